//! The BTF the kernel requires to create some maps: task-local storage (an
//! `int` key type and a value type of the map's size, an array of `int`),
//! and task work maps (an `int` key and a value holding a
//! `struct bpf_task_work`, which the kernel recognises by name and size).

use std::os::fd::OwnedFd;

/// Type ids in the blobs [`storage_btf`] and [`task_work_btf`] build.
pub const KEY_TYPE_ID: u32 = 1;
pub const VALUE_TYPE_ID: u32 = 2;
pub const TASK_WORK_VALUE_TYPE_ID: u32 = 4;
pub use crate::vocab::TASK_WORK_BYTES;

const BTF_MAGIC: u16 = 0xeb9f;
const BTF_KIND_INT: u32 = 1;
const BTF_KIND_ARRAY: u32 = 3;
const BTF_KIND_STRUCT: u32 = 4;
const BTF_INT_SIGNED: u32 = 1;
const HEADER_LEN: u32 = 24;

/// `int`: name at `name`, 4 bytes, signed 32 bits.
fn int(name: u32) -> [u32; 4] {
    [name, BTF_KIND_INT << 24, 4, BTF_INT_SIGNED << 24 | 32]
}

/// BTF with `int` (type 1) and `int[value_size / 4]` (type 2).
pub fn storage_btf(value_size: u32) -> Vec<u8> {
    let mut types = int(1).to_vec();
    // int[N]: elements and index are type 1.
    types.extend([0, BTF_KIND_ARRAY << 24, 0, KEY_TYPE_ID, KEY_TYPE_ID]);
    types.push(value_size.div_ceil(4));
    blob(&types, b"\0int\0")
}

/// BTF with `int` (type 1), `unsigned long long` (2), `struct bpf_task_work
/// { u64 __opaque; }` (3) and `struct wprof_task_work { struct bpf_task_work
/// work; }` (4), the value of a [`crate::vocab::MapKind::TaskWork`] map.
pub fn task_work_btf() -> Vec<u8> {
    let mut strings = vec![0u8];
    let mut name = |text: &str| {
        let at = strings.len() as u32;
        strings.extend(text.as_bytes());
        strings.push(0);
        at
    };
    let mut types = int(name("int")).to_vec();
    types.extend([name("unsigned long long"), BTF_KIND_INT << 24, 8, 64]);
    // A struct: name, kind and member count, size; then per member its
    // name, type and bit offset.
    let work = [BTF_KIND_STRUCT << 24 | 1, TASK_WORK_BYTES];
    types.extend([
        name("bpf_task_work"),
        work[0],
        work[1],
        name("__opaque"),
        2,
        0,
    ]);
    types.extend([
        name("wprof_task_work"),
        work[0],
        work[1],
        name("work"),
        3,
        0,
    ]);
    blob(&types, &strings)
}

/// Header, types, strings.
fn blob(types: &[u32], strings: &[u8]) -> Vec<u8> {
    let type_len = 4 * types.len() as u32;
    let mut blob = Vec::new();
    blob.extend(BTF_MAGIC.to_ne_bytes());
    blob.extend([1u8, 0]); // version, flags
    for word in [HEADER_LEN, 0, type_len, type_len, strings.len() as u32] {
        blob.extend(word.to_ne_bytes());
    }
    for word in types {
        blob.extend(word.to_ne_bytes());
    }
    blob.extend(strings);
    blob
}

/// Loads the BTF of a task storage map with values of `value_size` bytes.
pub fn load_storage_btf(value_size: u32) -> std::io::Result<OwnedFd> {
    crate::sys::btf_load(&storage_btf(value_size))
}

/// Loads the BTF of a task work map.
pub fn load_task_work_btf() -> std::io::Result<OwnedFd> {
    crate::sys::btf_load(&task_work_btf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel accepts the storage blob.
    #[test]
    fn kernel_loads_storage_btf() {
        let blob = storage_btf(16);
        assert_eq!(blob.len(), 24 + 40 + 5);
        load_storage_btf(16).expect("BPF_BTF_LOAD");
    }

    /// The kernel accepts the task work blob; its names are where the
    /// types say.
    #[test]
    fn kernel_loads_task_work_btf() {
        let blob = task_work_btf();
        let strings = &blob[24 + 4 * (4 + 4 + 6 + 6)..];
        let name_of_struct = u32::from_ne_bytes(blob[24 + 32..24 + 36].try_into().unwrap());
        assert!(strings[name_of_struct as usize..].starts_with(b"bpf_task_work\0"));
        load_task_work_btf().expect("BPF_BTF_LOAD");
    }
}
