//! Build identities the cache key is made of: the running kernel's (from
//! `/sys/kernel/notes`, the notes of the vmlinux whose BTF
//! `/sys/kernel/btf/vmlinux` describes) and wprof's own executable's (its
//! `.note.gnu.build-id`, so that every rebuild with other code generation or
//! other tracker sources is a new key even when the version is unchanged).

use object::Object;

/// `NT_GNU_BUILD_ID`.
const NT_GNU_BUILD_ID: u32 = 3;

/// The kernel's GNU build id in hex, `None` when the kernel exports none.
pub fn kernel_build_id() -> Option<String> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    gnu_build_id(&notes).map(hex)
}

/// The GNU build id of the running executable in hex.
pub fn executable_build_id() -> Option<String> {
    let file = std::fs::File::open("/proc/self/exe").ok()?;
    // SAFETY: the executable is mapped read-only and only its headers and
    // notes are read; a binary replaced while mapped gets a new inode, so
    // the mapped bytes do not change under us.
    let image = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let parsed = object::File::parse(&*image).ok()?;
    parsed.build_id().ok().flatten().map(hex)
}

/// The descriptor of the first `GNU` note of type `NT_GNU_BUILD_ID` in a
/// raw note list (4-byte aligned `namesz, descsz, type, name, desc`).
fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let word = |bytes: &[u8], at: usize| -> Option<u32> {
        let raw = bytes.get(at..at + 4)?;
        Some(u32::from_ne_bytes(raw.try_into().ok()?))
    };
    let padded = |n: u32| (n as usize).checked_add(3).map(|n| n & !3);
    while notes.len() >= 12 {
        let (name_size, desc_size, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name_end = 12usize.checked_add(padded(name_size)?)?;
        let desc_end = name_end.checked_add(padded(desc_size)?)?;
        let name = notes.get(12..12 + name_size as usize)?;
        let desc = notes.get(name_end..name_end + desc_size as usize)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], kind: u32, desc: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend((name.len() as u32).to_ne_bytes());
        out.extend((desc.len() as u32).to_ne_bytes());
        out.extend(kind.to_ne_bytes());
        out.extend(name);
        out.resize(out.len().next_multiple_of(4), 0);
        out.extend(desc);
        out.resize(out.len().next_multiple_of(4), 0);
        out
    }

    /// The build id is found after notes of other owners and types.
    #[test]
    fn finds_gnu_build_id_among_notes() {
        let mut notes = note(b"Xen\0", 3, &[9; 5]);
        notes.extend(note(b"GNU\0", 1, &[7; 4]));
        notes.extend(note(b"GNU\0", NT_GNU_BUILD_ID, &[0xab, 0xcd, 0x01]));
        assert_eq!(gnu_build_id(&notes).map(hex).as_deref(), Some("abcd01"));
    }

    /// Truncated or oversized notes give no id instead of a panic.
    #[test]
    fn truncated_notes_give_none() {
        let notes = note(b"GNU\0", NT_GNU_BUILD_ID, &[1; 20]);
        assert_eq!(gnu_build_id(&notes[..notes.len() - 8]), None);
        let mut huge = notes.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(gnu_build_id(&huge), None);
    }

    /// This machine's kernel and the test binary both have a build id.
    #[test]
    fn running_kernel_and_executable_have_ids() {
        let kernel = kernel_build_id().expect("kernel build id");
        let exe = executable_build_id().expect("executable build id");
        assert!(kernel.len() >= 16 && exe.len() >= 16, "{kernel} {exe}");
        assert_ne!(kernel, exe);
    }
}
