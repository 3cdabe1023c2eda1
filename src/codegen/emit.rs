//! Emission: IR with a register allocation → machine code through the assembler.
//!
//! Spilled values are loaded into scratch registers (r0–r5) for the one
//! instruction that needs them and stored back when written.

use crate::codegen::asm::{AsmError, Assembled, Assembler, AtomicOp, AtomicSize, Label, Reg, Size};
use crate::codegen::ir::{Arg, Base, Function, Inst, Src, VReg};
use crate::codegen::regalloc::{Allocation, Location};
use crate::unwind::bpf::{LoopKind, UserUnwinder};
use crate::unwind::orc_bpf::KernelWalker;

pub fn emit(function: &Function, allocation: &Allocation) -> Result<Assembled, AsmError> {
    emit_program(function, allocation, None)
}

/// A program and, with `callback`, its task-work callback (its own IR and
/// registers) after it: the program's [`Inst::TaskWorkCallback`] is its
/// address. One unwinder serves both.
pub fn emit_program(
    function: &Function,
    allocation: &Allocation,
    callback: Option<(&Function, &Allocation)>,
) -> Result<Assembled, AsmError> {
    let mut asm = Assembler::new();
    let callback_label = asm.new_label();
    let spec = function
        .unwinder
        .or_else(|| callback.and_then(|(f, _)| f.unwinder));
    let unwinder =
        spec.map(|spec| UserUnwinder::new(&mut asm, spec.maps, LoopKind::BpfLoop, spec.mm));
    let kernel_walker = (function.kernel_walker)
        .map(|spec| KernelWalker::new(&mut asm, spec.maps, spec.task_stack));
    let mut emitter = Emitter::new(asm, allocation, function, unwinder, callback_label);
    emitter.kernel_walker = kernel_walker;
    emitter.function(function)?;
    if let Some((callback, allocation)) = callback {
        emitter.asm.bind(callback_label)?;
        emitter.labels = (0..callback.labels)
            .map(|_| emitter.asm.new_label())
            .collect();
        emitter.allocation = allocation;
        emitter.function(callback)?;
    }
    if let Some(unwinder) = &emitter.unwinder {
        unwinder.emit_functions(&mut emitter.asm)?;
    }
    if let Some(walker) = &emitter.kernel_walker {
        walker.emit_functions(&mut emitter.asm)?;
    }
    emitter.asm.finish()
}

struct Emitter<'a> {
    asm: Assembler,
    allocation: &'a Allocation,
    labels: Vec<Label>,
    unwinder: Option<UserUnwinder>,
    kernel_walker: Option<KernelWalker>,
    callback: Label,
}

const ARG_REGS: [Reg; 5] = [Reg::R1, Reg::R2, Reg::R3, Reg::R4, Reg::R5];

fn phys(n: u8) -> Reg {
    match n {
        6 => Reg::R6,
        7 => Reg::R7,
        8 => Reg::R8,
        9 => Reg::R9,
        _ => unreachable!("the allocator hands out r6-r9 only, got r{n}"),
    }
}

impl<'a> Emitter<'a> {
    fn new(
        mut asm: Assembler,
        allocation: &'a Allocation,
        function: &Function,
        unwinder: Option<UserUnwinder>,
        callback: Label,
    ) -> Self {
        let labels = (0..function.labels).map(|_| asm.new_label()).collect();
        Emitter {
            asm,
            allocation,
            labels,
            unwinder,
            kernel_walker: None,
            callback,
        }
    }

    /// Emits one function's instructions.
    fn function(&mut self, function: &Function) -> Result<(), AsmError> {
        for annotated in &function.insts {
            self.asm.set_span(annotated.span);
            if let Some(comment) = &annotated.comment {
                self.asm.comment(comment.clone());
            }
            self.inst(&annotated.inst)?;
        }
        self.asm.set_span(None);
        Ok(())
    }

    fn location(&self, vreg: VReg) -> Location {
        *self
            .allocation
            .locations
            .get(&vreg)
            .expect("every register used is allocated")
    }

    /// The register holding `vreg`, loading a spilled value into `scratch`.
    fn read(&mut self, vreg: VReg, scratch: Reg) -> Reg {
        match self.location(vreg) {
            Location::Reg(n) => phys(n),
            Location::Spill(offset) => {
                self.asm.load(Size::U64, scratch, Reg::R10, offset);
                scratch
            }
        }
    }

    /// The register to compute `vreg` into (`scratch` when it is spilled).
    fn target(&self, vreg: VReg, scratch: Reg) -> Reg {
        match self.location(vreg) {
            Location::Reg(n) => phys(n),
            Location::Spill(_) => scratch,
        }
    }

    /// Store a spilled `vreg` computed in `reg` back to its slot.
    fn write_back(&mut self, vreg: VReg, reg: Reg) {
        if let Location::Spill(offset) = self.location(vreg) {
            self.asm.store_reg(Size::U64, Reg::R10, offset, reg);
        }
    }

    fn set(&mut self, dst: VReg, value: Reg) {
        match self.location(dst) {
            Location::Reg(n) => {
                if phys(n) != value {
                    self.asm.mov64_reg(phys(n), value);
                }
            }
            Location::Spill(offset) => self.asm.store_reg(Size::U64, Reg::R10, offset, value),
        }
    }

    fn base(&mut self, base: Base, scratch: Reg) -> Reg {
        match base {
            Base::Frame => Reg::R10,
            Base::Reg(vreg) => self.read(vreg, scratch),
        }
    }

