//! Lowering reads of kernel memory: struct members through typed pointers
//! (direct loads where the verifier knows the pointer's BTF type,
//! `bpf_probe_read_kernel` otherwise) and `curtask`.

use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Inst, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::checked::{KernelLoad, TExpr};
use crate::providers;

impl Lowerer<'_> {
    /// The member at `offset` bytes from the pointer `ptr` evaluates to.
    pub(super) fn kernel_read(
        &mut self,
        ptr: &TExpr,
        offset: u32,
        load: KernelLoad,
        direct: bool,
    ) -> Value {
        let pointer = self.int_expr(ptr);
        match (load, direct) {
            (KernelLoad::Int { size, signed }, true) => {
                let (base, at) = self.load_base(pointer, offset);
                let value = self.vreg();
                self.emit(Inst::Load {
                    dst: value,
                    base: Base::Reg(base),
                    offset: at,
                    size: size_code(size),
                });
                Value::Int(self.extend(value, size, signed))
            }
            (KernelLoad::Int { size, signed }, false) => {
                let buffer = self.alloc(8);
                self.zero(Base::Frame, buffer, 8);
                self.probe_read(buffer, u32::from(size), pointer, offset);
                let value = self.vreg();
                self.emit(Inst::Load {
                    dst: value,
                    base: Base::Frame,
                    offset: buffer,
                    size: Size::U64,
                });
                Value::Int(self.extend(value, size, signed))
            }
            (KernelLoad::CharArray(len), direct) => {
                let buffer = self.alloc(len);
                self.zero(Base::Frame, buffer, len.next_multiple_of(8));
                if direct {
                    self.copy_direct(buffer, pointer, offset, len);
                } else {
                    self.probe_read(buffer, len, pointer, offset);
                }
                Value::Mem(buffer)
            }
        }
    }

    /// A base register and load offset for `pointer + offset` (BPF load
    /// offsets are 16-bit).
    fn load_base(&mut self, pointer: VReg, offset: u32) -> (VReg, i16) {
        match i16::try_from(offset) {
            Ok(at) => (pointer, at),
            Err(_) => {
                let base = self.vreg();
                self.mov(base, pointer);
                let offset = self.constant(u64::from(offset));
                self.alu(AluOp::Add, base, Src::Reg(offset));
                (base, 0)
            }
        }
    }

    /// `bpf_probe_read_kernel(r10 + buffer, len, pointer + offset)`.
    fn probe_read(&mut self, buffer: i16, len: u32, pointer: VReg, offset: u32) {
        let source = self.vreg();
        self.mov(source, pointer);
        let offset = self.constant(u64::from(offset));
        self.alu(AluOp::Add, source, Src::Reg(offset));
        let args = vec![
            Arg::Frame(buffer),
            Arg::Imm(i64::from(len)),
            Arg::Reg(source),
        ];
        self.emit(Inst::Call {
            helper: PROBE_READ_KERNEL,
            args,
            ret: None,
        });
    }

    /// Copy `len` bytes with direct loads, widest first, never past the member.
    fn copy_direct(&mut self, buffer: i16, pointer: VReg, offset: u32, len: u32) {
        let (base, at) = self.load_base(pointer, offset);
        let temp = self.vreg();
        let mut done = 0;
        for width in [8u32, 4, 2, 1] {
            while len - done >= width {
                let size = size_code(width as u8);
                self.emit(Inst::Load {
                    dst: temp,
                    base: Base::Reg(base),
                    offset: at + done as i16,
                    size,
                });
                self.emit(Inst::Store {
                    base: Base::Frame,
                    offset: buffer + done as i16,
                    src: Src::Reg(temp),
                    size,
                });
                done += width;
            }
        }
    }

    /// `curtask`: a BTF pointer where the probe's pointers are BTF-typed, a
    /// plain address elsewhere.
    pub(crate) fn curtask(&mut self) -> VReg {
        let helper = if providers::of(&self.probe.attach).btf_pointers() {
            GET_CURRENT_TASK_BTF
        } else {
            GET_CURRENT_TASK
        };
        let reg = self.vreg();
        self.emit(Inst::Call {
            helper,
            args: vec![],
            ret: Some(reg),
        });
        reg
    }
}

/// The load/store size of an integer of `bytes` bytes.
pub(super) fn size_code(bytes: u8) -> Size {
    match bytes {
        1 => Size::U8,
        2 => Size::U16,
        4 => Size::U32,
        _ => Size::U64,
    }
}
