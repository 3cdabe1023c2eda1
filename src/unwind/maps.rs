//! The BPF maps of the unwinder and the byte layout of their values, shared
//! by the BPF emitter (`bpf.rs`) and the table manager (`manager.rs`).
//!
//! - rows: an array of 8-byte [`super::rules::Row`]s, every loaded table a
//!   contiguous range of it;
//! - tables: an array of [`TableSlot`]s by table id: `{ first_row, rows }`;
//! - processes: a hash from tgid to [`ProcessMappings`]: the executable
//!   mappings of the process, sorted by start, each with its table id;
//! - files: a hash from a file's device and inode to its loaded table
//!   ([`file_table`]), for a pc in no known mapping whose memory area the
//!   kernel names ([`vma`]);
//! - vmas: an LRU hash of the areas found so ([`found_vma`]), for the
//!   recorder to name their frames when the process is gone;
//! - the [`state`] of an unwind in progress (registers, flags, the frames
//!   found) lives in a map value of the caller's: a per-CPU scratch buffer,
//!   or a task's own storage when its stack is cached.

use crate::vocab::{MapId, MapKind, MapSpec};

use super::rules::ROW_BYTES;

/// Frames kept per stack, the kernel's limit for stack trace maps.
pub const MAX_FRAMES: u32 = 127;
/// Executable mappings per process the unwinder can tell apart (a power of two).
pub const MAX_MAPPINGS: u32 = 256;
/// Binary-search steps over a process's mappings: log2(MAX_MAPPINGS) + 1.
pub const MAPPING_SEARCH_STEPS: u32 = 9;
/// Largest table, in rows: 2^22 (32 MiB), more than rustc's driver needs.
pub const MAX_TABLE_ROWS: u32 = 1 << 22;
/// Binary-search steps over a table: log2(MAX_TABLE_ROWS) + 1.
pub const ROW_SEARCH_STEPS: u32 = 23;
/// Table id of a mapping without a table: unwound with frame pointers.
pub const NO_TABLE: u32 = u32::MAX;
/// Table id of a mapping whose table is being built: unwound with frame
/// pointers, flagged `TABLE_PENDING`.
pub const TABLE_PENDING: u32 = u32::MAX - 1;

/// Sizes of the unwinder's maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindLimits {
    /// Rows of all loaded tables together (8 bytes each).
    pub rows: u32,
    /// Tables loaded at once.
    pub tables: u32,
    /// Processes with mappings at once.
    pub processes: u32,
}

impl Default for UnwindLimits {
    /// 2 Mi rows (16 MiB): libc and a few large programs.
    fn default() -> Self {
        UnwindLimits {
            rows: 1 << 21,
            tables: 4096,
            processes: 4096,
        }
    }
}

/// The ids the unwinder's maps got in a program's map list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UnwindMaps {
    pub rows: MapId,
    pub tables: MapId,
    pub processes: MapId,
    pub files: MapId,
    pub vmas: MapId,
}

impl UnwindMaps {
    /// Appends the map specs to `maps` and returns their ids.
    pub fn add_specs(maps: &mut Vec<MapSpec>, limits: UnwindLimits) -> UnwindMaps {
        let mut add = |name: &str, kind, key_size, value_size, max_entries| {
            MapSpec::add_internal(maps, name, kind, key_size, value_size, max_entries)
        };
        UnwindMaps {
            rows: add(
                "unwind_rows",
                MapKind::Array,
                4,
                ROW_BYTES as u32,
                limits.rows,
            ),
            tables: add(
                "unwind_tables",
                MapKind::Array,
                4,
                table_slot::BYTES,
                limits.tables,
            ),
            processes: add(
                "unwind_procs",
                MapKind::Hash,
                4,
                process_mappings::BYTES,
                limits.processes,
            ),
            files: add(
                "unwind_files",
                MapKind::Hash,
                file_table::KEY_BYTES,
                file_table::BYTES,
                limits.tables,
            ),
            vmas: add(
                "unwind_vmas",
                MapKind::LruHash,
                found_vma::KEY_BYTES,
                found_vma::BYTES,
                found_vma::ENTRIES,
            ),
        }
    }
}

