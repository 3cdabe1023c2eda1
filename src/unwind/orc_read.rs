//! Copies the kernel's ORC sections out of the running kernel (no
//! `/proc/kcore` needed): their bounds by name through
//! [`crate::runtime::bpf::ksym_range::addresses`], then one sleepable
//! syscall program, run once, reads them with `bpf_probe_read_kernel` in
//! 64 KiB chunks into an array map, which user space reads back. Input:
//! nothing. Output: a [`KernelOrc`]: the table ([`super::orc`]) and the
//! addresses of the trampolines that replace return addresses on the stack.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use libbpf_rs::libbpf_sys;
use libbpf_rs::{MapCore, MapFlags, MapHandle, MapType};

use super::orc::{OrcError, OrcTable, RawOrc};
use crate::codegen::asm::{AluOp, Assembler, Cond, Reg, Size};
use crate::codegen::helpers;
use crate::runtime::bpf::{ksym_range, syscall_program};
use crate::vocab::MapId;

/// Bytes copied per map value (and per `bpf_probe_read_kernel`).
const CHUNK_BYTES: u32 = 1 << 16;
/// Most bytes of ORC sections copied (about 5 MiB on Linux 6.18).
const MAX_BYTES: u64 = 64 << 20;
/// The bounds the copy needs, in this order.
const BOUNDS: [&str; 6] = [
    "_stext",
    "_etext",
    "__start_orc_unwind_ip",
    "__stop_orc_unwind_ip",
    "__start_orc_unwind",
    "__stop_orc_unwind",
];
/// Functions whose address the kernel writes over return addresses
/// (kretprobes and fprobe exits, the function graph tracer): its own walk
/// puts the real ones back, which BPF cannot, so the walker leaves stacks
/// holding them to the kernel.
pub const TRAMPOLINES: [&str; 4] = [
    "arch_rethook_trampoline",
    "__kretprobe_trampoline",
    "kretprobe_trampoline",
    "return_to_handler",
];

