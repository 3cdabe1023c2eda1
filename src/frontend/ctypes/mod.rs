//! The C types a script can name, for the checker: the script's own
//! `struct`/`union`/`enum`/`typedef` definitions (laid out here), C's and
//! bpftrace's integer types, pointers and arrays derived from any type, and
//! kernel BTF or a binary's debug info through the
//! [`Environment`]. A script definition shadows the kernel type of the same
//! name, as in bpftrace.

mod define;
pub mod layout;
mod values;

use std::cell::RefCell;
use std::collections::HashMap;

use crate::vocab::Environment;
use crate::vocab::kernel_types::{
    EnumConstant, KTypeId, KernelKind, KernelMember, KernelType, SCRIPT_TYPES,
};

/// Integer and other built-in type names: size, signedness, and whether
/// it is `_Bool`, floating point or `void`.
#[derive(Clone, Copy)]
enum Builtin {
    Int(u8, bool),
    Bool,
    Float(u8),
    Void,
}

/// C's type names (as `cdecl` spells them), bpftrace's, `<stdint.h>`'s
/// and the kernel's fixed-width ones.
fn builtin(name: &str) -> Option<Builtin> {
    use Builtin::*;
    Some(match name {
        "char" | "signed char" | "int8" | "int8_t" | "s8" | "__s8" => Int(1, true),
        "unsigned char" | "uint8" | "uint8_t" | "u8" | "__u8" => Int(1, false),
        "short" | "int16" | "int16_t" | "s16" | "__s16" => Int(2, true),
        "unsigned short" | "uint16" | "uint16_t" | "u16" | "__u16" => Int(2, false),
        "int" | "int32" | "int32_t" | "s32" | "__s32" => Int(4, true),
        "unsigned int" | "uint32" | "uint32_t" | "u32" | "__u32" => Int(4, false),
        "long" | "long long" | "int64" | "int64_t" | "s64" | "__s64" | "ssize_t" | "intptr_t"
        | "ptrdiff_t" => Int(8, true),
        "unsigned long" | "unsigned long long" | "uint64" | "uint64_t" | "u64" | "__u64"
        | "size_t" | "uintptr_t" => Int(8, false),
        "_Bool" | "bool" => Bool,
        "float" => Float(4),
        "double" => Float(8),
        "long double" => Float(16),
        "void" => Void,
        _ => return None,
    })
}

/// Every type the checker can name.
pub struct TypeTable<'e> {
    env: &'e dyn Environment,
    /// Types made here, at ids from [`SCRIPT_TYPES`].
    own: Vec<KernelType>,
    /// The script's records, enums and typedefs by C name (`struct foo`,
    /// `enum e`, `my_t`), and built-in types once used.
    names: HashMap<String, KTypeId>,
    /// The script's enum constants.
    enumerators: HashMap<String, i64>,
    pointers: HashMap<KTypeId, KTypeId>,
    arrays: HashMap<(KTypeId, u32), KTypeId>,
    /// Alignments computed so far (records need a walk of their members).
    aligns: RefCell<HashMap<KTypeId, u32>>,
}

impl<'e> TypeTable<'e> {
    pub fn new(env: &'e dyn Environment) -> Self {
        TypeTable {
            env,
            own: Vec::new(),
            names: HashMap::new(),
            enumerators: HashMap::new(),
            pointers: HashMap::new(),
            arrays: HashMap::new(),
            aligns: RefCell::new(HashMap::new()),
        }
    }

    fn add(&mut self, ty: KernelType) -> KTypeId {
        self.own.push(ty);
        KTypeId(SCRIPT_TYPES + (self.own.len() - 1) as u32)
    }

    /// The type `id` is, typedefs skipped; a kernel record the script
    /// redefines is the script's.
    pub fn get(&self, id: KTypeId) -> Result<KernelType, String> {
        let id = self.resolve(id);
        if id.is_script() {
            return self
                .own
                .get((id.0 - SCRIPT_TYPES) as usize)
                .cloned()
                .ok_or_else(|| format!("no type with id {:#x}", id.0));
        }
        self.env.kernel_type(id)
    }

    /// `id`, or the script's type that shadows it.
    pub fn resolve(&self, id: KTypeId) -> KTypeId {
        if id.is_script() || self.names.is_empty() {
            return id;
        }
        match self.env.kernel_type(id) {
            Ok(ty) if matches!(ty.kind, KernelKind::Struct { .. }) => {
                self.names.get(&ty.name).copied().unwrap_or(id)
            }
            _ => id,
        }
    }

