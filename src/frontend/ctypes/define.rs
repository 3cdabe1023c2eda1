//! The script's C definitions → types in the table: records named first
//! (so they may point to themselves or to later ones), then each laid out
//! in order, enums and typedefs registered as they come.

use super::TypeTable;
use super::layout::{Slot, layout};
use crate::frontend::ast::{CDefinition, CEnum, CRecord, CType, Span};
use crate::frontend::diag::ScriptError;
use crate::vocab::kernel_types::{KTypeId, KernelKind, KernelMember, KernelType};

impl TypeTable<'_> {
    /// Adds the script's definitions; errors name what is wrong where.
    pub fn define(&mut self, definitions: &[CDefinition]) -> Vec<ScriptError> {
        for definition in definitions {
            match definition {
                CDefinition::Record(record) => self.declare_records(record),
                CDefinition::Typedef { ty, .. } => self.declare_in(ty),
                CDefinition::Enum(_) => {}
            }
        }
        let mut errors = Vec::new();
        for definition in definitions {
            let result = match definition {
                CDefinition::Record(record) => self.record(record).map(|_| ()),
                CDefinition::Enum(e) => {
                    self.enumeration(e);
                    Ok(())
                }
                CDefinition::Typedef { name, ty, .. } => self.c_type(ty).map(|id| {
                    self.names.insert(name.clone(), id);
                }),
            };
            errors.extend(result.err());
        }
        errors
    }

    /// Names every record defined in `record` (itself included) before any
    /// is laid out.
    fn declare_records(&mut self, record: &CRecord) {
        if let (Some(name), Some(_)) = (&record.name, &record.members) {
            let key = record_name(record.union, name);
            if !self.names.contains_key(&key) {
                let id = self.add(KernelType {
                    name: key.clone(),
                    kind: KernelKind::Other,
                });
                self.names.insert(key, id);
            }
        }
        for member in record.members.iter().flatten() {
            self.declare_in(&member.ty);
        }
    }

    fn declare_in(&mut self, ty: &CType) {
        match ty {
            CType::Record(inner) => self.declare_records(inner),
            CType::Pointer(inner) | CType::Array(inner, _) => self.declare_in(inner),
            CType::Named { .. } | CType::Enum(_) => {}
        }
    }

    /// The type C text names (`struct __kernel_timespec *`).
    pub fn parse_type(&mut self, text: &str) -> Result<KTypeId, String> {
        let ty = crate::frontend::parse::c_type(text).map_err(|e| e.message)?;
        self.c_type(&ty).map_err(|e| e.message)
    }

    /// Lays out a record and stores it under its declared id.
    fn record(&mut self, record: &CRecord) -> Result<KTypeId, ScriptError> {
        let key = record.name.as_ref().map(|n| record_name(record.union, n));
        let Some(members) = &record.members else {
            let key = key.expect("cdecl: a record without a body has a name");
            return self.named(&key).or_else(|_| Ok(self.opaque(key)));
        };
        let mut placed = Vec::with_capacity(members.len());
        let mut slots = Vec::with_capacity(members.len());
        for member in members {
            let ty = self.c_type(&member.ty)?;
            let size = self.size_of(ty).map_err(|e| incomplete(member.span, &e))?;
            let align = self.align_of(ty).map_err(|e| incomplete(member.span, &e))?;
            if member.bits.is_some_and(|b| b > size * 8) {
                let message = format!("the bitfield is wider than its type `{}`", self.name_of(ty));
                return Err(ScriptError::new(member.span, message));
            }
            slots.push(Slot {
                size,
                align,
                bits: member.bits,
                unnamed: member.name.is_none() && member.bits.is_some(),
            });
            placed.push((member.name.clone().unwrap_or_default(), ty, member.bits));
        }
        let shape = layout(&slots, record.union);
        let members: Vec<KernelMember> = placed
            .into_iter()
            .zip(shape.offsets_bits)
            .filter(|((name, _, bits), _)| !(name.is_empty() && bits.is_some()))
            .map(|((name, ty, bits), offset_bits)| KernelMember {
                name,
                ty,
                offset_bits,
                bitfield_bits: bits.map(|b| b as u8),
            })
            .collect();
        let ty = KernelType {
            name: key
                .clone()
                .unwrap_or_else(|| record_name(record.union, "").trim_end().to_string()),
            kind: KernelKind::Struct {
                union: record.union,
                size: shape.size,
                members: members.into(),
            },
        };
        let id = match key.and_then(|k| self.names.get(&k).copied()) {
            Some(id) => {
                self.own[(id.0 - crate::vocab::kernel_types::SCRIPT_TYPES) as usize] = ty;
                id
            }
            None => self.add(ty),
        };
        self.aligns.borrow_mut().remove(&id);
        Ok(id)
    }

    /// Registers an enum's constants; the enum itself is a 4-byte integer.
    fn enumeration(&mut self, e: &CEnum) -> KTypeId {
        for (name, value) in &e.values {
            self.enumerators.insert(name.clone(), *value);
        }
        let signed = e.values.iter().any(|(_, v)| *v < 0);
        let name = e
            .name
            .as_ref()
            .map_or("enum".to_string(), |n| format!("enum {n}"));
        let id = self.add(KernelType {
            name: name.clone(),
            kind: KernelKind::Enum { size: 4, signed },
        });
        if e.name.is_some() {
            self.names.insert(name, id);
        }
        id
    }

    /// The id of a type as a declaration writes it.
    fn c_type(&mut self, ty: &CType) -> Result<KTypeId, ScriptError> {
        match ty {
            CType::Named { name, span } => self.named(name).map_err(|e| ScriptError::new(*span, e)),
            CType::Record(record) => self.record(record),
            CType::Enum(e) => Ok(self.enumeration(e)),
            CType::Pointer(inner) => {
                let target = match &**inner {
                    // A pointer may name a record defined nowhere, as in C.
                    CType::Named { name, .. } if is_record_name(name) => self
                        .named(name)
                        .unwrap_or_else(|_| self.opaque(name.clone())),
                    other => self.c_type(other)?,
                };
                Ok(self.pointer_to(target))
            }
            CType::Array(inner, len) => {
                let elem = self.c_type(inner)?;
                Ok(self.array_of(elem, *len))
            }
        }
    }

    /// A record known by name only.
    fn opaque(&mut self, name: String) -> KTypeId {
        let id = self.add(KernelType {
            name: name.clone(),
            kind: KernelKind::Other,
        });
        self.names.insert(name, id);
        id
    }
}

fn record_name(union: bool, name: &str) -> String {
    format!("{} {name}", if union { "union" } else { "struct" })
}

fn is_record_name(name: &str) -> bool {
    name.starts_with("struct ") || name.starts_with("union ")
}

/// A member whose type has no size (declared but never defined).
fn incomplete(span: Span, why: &str) -> ScriptError {
    ScriptError::new(span, why.to_string())
        .with_help("define the type before using it by value, or use a pointer to it")
}