    fn inst(&mut self, inst: &Inst) -> Result<(), AsmError> {
        match inst {
            Inst::Ctx { dst } => self.set(*dst, Reg::R1),
            Inst::Mov {
                dst,
                src: Src::Imm(imm),
            } => match self.location(*dst) {
                Location::Reg(n) => self.asm.mov64_imm(phys(n), *imm),
                Location::Spill(offset) => self.asm.store_imm(Size::U64, Reg::R10, offset, *imm),
            },
            Inst::Mov {
                dst,
                src: Src::Reg(src),
            } => {
                let value = self.read(*src, Reg::R0);
                self.set(*dst, value);
            }
            Inst::Imm64 { dst, value } => {
                let reg = self.target(*dst, Reg::R0);
                self.asm.ld_imm64(reg, *value);
                self.write_back(*dst, reg);
            }
            Inst::Alu { op, dst, src } => {
                let reg = self.read(*dst, Reg::R0);
                match src {
                    Src::Imm(imm) => self.asm.alu64_imm(*op, reg, *imm),
                    Src::Reg(src) => {
                        let src = self.read(*src, Reg::R1);
                        self.asm.alu64_reg(*op, reg, src);
                    }
                }
                self.write_back(*dst, reg);
            }
            Inst::Neg { dst } => {
                let reg = self.read(*dst, Reg::R0);
                self.asm.neg64(reg);
                self.write_back(*dst, reg);
            }
            Inst::MapValueAddr { dst, map, offset } => {
                let reg = self.target(*dst, Reg::R0);
                self.asm.ld_map_value(reg, *map, *offset);
                self.write_back(*dst, reg);
            }
            Inst::Load {
                dst,
                base,
                offset,
                size,
            } => {
                let base = self.base(*base, Reg::R1);
                let reg = self.target(*dst, Reg::R0);
                self.asm.load(*size, reg, base, *offset);
                self.write_back(*dst, reg);
            }
            Inst::Store {
                base,
                offset,
                src,
                size,
            } => {
                let base = self.base(*base, Reg::R1);
                match src {
                    Src::Imm(imm) => self.asm.store_imm(*size, base, *offset, *imm),
                    Src::Reg(src) => {
                        let src = self.read(*src, Reg::R2);
                        self.asm.store_reg(*size, base, *offset, src);
                    }
                }
            }
            Inst::AtomicAdd {
                base,
                offset,
                src,
                size,
            } => {
                let base = self.read(*base, Reg::R1);
                let src = self.read(*src, Reg::R2);
                let size = if *size == Size::U32 {
                    AtomicSize::U32
                } else {
                    AtomicSize::U64
                };
                self.asm.atomic(size, AtomicOp::Add, base, *offset, src);
            }
            Inst::Call { helper, args, ret } => {
                self.pass_args(args);
                self.asm.call_helper(*helper);
                self.take_result(*ret);
            }
            Inst::Kfunc { btf_id, args, ret } => {
                self.pass_args(args);
                self.asm.call_kfunc(*btf_id);
                self.take_result(*ret);
            }
            Inst::Unwind { state, copy } => {
                let copy = copy.map(|copy| self.read(copy, Reg::R2));
                let state = self.read(*state, Reg::R1);
                let unwinder = self
                    .unwinder
                    .as_ref()
                    .expect("a function that unwinds has an unwinder");
                unwinder.call(&mut self.asm, state, copy);
            }
            Inst::KernelWalk { to, dst } => {
                let to = self.read(*to, Reg::R1);
                let walker = (self.kernel_walker.as_ref())
                    .expect("a function that walks kernel stacks has the walker");
                walker.call(&mut self.asm, to);
                self.take_result(Some(*dst));
            }
            Inst::TaskWorkCallback { dst } => {
                let reg = self.target(*dst, Reg::R0);
                self.asm.ld_func(reg, self.callback);
                self.write_back(*dst, reg);
            }
            Inst::Jump(label) => self.asm.jmp(self.labels[label.0 as usize]),
            Inst::Branch {
                cond,
                lhs,
                rhs,
                target,
            } => {
                let target = self.labels[target.0 as usize];
                let lhs = self.read(*lhs, Reg::R0);
                match rhs {
                    Src::Imm(imm) => self.asm.jmp_imm(*cond, lhs, *imm, target),
                    Src::Reg(rhs) => {
                        let rhs = self.read(*rhs, Reg::R1);
                        self.asm.jmp_reg(*cond, lhs, rhs, target);
                    }
                }
            }
            Inst::Bind(label) => self.asm.bind(self.labels[label.0 as usize])?,
            Inst::Exit => {
                self.asm.mov64_imm(Reg::R0, 0);
                self.asm.exit();
            }
        }
        Ok(())
    }

    /// Puts a call's arguments in r1-r5.
    fn pass_args(&mut self, args: &[Arg]) {
        for (arg, reg) in args.iter().zip(ARG_REGS) {
            match *arg {
                Arg::Reg(vreg) => match self.location(vreg) {
                    Location::Reg(n) => self.asm.mov64_reg(reg, phys(n)),
                    Location::Spill(offset) => self.asm.load(Size::U64, reg, Reg::R10, offset),
                },
                Arg::Imm(value) => match i32::try_from(value) {
                    Ok(imm) => self.asm.mov64_imm(reg, imm),
                    Err(_) => self.asm.ld_imm64(reg, value as u64),
                },
                Arg::Frame(offset) => {
                    self.asm.mov64_reg(reg, Reg::R10);
                    self.asm
                        .alu64_imm(crate::codegen::asm::AluOp::Add, reg, i32::from(offset));
                }
                Arg::Map(map) => self.asm.ld_map_fd(reg, map),
            }
        }
    }

    /// Moves a call's result from r0 to `ret`.
    fn take_result(&mut self, ret: Option<VReg>) {
        if let Some(ret) = ret {
            self.set(ret, Reg::R0);
        }
    }
}
