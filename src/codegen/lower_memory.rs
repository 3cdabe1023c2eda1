//! Lowering reads of C data: values in memory (direct loads where the
//! verifier knows the pointer's BTF type, `bpf_probe_read_kernel` or
//! `bpf_probe_read_user` otherwise), parts of structs and arrays held by
//! value in frame buffers, bitfields, comparing such values, and `curtask`.

use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Label, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::checked::{Access, Load, TExpr, TExprKind};
use crate::frontend::types::Type;
use crate::providers;

impl Lowerer<'_> {
    /// The value at `offset` bytes past the address `ptr` evaluates to.
    pub(super) fn memory_read(
        &mut self,
        ptr: &TExpr,
        offset: u32,
        load: Load,
        access: Access,
    ) -> Value {
        let pointer = match access {
            Access::Direct => self.walked_pointer(ptr),
            _ => None,
        };
        let pointer = pointer.unwrap_or_else(|| self.int_expr(ptr));
        match load {
            Load::Int { size, signed } if access == Access::Direct => {
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
            Load::Int { size, signed } => {
                let value = self.read_into_u64(u32::from(size), pointer, offset, access);
                Value::Int(self.extend(value, size, signed))
            }
            Load::Bits { bytes, shift, bits } => {
                let value = if access == Access::Direct {
                    let (base, at) = self.load_base(pointer, offset);
                    self.gather_bytes(Base::Reg(base), at, bytes)
                } else {
                    self.read_into_u64(u32::from(bytes), pointer, offset, access)
                };
                Value::Int(self.extract_bits(value, shift, bits))
            }
            Load::Bytes(len) => {
                let buffer = self.alloc(len);
                self.zero(Base::Frame, buffer, len.next_multiple_of(8));
                if access == Access::Direct {
                    self.copy_direct(buffer, pointer, offset, len);
                } else {
                    self.probe_read(Arg::Frame(buffer), len, pointer, offset, access);
                }
                Value::Mem(buffer)
            }
        }
    }

    /// `ptr` when it is a pointer member loaded directly only to be read
    /// through (`a->b` in `a->b->c`): loaded through an untrusted view of
    /// the struct holding it, which the verifier checks without searching
    /// kernel BTF by name
    /// ([`UntrustedViews`](crate::frontend::checked::UntrustedViews)). `None` for any other
    /// pointer, or when the kernel has no `bpf_rdonly_cast`.
    fn walked_pointer(&mut self, ptr: &TExpr) -> Option<VReg> {
        let TExprKind::MemoryRead {
            ptr: holder,
            offset,
            load: Load::Int { size: 8, .. },
            access: Access::Direct,
        } = &ptr.kind
        else {
            return None;
        };
        let Type::Ptr(holder_type) = &holder.ty else {
            return None;
        };
        let views = &self.program.untrusted_views;
        let kfunc = views.kfunc?;
        let view_of = *views.structs.get(&holder_type.target)?;
        let holder = self.int_expr(holder);
        let view = self.vreg();
        self.emit(Inst::Kfunc {
            btf_id: kfunc,
            args: vec![Arg::Reg(holder), Arg::Imm(i64::from(view_of.0))],
            ret: Some(view),
        });
        let (base, at) = self.load_base(view, *offset);
        let pointer = self.vreg();
        self.emit(Inst::Load {
            dst: pointer,
            base: Base::Reg(base),
            offset: at,
            size: Size::U64,
        });
        Some(pointer)
    }

    /// A part of the struct or array `value` (held in a frame buffer).
    pub(super) fn value_read(&mut self, value: &TExpr, offset: u32, load: Load) -> Value {
        let Value::Mem(start) = self.expr(value) else {
            unreachable!("structs and arrays live in memory")
        };
        let at = start + offset as i16;
        match load {
            Load::Int { size, signed } => {
                let reg = self.vreg();
                // C layout aligns every scalar member, as frame loads must be.
                self.emit(Inst::Load {
                    dst: reg,
                    base: Base::Frame,
                    offset: at,
                    size: size_code(size),
                });
                Value::Int(self.extend(reg, size, signed))
            }
            Load::Bits { bytes, shift, bits } => {
                let value = self.gather_bytes(Base::Frame, at, bytes);
                Value::Int(self.extract_bits(value, shift, bits))
            }
            Load::Bytes(len) => {
                let buffer = self.alloc(len);
                let rounded = len.next_multiple_of(8);
                self.copy_aligned((Base::Frame, buffer), (Base::Frame, at), len);
                self.zero_bytes(buffer + len as i16, rounded - len);
                Value::Mem(buffer)
            }
        }
    }

    /// 1 when two structs, arrays or `buf()` values held by value have equal
    /// bytes, else 0.
    pub(crate) fn objects_equal(&mut self, lhs: &TExpr, rhs: &TExpr) -> VReg {
        let (Value::Mem(a), Value::Mem(b)) = (self.expr(lhs), self.expr(rhs)) else {
            unreachable!("structs and arrays live in memory")
        };
        let result = self.vreg();
        let (x, y) = (self.vreg(), self.vreg());
        let (differ, done): (Label, Label) = (self.label(), self.label());
        // Buffers of different capacities: their lengths come first.
        for at in (0..lhs.ty.size().min(rhs.ty.size())).step_by(8) {
            for (reg, from) in [(x, a), (y, b)] {
                self.emit(Inst::Load {
                    dst: reg,
                    base: Base::Frame,
                    offset: from + at as i16,
                    size: Size::U64,
                });
            }
            self.branch(Cond::Ne, x, Src::Reg(y), differ);
        }
        self.mov_imm(result, 1);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(differ));
        self.mov_imm(result, 0);
        self.emit(Inst::Bind(done));
        result
    }

    /// `bytes` bytes at `pointer + offset` read into a zeroed u64.
    fn read_into_u64(&mut self, bytes: u32, pointer: VReg, offset: u32, access: Access) -> VReg {
        let buffer = self.alloc(8);
        self.zero(Base::Frame, buffer, 8);
        self.probe_read(Arg::Frame(buffer), bytes, pointer, offset, access);
        let value = self.vreg();
        self.emit(Inst::Load {
            dst: value,
            base: Base::Frame,
            offset: buffer,
            size: Size::U64,
        });
        value
    }

    /// `bytes` bytes at `base + at` as a little-endian integer, one byte at
    /// a time (a bitfield's bytes need not be aligned for a wider load).
    fn gather_bytes(&mut self, base: Base, at: i16, bytes: u8) -> VReg {
        let value = self.vreg();
        self.mov_imm(value, 0);
        let byte = self.vreg();
        for i in 0..i16::from(bytes) {
            self.emit(Inst::Load {
                dst: byte,
                base,
                offset: at + i,
                size: Size::U8,
            });
            self.shift(byte, AluOp::Lsh, 8 * i32::from(i));
            self.alu(AluOp::Or, value, Src::Reg(byte));
        }
        value
    }

    /// The `bits` bits `shift` bits up `value`, zero-extended.
    fn extract_bits(&mut self, value: VReg, shift: u8, bits: u8) -> VReg {
        if shift > 0 {
            self.shift(value, AluOp::Rsh, i32::from(shift));
        }
        let unused = 64 - i32::from(bits);
        if unused > 0 {
            self.shift(value, AluOp::Lsh, unused);
            self.shift(value, AluOp::Rsh, unused);
        }
        value
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

    /// The bytes `name` (a string member, such as `task->comm`) reads,
    /// copied to the address in `to` (a buffer outside the BPF stack).
    pub(super) fn read_bytes_to(&mut self, name: &TExpr, to: VReg) {
        let TExprKind::MemoryRead {
            ptr,
            offset,
            load: Load::Bytes(len),
            access,
        } = &name.kind
        else {
            unreachable!("names are read from memory")
        };
        let pointer = self.int_expr(ptr);
        self.probe_read(Arg::Reg(to), *len, pointer, *offset, *access);
    }

    /// `bpf_probe_read_{kernel,user}(to, len, pointer + offset)`.
    fn probe_read(&mut self, to: Arg, len: u32, pointer: VReg, offset: u32, access: Access) {
        let source = self.vreg();
        self.mov(source, pointer);
        if offset != 0 {
            let offset = self.constant(u64::from(offset));
            self.alu(AluOp::Add, source, Src::Reg(offset));
        }
        let helper = match access {
            Access::User => PROBE_READ_USER,
            Access::Kernel | Access::Direct => PROBE_READ_KERNEL,
            Access::Any => PROBE_READ,
        };
        let args = vec![to, Arg::Imm(i64::from(len)), Arg::Reg(source)];
        self.checked_call_unused(helper, args);
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

    /// Copy `len` bytes between frame buffers in the widest chunks both
    /// offsets are aligned for (the verifier requires aligned stack access).
    fn copy_aligned(&mut self, to: (Base, i16), from: (Base, i16), len: u32) {
        let temp = self.vreg();
        let mut done = 0u32;
        while done < len {
            let (a, b) = (from.1 + done as i16, to.1 + done as i16);
            let width = [8u32, 4, 2, 1]
                .into_iter()
                .find(|&w| {
                    len - done >= w && a.rem_euclid(w as i16) == 0 && b.rem_euclid(w as i16) == 0
                })
                .unwrap_or(1);
            let size = size_code(width as u8);
            self.emit(Inst::Load {
                dst: temp,
                base: from.0,
                offset: a,
                size,
            });
            self.emit(Inst::Store {
                base: to.0,
                offset: b,
                src: Src::Reg(temp),
                size,
            });
            done += width;
        }
    }

    /// Zero `bytes` (fewer than 8) bytes of the frame at `offset`.
    fn zero_bytes(&mut self, offset: i16, bytes: u32) {
        for i in 0..bytes as i16 {
            self.emit(Inst::Store {
                base: Base::Frame,
                offset: offset + i,
                src: Src::Imm(0),
                size: Size::U8,
            });
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
        self.call0(helper)
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

#[cfg(test)]
mod tests {
    use crate::capture::model::RecordOrigin;
    use crate::codegen::asm::opcode;
    use crate::codegen::program::BpfProgram;
    use crate::driver::{Source, compile};
    use crate::frontend::fake_machine::{FakeMachine, ids};
    use crate::frontend::options::CompileOptions;

    /// The one program `text` compiles to on the fake machine.
    fn compiled(text: &str) -> BpfProgram {
        let sources = [Source {
            name: "t.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        }];
        let (_, mut compiled) = compile(&sources, &[], &FakeMachine, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{}", e.render()));
        compiled.programs.remove(0)
    }

    /// The `imm` of every kfunc call in `program`.
    fn kfunc_calls(program: &BpfProgram) -> Vec<u32> {
        let kfunc = |insn: u64| {
            let call = insn as u8 == opcode::CALL;
            (call && (insn >> 12) as u8 & 0xf == opcode::PSEUDO_KFUNC_CALL)
                .then_some((insn >> 32) as u32)
        };
        program.insns.iter().filter_map(|&i| kfunc(i)).collect()
    }

    /// A pointer member loaded to be read through is loaded through an
    /// untrusted view of its holder: `bpf_rdonly_cast(next, task_struct)`.
    #[test]
    fn walked_pointer_member_is_read_through_a_view() {
        let program = compiled("tp_btf:sched_switch { @ = args.next->real_parent->pid; }");
        assert_eq!(kfunc_calls(&program), [ids::RDONLY_CAST]);
        let task = i64::from(ids::TASK.0);
        let mov_r2 = program.insns.iter().any(|&i| {
            // BPF_ALU64 | BPF_MOV | BPF_K into r2.
            i as u8 == 0xb7 && (i >> 8) as u8 & 0xf == 2 && (i >> 32) as i32 as i64 == task
        });
        assert!(mov_r2, "the view names struct task_struct");
    }

    /// A pointer member kept as a value (here a map key) stays a trusted
    /// load: helpers taking task pointers refuse untrusted ones.
    #[test]
    fn pointer_member_kept_as_a_value_is_loaded_as_written() {
        let program = compiled("tp_btf:sched_switch { @[args.next->real_parent] = 1; }");
        assert!(kfunc_calls(&program).is_empty());
        let scalar = compiled("tp_btf:sched_switch { @ = args.next->pid; }");
        assert!(kfunc_calls(&scalar).is_empty());
    }
}
