//! Types of script values as the checker infers them.

use std::fmt;

use crate::vocab::kernel_types::KTypeId;
use crate::vocab::{StackMode, StackType, ValueType};

/// Length of a string produced by `str()` and of string literals' buffers, as in bpftrace.
pub const STRING_LEN: u32 = 64;
/// Length of `comm`.
pub const COMM_LEN: u32 = 16;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    Int {
        size: u8,
        signed: bool,
    },
    /// A NUL-terminated string in a buffer of `len` bytes.
    Str {
        len: u32,
    },
    Tuple(Vec<Type>),
    /// The name of the probe that fired (`probe`).
    Probe,
    /// A typed pointer; usable as a u64.
    Ptr(Pointer),
    /// A C struct, union or array held by value (copied out of memory):
    /// stored and printed with its C layout.
    Object(CObject),
    /// A kernel address printed as its symbol (`ksym`).
    KernelSymbol,
    /// A user address and its process, printed as a symbol (`usym`).
    UserSymbol,
    /// `kstack`/`ustack`: a stack id, printed as the stack's frames.
    Stack(StackType),
    /// `ntop()`: an IPv4 or IPv6 address, printed as text.
    Inet,
    /// `username`: a uid, printed as its name.
    Username,
    /// `buf()`: up to `len` raw bytes, printed escaped.
    Buffer {
        len: u32,
    },
    /// `strftime()`: a time since boot, printed with a format.
    Timestamp,
    /// `macaddr()`: 6 bytes, printed as `AA:BB:CC:DD:EE:FF`.
    MacAddr,
    /// `cgroup_path()`: a cgroup id, printed as its paths.
    CgroupPath,
    /// `strerror()`: an errno, printed as its message.
    Strerror,
    /// Statements and functions without a value.
    Void,
}

/// A typed pointer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    pub target: KTypeId,
    /// The pointee as C spells it, e.g. `struct task_struct`.
    pub name: String,
    /// Whether the verifier knows its BTF type (tp_btf arguments, loads
    /// through such pointers, `bpf_get_current_task_btf`): it can then be
    /// read with direct loads and passed to helpers taking BTF pointers.
    pub btf: bool,
    /// The memory it points into.
    pub space: Space,
}

/// The address space a pointer's memory is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// Read with `bpf_probe_read_kernel` (or directly, given BTF).
    Kernel,
    /// Read with `bpf_probe_read_user`.
    User,
    /// Not known where the pointer was made: read with `bpf_probe_read`,
    /// which reads user memory at user addresses and kernel memory elsewhere.
    Unknown,
}

impl Space {
    /// User memory where `user`, else kernel memory.
    pub fn of(user: bool) -> Space {
        if user { Space::User } else { Space::Kernel }
    }
}

impl Pointer {
    pub fn is_task(&self) -> bool {
        self.name == "struct task_struct"
    }
}

/// A struct, union or array value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CObject {
    pub ty: KTypeId,
    /// As C spells it: `struct foo`, `int[4]`.
    pub name: String,
    /// Its bytes as C lays them out.
    pub layout: ValueType,
}

impl Type {
    pub const U64: Type = Type::Int {
        size: 8,
        signed: false,
    };
    pub const I64: Type = Type::Int {
        size: 8,
        signed: true,
    };

    /// Integers and what behaves as one (pointers, symbols).
    pub fn is_int(&self) -> bool {
        matches!(self, Type::Int { .. } | Type::Ptr(_) | Type::KernelSymbol)
    }

    /// The pointer this is, if any.
    pub fn pointer(&self) -> Option<&Pointer> {
        match self {
            Type::Ptr(ptr) => Some(ptr),
            _ => None,
        }
    }

    /// Whether values of this type live in a stack buffer rather than a
    /// register while a probe computes with them.
    pub fn in_memory(&self) -> bool {
        matches!(
            self,
            Type::Str { .. }
                | Type::Tuple(_)
                | Type::Object(_)
                | Type::UserSymbol
                | Type::Inet
                | Type::Buffer { .. }
                | Type::Timestamp
                | Type::CgroupPath
        )
    }

