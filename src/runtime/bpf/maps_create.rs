//! Runtime, loading step one: creates a compiled program's maps (ring
//! buffer, hashes, arrays, task storage), writes their initial values, and
//! patches each map's fd into the programs' `ld_imm64` instructions.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use libbpf_rs::{MapCore, MapHandle, MapType};

use super::loader::LoadError;
use super::map_btf::{
    KEY_TYPE_ID, TASK_WORK_BYTES, TASK_WORK_VALUE_TYPE_ID, VALUE_TYPE_ID, load_storage_btf,
    load_task_work_btf,
};
use crate::codegen::program::BpfProgram;
use crate::vocab::{MapId, MapKind, MapSpec};

pub(super) fn create_map(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    match spec.kind {
        MapKind::TaskStorage => return create_task_storage(spec),
        MapKind::TaskWork => return create_task_work(spec),
        _ => {}
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
        MapKind::TaskStorage | MapKind::TaskWork => unreachable!("created with their BTF"),
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
    let btf = load_storage_btf(spec.value_size);
    let btf = btf.map_err(|e| create_failed(spec, format!("cannot load its BTF: {e}")))?;
    let types = (KEY_TYPE_ID, VALUE_TYPE_ID);
    create_with_btf(
        spec,
        MapType::TaskStorage,
        (&btf, types),
        (spec.value_size, 0),
        libbpf_rs::libbpf_sys::BPF_F_NO_PREALLOC,
    )
}

/// A task work map: the kernel finds the `struct bpf_task_work` in its
/// value through its BTF. Preallocated, unlike the other hashes: the
/// `sched_switch` program inserts with interrupts off, where taking a free
/// element cannot fail for want of memory.
fn create_task_work(spec: &MapSpec) -> Result<MapHandle, LoadError> {
    let btf = load_task_work_btf();
    let btf = btf.map_err(|e| create_failed(spec, format!("cannot load its BTF: {e}")))?;
    let types = (KEY_TYPE_ID, TASK_WORK_VALUE_TYPE_ID);
    let sizes = (TASK_WORK_BYTES, spec.max_entries);
    create_with_btf(spec, MapType::Hash, (&btf, types), sizes, 0)
}

fn create_failed(spec: &MapSpec, reason: String) -> LoadError {
    LoadError::CreateMap {
        map: spec.name.clone(),
        reason,
    }
}

/// Creates a map with `u32` keys and `map_flags`, whose key and value
/// types are `types.0` and `types.1` of `btf`; `sizes` are the value size
/// and the entry count.
fn create_with_btf(
    spec: &MapSpec,
    ty: MapType,
    (btf, types): (&OwnedFd, (u32, u32)),
    (value_size, max_entries): (u32, u32),
    map_flags: u32,
) -> Result<MapHandle, LoadError> {
    let opts = libbpf_rs::libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_rs::libbpf_sys::bpf_map_create_opts>() as _,
        map_flags,
        btf_fd: btf.as_raw_fd() as u32,
        btf_key_type_id: types.0,
        btf_value_type_id: types.1,
        ..Default::default()
    };
    let name = Some(kernel_map_name(&spec.name));
    MapHandle::create(ty, name, 4, value_size, max_entries, &opts)
        .map_err(|e| create_failed(spec, format!("{e:#}")))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::{AluOp, Cond, Reg, Size};
    use crate::codegen::helpers;
    use crate::codegen::program::BpfProgram;
    use crate::runtime::bpf::loader::load;
    use crate::runtime::bpf::test_support::*;
    use crate::runtime::targets::kernel_btf::KernelBtf;
    use crate::vocab::kernel_types::KernelKind;
    use crate::vocab::{AttachPoint, MapId};
    use std::ops::ControlFlow;
    use std::time::{Duration, Instant};

    /// The kfunc `bpf_task_work_schedule_resume(task, tw, map, callback,
    /// aux)`: runs `callback(map, key, value)` in `task` on its next return to
    /// user space; `tw` is the `struct bpf_task_work` in `map`'s value, `aux`
    /// NULL (the verifier fills it). Later Linux 6.18 releases add `_impl` to
    /// the name; these are the names to look up, newest first.
    const RING: MapId = MapId(0);
    const WORK: MapId = MapId(1);
    /// `struct pt_regs` offsets of `orig_ax`, `ip` and `sp`.
    const REGS_ORIG_AX: i16 = 120;
    const REGS_IP: i16 = 128;
    const REGS_SP: i16 = 152;

    /// At a `sched_switch` to thread `tid` (whose `pid` is at `pid_at` in
    /// its `task_struct`): schedule the callback in it through the kfunc
    /// `kfunc`, with the task work of key `tid`; the kfunc's error, if any,
    /// goes to the ring as an 8-byte record.
    fn schedule_at_switch_in(tid: i32, pid_at: i16, kfunc: u32) -> BpfProgram {
        use Reg::*;
        let mut asm = Assembler::new();
        let (callback, out) = (asm.new_label(), asm.new_label());
        asm.load(Size::U64, R6, R1, 16); // next
        asm.load(Size::U32, R1, R6, pid_at);
        asm.jmp_imm(Cond::Ne, R1, tid, out);
        asm.store_imm(Size::U32, R10, -4, tid);
        asm.store_imm(Size::U64, R10, -16, 0);
        asm.ld_map_fd(R1, WORK);
        asm.mov64_reg(R2, R10);
        asm.alu64_imm(AluOp::Add, R2, -4);
        asm.mov64_reg(R3, R10);
        asm.alu64_imm(AluOp::Add, R3, -16);
        asm.mov64_imm(R4, 1); // BPF_NOEXIST: keep a scheduled work
        asm.call_helper(helpers::MAP_UPDATE_ELEM);
        asm.lookup_u32_key(WORK, tid);
        asm.jmp_imm(Cond::Eq, R0, 0, out);
        asm.mov64_reg(R1, R6);
        asm.mov64_reg(R2, R0);
        asm.ld_map_fd(R3, WORK);
        asm.ld_func(R4, callback);
        asm.mov64_imm(R5, 0);
        asm.call_kfunc(kfunc);
        asm.jmp_imm(Cond::Eq, R0, 0, out);
        asm.mov64_reg(R6, R0);
        asm.send_r6(RING); // the kfunc's error, 8 bytes
        asm.bind(out).expect("a new label");
        asm.ret0();
        asm.bind(callback).expect("a new label");
        send_user_registers(&mut asm);
        let attach = AttachPoint::TpBtf {
            name: "sched_switch".into(),
        };
        asm.program("switch_in", "tp_btf:sched_switch", attach)
    }

    /// The callback: on a return from `nanosleep`, sends pid_tgid, the user
    /// `ip` and the word at the user `sp` (0 when unreadable) of the task
    /// it runs in.
    fn send_user_registers(asm: &mut Assembler) {
        use Reg::*;
        let out = asm.new_label();
        asm.call_helper(helpers::GET_CURRENT_TASK_BTF);
        asm.mov64_reg(R1, R0);
        asm.call_helper(helpers::TASK_PT_REGS);
        asm.mov64_reg(R6, R0);
        asm.load(Size::U64, R1, R6, REGS_ORIG_AX);
        asm.jmp_imm(Cond::Ne, R1, libc::SYS_nanosleep as i32, out);
        asm.call_helper(helpers::GET_CURRENT_PID_TGID);
        asm.store_reg(Size::U64, R10, -24, R0);
        asm.load(Size::U64, R1, R6, REGS_IP);
        asm.store_reg(Size::U64, R10, -16, R1);
        asm.store_imm(Size::U64, R10, -8, 0);
        asm.load(Size::U64, R3, R6, REGS_SP);
        asm.mov64_reg(R1, R10);
        asm.alu64_imm(AluOp::Add, R1, -8);
        asm.mov64_imm(R2, 8);
        asm.call_helper(helpers::PROBE_READ_USER);
        asm.ld_map_fd(R1, RING);
        asm.mov64_reg(R2, R10);
        asm.alu64_imm(AluOp::Add, R2, -24);
        asm.mov64_imm(R3, 24);
        asm.mov64_imm(R4, 0);
        asm.call_helper(helpers::RINGBUF_OUTPUT);
        asm.bind(out).expect("a new label");
        asm.ret0();
    }

    /// Sleeps 10 ms in `nanosleep` through glibc's `syscall`, which makes
    /// no stack frame: at the system call the word at `sp` is the return
    /// address into this binary.
    #[inline(never)]
    fn sleep_by_syscall() {
        let time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 10_000_000,
        };
        // SAFETY: nanosleep reads the timespec; a null remainder is allowed.
        unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &time,
                std::ptr::null::<libc::timespec>(),
            )
        };
    }

    /// The offset of `pid` in `struct task_struct`.
    fn pid_offset(btf: &KernelBtf) -> i16 {
        let task = btf.named("struct task_struct").expect("task_struct");
        let KernelKind::Struct { members, .. } = btf.kernel_type(task).expect("its type").kind
        else {
            panic!("task_struct is a struct")
        };
        let pid = members.iter().find(|m| m.name == "pid").expect("pid");
        i16::try_from(pid.offset_bits / 8).expect("pid in the first 32 KiB")
    }

    /// The path of the file mapped executable at `addr` in this process.
    fn executable_file(addr: u64) -> Option<String> {
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        maps.lines().find_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (start, end) = fields.first()?.split_once('-')?;
            let range = u64::from_str_radix(start, 16).ok()?..u64::from_str_radix(end, 16).ok()?;
            let executable = fields.get(1)?.contains('x');
            (range.contains(&addr) && executable).then(|| fields.get(5).unwrap_or(&"").to_string())
        })
    }

    /// A task work map, a callback and the kfunc work in our objects: the
    /// callback scheduled at the switch-in of a thread sleeping in
    /// `nanosleep` (with the `next` task of `tp_btf:sched_switch`) runs in
    /// that thread on its return from the call, with the call's user
    /// registers (`ip` in libc, the word at `sp` the return address into
    /// this test).
    #[test]
    fn task_work_runs_in_the_task_with_its_user_stack() {
        let btf = KernelBtf::load().expect("kernel BTF");
        let kfunc = helpers::TASK_WORK_SCHEDULE_RESUME
            .iter()
            .find_map(|name| btf.function_id(name));
        let Some(kfunc) = kfunc else {
            println!("SKIPPED: this kernel has no bpf_task_work_schedule_resume kfunc");
            return;
        };
        let tid = tid();
        let maps = vec![map("work", MapKind::TaskWork, 4, TASK_WORK_BYTES, 64)];
        let program = schedule_at_switch_in(tid, pid_offset(&btf), kfunc);
        let mut loaded = load(&with_ring(maps, vec![program])).unwrap_or_else(|e| panic!("{e}"));
        loaded.attach_all(Default::default()).expect("attach");
        // The kfunc allocates without sleeping and may fail under memory
        // pressure (the block then keeps no user stack): sleep again then.
        let (mut got, mut errors) = (Vec::new(), Vec::new());
        for _ in 0..5 {
            sleep_by_syscall();
            let deadline = Instant::now() + Duration::from_millis(500);
            while got.is_empty() && Instant::now() < deadline {
                let _ = loaded.poll(Duration::from_millis(50), |r| {
                    match <[u8; 8]>::try_from(r) {
                        Ok(error) => errors.push(i64::from_ne_bytes(error)),
                        Err(_) => got.push(r.to_vec()),
                    }
                    ControlFlow::Continue(())
                });
            }
            if !got.is_empty() {
                break;
            }
        }
        assert_eq!(
            got.len(),
            1,
            "one record for one sleep; kfunc errors {errors:?}"
        );
        let word = |i: usize| u64::from_ne_bytes(got[0][8 * i..8 * i + 8].try_into().unwrap());
        let expected = u64::from(std::process::id()) << 32 | tid as u64;
        assert_eq!(word(0), expected, "pid_tgid");
        let ip_file = executable_file(word(1)).unwrap_or_default();
        assert!(ip_file.contains("libc"), "ip {:#x} in {ip_file:?}", word(1));
        let exe = std::env::current_exe().expect("this test's path");
        let returns_to = executable_file(word(2)).unwrap_or_default();
        assert_eq!(
            returns_to,
            exe.to_string_lossy(),
            "return address {:#x}",
            word(2)
        );
    }
}