/// A loaded table's place in the rows map: `first_row: u32`, `rows: u32`.
pub mod table_slot {
    pub const FIRST_ROW: i16 = 0;
    pub const ROWS: i16 = 4;
    pub const BYTES: u32 = 8;
}

/// A loaded table by the file it was built from, keyed `{ino: u64, dev:
/// u32, 0: u32}` (the kernel's `dev_t`: major << 20 | minor): `table: u32`,
/// `pad: u32`, `delta: u64` (the file's executable segment's virtual
/// address minus its file offset: ELF address = file offset + delta).
pub mod file_table {
    pub const KEY_BYTES: u32 = 16;
    pub const TABLE: i16 = 0;
    pub const DELTA: i16 = 8;
    pub const BYTES: u32 = 16;

    /// The key of the file with this `dev_t` and inode.
    pub fn key(dev: u32, ino: u64) -> [u8; KEY_BYTES as usize] {
        let mut key = [0; KEY_BYTES as usize];
        key[..8].copy_from_slice(&ino.to_ne_bytes());
        key[8..12].copy_from_slice(&dev.to_ne_bytes());
        key
    }

    pub fn value(table: u32, delta: u64) -> [u8; BYTES as usize] {
        let mut value = [0; BYTES as usize];
        value[..4].copy_from_slice(&table.to_ne_bytes());
        value[8..].copy_from_slice(&delta.to_ne_bytes());
        value
    }
}

/// A memory area the unwinder found through the kernel, by
/// `{tgid: u32, slot: u32}` (`slot` = the area's start page modulo
/// `SLOTS`, so a process keeps a few): `start, end, offset: u64` (the file
/// offset of `start`), then the file's `{ino: u64, dev: u32, 0: u32}` (as
/// [`file_table`]'s key). Written by the walk, read by the recorder to
/// name the frames of a process whose mappings it never read with the
/// area in them.
pub mod found_vma {
    pub const KEY_BYTES: u32 = 8;
    pub const SLOTS: u32 = 8;
    pub const START: usize = 0;
    pub const END: usize = 8;
    pub const OFFSET: usize = 16;
    pub const INO: usize = 24;
    pub const DEV: usize = 32;
    pub const BYTES: u32 = 40;
    /// Areas kept, least recently found evicted first.
    pub const ENTRIES: u32 = 1024;

    /// An area as the unwinder noted it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct FoundVma {
        pub start: u64,
        pub end: u64,
        /// The file offset of `start`.
        pub offset: u64,
        /// The file's `dev_t` and inode.
        pub dev: u32,
        pub ino: u64,
    }

    pub fn key(tgid: u32, slot: u32) -> [u8; KEY_BYTES as usize] {
        let mut key = [0; KEY_BYTES as usize];
        key[..4].copy_from_slice(&tgid.to_ne_bytes());
        key[4..].copy_from_slice(&slot.to_ne_bytes());
        key
    }

    /// The area of a map value; `None` when it is not one.
    pub fn decode(value: &[u8]) -> Option<FoundVma> {
        let u64_at = |at: usize| Some(u64::from_ne_bytes(value.get(at..at + 8)?.try_into().ok()?));
        let dev = u32::from_ne_bytes(value.get(DEV..DEV + 4)?.try_into().ok()?);
        Some(FoundVma {
            start: u64_at(START)?,
            end: u64_at(END)?,
            offset: u64_at(OFFSET)?,
            dev,
            ino: u64_at(INO)?,
        })
        .filter(|vma| vma.start < vma.end)
    }
}

