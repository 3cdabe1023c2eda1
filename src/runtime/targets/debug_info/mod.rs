//! Runtime, attach targets: a function's parameters from a binary's DWARF
//! `.debug_info`, for `args.NAME` in uprobes and `-lv`. Input: an ELF file
//! and a function name. Output: [`FunctionParam`]s (name, where the x86-64
//! SysV ABI passes it) whose C types are converted into [`KernelType`]s
//! appended to a [`DebugTypes`] store, numbered from [`DEBUG_INFO_TYPES`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use gimli::{
    AttributeValue, DebuggingInformationEntry, DwTag, EndianSlice, LittleEndian, Unit, UnitOffset,
};
use object::{Object, ObjectSection};

use crate::vocab::FunctionParam;
use crate::vocab::kernel_types::{DEBUG_INFO_TYPES, KTypeId, KernelKind, KernelMember, KernelType};

mod abi;
mod spelling;

use abi::passing;

type Reader<'a> = EndianSlice<'a, LittleEndian>;
type Dwarf<'a> = gimli::Dwarf<Reader<'a>>;

/// Types read from debug info, by id from [`DEBUG_INFO_TYPES`].
#[derive(Default)]
pub struct DebugTypes {
    types: Vec<KernelType>,
}

impl DebugTypes {
    pub fn get(&self, id: KTypeId) -> Option<&KernelType> {
        let index = id.0.checked_sub(DEBUG_INFO_TYPES)?;
        self.types.get(index as usize)
    }

    fn reserve(&mut self) -> KTypeId {
        self.types.push(KernelType {
            name: String::new(),
            kind: KernelKind::Other,
        });
        KTypeId(DEBUG_INFO_TYPES + (self.types.len() - 1) as u32)
    }

    fn set(&mut self, id: KTypeId, ty: KernelType) {
        self.types[(id.0 - DEBUG_INFO_TYPES) as usize] = ty;
    }

    fn name(&self, id: KTypeId) -> &str {
        self.get(id).map_or("?", |t| t.name.as_str())
    }

    /// Bytes a value of type `id` takes; `None` for `void` and functions.
    fn size_of(&self, id: KTypeId) -> Option<u32> {
        match &self.get(id)?.kind {
            KernelKind::Int { size, .. } | KernelKind::Enum { size, .. } => Some(u32::from(*size)),
            KernelKind::Float { size } => Some(u32::from(*size)),
            KernelKind::Bool => Some(1),
            KernelKind::Pointer(_) => Some(8),
            KernelKind::Struct { size, .. } => Some(*size),
            KernelKind::Array { elem, len } => self.size_of(*elem)?.checked_mul(*len),
            KernelKind::Void | KernelKind::Other => None,
        }
    }
}

/// The parameters of `function` as `binary`'s debug info declares them;
/// their types are added to `types`.
pub fn function_params(
    binary: &Path,
    function: &str,
    types: &mut DebugTypes,
) -> Result<Vec<FunctionParam>, String> {
    let found = with_dwarf(binary, |dwarf| find_function(dwarf, function, types))?;
    found.ok_or_else(|| {
        format!(
            "{} has no debug info for function `{function}`",
            binary.display()
        )
    })
}

/// The type `binary`'s debug info defines as `name` (`struct Foo`, a
/// typedef, a base type), added to `types`; `None` when it has none.
pub fn named_type(
    binary: &Path,
    name: &str,
    types: &mut DebugTypes,
) -> Result<Option<KTypeId>, String> {
    with_dwarf(binary, |dwarf| find_type(dwarf, name, types))
}

/// Runs `read` on `binary`'s DWARF sections.
fn with_dwarf<T>(
    binary: &Path,
    read: impl FnOnce(&Dwarf<'_>) -> gimli::Result<T>,
) -> Result<T, String> {
    let shown = binary.display();
    let data = std::fs::read(binary).map_err(|e| format!("{shown}: {e}"))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{shown}: {e}"))?;
    if file.section_by_name(".debug_info").is_none() {
        return Err(format!(
            "{shown} has no debug info (no .debug_info section)"
        ));
    }
    let sections =
        gimli::DwarfSections::load(|id| Ok::<_, gimli::Error>(section(&file, id.name())))
            .map_err(|e| format!("{shown}: {e}"))?;
    let dwarf = sections.borrow(|data| EndianSlice::new(data, LittleEndian));
    read(&dwarf).map_err(|e| format!("{shown}: bad debug info: {e}"))
}

fn section<'a>(file: &object::File<'a>, name: &str) -> Cow<'a, [u8]> {
    file.section_by_name(name)
        .and_then(|s| s.uncompressed_data().ok())
        .unwrap_or(Cow::Borrowed(&[]))
}

