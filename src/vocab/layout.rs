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
}

impl ValueType {
    pub fn size(&self) -> u32 {
        match self {
            ValueType::Int { size, .. } => u32::from(*size),
            ValueType::Str { len } => *len,
            ValueType::Tuple { size, .. } => *size,
            ValueType::Symbol { .. } | ValueType::Probe => 8,
        }
    }
}
