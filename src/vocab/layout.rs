//! The byte layout of values in map keys, map values and messages, which
//! BPF code writes and user space decodes.

/// The byte layout of a value in a map key, map value or message.
#[derive(Clone, Debug, PartialEq, Eq)]
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
    /// u64 address printed as a symbol.
    Symbol {
        kernel: bool,
    },
    /// A probe name, stored as a u64 index into `Compiled::programs`.
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
}

/// A member of a [`ValueType::Struct`].
#[derive(Clone, Debug, PartialEq, Eq)]
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
            ValueType::Symbol { .. } | ValueType::Probe => 8,
            ValueType::Array { elem, len } => elem.size() * len,
        }
    }

    /// The alignment C gives a value of this layout.
    pub fn align(&self) -> u32 {
        match self {
            ValueType::Int { size, .. } => u32::from(*size).max(1),
            ValueType::Str { .. } => 1,
            ValueType::Struct { align, .. } => *align,
            ValueType::Array { elem, .. } => elem.align(),
            ValueType::Tuple { .. } | ValueType::Symbol { .. } | ValueType::Probe => 8,
        }
    }
}
