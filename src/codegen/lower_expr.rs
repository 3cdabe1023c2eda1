//! Lowering expressions: builtins, probe arguments, operators, strings.

use crate::builtins;
use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Label, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::codegen::lower_memory::size_code;
use crate::frontend::ast::{BinOp, UnOp};
use crate::frontend::checked::{TExpr, TExprKind};
use crate::frontend::types::Type;
use crate::vocab::{
    ArgRead, FieldKind, GlobalSlot, TracepointField, UsdtArgSpec, UsdtIndex, x86_64,
};

impl Lowerer<'_> {
    pub(crate) fn expr(&mut self, expr: &TExpr) -> Value {
        self.with_span(expr.span, |this| this.expr_inner(expr))
    }

    /// An expression that the checker typed as an integer.
    pub(crate) fn int_expr(&mut self, expr: &TExpr) -> VReg {
        match self.expr(expr) {
            Value::Int(reg) => reg,
            Value::Mem(_) => unreachable!("the checker typed {:?} as an integer", expr.ty),
        }
    }

    fn expr_inner(&mut self, expr: &TExpr) -> Value {
        match &expr.kind {
            TExprKind::Int(n) => Value::Int(self.constant(*n)),
            TExprKind::Str(text) => Value::Mem(self.string_literal(text.as_bytes(), &expr.ty)),
            TExprKind::Bytes(bytes) => Value::Mem(self.string_literal(bytes, &expr.ty)),
            TExprKind::Call(call) => {
                builtins::expression_hooks(call.builtin).lower(self, call, &expr.ty)
            }
            TExprKind::Arg(read) => Value::Int(self.arg(read)),
            TExprKind::Field(field) => self.tracepoint_field(field),
            TExprKind::Var(var) => self.var(var.0),
            TExprKind::MapRead { map, key } => self.map_read(*map, key.as_deref(), &expr.ty),
            TExprKind::Unary { op, expr: inner } => Value::Int(self.unary(*op, inner)),
            TExprKind::Binary { op, lhs, rhs } => Value::Int(self.binary(*op, lhs, rhs)),
            TExprKind::Ternary {
                cond,
                then,
                otherwise,
            } => self.ternary(cond, then, otherwise, &expr.ty),
            TExprKind::Tuple(items) => {
                let offset = self.alloc(expr.ty.size());
                let offsets = expr.ty.layout_offsets();
                for (item, at) in items.iter().zip(offsets) {
                    let value = self.expr(item);
                    self.store_value(value, &item.ty, Base::Frame, offset + at as i16, &item.ty);
                }
                Value::Mem(offset)
            }
            TExprKind::TupleIndex { expr: tuple, index } => {
                let Value::Mem(at) = self.expr(tuple) else {
                    unreachable!("tuples live in memory")
                };
                let offset = tuple.ty.layout_offsets()[*index];
                self.field_value(at, offset, &expr.ty)
            }
            TExprKind::Cast(inner) => {
                let value = self.int_expr(inner);
                Value::Int(self.convert(value, &expr.ty))
            }
            TExprKind::Sequence { effects, value } => {
                self.stmts(effects);
                self.expr(value)
            }
            TExprKind::MemoryRead {
                ptr,
                offset,
                load,
                access,
            } => self.memory_read(ptr, *offset, *load, *access),
            TExprKind::ValueRead {
                value,
                offset,
                load,
            } => self.value_read(value, *offset, *load),
        }
    }

    /// The register holding the program's context pointer.
    pub(crate) fn context(&self) -> VReg {
        self.ctx
    }

    pub(crate) fn constant(&mut self, n: u64) -> VReg {
        let reg = self.vreg();
        match i32::try_from(n as i64) {
            Ok(imm) => self.mov_imm(reg, imm),
            Err(_) => self.emit(Inst::Imm64 { dst: reg, value: n }),
        }
        reg
    }

    pub(crate) fn string_literal(&mut self, text: &[u8], ty: &Type) -> i16 {
        let offset = self.alloc(ty.size());
        let mut bytes = text.to_vec();
        bytes.resize(ty.size() as usize, 0);
        for (i, chunk) in bytes.chunks(4).enumerate() {
            let word = i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
            let at = offset + (i * 4) as i16;
            self.emit(Inst::Store {
                base: Base::Frame,
                offset: at,
                src: Src::Imm(word),
                size: Size::U32,
            });
        }
        offset
    }

    /// Call a helper that takes no arguments and return its result.
    pub(crate) fn call0(&mut self, helper: u32) -> VReg {
        let reg = self.vreg();
        self.emit(Inst::Call {
            helper,
            args: vec![],
            ret: Some(reg),
        });
        reg
    }

    pub(crate) fn shift(&mut self, reg: VReg, op: AluOp, bits: i32) {
        self.alu(op, reg, Src::Imm(bits));
    }

    /// The low 32 bits of `reg`, in place.
    pub(crate) fn low32(&mut self, reg: VReg) {
        self.shift(reg, AluOp::Lsh, 32);
        self.shift(reg, AluOp::Rsh, 32);
    }

    /// One u64 slot of the globals map, read through a direct value pointer.
    pub(crate) fn global(&mut self, slot: GlobalSlot) -> VReg {
        let pointer = self.vreg();
        let map = self.maps.globals;
        self.emit(Inst::MapValueAddr {
            dst: pointer,
            map,
            offset: 8 * slot as u32,
        });
        let value = self.vreg();
        self.emit(Inst::Load {
            dst: value,
            base: Base::Reg(pointer),
            offset: 0,
            size: Size::U64,
        });
        value
    }

    /// A probe argument, read from the context as its provider decided.
    fn arg(&mut self, read: &ArgRead) -> VReg {
        let ctx = self.ctx;
        let reg = self.vreg();
        let load = |offset: i16| Inst::Load {
            dst: reg,
            base: Base::Reg(ctx),
            offset,
            size: Size::U64,
        };
        match read {
            ArgRead::Slot(offset) => self.emit(load(*offset as i16)),
            ArgRead::Usdt(UsdtArgSpec::Constant(value)) => return self.constant(*value as u64),
            ArgRead::Usdt(UsdtArgSpec::Register {
                pt_regs_offset,
                size,
                signed,
            }) => {
                self.emit(load(*pt_regs_offset as i16));
                return self.extend(reg, *size, *signed);
            }
            ArgRead::Usdt(UsdtArgSpec::Memory {
                base_offset,
                index,
                displacement,
                size,
                signed,
            }) => {
                let address = self.register_address(*base_offset, *index);
                return self.user_memory_arg(address, *displacement, *size, *signed);
            }
            ArgRead::Stack(offset) => {
                let sp = self.register_address(Some(x86_64::STACK_POINTER), None);
                // The return address is at `sp`.
                return self.user_memory_arg(sp, 8 + i64::from(*offset), 8, false);
            }
        }
        reg
    }

    /// `base + index * scale` of a memory operand, from the saved registers.
    fn register_address(&mut self, base_offset: Option<u16>, index: Option<UsdtIndex>) -> VReg {
        let ctx = self.ctx;
        let load = |this: &mut Self, offset: u16| {
            let reg = this.vreg();
            this.emit(Inst::Load {
                dst: reg,
                base: Base::Reg(ctx),
                offset: offset as i16,
                size: Size::U64,
            });
            reg
        };
        let address = match base_offset {
            Some(offset) => load(self, offset),
            None => self.constant(0),
        };
        if let Some(index) = index {
            let scaled = load(self, index.pt_regs_offset);
            if index.scale > 1 {
                self.shift(scaled, AluOp::Lsh, index.scale.trailing_zeros() as i32);
            }
            self.alu(AluOp::Add, address, Src::Reg(scaled));
        }
        address
    }

    /// A value in user memory at `address + displacement` (a USDT argument,
    /// a function argument on the stack).
    fn user_memory_arg(
        &mut self,
        address: VReg,
        displacement: i64,
        size: u8,
        signed: bool,
    ) -> VReg {
        let displacement = self.constant(displacement as u64);
        self.alu(AluOp::Add, address, Src::Reg(displacement));
        let buffer = self.alloc(8);
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: buffer,
            src: Src::Imm(0),
            size: Size::U64,
        });
        let args = vec![
            Arg::Frame(buffer),
            Arg::Imm(i64::from(size)),
            Arg::Reg(address),
        ];
        self.checked_call_unused(PROBE_READ_USER, args);
        let value = self.vreg();
        self.emit(Inst::Load {
            dst: value,
            base: Base::Frame,
            offset: buffer,
            size: Size::U64,
        });
        self.extend(value, size, signed)
    }

    /// Truncate `reg` to `size` bytes, sign- or zero-extending back to 64 bits.
    pub(super) fn extend(&mut self, reg: VReg, size: u8, signed: bool) -> VReg {
        if size < 8 {
            let bits = 64 - 8 * i32::from(size);
            self.shift(reg, AluOp::Lsh, bits);
            self.shift(reg, if signed { AluOp::Arsh } else { AluOp::Rsh }, bits);
        }
        reg
    }

    /// A copy of `value` converted to integer type `ty`.
    fn convert(&mut self, value: VReg, ty: &Type) -> VReg {
        let reg = self.vreg();
        self.mov(reg, value);
        match ty {
            Type::Int { size, signed } => self.extend(reg, *size, *signed),
            _ => reg,
        }
    }

    fn tracepoint_field(&mut self, field: &TracepointField) -> Value {
        let ctx = self.ctx;
        let offset = field.offset as i16;
        match field.kind {
            FieldKind::Int { size, signed } => {
                let reg = self.vreg();
                self.emit(Inst::Load {
                    dst: reg,
                    base: Base::Reg(ctx),
                    offset,
                    size: size_code(size),
                });
                Value::Int(self.extend(reg, size, signed))
            }
            FieldKind::Pointer { .. } => {
                let reg = self.vreg();
                self.emit(Inst::Load {
                    dst: reg,
                    base: Base::Reg(ctx),
                    offset,
                    size: Size::U64,
                });
                Value::Int(reg)
            }
            FieldKind::CharArray(len) => {
                let buffer = self.alloc(len);
                self.zero(Base::Frame, buffer, len.next_multiple_of(8));
                let source = self.vreg();
                self.mov(source, ctx);
                self.alu(AluOp::Add, source, Src::Imm(i32::from(offset)));
                let args = vec![
                    Arg::Frame(buffer),
                    Arg::Imm(i64::from(len)),
                    Arg::Reg(source),
                ];
                self.checked_call_unused(PROBE_READ_KERNEL, args);
                Value::Mem(buffer)
            }
            FieldKind::DataLocString => {
                let len = crate::frontend::types::STRING_LEN;
                let buffer = self.alloc(len);
                self.zero(Base::Frame, buffer, len);
                let location = self.vreg();
                self.emit(Inst::Load {
                    dst: location,
                    base: Base::Reg(ctx),
                    offset,
                    size: Size::U32,
                });
                self.alu(AluOp::And, location, Src::Imm(0xffff));
                let source = self.vreg();
                self.mov(source, ctx);
                self.alu(AluOp::Add, source, Src::Reg(location));
                let args = vec![
                    Arg::Frame(buffer),
                    Arg::Imm(i64::from(len)),
                    Arg::Reg(source),
                ];
                self.checked_call_unused(PROBE_READ_KERNEL_STR, args);
                Value::Mem(buffer)
            }
        }
    }

    fn unary(&mut self, op: UnOp, inner: &TExpr) -> VReg {
        let value = self.int_expr(inner);
        let reg = self.vreg();
        self.mov(reg, value);
        match op {
            UnOp::Neg => self.emit(Inst::Neg { dst: reg }),
            UnOp::BitNot => self.alu(AluOp::Xor, reg, Src::Imm(-1)),
            UnOp::Not => {
                let done = self.label();
                self.mov_imm(reg, 1);
                self.branch(Cond::Eq, value, Src::Imm(0), done);
                self.mov_imm(reg, 0);
                self.emit(Inst::Bind(done));
            }
            UnOp::Deref | UnOp::AddrOf => unreachable!("the checker rejects pointer operators"),
        }
        reg
    }

    fn binary(&mut self, op: BinOp, lhs: &TExpr, rhs: &TExpr) -> VReg {
        if op.is_comparison() || matches!(op, BinOp::LogicalAnd | BinOp::LogicalOr) {
            return self.truth_value(|this, false_label| {
                this.branch_unless_binary(op, lhs, rhs, false_label)
            });
        }
        let left = self.int_expr(lhs);
        let right = self.int_expr(rhs);
        let signed = lhs.ty.is_signed() && rhs.ty.is_signed();
        let alu = match op {
            BinOp::Add => AluOp::Add,
            BinOp::Sub => AluOp::Sub,
            BinOp::Mul => AluOp::Mul,
            BinOp::Div => AluOp::Div,
            BinOp::Mod => AluOp::Mod,
            BinOp::BitAnd => AluOp::And,
            BinOp::BitOr => AluOp::Or,
            BinOp::BitXor => AluOp::Xor,
            BinOp::Shl => AluOp::Lsh,
            BinOp::Shr if signed => AluOp::Arsh,
            BinOp::Shr => AluOp::Rsh,
            _ => unreachable!("comparisons are handled above"),
        };
        let reg = self.vreg();
        self.mov(reg, left);
        self.alu(alu, reg, Src::Reg(right));
        reg
    }

    /// 1 if the branch code falls through, 0 if it jumps to its false label.
    fn truth_value(&mut self, branch: impl FnOnce(&mut Self, Label)) -> VReg {
        let reg = self.vreg();
        let (false_label, done) = (self.label(), self.label());
        branch(self, false_label);
        self.mov_imm(reg, 1);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(false_label));
        self.mov_imm(reg, 0);
        self.emit(Inst::Bind(done));
        reg
    }

    /// Jump to `target` when `cond` is false; fall through when true.
    pub(super) fn branch_unless(&mut self, cond: &TExpr, target: Label) {
        self.with_span(cond.span, |this| match &cond.kind {
            TExprKind::Binary { op, lhs, rhs }
                if op.is_comparison() || matches!(op, BinOp::LogicalAnd | BinOp::LogicalOr) =>
            {
                this.branch_unless_binary(*op, lhs, rhs, target)
            }
            TExprKind::Unary {
                op: UnOp::Not,
                expr,
            } => {
                let value = this.int_expr(expr);
                this.emit(Inst::Branch {
                    cond: Cond::Ne,
                    lhs: value,
                    rhs: Src::Imm(0),
                    target,
                });
            }
            _ => {
                let value = this.int_expr(cond);
                this.emit(Inst::Branch {
                    cond: Cond::Eq,
                    lhs: value,
                    rhs: Src::Imm(0),
                    target,
                });
            }
        })
    }

    fn branch_unless_binary(&mut self, op: BinOp, lhs: &TExpr, rhs: &TExpr, target: Label) {
        match op {
            BinOp::LogicalAnd => {
                self.branch_unless(lhs, target);
                self.branch_unless(rhs, target);
            }
            BinOp::LogicalOr => {
                let taken = self.label();
                let (rhs_label, lhs_false) = (taken, self.label());
                self.branch_unless(lhs, lhs_false);
                self.emit(Inst::Jump(rhs_label));
                self.emit(Inst::Bind(lhs_false));
                self.branch_unless(rhs, target);
                self.emit(Inst::Bind(taken));
            }
            _ if matches!(
                lhs.ty,
                Type::Str { .. } | Type::Object(_) | Type::Buffer { .. }
            ) =>
            {
                let equal = match lhs.ty {
                    Type::Str { .. } => self.strings_equal(lhs, rhs, u32::MAX),
                    _ => self.objects_equal(lhs, rhs),
                };
                let cond = if op == BinOp::Eq { Cond::Eq } else { Cond::Ne };
                self.branch(cond, equal, Src::Imm(0), target);
            }
            _ => {
                let left = self.int_expr(lhs);
                let right = self.int_expr(rhs);
                let signed = lhs.ty.is_signed() && rhs.ty.is_signed();
                let cond = comparison(op, signed)
                    .negate()
                    .expect("comparisons have negations");
                self.branch(cond, left, Src::Reg(right), target);
            }
        }
    }

    /// 1 when two strings are equal up to their terminating NUL (or in their
    /// first `limit` bytes), else 0.
    pub(crate) fn strings_equal(&mut self, lhs: &TExpr, rhs: &TExpr, limit: u32) -> VReg {
        let (Value::Mem(a), Value::Mem(b)) = (self.expr(lhs), self.expr(rhs)) else {
            unreachable!("strings live in memory")
        };
        let len = match (&lhs.ty, &rhs.ty) {
            (Type::Str { len: x }, Type::Str { len: y }) => (*x).min(*y).min(limit),
            _ => unreachable!("compared as strings"),
        };
        let result = self.vreg();
        let (x, y) = (self.vreg(), self.vreg());
        let (differ, same, done) = (self.label(), self.label(), self.label());
        for i in 0..len as i16 {
            self.emit(Inst::Load {
                dst: x,
                base: Base::Frame,
                offset: a + i,
                size: Size::U8,
            });
            self.emit(Inst::Load {
                dst: y,
                base: Base::Frame,
                offset: b + i,
                size: Size::U8,
            });
            self.branch(Cond::Ne, x, Src::Reg(y), differ);
            self.branch(Cond::Eq, x, Src::Imm(0), same);
        }
        self.emit(Inst::Jump(same));
        self.emit(Inst::Bind(differ));
        self.mov_imm(result, 0);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(same));
        self.mov_imm(result, 1);
        self.emit(Inst::Bind(done));
        result
    }

    fn ternary(&mut self, cond: &TExpr, then: &TExpr, otherwise: &TExpr, ty: &Type) -> Value {
        let (else_label, done) = (self.label(), self.label());
        let result = match ty {
            ty if ty.in_memory() => Value::Mem(self.alloc(ty.size())),
            _ => Value::Int(self.vreg()),
        };
        self.branch_unless(cond, else_label);
        self.ternary_arm(then, result, ty);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(else_label));
        self.ternary_arm(otherwise, result, ty);
        self.emit(Inst::Bind(done));
        result
    }

    fn ternary_arm(&mut self, arm: &TExpr, result: Value, ty: &Type) {
        let value = self.expr(arm);
        match (result, value) {
            (Value::Int(dst), Value::Int(src)) => self.emit(Inst::Mov {
                dst,
                src: Src::Reg(src),
            }),
            (Value::Mem(offset), value) => {
                self.store_value(value, &arm.ty, Base::Frame, offset, ty)
            }
            (Value::Int(_), Value::Mem(_)) => unreachable!("the checker unified the arms"),
        }
    }
}

/// The jump condition for comparison `op`.
fn comparison(op: BinOp, signed: bool) -> Cond {
    match (op, signed) {
        (BinOp::Eq, _) => Cond::Eq,
        (BinOp::Ne, _) => Cond::Ne,
        (BinOp::Lt, false) => Cond::Lt,
        (BinOp::Le, false) => Cond::Le,
        (BinOp::Gt, false) => Cond::Gt,
        (BinOp::Ge, false) => Cond::Ge,
        (BinOp::Lt, true) => Cond::Slt,
        (BinOp::Le, true) => Cond::Sle,
        (BinOp::Gt, true) => Cond::Sgt,
        (BinOp::Ge, true) => Cond::Sge,
        _ => unreachable!("{op:?} is not a comparison"),
    }
}
