//! The byte layout of values in map keys, map values and messages, which
//! BPF code writes and user space decodes.

/// The byte layout of a value in a map key, map value or message.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ValueType {
    Int {
        size: u8,
        signed: bool,
    },
    /// NUL-terminated within a fixed buffer.
    Str {
        len: u32,
    },
    /// Fields at their offsets; the size includes padding.
    Tuple {
        fields: Vec<(u32, ValueType)>,
        size: u32,
    },
    /// A code address printed as a symbol: a u64 (`ksym`), or for user
    /// addresses (`usym`) the u64 address then the u64 process id.
    Symbol {
        kernel: bool,
    },
    /// A probe name, stored as a u64 index into `Compiled::probe_names`.
    Probe,
    /// A C struct or union as C lays it out; `size` includes padding.
    Struct {
        fields: Vec<StructField>,
        size: u32,
        align: u32,
    },
    /// `len` elements of `elem`, each `elem.size()` bytes.
    Array {
        elem: Box<ValueType>,
        len: u32,
    },
    /// `kstack`/`ustack`: a u64 whose low 32 bits are an id into the stack
    /// trace map of the stack's depth (negative: no stack); a user stack has
    /// the thread id in its high 32 bits, as bpftrace stores it.
    Stack(StackType),
    /// `ntop()`: the u64 address family (2 or 10), then 16 address bytes
    /// (an IPv4 address in the first 4).
    Inet,
    /// `username`: a u64 uid printed as its name.
    Username,
    /// `buf()`: the u64 number of bytes kept, then `len` bytes.
    Buffer {
        len: u32,
    },
    /// `strftime()`: the u64 index of its format in `Compiled::texts`, then
    /// u64 nanoseconds since boot.
    Timestamp,
    /// `macaddr()`: 6 bytes, padded to 8.
    MacAddr,
    /// `cgroup_path()`: the u64 index of its hierarchy filter in
    /// `Compiled::texts`, then the u64 cgroup id.
    CgroupPath,
    /// `strerror()`: a u64 errno printed as its message.
    Strerror,
}

/// A member of a [`ValueType::Struct`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StructField {
    pub name: String,
    /// Byte offset in the struct.
    pub offset: u32,
    pub ty: ValueType,
    /// A bitfield: its first bit past `offset` and its width; `ty` is the
    /// integer read at `offset` that holds it.
    pub bits: Option<(u8, u8)>,
}

impl ValueType {
    pub fn size(&self) -> u32 {
        match self {
            ValueType::Int { size, .. } => u32::from(*size),
            ValueType::Str { len } => *len,
            ValueType::Tuple { size, .. } | ValueType::Struct { size, .. } => *size,
            ValueType::Array { elem, len } => elem.size() * len,
            ValueType::Symbol { kernel: true } => 8,
            ValueType::Symbol { kernel: false } => 16,
            ValueType::Probe
            | ValueType::Stack(_)
            | ValueType::Username
            | ValueType::MacAddr
            | ValueType::Strerror => 8,
            ValueType::Inet => 24,
            ValueType::Buffer { len } => 8 + len,
            ValueType::Timestamp | ValueType::CgroupPath => 16,
        }
    }

    /// The alignment C gives a value of this layout.
    pub fn align(&self) -> u32 {
        match self {
            ValueType::Int { size, .. } => u32::from(*size).max(1),
            ValueType::Str { .. } => 1,
            ValueType::Struct { align, .. } => *align,
            ValueType::Array { elem, .. } => elem.align(),
            _ => 8,
        }
    }
}

/// How `kstack`/`ustack` are taken and printed.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct StackType {
    /// User frames (`ustack`), else kernel frames (`kstack`).
    pub user: bool,
    pub mode: StackMode,
    /// Frames kept: the stack trace map of this depth holds the frames.
    pub depth: u32,
}

/// How a stack prints: bpftrace's `kstack(bpftrace)` (the default) or
/// `kstack(perf)`.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum StackMode {
    /// One `symbol+offset` per line, indented.
    Bpftrace,
    /// `\taddress symbol+offset (module)` per line, as `perf script`.
    Perf,
}

impl StackType {
    /// Frames kept when no depth is given, as bpftrace.
    pub const DEFAULT_DEPTH: u32 = 127;
    /// The largest depth bpftrace accepts.
    pub const MAX_DEPTH: u32 = 1024;

    /// The builtin's name: `kstack` or `ustack`.
    pub fn name(self) -> &'static str {
        if self.user { "ustack" } else { "kstack" }
    }
}
