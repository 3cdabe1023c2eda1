//! The code generator's intermediate form: BPF-shaped instructions over
//! unlimited virtual registers, with symbolic labels. Lowering writes it,
//! `regalloc` assigns registers, `emit` turns it into machine code.

pub use crate::codegen::asm::{AluOp, Cond, Size};
use crate::frontend::ast::Span;
use crate::vocab::MapId;

/// A virtual register: one 64-bit value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VReg(pub u32);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Label(pub u32);

/// A second operand: a register or a 32-bit immediate (sign-extended).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Src {
    Reg(VReg),
    Imm(i32),
}

/// Where a memory access is based: a register holding a pointer, or the frame (r10).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Base {
    Reg(VReg),
    Frame,
}

/// A helper-call argument, placed in r1..r5 at the call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Arg {
    Reg(VReg),
    Imm(i64),
    /// r10 + offset
    Frame(i16),
    Map(MapId),
}

#[derive(Clone, Debug, PartialEq)]
pub enum Inst {
    /// dst = the program's context argument (r1 at entry). Must come first.
    Ctx {
        dst: VReg,
    },
    Mov {
        dst: VReg,
        src: Src,
    },
    Imm64 {
        dst: VReg,
        value: u64,
    },
    /// dst = dst op src (64-bit)
    Alu {
        op: AluOp,
        dst: VReg,
        src: Src,
    },
    Neg {
        dst: VReg,
    },
    /// dst = address of byte `offset` of the value of one-element array `map`.
    MapValueAddr {
        dst: VReg,
        map: MapId,
        offset: u32,
    },
    Load {
        dst: VReg,
        base: Base,
        offset: i16,
        size: Size,
    },
    Store {
        base: Base,
        offset: i16,
        src: Src,
        size: Size,
    },
    /// Atomic `*(base + offset) += src`.
    AtomicAdd {
        base: VReg,
        offset: i16,
        src: VReg,
        size: Size,
    },
    Call {
        helper: u32,
        args: Vec<Arg>,
        ret: Option<VReg>,
    },
    /// A call of the kernel function (kfunc) with kernel BTF id `btf_id`:
    /// arguments and result as for helpers.
    Kfunc {
        btf_id: u32,
        args: Vec<Arg>,
        ret: Option<VReg>,
    },
    /// The user-stack unwinder (`unwind::bpf`, a BPF function of the
    /// program): walks the current task's user stack into the unwind state
    /// `state` points to. Needs `Function::unwinder`. With `copy` (a
    /// buffer of `walk_cache::RANGE_MAX + 8` bytes) the state is a task's
    /// own and its last walk is reused while it holds.
    Unwind {
        state: VReg,
        copy: Option<VReg>,
    },
    /// `dst` = the kernel-stack walker (`unwind::orc_bpf`, a BPF function
    /// of the program) run from the program's main function: the current
    /// task's kernel frames after the tracer's into `to`, `dst` their bytes
    /// or negative when it gave up. Needs `Function::kernel_walker`.
    KernelWalk {
        to: VReg,
        dst: VReg,
    },
    /// `dst` = the address of the program's task-work callback (the
    /// function `emit::emit_program` places after the program's own).
    TaskWorkCallback {
        dst: VReg,
    },
    Jump(Label),
    Branch {
        cond: Cond,
        lhs: VReg,
        rhs: Src,
        target: Label,
    },
    Bind(Label),
    /// return 0
    Exit,
}

impl Inst {
    /// Registers read.
    pub fn uses(&self) -> Vec<VReg> {
        let src = |s: &Src| match s {
            Src::Reg(r) => Some(*r),
            Src::Imm(_) => None,
        };
        let base = |b: &Base| match b {
            Base::Reg(r) => Some(*r),
            Base::Frame => None,
        };
        match self {
            Inst::Ctx { .. }
            | Inst::Imm64 { .. }
            | Inst::MapValueAddr { .. }
            | Inst::TaskWorkCallback { .. } => vec![],
            Inst::Mov { src: s, .. } => src(s).into_iter().collect(),
            Inst::Alu { dst, src: s, .. } => std::iter::once(*dst).chain(src(s)).collect(),
            Inst::Neg { dst } => vec![*dst],
            Inst::Load { base: b, .. } => base(b).into_iter().collect(),
            Inst::Store {
                base: b, src: s, ..
            } => base(b).into_iter().chain(src(s)).collect(),
            Inst::AtomicAdd { base, src, .. } => vec![*base, *src],
            Inst::Unwind { state, copy } => std::iter::once(*state).chain(*copy).collect(),
            Inst::KernelWalk { to, .. } => vec![*to],
            Inst::Call { args, .. } | Inst::Kfunc { args, .. } => args
                .iter()
                .filter_map(|a| match a {
                    Arg::Reg(r) => Some(*r),
                    _ => None,
                })
                .collect(),
            Inst::Branch { lhs, rhs, .. } => std::iter::once(*lhs).chain(src(rhs)).collect(),
            Inst::Jump(_) | Inst::Bind(_) | Inst::Exit => vec![],
        }
    }

    /// The register written, if any.
    pub fn def(&self) -> Option<VReg> {
        match self {
            Inst::Ctx { dst }
            | Inst::Mov { dst, .. }
            | Inst::Imm64 { dst, .. }
            | Inst::Alu { dst, .. }
            | Inst::Neg { dst }
            | Inst::MapValueAddr { dst, .. }
            | Inst::TaskWorkCallback { dst }
            | Inst::KernelWalk { dst, .. }
            | Inst::Load { dst, .. } => Some(*dst),
            Inst::Call { ret, .. } | Inst::Kfunc { ret, .. } => *ret,
            _ => None,
        }
    }
}

/// An instruction with the script text it implements and an optional note.
#[derive(Clone, Debug, PartialEq)]
pub struct Annotated {
    pub inst: Inst,
    pub span: Option<Span>,
    pub comment: Option<String>,
}

/// One program's IR, ready for register allocation.
#[derive(Clone, Debug, Default)]
pub struct Function {
    pub insts: Vec<Annotated>,
    pub vregs: u32,
    pub labels: u32,
    /// Bytes of the frame used by buffers (below r10).
    pub frame_bytes: u32,
    /// The unwinder [`Inst::Unwind`] calls, emitted after the program.
    pub unwinder: Option<UnwinderSpec>,
    /// The walker [`Inst::KernelWalk`] calls, emitted after the program.
    pub kernel_walker: Option<KernelWalkerSpec>,
}

/// What the unwinder's BPF functions are built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwinderSpec {
    pub maps: crate::unwind::maps::UnwindMaps,
    pub mm: crate::unwind::layout::MmLayout,
}

/// What the kernel-stack walker's BPF functions are built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelWalkerSpec {
    pub maps: crate::unwind::orc_maps::OrcMaps,
    /// `task_struct.stack`'s offset.
    pub task_stack: u32,
}

#[cfg(test)]
impl Function {
    /// A function of unannotated instructions, for tests.
    pub fn from_insts(insts: Vec<Inst>, vregs: u32, labels: u32, frame_bytes: u32) -> Function {
        let insts = insts
            .into_iter()
            .map(|inst| Annotated {
                inst,
                span: None,
                comment: None,
            })
            .collect();
        Function {
            insts,
            vregs,
            labels,
            frame_bytes,
            unwinder: None,
            kernel_walker: None,
        }
    }
}