/// A process's executable mappings: `count: u32`, `stamp: u32` (new at
/// each write of an entry, never 0, repeating only after 2^32 writes: a
/// walk cached under one stamp used exactly these mappings and tables), the
/// identity of the address space they were read from (`start_stack: u64`,
/// `end_code: u64`, as `/proc/PID/stat` shows them and `mm_struct` holds
/// them: an `exec` changes both), then `MAX_MAPPINGS` entries of
/// `start: u64, end: u64, bias: u64, table: u32`, padded to 32 bytes.
/// `bias` is the load bias: ELF address = pc - bias.
pub mod process_mappings {
    use super::MAX_MAPPINGS;

    pub const COUNT: i16 = 0;
    pub const STAMP: i16 = 4;
    pub const START_STACK: i16 = 8;
    pub const END_CODE: i16 = 16;
    pub const ENTRIES: i16 = 24;
    pub const ENTRY_BYTES: u32 = 32;
    pub const START: i16 = 0;
    pub const END: i16 = 8;
    pub const BIAS: i16 = 16;
    pub const TABLE: i16 = 24;
    pub const BYTES: u32 = ENTRIES as u32 + MAX_MAPPINGS * ENTRY_BYTES;
}

/// The unwind in progress and its result. The caller fills the inputs:
/// `ip, sp, bp: u64` (the frame to start from), `tgid: u32`, `input: u32`
/// ([`input`] bits), and the address space's identity (`mm_start_stack`,
/// `mm_end_code`, compared with the process's mappings entry). The unwinder
/// leaves `frames: u32` (found), `flags: u32` ([`flags`]), `first_slot`
/// (the user address the first return address was read from, 0 if none)
/// and the return addresses in `stack` (the first the starting ip), moving
/// `ip, sp, bp` up as it goes (`start_ip`, `xol_ip`: where it started). `caller_*` and `key_*` are left to the
/// caller (the sampler keeps its source and timing there). The
/// [`walk_cache`] follows the frames.
pub mod state {
    use super::{MAX_FRAMES, walk_cache};

    pub const IP: i16 = 0;
    pub const SP: i16 = 8;
    pub const BP: i16 = 16;
    pub const TGID: i16 = 24;
    pub const FRAMES: i16 = 28;
    pub const FLAGS: i16 = 32;
    pub const INPUT: i16 = 36;
    pub const MM_START_STACK: i16 = 40;
    pub const MM_END_CODE: i16 = 48;
    pub const FIRST_SLOT: i16 = 56;
    /// A u32 and a u64 left to the caller.
    pub const CALLER_U32: i16 = 64;
    pub const CALLER_U64: i16 = 72;
    /// Three u64 left to the caller.
    pub const KEY: i16 = 80;
    /// The user pc the walk started from: the task's `ip`, or the probed
    /// address its uprobe's displaced instruction was copied from while
    /// that runs out of line (`crate::unwind::layout::XolLayout`).
    pub const START_IP: i16 = 104;
    /// The task's `ip` in its uprobe's out-of-line slot, which the walk
    /// started from `START_IP` instead; 0 when it was not there. A kernel
    /// walk's first frame is that `ip`: the caller replaces it.
    pub const XOL_IP: i16 = 112;
    /// 88 bytes of the unwinder's temporaries.
    pub const WORK: i16 = 120;
    /// The `[uprobes]` trampoline's address while the task has pending
    /// uretprobes, else 0 (`crate::unwind::layout::ReturnLayout`).
    pub const TRAMPOLINE: i16 = 208;
    /// The task's pending uretprobes (`utask->return_instances`, a kernel
    /// `struct return_instance *`, innermost first), or 0.
    pub const RETURN_INSTANCES: i16 = 216;
    /// The user `sp` the walk started from: the task's, or its caller's
    /// when the task was returning through a uretprobe's trampoline.
    pub const START_SP: i16 = 224;
    /// The memory area the kernel found for a pc in no known mapping
    /// during this walk ([`super::vma`]).
    pub const VMA: i16 = 232;
    pub const STACK: i16 = VMA + super::vma::BYTES as i16;
    pub const CACHE: i16 = STACK + 8 * MAX_FRAMES as i16;
    pub const BYTES: u32 = CACHE as u32 + walk_cache::BYTES;
}

