//! The BPF maps of the kernel-stack walker and the byte layout of their
//! values, shared by the walker ([`super::orc_bpf`]) and the code that
//! places the kernel's table in them ([`place`]).
//!
//! - rows: an array of chunks of [`ROWS_PER_CHUNK`] encoded rows
//!   ([`super::orc::OrcRow`]), written in a few updates;
//! - blocks: one value, the block index (`u32` row indices);
//! - info: one value, the [`info`] the walker checks and starts from;
//! - walk: a per-CPU value, the [`walk`] in progress and its copy of the
//!   task's kernel stack.

use libbpf_rs::{MapCore, MapFlags};

use super::maps::MAX_FRAMES;
use super::orc::{OrcTable, ROW_BYTES};
use crate::runtime::bpf::loader::Loaded;
use crate::vocab::{MapId, MapKind, MapSpec};

/// Rows per value of the rows map (512 KiB).
pub const ROWS_PER_CHUNK: u32 = 1 << 16;
/// Values of the rows map: 4 MiB, 512 Ki rows (Linux 6.18 here: 484 k).
pub const ROW_CHUNKS: u32 = 8;
/// Blocks indexed at most: 32 MiB of kernel text.
pub const MAX_BLOCKS: u32 = 1 << 17;
/// Bytes of the blocks value: one index more than blocks, which a lookup
/// of the last block reads.
pub const BLOCKS_BYTES: u32 = 4 * (MAX_BLOCKS + 1);
/// Binary-search steps within a block: blocks of at most 2^9 - 1 rows.
pub const SEARCH_STEPS: u32 = 9;

/// The ids the walker's maps got in a program's map list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrcMaps {
    pub rows: MapId,
    pub blocks: MapId,
    pub info: MapId,
    pub walk: MapId,
}

impl OrcMaps {
    /// Appends the map specs to `maps` and returns their ids.
    pub fn add_specs(maps: &mut Vec<MapSpec>) -> OrcMaps {
        let mut add = |name: &str, kind, value_size, max_entries| {
            MapSpec::add_internal(maps, name, kind, 4, value_size, max_entries)
        };
        OrcMaps {
            rows: add(
                "kstack_rows",
                MapKind::Array,
                ROWS_PER_CHUNK * ROW_BYTES as u32,
                ROW_CHUNKS,
            ),
            blocks: add("kstack_blocks", MapKind::Array, BLOCKS_BYTES, 1),
            info: add("kstack_info", MapKind::Array, info::BYTES, 1),
            walk: add("kstack_walk", MapKind::PerCpuArray, walk::BYTES, 1),
        }
    }
}

/// What the walker needs besides the rows: `text_base`, `text_end` (the
/// table's `[_stext, _etext)`), `blocks: u32` (0 until the table is placed:
/// every walk then leaves the stack to the kernel), `skip: u32` (frames of
/// the walk, from the traced program's caller on, that are the tracer's:
/// not stored), `max_stored: u32` (frames the kernel would store at most
/// after its skip: a longer stack is left to it, which cuts it there), and
/// `TRAMPOLINES` return-address trampolines (0 for none).
pub mod info {
    pub const TEXT_BASE: i16 = 0;
    pub const TEXT_END: i16 = 8;
    pub const BLOCKS: i16 = 16;
    pub const SKIP: i16 = 20;
    pub const MAX_STORED: i16 = 24;
    pub const TRAMPOLINE: i16 = 32;
    pub const TRAMPOLINES: usize = 4;
    pub const BYTES: u32 = 64;
}

/// A walk in progress: the frame's `ip, sp, bp`, the registers a `Regs`
/// frame found (`regs`, the previous full set `prev_regs`, 0 for none;
/// `regs_full`), `signal` (the frame was interrupted: its own `ip` is
/// looked up, not `ip - 1`), the copy's first address `low` and length
/// `len`, frames `walked` and `stored`, the `status`, temporaries, the
/// frames stored, and the copy of the task's kernel stack from the walker's
/// own frame to the stack's top.
pub mod walk {
    use super::MAX_FRAMES;