    /// A type by name: `int`, `uint32`, `struct task_struct`, a typedef.
    pub fn named(&mut self, name: &str) -> Result<KTypeId, String> {
        if let Some(&id) = self.names.get(name) {
            return Ok(id);
        }
        if let Some(kind) = builtin(name) {
            let kind = match kind {
                Builtin::Int(size, signed) => KernelKind::Int { size, signed },
                Builtin::Bool => KernelKind::Bool,
                Builtin::Float(size) => KernelKind::Float { size },
                Builtin::Void => KernelKind::Void,
            };
            let id = self.add(KernelType {
                name: name.to_string(),
                kind,
            });
            self.names.insert(name.to_string(), id);
            return Ok(id);
        }
        self.env
            .kernel_type_named(name)
            .map_err(|_| format!("unknown type `{name}`"))
    }

    /// The pointer type to `target`.
    pub fn pointer_to(&mut self, target: KTypeId) -> KTypeId {
        if let Some(&id) = self.pointers.get(&target) {
            return id;
        }
        let name = format!("{} *", self.name_of(target));
        let id = self.add(KernelType {
            name,
            kind: KernelKind::Pointer(target),
        });
        self.pointers.insert(target, id);
        id
    }

    /// The type of `len` elements of `elem`.
    pub fn array_of(&mut self, elem: KTypeId, len: u32) -> KTypeId {
        if let Some(&id) = self.arrays.get(&(elem, len)) {
            return id;
        }
        let name = format!("{}[{len}]", self.name_of(elem));
        let id = self.add(KernelType {
            name,
            kind: KernelKind::Array { elem, len },
        });
        self.arrays.insert((elem, len), id);
        id
    }

    /// The C spelling of a type, for messages.
    pub fn name_of(&self, id: KTypeId) -> String {
        self.get(id).map_or_else(|_| "?".into(), |t| t.name)
    }

    /// `sizeof`: bytes of a value of the type.
    pub fn size_of(&self, id: KTypeId) -> Result<u32, String> {
        let ty = self.get(id)?;
        Ok(match ty.kind {
            KernelKind::Void => 0,
            KernelKind::Int { size, .. } | KernelKind::Enum { size, .. } => u32::from(size),
            KernelKind::Float { size } => u32::from(size),
            KernelKind::Bool => 1,
            KernelKind::Pointer(_) => 8,
            KernelKind::Struct { size, .. } => size,
            KernelKind::Array { elem, len } => self.size_of(elem)?.saturating_mul(len),
            KernelKind::Other => {
                return Err(format!(
                    "`{}` is declared but not defined, so it has no size",
                    ty.name
                ));
            }
        })
    }

    /// The alignment of the type in bytes.
    pub fn align_of(&self, id: KTypeId) -> Result<u32, String> {
        if let Some(&align) = self.aligns.borrow().get(&id) {
            return Ok(align);
        }
        let ty = self.get(id)?;
        let align = match ty.kind {
            KernelKind::Struct { members, .. } => {
                let mut align = 1;
                for member in members.iter().filter(|m| m.bitfield_bits != Some(0)) {
                    align = align.max(self.align_of(member.ty)?);
                }
                align
            }
            KernelKind::Array { elem, .. } => self.align_of(elem)?,
            KernelKind::Float { size: 16 } => 16,
            _ => self.size_of(id)?.clamp(1, 8),
        };
        self.aligns.borrow_mut().insert(id, align);
        Ok(align)
    }

    /// The members of a struct or union type (empty for other types).
    pub fn members(&self, id: KTypeId) -> std::sync::Arc<[KernelMember]> {
        match self.get(id).map(|t| t.kind) {
            Ok(KernelKind::Struct { members, .. }) => members,
            _ => std::sync::Arc::new([]),
        }
    }

    /// The value of enum constant `name`: the script's enums first, then
    /// the kernel's; `None` when there is none, an error when kernel
    /// enums disagree on it.
    pub fn enum_constant(&self, name: &str) -> Result<Option<i64>, String> {
        if let Some(&value) = self.enumerators.get(name) {
            return Ok(Some(value));
        }
        let found = self.env.enum_constants(name)?;
        match found.as_slice() {
            [] => Ok(None),
            [one, rest @ ..] if rest.iter().all(|c| c.value == one.value) => Ok(Some(one.value)),
            several => Err(ambiguous(name, several)),
        }
    }
}

fn ambiguous(name: &str, found: &[EnumConstant]) -> String {
    let each: Vec<String> = found
        .iter()
        .map(|c| {
            let owner = if c.enum_name.is_empty() {
                "an anonymous enum".into()
            } else {
                format!("`{}`", c.enum_name)
            };
            format!("{} in {owner}", c.value)
        })
        .collect();
    format!(
        "`{name}` is ambiguous: kernel enums give it different values ({})",
        each.join(", ")
    )
}

#[cfg(test)]
mod tests;