/// Finds the definition of `function` in any unit and reads its parameters.
fn find_function(
    dwarf: &Dwarf<'_>,
    function: &str,
    types: &mut DebugTypes,
) -> gimli::Result<Option<Vec<FunctionParam>>> {
    let is_function = |entry: &Entry<'_>, spelled: &str| {
        entry.tag() == gimli::DW_TAG_subprogram && spelled == function
    };
    match find_entry(dwarf, is_function)? {
        Some((unit, offset)) => Converter::new(dwarf, &unit, types).params(offset).map(Some),
        None => Ok(None),
    }
}

/// Finds the definition of the type C spells `name` in any unit.
fn find_type(
    dwarf: &Dwarf<'_>,
    name: &str,
    types: &mut DebugTypes,
) -> gimli::Result<Option<KTypeId>> {
    let is_type = |entry: &Entry<'_>, spelled: &str| {
        let keyword = match entry.tag() {
            gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type => "struct ",
            gimli::DW_TAG_union_type => "union ",
            gimli::DW_TAG_enumeration_type => "enum ",
            gimli::DW_TAG_typedef | gimli::DW_TAG_base_type => "",
            _ => return false,
        };
        name.strip_prefix(keyword) == Some(spelled)
    };
    match find_entry(dwarf, is_type)? {
        Some((unit, offset)) => Converter::new(dwarf, &unit, types)
            .type_id(Some(offset))
            .map(Some),
        None => Ok(None),
    }
}

/// The first named entry, not a mere declaration, that `wanted` accepts
/// given its name.
fn find_entry<'a>(
    dwarf: &Dwarf<'a>,
    wanted: impl Fn(&Entry<'a>, &str) -> bool,
) -> gimli::Result<Option<(Unit<Reader<'a>>, UnitOffset)>> {
    let mut headers = dwarf.units();
    while let Some(header) = headers.next()? {
        let unit = dwarf.unit(header)?;
        let mut entries = unit.entries();
        let mut found = None;
        while let Some(entry) = entries.next_dfs()? {
            if entry.attr_value(gimli::DW_AT_declaration).is_some() {
                continue;
            }
            if name_of(dwarf, &unit, entry).is_some_and(|name| wanted(entry, &name)) {
                found = Some(entry.offset());
                break;
            }
        }
        if let Some(offset) = found {
            return Ok(Some((unit, offset)));
        }
    }
    Ok(None)
}

fn name_of(dwarf: &Dwarf<'_>, unit: &Unit<Reader<'_>>, entry: &Entry<'_>) -> Option<String> {
    let value = entry.attr_value(gimli::DW_AT_name)?;
    let name = dwarf.attr_string(unit, value).ok()?;
    Some(name.to_string_lossy().into_owned())
}

type Entry<'a> = DebuggingInformationEntry<Reader<'a>>;

/// Converts one unit's DWARF types into [`KernelType`]s.
struct Converter<'u, 'a> {
    dwarf: &'u Dwarf<'a>,
    unit: &'u Unit<Reader<'a>>,
    types: &'u mut DebugTypes,
    /// Types converted (or being converted: records refer to themselves).
    seen: HashMap<Option<UnitOffset>, KTypeId>,
}

impl<'u, 'a> Converter<'u, 'a> {
    fn new(dwarf: &'u Dwarf<'a>, unit: &'u Unit<Reader<'a>>, types: &'u mut DebugTypes) -> Self {
        Converter {
            dwarf,
            unit,
            types,
            seen: HashMap::new(),
        }
    }