/// The memory area of a walk's pc in no known mapping, as `bpf_find_vma`
/// found it (offsets from `state::VMA`): the [`found_vma`] entry (`KEY`,
/// then its value: `START`, `END`, `OFFSET`, and the [`file_table`] key
/// `INO`, `DEV`, `ZERO`), then `BIAS` (pc - bias = ELF address), `TABLE`
/// (its file's table) and `LOOKED` (non-zero once the walk asked: one
/// lookup per walk, as the kernel defers the area lock's release to an
/// IRQ work where interrupts are off, and refuses a second lookup on the
/// CPU until that has run). `END` is 0 until an area with a table is
/// found.
pub mod vma {
    pub const KEY: i16 = 0;
    pub const KEY_SLOT: i16 = 4;
    pub const START: i16 = 8;
    pub const END: i16 = 16;
    pub const OFFSET: i16 = 24;
    pub const INO: i16 = 32;
    pub const DEV: i16 = 40;
    pub const ZERO: i16 = 44;
    pub const BIAS: i16 = 48;
    pub const TABLE: i16 = 56;
    pub const LOOKED: i16 = 60;
    pub const BYTES: u32 = 64;
}

/// A task's last walk, kept in its state (offsets from the state's start)
/// when the caller asks for it (a task's own storage, at its switch-out):
/// the walk is a function of the starting `ip, sp, bp`, of the process's
/// mappings entry (its stamp) and of the user words it read. A later walk
/// from the same registers under the same stamp, whose words (read again
/// in one copy of the stack from `sp` up) all match, would take the same
/// steps: it reuses `frames, flags, first_slot` and the frames in the
/// state's stack. `valid: u32` (the state's stack holds that walk),
/// `stamp: u32`, `ip, sp, bp`, `frames: u32`, `flags: u32`, `first_slot`,
/// `reads: u32` (words logged), `range: u32` (bytes from `sp` to the end
/// of the highest word), then `LOG_ENTRIES` words read: `offset from sp:
/// u64, value: u64`. A walk reading more words, words outside `RANGE_MAX`
/// bytes above `sp`, or failing a read is not kept.
pub mod walk_cache {
    use super::state::CACHE;

    pub const VALID: i16 = CACHE;
    pub const STAMP: i16 = CACHE + 4;
    pub const IP: i16 = CACHE + 8;
    pub const SP: i16 = CACHE + 16;
    pub const BP: i16 = CACHE + 24;
    pub const FRAMES: i16 = CACHE + 32;
    pub const FLAGS: i16 = CACHE + 36;
    pub const FIRST_SLOT: i16 = CACHE + 40;
    pub const READS: i16 = CACHE + 48;
    pub const RANGE: i16 = CACHE + 52;
    pub const LOG: i16 = CACHE + 56;
    pub const LOG_ENTRY_BYTES: u32 = 16;
    /// Words a cached walk may have read: 2 per frame (return address and
    /// saved rbp) of 32 frames.
    pub const LOG_ENTRIES: u32 = 64;
    /// Most bytes of stack a cached walk may span (a power of two); the
    /// caller's copy buffer holds `RANGE_MAX + 8` bytes.
    pub const RANGE_MAX: u32 = 16384;
    pub const BYTES: u32 = 56 + LOG_ENTRY_BYTES * LOG_ENTRIES;
}

