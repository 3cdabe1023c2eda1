//! Lowering byte-level built-ins: substring search (`strcontains`), byte
//! order reversal (`bswap`) and bounding a run-time length.

use crate::codegen::ir::{AluOp, Base, Cond, Inst, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::checked::TExpr;
use crate::frontend::types::Type;

impl Lowerer<'_> {
    /// 1 when string `needle` occurs in string `haystack`, else 0: every
    /// start position and needle byte unrolled, as bpftrace does (strings
    /// are at most a few dozen bytes).
    pub(crate) fn string_contains(&mut self, haystack: &TExpr, needle: &TExpr) -> VReg {
        let (Value::Mem(hay), Value::Mem(pin)) = (self.expr(haystack), self.expr(needle)) else {
            unreachable!("strings live in memory")
        };
        let (Type::Str { len: hay_len }, Type::Str { len: pin_len }) = (&haystack.ty, &needle.ty)
        else {
            unreachable!("strcontains() takes strings")
        };
        let (hay_len, pin_len) = (*hay_len as i16, *pin_len as i16);
        let result = self.vreg();
        let (a, b) = (self.vreg(), self.vreg());
        let (found, missing, done) = (self.label(), self.label(), self.label());
        for start in 0..=(hay_len - pin_len).max(0) {
            let next = self.label();
            for i in 0..pin_len.min(hay_len - start) {
                self.load_byte(b, pin + i);
                self.branch(Cond::Eq, b, Src::Imm(0), found);
                self.load_byte(a, hay + start + i);
                self.branch(Cond::Ne, a, Src::Reg(b), next);
            }
            // The whole needle buffer matched without its NUL.
            self.emit(Inst::Jump(found));
            self.emit(Inst::Bind(next));
            self.load_byte(a, hay + start);
            self.branch(Cond::Eq, a, Src::Imm(0), missing);
        }
        self.emit(Inst::Bind(missing));
        self.mov_imm(result, 0);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(found));
        self.mov_imm(result, 1);
        self.emit(Inst::Bind(done));
        result
    }

    fn load_byte(&mut self, dst: VReg, offset: i16) {
        self.emit(Inst::Load {
            dst,
            base: Base::Frame,
            offset,
            size: Size::U8,
        });
    }

    /// `value`'s low `size` bytes in reverse order.
    pub(crate) fn byte_swap(&mut self, value: VReg, size: u8) -> VReg {
        let result = self.vreg();
        let byte = self.vreg();
        self.mov_imm(result, 0);
        for i in 0..i32::from(size) {
            self.mov(byte, value);
            self.alu(AluOp::Rsh, byte, Src::Imm(8 * i));
            self.alu(AluOp::And, byte, Src::Imm(0xff));
            self.alu(AluOp::Lsh, byte, Src::Imm(8 * (i32::from(size) - 1 - i)));
            self.alu(AluOp::Or, result, Src::Reg(byte));
        }
        result
    }

    /// `value`, or `max` when it is larger (unsigned).
    pub(crate) fn clamp(&mut self, value: VReg, max: u32) -> VReg {
        let result = self.vreg();
        self.mov(result, value);
        let within = self.label();
        self.branch(Cond::Le, result, Src::Imm(max as i32), within);
        self.mov_imm(result, max as i32);
        self.emit(Inst::Bind(within));
        result
    }
}