    /// The formal parameters of the subprogram at `offset`, in order.
    fn params(&mut self, offset: UnitOffset) -> gimli::Result<Vec<FunctionParam>> {
        let mut found = Vec::new();
        let mut tree = self.unit.entries_tree(Some(offset))?;
        let mut children = tree.root()?.children();
        while let Some(child) = children.next()? {
            let entry = child.entry();
            if entry.tag() == gimli::DW_TAG_formal_parameter {
                let name = name_of(self.dwarf, self.unit, entry).unwrap_or_default();
                found.push((name, type_ref(entry)));
            }
        }
        let mut params = Vec::with_capacity(found.len());
        let mut spellings = Vec::with_capacity(found.len());
        for (name, ty) in found {
            spellings.push(spelling::spell(self.dwarf, self.unit, ty));
            params.push((name, self.type_id(ty)?));
        }
        let passed = passing(&params, self.types);
        Ok(params
            .into_iter()
            .zip(passed)
            .zip(spellings)
            .map(|(((name, ty), passed), spelled)| FunctionParam {
                name,
                ty,
                spelled,
                passed,
            })
            .collect())
    }

    /// The id of the type at `offset` (`None`: `void`), converting it on
    /// first use; qualifiers and typedefs are seen through.
    fn type_id(&mut self, offset: Option<UnitOffset>) -> gimli::Result<KTypeId> {
        if let Some(&id) = self.seen.get(&offset) {
            return Ok(id);
        }
        let Some(at) = offset else {
            let id = self.types.reserve();
            let void = KernelType {
                name: "void".into(),
                kind: KernelKind::Void,
            };
            self.types.set(id, void);
            self.seen.insert(None, id);
            return Ok(id);
        };
        let entry = self.unit.entry(at)?;
        if is_transparent(entry.tag()) {
            let id = self.type_id(type_ref(&entry))?;
            self.seen.insert(offset, id);
            return Ok(id);
        }
        let id = self.types.reserve();
        self.seen.insert(offset, id);
        let ty = self.convert(&entry, id)?;
        self.types.set(id, ty);
        Ok(id)
    }

    /// The type `entry` describes, to be stored at `id`.
    fn convert(&mut self, entry: &Entry<'_>, id: KTypeId) -> gimli::Result<KernelType> {
        let name = name_of(self.dwarf, self.unit, entry).unwrap_or_default();
        let size = udata(entry, gimli::DW_AT_byte_size).unwrap_or(0);
        let (name, kind) = match entry.tag() {
            gimli::DW_TAG_base_type => (name, base_kind(entry, size)),
            gimli::DW_TAG_pointer_type | gimli::DW_TAG_reference_type => {
                let target = self.type_id(type_ref(entry))?;
                (
                    format!("{} *", self.types.name(target)),
                    KernelKind::Pointer(target),
                )
            }
            gimli::DW_TAG_structure_type | gimli::DW_TAG_union_type | gimli::DW_TAG_class_type => {
                let union = entry.tag() == gimli::DW_TAG_union_type;
                let keyword = if union { "union" } else { "struct" };
                let name = format!("{keyword} {name}");
                if entry.attr_value(gimli::DW_AT_declaration).is_some() {
                    (name, KernelKind::Other)
                } else {
                    // Named before its members, which may point back to it.
                    let named = KernelType {
                        name: name.clone(),
                        kind: KernelKind::Other,
                    };
                    self.types.set(id, named);
                    let members = self.members(entry.offset())?;
                    let size = size as u32;
                    (
                        name,
                        KernelKind::Struct {
                            union,
                            size,
                            members: members.into(),
                        },
                    )
                }
            }
            gimli::DW_TAG_enumeration_type => {
                let signed = match type_ref(entry) {
                    Some(under) => self.unit.entry(under).is_ok_and(|e| {
                        udata(&e, gimli::DW_AT_encoding)
                            .is_some_and(|enc| is_signed(gimli::DwAte(enc as u8)))
                    }),
                    None => false,
                };
                let name = if name.is_empty() {
                    name
                } else {
                    format!("enum {name}")
                };
                (
                    name,
                    KernelKind::Enum {
                        size: size as u8,
                        signed,
                    },
                )
            }
            gimli::DW_TAG_array_type => return self.array(entry),
            _ => (name, KernelKind::Other),
        };
        Ok(KernelType { name, kind })
    }

