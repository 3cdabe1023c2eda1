//! C types as the checker sees them: a small, library-independent view of
//! kernel BTF and of binaries' debug info, which the
//! [`Environment`](crate::vocab::Environment) resolves one type at a time
//! (typedefs and qualifiers already skipped), and of the types a script
//! defines, which the checker keeps itself.

/// Identifies a C type. Ids below [`DEBUG_INFO_TYPES`] are kernel BTF ids;
/// ids from there up to [`SCRIPT_TYPES`] are types of binaries' debug info
/// (DWARF) the environment has read; ids from [`SCRIPT_TYPES`] up are the
/// checker's own (script definitions, integer types, derived pointers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KTypeId(pub u32);

/// The first id of a type read from a binary's debug info.
pub const DEBUG_INFO_TYPES: u32 = 0x4000_0000;
/// The first id of a type the checker made.
pub const SCRIPT_TYPES: u32 = 0x8000_0000;

impl KTypeId {
    /// Whether the checker made this type (a script definition, an
    /// integer type, a derived pointer or array).
    pub fn is_script(self) -> bool {
        self.0 >= SCRIPT_TYPES
    }
}

/// A constant of a kernel enum: `TCP_CLOSE` is 7 of an anonymous enum.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnumConstant {
    /// `enum NAME`, or empty for an anonymous enum.
    pub enum_name: String,
    pub value: i64,
}

/// One kernel type.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelType {
    /// As C spells it: `struct task_struct`, `int`, `char`, or empty for
    /// anonymous structs and unions.
    pub name: String,
    pub kind: KernelKind,
}

impl KernelType {
    /// Whether this is plain `char`, whose arrays are strings as bpftrace's
    /// clang types them; arrays of other bytes (`uint8_t`, `unsigned char`)
    /// stay arrays.
    pub fn is_char(&self) -> bool {
        self.name == "char" && matches!(self.kind, KernelKind::Int { size: 1, .. })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum KernelKind {
    Void,
    Int {
        size: u8,
        signed: bool,
    },
    Bool,
    Enum {
        size: u8,
        signed: bool,
    },
    Pointer(KTypeId),
    /// A struct or union (`union` tells which).
    Struct {
        union: bool,
        size: u32,
        /// Shared: the checker asks for the same struct (a `task_struct`
        /// has hundreds of members) many times per script.
        members: std::sync::Arc<[KernelMember]>,
    },
    Array {
        elem: KTypeId,
        len: u32,
    },
    /// `float`, `double`: they take room, but scripts cannot read them.
    Float {
        size: u8,
    },
    /// Functions, forward declarations: nothing a script can read.
    Other,
}

#[derive(Clone, Debug, PartialEq)]
pub struct KernelMember {
    /// Empty for an anonymous struct or union, whose members are reachable
    /// as if they were the parent's.
    pub name: String,
    pub ty: KTypeId,
    pub offset_bits: u32,
    /// The width of a bitfield member.
    pub bitfield_bits: Option<u8>,
}

/// A member found by name, possibly inside anonymous structs and unions.
#[derive(Clone, Debug, PartialEq)]
pub struct FoundMember {
    pub ty: KTypeId,
    pub offset_bits: u32,
    pub bitfield_bits: Option<u8>,
}

/// Finds `name` among `members`, descending into anonymous members;
/// `resolve` gives the members of a struct type.
pub fn find_member(
    members: &[KernelMember],
    name: &str,
    resolve: &dyn Fn(KTypeId) -> Option<std::sync::Arc<[KernelMember]>>,
) -> Option<FoundMember> {
    for member in members {
        if member.name == name {
            return Some(FoundMember {
                ty: member.ty,
                offset_bits: member.offset_bits,
                bitfield_bits: member.bitfield_bits,
            });
        }
        if member.name.is_empty()
            && let Some(inner) = resolve(member.ty)
            && let Some(mut found) = find_member(&inner, name, resolve)
        {
            found.offset_bits += member.offset_bits;
            return Some(found);
        }
    }
    None
}

/// Every member name reachable from `members` (anonymous members flattened).
pub fn member_names(
    members: &[KernelMember],
    resolve: &dyn Fn(KTypeId) -> Option<std::sync::Arc<[KernelMember]>>,
) -> Vec<String> {
    let mut names = Vec::new();
    for member in members {
        if member.name.is_empty() {
            if let Some(inner) = resolve(member.ty) {
                names.extend(member_names(&inner, resolve));
            }
        } else {
            names.push(member.name.clone());
        }
    }
    names
}

/// Up to five of `candidates` closest to `wanted` (by edit distance), for
/// "did you mean" help.
pub fn close_names(wanted: &str, candidates: &[String]) -> Vec<String> {
    let mut scored: Vec<(usize, &String)> = candidates
        .iter()
        .map(|c| (edit_distance(wanted, c), c))
        .filter(|(d, c)| *d <= wanted.len() / 3 + 1 || c.contains(wanted))
        .collect();
    scored.sort();
    scored.into_iter().take(5).map(|(_, c)| c.clone()).collect()
}

/// `; close names: a, b` for the [`close_names`] of `wanted`, or nothing
/// when none is close, to end a "not found" message.
pub fn close_names_note(wanted: &str, candidates: &[String]) -> String {
    match close_names(wanted, candidates).as_slice() {
        [] => String::new(),
        close => format!("; close names: {}", close.join(", ")),
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Close names rank by edit distance and drop unrelated ones.
    #[test]
    fn suggests_close_names() {
        let names: Vec<String> = ["pid", "tgid", "comm", "prio", "real_parent"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(close_names("tgd", &names), vec!["tgid", "pid"]);
        assert_eq!(close_names("parent", &names), vec!["real_parent"]);
        assert_eq!(close_names_note("tgd", &names), "; close names: tgid, pid");
        assert_eq!(close_names_note("zzzzzzzz", &names), "");
    }
}
