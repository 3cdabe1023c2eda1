//! Runtime, loading step one: creates a compiled program's maps (ring
//! buffer, hashes, arrays, task storage), writes their initial values, and
//! patches each map's fd into the programs' `ld_imm64` instructions.

use std::os::fd::{AsFd, AsRawFd};

use libbpf_rs::{MapCore, MapHandle, MapType};

use super::loader::LoadError;
use super::map_btf::{KEY_TYPE_ID, VALUE_TYPE_ID, load_storage_btf};
use crate::codegen::program::BpfProgram;
use crate::vocab::{MapId, MapKind, MapSpec};

pub(super) fn create_map(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    if spec.kind == MapKind::TaskStorage {
        return create_task_storage(spec);
    }
    let (ty, key_size, value_size) = match spec.kind {
        MapKind::Hash => (MapType::Hash, spec.key_size, spec.value_size),
        MapKind::PerCpuHash => (MapType::PercpuHash, spec.key_size, spec.value_size),
        MapKind::LruHash => (MapType::LruHash, spec.key_size, spec.value_size),
        MapKind::Array => (MapType::Array, 4, spec.value_size),
        MapKind::PerCpuArray => (MapType::PercpuArray, 4, spec.value_size),
        MapKind::RingBuf => (MapType::RingBuf, 0, 0),
        MapKind::PerfEventArray => (MapType::PerfEventArray, 4, 4),
        MapKind::StackTrace => (MapType::StackTrace, 4, spec.value_size),
        MapKind::TaskStorage => unreachable!("created by create_task_storage"),
    };
    let fail = |reason: String| LoadError::CreateMap {
        map: spec.name.clone(),
        reason,
    };
    if spec.kind == MapKind::RingBuf && !spec.max_entries.is_power_of_two() {
        return Err(fail(format!(
            "ring buffer size {} is not a power of two",
            spec.max_entries
        )));
    }
    // Hash maps are not preallocated: preallocating a 4096-entry per-CPU
    // hash took ~1.7 ms on 2 CPUs here and grows with the CPU count, which
    // alone would break the 10 ms start budget on big machines. Since Linux
    // 6.1 (bpf_mem_alloc) non-preallocated hash maps are safe in tracing and
    // perf_event programs; older verifiers reject them in perf_event programs.
    let map_flags = match spec.kind {
        MapKind::Hash | MapKind::PerCpuHash => libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
        _ => 0,
    };
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags,
        ..Default::default()
    };
    MapHandle::create(
        ty,
        Some(kernel_map_name(&spec.name)),
        key_size,
        value_size,
        spec.max_entries,
        &opts,
    )
    .map_err(|e| fail(format!("{e:#}")))
}

/// Task storage maps need BTF for their key and value types; the kernel
/// keeps its own reference to the BTF, so its fd closes after creation.
fn create_task_storage(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    let fail = |reason: String| LoadError::CreateMap {
        map: spec.name.clone(),
        reason,
    };
    let btf =
        load_storage_btf(spec.value_size).map_err(|e| fail(format!("cannot load its BTF: {e}")))?;
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags: libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
        btf_fd: btf.as_raw_fd() as u32,
        btf_key_type_id: KEY_TYPE_ID,
        btf_value_type_id: VALUE_TYPE_ID,
        ..Default::default()
    };
    MapHandle::create(
        MapType::TaskStorage,
        Some(kernel_map_name(&spec.name)),
        4,
        spec.value_size,
        0,
        &opts,
    )
    .map_err(|e| fail(format!("{e:#}")))
}

/// Writes the value of one-element array `id`.
pub(super) fn write_initial_value(
    specs: &[MapSpec],
    maps: &[MapHandle],
    id: MapId,
    value: &[u8],
) -> Result<(), LoadError> {
    let index = id.0 as usize;
    let fail = |reason: String| LoadError::CreateMap {
        map: specs
            .get(index)
            .map_or_else(|| id.0.to_string(), |s| s.name.clone()),
        reason,
    };
    let map = maps.get(index).ok_or_else(|| fail("no such map".into()))?;
    map.update(&0u32.to_ne_bytes(), value, libbpf_rs::MapFlags::ANY)
        .map_err(|e| fail(format!("cannot write its initial value: {e:#}")))
}

/// Kernel map names are at most 15 characters of `[A-Za-z0-9_.]`.
pub(super) fn kernel_map_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(15)
        .collect()
}

/// Copies the program and writes each relocated map's fd into its `ld_imm64`.
pub(super) fn patch_relocs(prog: &BpfProgram, maps: &[MapHandle]) -> Result<Vec<u64>, LoadError> {
    let mut insns = prog.insns.clone();
    for reloc in &prog.map_relocs {
        let bad = |reason: &str| LoadError::BadReloc {
            program: prog.name.clone(),
            insn: reloc.insn,
            reason: reason.into(),
        };
        let map = maps
            .get(reloc.map.0 as usize)
            .ok_or_else(|| bad("no such map"))?;
        if reloc.insn + 1 >= insns.len() {
            return Err(bad("ld_imm64 runs past the end"));
        }
        let slot = insns[reloc.insn];
        // BPF_LD | BPF_IMM | BPF_DW with src_reg = BPF_PSEUDO_MAP_FD or BPF_PSEUDO_MAP_VALUE.
        if slot & 0xff != 0x18 || !matches!((slot >> 12) & 0xf, 1 | 2) {
            return Err(bad("not an ld_imm64 of a map fd or map value"));
        }
        let fd = u32::try_from(map.as_fd().as_raw_fd()).map_err(|_| bad("negative fd"))?;
        insns[reloc.insn] = (slot & 0xffff_ffff) | (u64::from(fd) << 32);
    }
    Ok(insns)
}
