//! The BTF the kernel requires to create task-local storage maps: an `int`
//! key type and a value type of the map's size (an array of `int`).

use std::os::fd::OwnedFd;

/// Type ids in the blob [`storage_btf`] builds.
pub const KEY_TYPE_ID: u32 = 1;
pub const VALUE_TYPE_ID: u32 = 2;

const BTF_MAGIC: u16 = 0xeb9f;
const BTF_KIND_INT: u32 = 1;
const BTF_KIND_ARRAY: u32 = 3;
const BTF_INT_SIGNED: u32 = 1;
const HEADER_LEN: u32 = 24;

/// BTF with `int` (type 1) and `int[value_size / 4]` (type 2).
pub fn storage_btf(value_size: u32) -> Vec<u8> {
    let strings = b"\0int\0";
    let types: [u32; 9] = [
        // int: name "int" at string offset 1, 4 bytes, signed 32 bits.
        1,
        BTF_KIND_INT << 24,
        4,
        BTF_INT_SIGNED << 24 | 32,
        // int[N]: elements and index are type 1.
        0,
        BTF_KIND_ARRAY << 24,
        0,
        KEY_TYPE_ID,
        KEY_TYPE_ID,
    ];
    let mut types: Vec<u32> = types.to_vec();
    types.push(value_size.div_ceil(4));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel accepts the blob.
    #[test]
    fn kernel_loads_storage_btf() {
        let blob = storage_btf(16);
        assert_eq!(blob.len(), 24 + 40 + 5);
        load_storage_btf(16).expect("BPF_BTF_LOAD");
    }
}
