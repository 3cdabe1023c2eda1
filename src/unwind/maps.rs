//! The BPF maps of the unwinder and the byte layout of their values, shared
//! by the BPF emitter (`bpf.rs`) and the table manager (`manager.rs`).
//!
//! - rows: an array of 8-byte [`super::rules::Row`]s, every loaded table a
//!   contiguous range of it;
//! - tables: an array of [`TableSlot`]s by table id: `{ first_row, rows }`;
//! - processes: a hash from tgid to [`ProcessMappings`]: the executable
//!   mappings of the process, sorted by start, each with its table id;
//! - state: a one-element per-CPU array holding the [`state`] of the
//!   unwind in progress: registers, flags and the frames found.

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindMaps {
    pub rows: MapId,
    pub tables: MapId,
    pub processes: MapId,
    pub state: MapId,
}

impl UnwindMaps {
    /// Appends the four map specs to `maps` and returns their ids.
    pub fn add_specs(maps: &mut Vec<MapSpec>, limits: UnwindLimits) -> UnwindMaps {
        let mut add = |name: &str, kind, key_size, value_size, max_entries| {
            let id = MapId(u32::try_from(maps.len()).expect("fewer than 2^32 maps"));
            maps.push(MapSpec {
                name: name.into(),
                kind,
                key_size,
                value_size,
                max_entries,
                script_map: None,
            });
            id
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
            state: add("unwind_state", MapKind::PerCpuArray, 4, state::BYTES, 1),
        }
    }
}

/// A loaded table's place in the rows map: `first_row: u32`, `rows: u32`.
pub mod table_slot {
    pub const FIRST_ROW: i16 = 0;
    pub const ROWS: i16 = 4;
    pub const BYTES: u32 = 8;
}

/// A process's executable mappings: `count: u32`, 4 bytes of padding, then
/// `MAX_MAPPINGS` entries of `start: u64, end: u64, bias: u64, table: u32`,
/// padded to 32 bytes. `bias` is the load bias: ELF address = pc - bias.
pub mod process_mappings {
    use super::MAX_MAPPINGS;

    pub const COUNT: i16 = 0;
    pub const ENTRIES: i16 = 8;
    pub const ENTRY_BYTES: u32 = 32;
    pub const START: i16 = 0;
    pub const END: i16 = 8;
    pub const BIAS: i16 = 16;
    pub const TABLE: i16 = 24;
    pub const BYTES: u32 = ENTRIES as u32 + MAX_MAPPINGS * ENTRY_BYTES;
}

/// The unwind in progress and its result: `ip, sp, bp: u64` (the frame
/// being unwound), `tgid: u32`, `frames: u32` (found so far), `flags: u32`,
/// 12 bytes the caller may use (the sampler keeps its source and the time
/// the unwind took there), then `MAX_FRAMES` return addresses (the first the
/// interrupted ip).
pub mod state {
    use super::MAX_FRAMES;

    pub const IP: i16 = 0;
    pub const SP: i16 = 8;
    pub const BP: i16 = 16;
    pub const TGID: i16 = 24;
    pub const FRAMES: i16 = 28;
    pub const FLAGS: i16 = 32;
    /// u32 and u64 left to the caller.
    pub const CALLER_U32: i16 = 36;
    pub const CALLER_U64: i16 = 40;
    pub const STACK: i16 = 48;
    pub const BYTES: u32 = STACK as u32 + 8 * MAX_FRAMES;
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
    /// The process has no mappings loaded: frame pointers only.
    pub const NO_PROCESS: u32 = 64;
}