#[derive(Debug, thiserror::Error)]
pub enum OrcReadError {
    #[error("cannot look up kernel symbols: {0}")]
    Lookup(#[from] ksym_range::LookupError),
    #[error("the kernel does not show `{0}`")]
    Missing(&'static str),
    #[error("the ORC sections are {0} bytes, more than expected")]
    TooLarge(u64),
    #[error("cannot create the copy map: {0}")]
    Map(String),
    #[error("cannot assemble the copy program: {0}")]
    Assemble(String),
    #[error("the kernel refused the copy program: {0}")]
    Load(std::io::Error),
    #[error("the copy program failed: {0}")]
    Run(String),
    #[error(transparent)]
    Table(#[from] OrcError),
}

/// The kernel's table, the trampolines' addresses, and what reading took.
pub struct KernelOrc {
    pub table: OrcTable,
    pub trampolines: Vec<u64>,
    /// Looking up the bounds and copying the sections.
    pub copy_time: Duration,
    /// Decoding, merging and indexing.
    pub build_time: Duration,
}

/// Reads and builds this kernel's table.
pub fn read() -> Result<KernelOrc, OrcReadError> {
    let started = Instant::now();
    let mut names: Vec<&str> = BOUNDS.to_vec();
    names.extend(TRAMPOLINES);
    let found = ksym_range::addresses(&names)?;
    let bound = |index: usize| found[index].ok_or(OrcReadError::Missing(BOUNDS[index]));
    let [text, text_end, ips, ips_end, entries, entries_end] = [0, 1, 2, 3, 4, 5].map(bound);
    let (first, ips_end, entries, last) = (ips?, ips_end?, entries?, entries_end?);
    if !(first <= ips_end && ips_end <= entries && entries <= last) {
        return Err(OrcReadError::Run(
            "the ORC sections' bounds are out of order".into(),
        ));
    }
    let trampolines: Vec<u64> = found[BOUNDS.len()..].iter().flatten().copied().collect();
    let bytes = last.saturating_sub(first);
    if bytes > MAX_BYTES {
        return Err(OrcReadError::TooLarge(bytes));
    }
    let sections = copy(first, bytes as u32)?;
    let copy_time = started.elapsed();
    let started = Instant::now();
    let at = |address: u64| (address - first) as usize;
    let raw = RawOrc {
        ip_table_at: first,
        ip_table: &sections[..at(ips_end)],
        entries: &sections[at(entries)..],
    };
    let table = OrcTable::build(&raw, text?, text_end?)?;
    Ok(KernelOrc {
        table,
        trampolines,
        copy_time,
        build_time: started.elapsed(),
    })
}

/// `bytes` of kernel memory from `from`.
fn copy(from: u64, bytes: u32) -> Result<Vec<u8>, OrcReadError> {
    let chunks = bytes.div_ceil(CHUNK_BYTES);
    let opts = libbpf_sys::bpf_map_create_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_map_create_opts>() as _,
        ..Default::default()
    };
    let map = MapHandle::create(
        MapType::Array,
        Some("wprof_orc_copy"),
        4,
        CHUNK_BYTES,
        chunks.max(1),
        &opts,
    )
    .map_err(|e| OrcReadError::Map(format!("{e:#}")))?;
    let insns = copy_insns(from, bytes)?;
    let program = syscall_program::load(&insns, map.as_fd(), c"wprof_orc_copy")
        .map_err(OrcReadError::Load)?;
    let failed = syscall_program::run(&program, &mut [0u8; 8])
        .map_err(|e| OrcReadError::Run(e.to_string()))?;
    if failed != 0 {
        return Err(OrcReadError::Run(format!(
            "chunk {} unreadable",
            failed - 1
        )));
    }
    let mut out = Vec::with_capacity(bytes as usize);
    for chunk in 0..chunks {
        let value = (map.lookup(&chunk.to_ne_bytes(), MapFlags::ANY))
            .map_err(|e| OrcReadError::Run(format!("{e:#}")))?
            .ok_or_else(|| OrcReadError::Run(format!("chunk {chunk} missing")))?;
        out.extend_from_slice(&value);
    }
    out.truncate(bytes as usize);
    Ok(out)
}

/// For each chunk `i`: `bpf_probe_read_kernel(&map[i], len, from + i *
/// CHUNK_BYTES)`; returns 0, or `i + 1` for the first chunk that failed.
fn copy_insns(from: u64, bytes: u32) -> Result<Vec<u64>, OrcReadError> {
    use Reg::*;
    let mut asm = Assembler::new();
    let failed = asm.new_label();
    for chunk in 0..bytes.div_ceil(CHUNK_BYTES) {
        let len = (bytes - chunk * CHUNK_BYTES).min(CHUNK_BYTES);
        asm.mov64_imm(R6, chunk as i32 + 1);
        asm.store_imm(Size::U32, R10, -4, chunk as i32);
        asm.ld_map_fd(R1, MapId(0));
        asm.mov64_reg(R2, R10);
        asm.alu64_imm(AluOp::Add, R2, -4);
        asm.call_helper(helpers::MAP_LOOKUP_ELEM);
        asm.jmp_imm(Cond::Eq, R0, 0, failed);
        asm.mov64_reg(R1, R0);
        asm.mov64_imm(R2, len as i32);
        asm.ld_imm64(R3, from + u64::from(chunk * CHUNK_BYTES));
        asm.call_helper(helpers::PROBE_READ_KERNEL);
        asm.jmp_imm(Cond::Ne, R0, 0, failed);
    }
    asm.mov64_imm(R0, 0);
    asm.exit();
    let fail = |e: crate::codegen::asm::AsmError| OrcReadError::Assemble(e.to_string());
    asm.bind(failed).map_err(fail)?;
    asm.mov64_reg(R0, R6);
    asm.exit();
    Ok(asm.finish().map_err(fail)?.insns)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On this kernel the sections copy and build: every entry is read,
    /// the rows cover `_stext`, and a lookup of the function this test
    /// knows (`_stext` itself) finds a rule.
    #[test]
    fn reads_this_kernel() {
        let orc = read().unwrap_or_else(|e| panic!("{e}"));
        let table = &orc.table;
        assert!(table.entries > 10_000, "{} entries", table.entries);
        assert!(table.rows.len() > 1000 && table.rows.len() <= table.entries);
        assert!(table.lookup(table.base).is_some());
        assert!(table.widest_block() < 256, "{}", table.widest_block());
        eprintln!(
            "{} entries, {} rows ({} unusable), {} blocks, widest {}; copy {:?}, build {:?}",
            table.entries,
            table.rows.len(),
            table.unusable_rows(),
            table.blocks.len(),
            table.widest_block(),
            orc.copy_time,
            orc.build_time
        );
    }
}