    /// An array type; several subranges (`int y[2][3]`) nest, the last
    /// innermost.
    fn array(&mut self, entry: &Entry<'_>) -> gimli::Result<KernelType> {
        let mut lens = Vec::new();
        let mut tree = self.unit.entries_tree(Some(entry.offset()))?;
        let mut children = tree.root()?.children();
        while let Some(child) = children.next()? {
            let range = child.entry();
            if range.tag() == gimli::DW_TAG_subrange_type {
                let len = udata(range, gimli::DW_AT_count)
                    .or_else(|| udata(range, gimli::DW_AT_upper_bound).map(|u| u + 1))
                    .unwrap_or(0);
                lens.push(len as u32);
            }
        }
        let mut elem = self.type_id(type_ref(entry))?;
        let mut ty = self.types.get(elem).cloned().unwrap_or(KernelType {
            name: "?".into(),
            kind: KernelKind::Other,
        });
        for (depth, &len) in lens.iter().enumerate().rev() {
            ty = KernelType {
                name: format!("{}[{len}]", self.types.name(elem)),
                kind: KernelKind::Array { elem, len },
            };
            if depth > 0 {
                elem = self.types.reserve();
                self.types.set(elem, ty.clone());
            }
        }
        Ok(ty)
    }

    /// The members of the record at `offset`, with bit offsets.
    fn members(&mut self, offset: UnitOffset) -> gimli::Result<Vec<KernelMember>> {
        let mut found = Vec::new();
        let mut tree = self.unit.entries_tree(Some(offset))?;
        let mut children = tree.root()?.children();
        while let Some(child) = children.next()? {
            let entry = child.entry();
            if entry.tag() != gimli::DW_TAG_member {
                continue;
            }
            let name = name_of(self.dwarf, self.unit, entry).unwrap_or_default();
            let bits = udata(entry, gimli::DW_AT_bit_size).map(|b| b as u8);
            let offset_bits = udata(entry, gimli::DW_AT_data_bit_offset)
                .or_else(|| udata(entry, gimli::DW_AT_data_member_location).map(|b| b * 8))
                .unwrap_or(0) as u32;
            found.push((name, type_ref(entry), offset_bits, bits));
        }
        let mut members = Vec::with_capacity(found.len());
        for (name, ty, offset_bits, bitfield_bits) in found {
            members.push(KernelMember {
                name,
                ty: self.type_id(ty)?,
                offset_bits,
                bitfield_bits,
            });
        }
        Ok(members)
    }
}

/// Tags that only qualify or rename their `DW_AT_type`.
fn is_transparent(tag: DwTag) -> bool {
    matches!(
        tag,
        gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type
    )
}

fn type_ref(entry: &Entry<'_>) -> Option<UnitOffset> {
    match entry.attr_value(gimli::DW_AT_type)? {
        AttributeValue::UnitRef(offset) => Some(offset),
        _ => None,
    }
}

fn udata(entry: &Entry<'_>, name: gimli::DwAt) -> Option<u64> {
    entry.attr(name)?.udata_value()
}

fn is_signed(encoding: gimli::DwAte) -> bool {
    matches!(encoding, gimli::DW_ATE_signed | gimli::DW_ATE_signed_char)
}

fn base_kind(entry: &Entry<'_>, size: u64) -> KernelKind {
    let encoding =
        udata(entry, gimli::DW_AT_encoding).map_or(gimli::DwAte(0), |e| gimli::DwAte(e as u8));
    match encoding {
        gimli::DW_ATE_boolean => KernelKind::Bool,
        gimli::DW_ATE_float => KernelKind::Float { size: size as u8 },
        gimli::DW_ATE_signed
        | gimli::DW_ATE_signed_char
        | gimli::DW_ATE_unsigned
        | gimli::DW_ATE_unsigned_char
        | gimli::DW_ATE_UTF
            if size <= 8 =>
        {
            KernelKind::Int {
                size: size as u8,
                signed: is_signed(encoding),
            }
        }
        _ => KernelKind::Other,
    }
}

#[cfg(test)]
mod tests;