    /// Values printed as text by user space (`printf`'s `%s`, bpftrace's
    /// "string-like" types): strings, symbols, stacks, names.
    pub fn is_text(&self) -> bool {
        matches!(
            self,
            Type::Str { .. }
                | Type::Probe
                | Type::KernelSymbol
                | Type::UserSymbol
                | Type::Stack(_)
                | Type::Inet
                | Type::Username
                | Type::Timestamp
                | Type::MacAddr
                | Type::CgroupPath
                | Type::Strerror
        )
    }

    /// The default stack of `kstack`/`ustack` without arguments.
    pub fn stack(user: bool) -> Type {
        Type::Stack(StackType {
            user,
            mode: StackMode::Bpftrace,
            depth: StackType::DEFAULT_DEPTH,
        })
    }

    pub fn is_signed(&self) -> bool {
        matches!(self, Type::Int { signed: true, .. })
    }

    /// The smallest type holding values of both (for maps and variables
    /// assigned from several places).
    pub fn unify(&self, other: &Type) -> Option<Type> {
        match (self, other) {
            (Type::Ptr(a), Type::Ptr(b)) if a.target == b.target => Some(Type::Ptr(Pointer {
                btf: a.btf && b.btf,
                space: if a.space == b.space {
                    a.space
                } else {
                    Space::Unknown
                },
                ..a.clone()
            })),
            // A pointer variable or map keeps its type when integers are
            // added to it (`@p = (int32 *)x; @p += 1`).
            (Type::Ptr(p), Type::Int { .. }) | (Type::Int { .. }, Type::Ptr(p)) => {
                Some(Type::Ptr(p.clone()))
            }
            (Type::KernelSymbol, Type::KernelSymbol) => Some(Type::KernelSymbol),
            (a, b)
                if a.is_int()
                    && b.is_int()
                    && !matches!((a, b), (Type::Int { .. }, Type::Int { .. })) =>
            {
                Some(Type::U64)
            }
            // Of one signedness, the wider of the two: a variable keeps its C
            // size (for `sizeof`) while every value assigned fits it; storage
            // is 8 bytes anyway.
            (
                Type::Int {
                    size: a_size,
                    signed: a,
                },
                Type::Int {
                    size: b_size,
                    signed: b,
                },
            ) => Some(Type::Int {
                size: if a == b { *a_size.max(b_size) } else { 8 },
                signed: *a && *b,
            }),
            (Type::Str { len: a }, Type::Str { len: b }) => Some(Type::Str { len: *a.max(b) }),
            (Type::Buffer { len: a }, Type::Buffer { len: b }) => {
                Some(Type::Buffer { len: *a.max(b) })
            }
            (Type::Tuple(a), Type::Tuple(b)) if a.len() == b.len() => a
                .iter()
                .zip(b)
                .map(|(x, y)| x.unify(y))
                .collect::<Option<Vec<_>>>()
                .map(Type::Tuple),
            (a, b) if a == b => Some(a.clone()),
            _ => None,
        }
    }

    /// Storage layout: integers widen to 8 bytes (all arithmetic is 64-bit),
    /// strings keep their buffer, tuples align every field to 8 bytes.
    pub fn layout(&self) -> ValueType {
        match self {
            Type::Int { signed, .. } => ValueType::Int {
                size: 8,
                signed: *signed,
            },
            Type::Str { len } => ValueType::Str { len: *len },
            Type::Tuple(fields) => {
                let mut offset = 0;
                let fields = fields
                    .iter()
                    .map(|field| {
                        let layout = field.layout();
                        let at = offset;
                        offset += layout.size().next_multiple_of(8);
                        (at, layout)
                    })
                    .collect();
                ValueType::Tuple {
                    fields,
                    size: offset,
                }
            }
            Type::Probe => ValueType::Probe,
            Type::Ptr(_) => ValueType::Int {
                size: 8,
                signed: false,
            },
            Type::Object(object) => object.layout.clone(),
            Type::KernelSymbol => ValueType::Symbol { kernel: true },
            Type::UserSymbol => ValueType::Symbol { kernel: false },
            Type::Stack(stack) => ValueType::Stack(*stack),
            Type::Inet => ValueType::Inet,
            Type::Username => ValueType::Username,
            Type::Buffer { len } => ValueType::Buffer { len: *len },
            Type::Timestamp => ValueType::Timestamp,
            Type::MacAddr => ValueType::MacAddr,
            Type::CgroupPath => ValueType::CgroupPath,
            Type::Strerror => ValueType::Strerror,
            Type::Void => ValueType::Int {
                size: 8,
                signed: false,
            },
        }
    }

