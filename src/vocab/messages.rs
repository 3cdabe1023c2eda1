//! What programs send to user space through the ring buffer: the layout of
//! each message after its 8-byte [`MessageId`].

use super::layout::ValueType;
use super::maps::MapId;
use super::printf_format::Piece;

/// Index into `Compiled::messages`; the first 8 bytes of every ring buffer record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub u32);

/// Index into the table of built-in functions (`crate::builtins`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct BuiltinId(pub u16);

/// A ring buffer message: after the 8-byte `MessageId`, the fields at their offsets.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Message {
    /// Output of a built-in statement (`printf`, `print`, `time`, `exit`,
    /// `clear`...), printed in user space by that built-in.
    Builtin(BuiltinMessage),
    /// A capture event: the header at the offsets in [`record_header`], then the fields.
    /// A thread field (`FieldType::Thread` in the record's schema, from a
    /// `struct task_struct *` item) holds the task's tid (`task->pid`) as a
    /// u64 (`ValueType::Int { size: 8, signed: false }`); a `ksym()` item is a
    /// u64 kernel address (`ValueType::Symbol { kernel: true }`, a `Str`
    /// field in the schema: the recorder stores the symbol's name).
    /// A record with a stack carries its frames after the fields, at
    /// `frames_at`: the user frames (8-byte addresses, or 32-byte
    /// `struct bpf_stack_build_id`s when the stack flags say
    /// `BUILD_ID`), then the kernel frames (8-byte addresses), counted in
    /// the header.
    Record {
        record: u32,
        fields: Vec<(u32, ValueType)>,
        /// Where the frames start; `None` for a record without a stack.
        frames_at: Option<u32>,
    },
    /// A watched function was called: the address to watch is the u64 at
    /// offset 8; user space sets program `program`'s breakpoint on it (and,
    /// for a `watchpoint`, lets the stopped tracee continue).
    Watch { program: u32 },
    /// A thread took a user address (`ustack`, `usym()`) for the first time:
    /// its u64 `pid_tgid` at offset 8. User space keeps its process's
    /// mappings, so the address still names its function after the exit.
    ThreadSeen,
    /// A helper call at this site failed (`-k`/`-kk`): its return code as an
    /// i64 at offset 8. The message id is the site's id.
    HelperError(HelperErrorSite),
}

/// A helper call whose failure `-k`/`-kk` reports: the helper and the script
/// text it implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HelperErrorSite {
    /// The kernel's `enum bpf_func_id`.
    pub helper: u32,
    /// Merged source offsets (see `frontend::diag::SourceMap`).
    pub span: crate::frontend::ast::Span,
}

/// What a built-in statement sends and keeps for user space; each built-in
/// uses the parts it needs and documents them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BuiltinMessage {
    pub builtin: BuiltinId,
    /// The values the probe sends, at their offsets after the message id.
    pub args: Vec<(u32, ValueType)>,
    /// A parsed `printf` format.
    pub format: Vec<Piece>,
    /// A literal string (`time`'s format).
    pub text: Option<String>,
    /// The map the message is about (`print(@m)`, `clear(@m)`).
    pub map: Option<MapId>,
    /// Integer literals (`print`'s top and div).
    pub consts: Vec<u64>,
}

/// Offsets in a `Message::Record` (after the 8-byte message id).
pub mod record_header {
    /// `bpf_ktime_get_ns()` when the event (or the span) began.
    pub const TS: u32 = 8;
    pub const PID_TGID: u32 = 16;
    /// u32
    pub const CPU: u32 = 24;
    /// u32 (the upper half of the CPU's u64): the process whose user frames
    /// the record carries when they are not the current task's (a switch's
    /// `stack(offcpu, NEXT)` under `-S offcpu=DUR`: the task switched in);
    /// 0 for the current task.
    pub const STACK_TGID: u32 = 28;
    /// `char[16]`
    pub const COMM: u32 = 32;
    /// The fields of a record without a duration or a stack (an instant
    /// without a stack) start here, right after the comm.
    pub const PLAIN_FIELDS: u32 = 48;
    /// Spans only; 0 in other records with a stack.
    pub const DURATION: u32 = 48;
    /// u32 counts of the kernel and user frames after the fields.
    pub const KERNEL_FRAMES: u32 = 56;
    pub const USER_FRAMES: u32 = 60;
    /// u32: how the stack was taken (`unwind::maps::flags`).
    pub const STACK_FLAGS: u32 = 64;
    /// i32: the error of the kernel stack helper (negative errno), 0 if none.
    pub const KERNEL_ERROR: u32 = 68;
    /// At a function-entry uprobe whose user stack the kernel walked with
    /// frame pointers, the caller's return address (the walk cannot see it
    /// yet); 0 otherwise.
    pub const ENTRY_RETURN: u32 = 72;
    pub const FIELDS: u32 = 80;
}

/// Bytes of one frame in a build-id stack map (`struct bpf_stack_build_id`).
pub const BUILD_ID_FRAME_BYTES: u32 = 32;