    pub const IP: i16 = 0;
    pub const SP: i16 = 8;
    pub const BP: i16 = 16;
    pub const REGS: i16 = 24;
    pub const PREV_REGS: i16 = 32;
    pub const LOW: i16 = 40;
    pub const LEN: i16 = 48;
    pub const WALKED: i16 = 56;
    pub const STORED: i16 = 60;
    pub const REGS_FULL: i16 = 64;
    pub const SIGNAL: i16 = 68;
    pub const STATUS: i16 = 72;
    pub const KEY: i16 = 76;
    /// The pc looked up (bytes from the text base).
    pub const PC: i16 = 80;
    /// The CFA of the frame being unwound.
    pub const CFA: i16 = 88;
    pub const NEW_IP: i16 = 96;
    pub const NEW_SP: i16 = 104;
    pub const TEMP: i16 = 112;
    /// The task's `stack`: its kernel stack's lowest address.
    pub const STACK: i16 = 120;
    pub const FRAMES: i16 = 128;
    /// The rows of recent pcs ([`ROW_CACHE_ENTRIES`] of `pc + 1: u64`, the
    /// row: u64; 0 for none): a walk passes the same tracer, scheduler and
    /// system-call frames again and again, and a row found here needs no
    /// search.
    pub const ROW_CACHE: i16 = FRAMES + 8 * (MAX_FRAMES as i16 + 1);
    pub const ROW_CACHE_ENTRIES: u32 = 256;
    pub const COPY: i16 = ROW_CACHE + 16 * ROW_CACHE_ENTRIES as i16;
    /// Bytes of stack copied at most (a power of two: x86-64's
    /// `THREAD_SIZE` without KASAN).
    pub const COPY_BYTES: u32 = 16384;
    /// Room after the copy for a masked offset's widest read (a `struct
    /// pt_regs`).
    pub const COPY_SLACK: u32 = 256;
    pub const BYTES: u32 = COPY as u32 + COPY_BYTES + COPY_SLACK;

    /// `status` values.
    pub const WALKING: i32 = 0;
    pub const DONE: i32 = 1;
    pub const GIVEN_UP: i32 = 2;
}

/// The table, and what the walker needs to start.
pub struct Placement<'a> {
    pub table: &'a OrcTable,
    pub trampolines: &'a [u64],
    pub skip: u32,
    pub max_stored: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    #[error("the kernel's table has {rows} rows and {blocks} blocks, more than the maps hold")]
    TooLarge { rows: usize, blocks: usize },
    #[error("a block of the kernel's table has {0} rows, more than a search finds")]
    WideBlock(u32),
    #[error("cannot write the kernel's table: {0}")]
    Write(String),
}

/// Writes the table, then the info that lets walks use it.
pub fn place(loaded: &Loaded, maps: OrcMaps, placement: &Placement) -> Result<(), PlaceError> {
    let table = placement.table;
    let (rows, blocks) = (table.rows.len(), table.blocks.len());
    if rows > (ROWS_PER_CHUNK * ROW_CHUNKS) as usize || blocks > MAX_BLOCKS as usize {
        return Err(PlaceError::TooLarge { rows, blocks });
    }
    if table.widest_block() >= 1 << SEARCH_STEPS {
        return Err(PlaceError::WideBlock(table.widest_block()));
    }
    let write = |map: MapId, key: u32, value: &[u8]| {
        (loaded
            .map(map)
            .map_err(|e| PlaceError::Write(e.to_string()))?)
        .update(&key.to_ne_bytes(), value, MapFlags::ANY)
        .map_err(|e| PlaceError::Write(format!("{e:#}")))
    };
    let chunk_bytes = ROWS_PER_CHUNK as usize * ROW_BYTES;
    let mut encoded = table.encoded_rows();
    encoded.resize(encoded.len().next_multiple_of(chunk_bytes), 0);
    for (chunk, value) in encoded.chunks_exact(chunk_bytes).enumerate() {
        write(maps.rows, chunk as u32, value)?;
    }
    let mut index: Vec<u8> = table.blocks.iter().flat_map(|b| b.to_ne_bytes()).collect();
    index.resize(BLOCKS_BYTES as usize, 0);
    write(maps.blocks, 0, &index)?;
    write(maps.info, 0, &info_value(placement))
}

/// The info value of a placed table.
fn info_value(placement: &Placement) -> Vec<u8> {
    let mut value = vec![0u8; info::BYTES as usize];
    let mut put = |at: i16, bytes: &[u8]| {
        value[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
    };
    put(info::TEXT_BASE, &placement.table.base.to_ne_bytes());
    put(info::TEXT_END, &placement.table.end.to_ne_bytes());
    put(
        info::BLOCKS,
        &(placement.table.blocks.len() as u32).to_ne_bytes(),
    );
    put(info::SKIP, &placement.skip.to_ne_bytes());
    put(info::MAX_STORED, &placement.max_stored.to_ne_bytes());
    for (i, address) in placement
        .trampolines
        .iter()
        .take(info::TRAMPOLINES)
        .enumerate()
    {
        put(info::TRAMPOLINE + 8 * i as i16, &address.to_ne_bytes());
    }
    value
}