    /// Offsets of a tuple's fields in its layout (empty for other types).
    pub fn layout_offsets(&self) -> Vec<u32> {
        match self.layout() {
            ValueType::Tuple { fields, .. } => fields.iter().map(|(at, _)| *at).collect(),
            _ => Vec::new(),
        }
    }

    /// Bytes this type takes in a map key, map value or message.
    pub fn size(&self) -> u32 {
        self.layout().size().next_multiple_of(8)
    }

    /// `sizeof` as bpftrace counts it: integers at their own size, tuples
    /// as C structs of their elements.
    pub fn c_size(&self) -> u32 {
        self.c_size_align().0
    }

    fn c_size_align(&self) -> (u32, u32) {
        match self {
            Type::Int { size, .. } => (u32::from(*size), u32::from(*size)),
            Type::Str { len } => (*len, 1),
            Type::Tuple(fields) => {
                let (mut end, mut align) = (0u32, 1u32);
                for field in fields {
                    let (size, field_align) = field.c_size_align();
                    end = end.next_multiple_of(field_align.max(1)) + size;
                    align = align.max(field_align);
                }
                (end.next_multiple_of(align), align)
            }
            Type::Object(object) => (object.layout.size(), object.layout.align()),
            Type::Probe | Type::Ptr(_) | Type::KernelSymbol => (8, 8),
            Type::Void => (0, 1),
            // Values only built-ins make (stacks, symbols, addresses): as stored.
            _ => (self.size(), 8),
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Int { size, signed } => {
                write!(f, "{}int{}", if *signed { "" } else { "u" }, size * 8)
            }
            Type::Str { len } => write!(f, "string[{len}]"),
            Type::Tuple(fields) => {
                f.write_str("(")?;
                for (i, field) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{field}")?;
                }
                f.write_str(")")
            }
            Type::Probe => f.write_str("probe"),
            Type::Ptr(ptr) => write!(f, "{} *", ptr.name),
            Type::Object(object) => f.write_str(&object.name),
            Type::KernelSymbol => f.write_str("ksym"),
            Type::UserSymbol => f.write_str("usym"),
            Type::Stack(stack) => f.write_str(stack.name()),
            Type::Inet => f.write_str("inet"),
            Type::Username => f.write_str("username"),
            Type::Buffer { len } => write!(f, "buffer[{len}]"),
            Type::Timestamp => f.write_str("timestamp"),
            Type::MacAddr => f.write_str("mac_address"),
            Type::CgroupPath => f.write_str("cgroup_path"),
            Type::Strerror => f.write_str("strerror"),
            Type::Void => f.write_str("void"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tuples lay every field out on an 8-byte boundary.
    #[test]
    fn tuple_layout_aligns_fields() {
        let ty = Type::Tuple(vec![Type::U64, Type::Str { len: 5 }, Type::I64]);
        let ValueType::Tuple { fields, size } = ty.layout() else {
            panic!("tuple layout expected");
        };
        let offsets: Vec<u32> = fields.iter().map(|(at, _)| *at).collect();
        assert_eq!(offsets, vec![0, 8, 16]);
        assert_eq!(size, 24);
    }

    /// `sizeof` counts tuples as C structs of their elements, as bpftrace.
    #[test]
    fn c_sizes_of_tuples() {
        let int = |size| Type::Int { size, signed: true };
        assert_eq!(
            Type::Tuple(vec![int(1), int(8), int(1), int(8)]).c_size(),
            32
        );
        assert_eq!(Type::Tuple(vec![int(1), int(2), int(4)]).c_size(), 8);
        let mixed = vec![
            int(1),
            int(1),
            Type::Str { len: 7 },
            int(8),
            int(4),
            int(8),
            int(1),
            int(2),
            Type::Str { len: 4 },
        ];
        assert_eq!(Type::Tuple(mixed).c_size(), 48);
    }

    /// Unifying strings keeps the longer buffer; ints and strings never unify.
    #[test]
    fn unify_rules() {
        let short = Type::Str { len: 16 };
        let long = Type::Str { len: 64 };
        assert_eq!(short.unify(&long), Some(long.clone()));
        assert_eq!(Type::U64.unify(&long), None);
        assert_eq!(Type::I64.unify(&Type::U64), Some(Type::U64));
    }
}
