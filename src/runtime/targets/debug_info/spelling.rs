//! A parameter's C type as bpftrace 0.17's `-lv` spells it from DWARF:
//! typedef names kept (`size_t n`, `pair_t* p`), `const` before a value and
//! after a pointer (`const pair_t* const cp`), `void*` for untyped pointers,
//! and `<unknown type>` where bpftrace has no spelling (volatile, restrict,
//! atomic, functions, `const void`). Input: a unit and a type offset;
//! output: the text.

use gimli::{Unit, UnitOffset};

use super::{Dwarf, Entry, Reader, name_of, type_ref};

/// What bpftrace prints for a type it cannot spell.
const UNKNOWN: &str = "<unknown type>";

/// Types nested deeper than this (a malformed cycle) are unknown.
const MAX_DEPTH: u32 = 32;

/// The spelling of the type at `offset` (`None`: `void`).
pub(super) fn spell(
    dwarf: &Dwarf<'_>,
    unit: &Unit<Reader<'_>>,
    offset: Option<UnitOffset>,
) -> String {
    spell_at(dwarf, unit, offset, MAX_DEPTH).unwrap_or_else(|| UNKNOWN.into())
}

fn spell_at(
    dwarf: &Dwarf<'_>,
    unit: &Unit<Reader<'_>>,
    offset: Option<UnitOffset>,
    depth: u32,
) -> Option<String> {
    let depth = depth.checked_sub(1)?;
    let Some(offset) = offset else {
        return Some("void".into());
    };
    let entry = unit.entry(offset).ok()?;
    let name = || name_of(dwarf, unit, &entry);
    match entry.tag() {
        gimli::DW_TAG_base_type | gimli::DW_TAG_typedef => name(),
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => {
            Some(format!("struct {}", name()?))
        }
        gimli::DW_TAG_union_type => Some(format!("union {}", name()?)),
        gimli::DW_TAG_enumeration_type => Some(format!("enum {}", name()?)),
        gimli::DW_TAG_pointer_type => {
            let target = type_ref(&entry);
            Some(format!("{}*", spell_or_unknown(dwarf, unit, target, depth)))
        }
        gimli::DW_TAG_const_type => const_spelling(dwarf, unit, &entry, depth),
        _ => None,
    }
}

/// `const T` for a value, `T* const` for a pointer; `const void` is unknown.
fn const_spelling(
    dwarf: &Dwarf<'_>,
    unit: &Unit<Reader<'_>>,
    entry: &Entry<'_>,
    depth: u32,
) -> Option<String> {
    let target = type_ref(entry);
    let pointer = match target {
        Some(at) => unit.entry(at).ok()?.tag() == gimli::DW_TAG_pointer_type,
        None => false,
    };
    match (target, pointer) {
        (None, _) => Some(format!("const {UNKNOWN}")),
        (_, true) => Some(format!(
            "{} const",
            spell_or_unknown(dwarf, unit, target, depth)
        )),
        (_, false) => Some(format!(
            "const {}",
            spell_or_unknown(dwarf, unit, target, depth)
        )),
    }
}

fn spell_or_unknown(
    dwarf: &Dwarf<'_>,
    unit: &Unit<Reader<'_>>,
    offset: Option<UnitOffset>,
    depth: u32,
) -> String {
    spell_at(dwarf, unit, offset, depth).unwrap_or_else(|| UNKNOWN.into())
}