/// Bits of `state::INPUT`: what the caller knows about the first frame.
pub mod input {
    /// The ip is a function's first instruction (a function-entry uprobe):
    /// the return address is at `sp`, whatever the tables say.
    pub const FUNCTION_ENTRY: u32 = 1;
    /// Set by the unwinder while it logs the words a cacheable walk reads
    /// ([`super::walk_cache`]); cleared when the walk cannot be kept.
    pub const WALK_CACHE: u32 = 2;
}

/// Bits of `state::FLAGS`: how the stack was unwound and why it ended.
pub mod flags {
    /// `MAX_FRAMES` were found and the stack goes on.
    pub const TRUNCATED: u32 = 1;
    /// At least one frame was unwound with an unwind table.
    pub const TABLE: u32 = 2;
    /// At least one frame was unwound by following frame pointers.
    pub const FRAME_POINTER: u32 = 4;
    /// Ended at a frame whose table marks it outermost (`_start`).
    pub const OUTERMOST: u32 = 8;
    /// Ended because reading the user stack failed.
    pub const READ_FAILED: u32 = 16;
    /// Ended because the next frame was not above the current one.
    pub const NO_PROGRESS: u32 = 32;
    /// No mappings are loaded for the address space (the process was
    /// never added, or exec'd since): nothing was unwound, the caller falls
    /// back to the kernel's frame-pointer walk.
    pub const NO_PROCESS: u32 = 64;
    /// A pc outside every mapping of the process (code mapped since its
    /// mappings were read: `dlopen`, JIT): unwound with frame pointers.
    pub const UNKNOWN_MAPPING: u32 = 128;
    /// The user frames are the kernel's frame-pointer walk (set by the
    /// caller after a `NO_PROCESS` unwind).
    pub const KERNEL_WALK: u32 = 256;
    /// No user frames yet: the block's task was in a system call, whose
    /// return sends them (`stack(offcpu, pending)`; set at the switch-in
    /// of a long block under `-S offcpu=DUR`).
    pub const USER_PENDING: u32 = 512;
    /// The user frames are `struct bpf_stack_build_id`s (file and offset),
    /// from a kernel walk (set by the caller).
    pub const BUILD_ID: u32 = 1024;
    /// The kernel stack reached the kernel's depth limit and goes on (set
    /// by the caller after taking it).
    pub const KERNEL_TRUNCATED: u32 = 2048;
    /// No user frames: the task's address space changed (`execve`) since
    /// its first long block of the system call it returns from, so its
    /// user stack is the new program's, not the blocks' (set by
    /// `stack(offcpu, pending)`).
    pub const USER_EXEC: u32 = 4096;
    /// The message carries a copy of the user registers and stack after
    /// its frames (`codegen::stack_layout::snapshot`; set by the caller
    /// when the walk found no table: `NO_PROCESS` or `UNKNOWN_MAPPING`).
    /// In the capture: the user frames were unwound from that copy in
    /// user space.
    pub const SNAPSHOT: u32 = 8192;
    /// A pc in a mapping whose table is being built: unwound with frame
    /// pointers.
    pub const TABLE_PENDING: u32 = 16384;
    /// The frames are the task's last walk, reused: it blocked again from
    /// the same registers with the same stack words and mappings
    /// ([`super::walk_cache`]).
    pub const WALK_CACHED: u32 = 32768;
    /// A pc in no known mapping was walked with its file's table, found
    /// through the memory area the kernel holds there ([`super::vma`]): the
    /// process's mappings should be read again, and the area was noted in
    /// the vmas map for the recorder.
    pub const KERNEL_VMA: u32 = 65536;
    /// The kernel frames come from wprof's ORC walk of the kernel stack
    /// (`super::super::orc_bpf`; set by the caller).
    pub const KERNEL_ORC: u32 = 131072;
    /// The ORC walk gave the kernel stack up (a module, BPF or trampoline
    /// frame, an unusable rule, a stack the kernel cuts): the kernel's
    /// walk took it (set by the caller).
    pub const KERNEL_ORC_GIVEN_UP: u32 = 262144;
}
