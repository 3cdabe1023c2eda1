//! C types → the byte layouts of values held by value: a struct, union or
//! array copied out of memory is stored, keyed on and printed with these.

use super::TypeTable;
use crate::vocab::kernel_types::{KTypeId, KernelKind};
use crate::vocab::{StructField, ValueType};

impl TypeTable<'_> {
    /// The layout of a value of type `ty`, as C lays it out.
    pub fn layout_of(&self, ty: KTypeId) -> Result<ValueType, String> {
        let described = self.get(ty)?;
        Ok(match described.kind {
            KernelKind::Int { size, signed } | KernelKind::Enum { size, signed } => {
                ValueType::Int { size, signed }
            }
            KernelKind::Bool => ValueType::Int {
                size: 1,
                signed: false,
            },
            KernelKind::Pointer(_) => ValueType::Int {
                size: 8,
                signed: false,
            },
            KernelKind::Array { elem, len } if self.get(elem)?.is_char() => ValueType::Str { len },
            KernelKind::Array { elem, len } => ValueType::Array {
                elem: Box::new(self.layout_of(elem)?),
                len,
            },
            KernelKind::Struct { size, .. } => ValueType::Struct {
                fields: self.fields(ty, 0)?,
                size,
                align: self.align_of(ty)?,
            },
            KernelKind::Float { .. } | KernelKind::Void | KernelKind::Other => {
                return Err(format!(
                    "values of type `{}` cannot be held",
                    described.name
                ));
            }
        })
    }

    /// The fields of record `ty` placed `base` bytes into its parent, the
    /// members of anonymous structs and unions among them.
    fn fields(&self, ty: KTypeId, base: u32) -> Result<Vec<StructField>, String> {
        let mut fields = Vec::new();
        for member in self.members(ty).iter() {
            let offset = base + member.offset_bits / 8;
            if member.name.is_empty() {
                fields.extend(self.fields(member.ty, offset)?);
                continue;
            }
            let (ty, bits) = match member.bitfield_bits {
                Some(width) => {
                    let signed = matches!(
                        self.get(member.ty)?.kind,
                        KernelKind::Int { signed: true, .. }
                            | KernelKind::Enum { signed: true, .. }
                    );
                    let shift = (member.offset_bits % 8) as u8;
                    (ValueType::Int { size: 8, signed }, Some((shift, width)))
                }
                None => (self.layout_of(member.ty)?, None),
            };
            fields.push(StructField {
                name: member.name.clone(),
                offset,
                ty,
                bits,
            });
        }
        Ok(fields)
    }
}
