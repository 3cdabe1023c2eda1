//! Where the x86-64 SysV ABI passes each parameter of a function, from its
//! types: integer-class values (integers, enums, pointers) in the next of
//! six registers, then on the stack; floating point in eight SSE registers;
//! a struct or union of up to 16 bytes in one register per eightbyte
//! (INTEGER when any of its members there is an integer, else SSE), or
//! wholly on the stack when too few registers remain; larger ones on the
//! stack. Input: parameter names and types; output: [`PassedIn`] or why a
//! script cannot read the parameter (floating point, structs by value).

use super::DebugTypes;
use crate::vocab::PassedIn;
use crate::vocab::kernel_types::{KTypeId, KernelKind};

/// Integer argument registers (rdi, rsi, rdx, rcx, r8, r9).
const INT_REGISTERS: u8 = 6;
/// SSE argument registers (xmm0..xmm7).
const SSE_REGISTERS: u8 = 8;
/// Nesting deeper than this (a malformed type) is not classified.
const MAX_DEPTH: u32 = 16;

/// The class of one eightbyte of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Integer,
    Sse,
}

/// How a parameter's type is passed.
#[derive(Debug, PartialEq, Eq)]
enum Passing {
    /// In registers, one class per eightbyte.
    Registers(Vec<Class>),
    /// On the stack, taking this many bytes.
    Memory(u32),
}

/// The registers and stack bytes used so far.
#[derive(Default)]
struct Allocation {
    int: u8,
    sse: u8,
    stack: u32,
}

/// Where each parameter is, or why it cannot be read; a type the classifier
/// does not know leaves it and every parameter after it unlocated.
pub(super) fn passing(
    params: &[(String, KTypeId)],
    types: &DebugTypes,
) -> Vec<Result<PassedIn, String>> {
    let mut used = Allocation::default();
    let mut lost: Option<String> = None;
    params
        .iter()
        .map(|(name, ty)| {
            if let Some(why) = &lost {
                return Err(why.clone());
            }
            let Some(passing) = classify(*ty, types) else {
                lost = Some(format!("it follows `{name}`, whose type is not classified"));
                return Err(format!(
                    "wprof cannot tell how `{}` is passed",
                    types.name(*ty)
                ));
            };
            used.place(passing, types.name(*ty), types.get(*ty).map(|t| &t.kind))
        })
        .collect()
}

impl Allocation {
    /// Places one parameter; only a lone integer-class value can be read.
    fn place(
        &mut self,
        passing: Passing,
        type_name: &str,
        kind: Option<&KernelKind>,
    ) -> Result<PassedIn, String> {
        let by_value = || {
            format!("`{type_name}` is passed by value, which `args` cannot read (nor can bpftrace)")
        };
        let is_record = matches!(kind, Some(KernelKind::Struct { .. }));
        let classes = match passing {
            Passing::Memory(size) => {
                self.stack += size.div_ceil(8) * 8;
                return Err(by_value());
            }
            Passing::Registers(classes) => classes,
        };
        let ints = classes.iter().filter(|&&c| c == Class::Integer).count() as u8;
        let sses = classes.len() as u8 - ints;
        if self.int + ints > INT_REGISTERS || self.sse + sses > SSE_REGISTERS {
            let at = self.stack;
            self.stack += 8 * classes.len() as u32;
            return match (is_record, classes.as_slice()) {
                (false, [Class::Integer]) => Ok(PassedIn::Stack(at)),
                (false, _) => Err(floating_point()),
                (true, _) => Err(by_value()),
            };
        }
        let first = self.int;
        self.int += ints;
        self.sse += sses;
        match (is_record, classes.as_slice()) {
            (false, [Class::Integer]) => Ok(PassedIn::Register(first)),
            (false, _) => Err(floating_point()),
            (true, _) => Err(by_value()),
        }
    }
}

fn floating_point() -> String {
    "floating-point values arrive in SSE registers, which probes cannot read".into()
}

/// How a value of type `ty` is passed; `None` for a type not classified.
fn classify(ty: KTypeId, types: &DebugTypes) -> Option<Passing> {
    let kind = &types.get(ty)?.kind;
    match kind {
        KernelKind::Struct { size, .. } if *size > 16 => Some(Passing::Memory(*size)),
        KernelKind::Struct { size, .. } => {
            let mut classes = vec![None; size.div_ceil(8) as usize];
            eightbytes(ty, 0, types, &mut classes, MAX_DEPTH)?;
            // Padding-only eightbytes do not occur in C; treat them as SSE-free integers.
            Some(Passing::Registers(
                classes
                    .into_iter()
                    .map(|c| c.unwrap_or(Class::Integer))
                    .collect(),
            ))
        }
        _ => Some(Passing::Registers(vec![scalar_class(kind)?])),
    }
}

fn scalar_class(kind: &KernelKind) -> Option<Class> {
    match kind {
        KernelKind::Int { .. }
        | KernelKind::Enum { .. }
        | KernelKind::Bool
        | KernelKind::Pointer(_) => Some(Class::Integer),
        KernelKind::Float { .. } => Some(Class::Sse),
        _ => None,
    }
}

/// Merges the classes of the scalars inside `ty`, placed at byte `offset`
/// of the record, into its eightbytes (INTEGER wins over SSE).
fn eightbytes(
    ty: KTypeId,
    offset: u32,
    types: &DebugTypes,
    classes: &mut [Option<Class>],
    depth: u32,
) -> Option<()> {
    let depth = depth.checked_sub(1)?;
    match &types.get(ty)?.kind {
        KernelKind::Struct { members, .. } => members.iter().try_for_each(|member| {
            eightbytes(
                member.ty,
                offset + member.offset_bits / 8,
                types,
                classes,
                depth,
            )
        }),
        KernelKind::Array { elem, len } => {
            let size = types.size_of(*elem)?;
            (0..*len).try_for_each(|i| eightbytes(*elem, offset + i * size, types, classes, depth))
        }
        kind => {
            let class = scalar_class(kind)?;
            let slot = classes.get_mut(offset as usize / 8)?;
            *slot = match (*slot, class) {
                (Some(Class::Integer), _) | (_, Class::Integer) => Some(Class::Integer),
                _ => Some(Class::Sse),
            };
            Some(())
        }
    }
}
