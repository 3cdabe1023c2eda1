//! Normalization: user addresses of a live process → file, build id, offset.
//!
//! Parsing `/proc/PID/maps` for every stack would cost more than the stack, so
//! the mappings of each pid are cached. A cache only misses on growth (`dlopen`,
//! `mmap` of new code): an address outside every cached mapping refreshes that
//! pid once. Addresses still unmapped after a refresh (JIT code is usually in
//! anonymous memory, which is not cached) are remembered so they do not force a
//! refresh on every stack. A cache cannot see `exec` or pid reuse: the capture
//! calls [`StackNormalizer::forget`] when a process execs or exits. Nor can it
//! see `munmap` followed by a new file mapped at the same address (`dlclose`
//! then `dlopen` of another library): such addresses resolve to the old file
//! until the next refresh. Measured here, a 20-frame stack costs ~6 us cached
//! and ~37 us reading `/proc/PID/maps` afresh (more for processes with
//! thousands of mappings), hence the trade.
//!
//! Caching also keeps stacks of a process that exits between recording and
//! normalization: its cached mappings still answer.

use std::collections::{HashMap, HashSet};

use blazesym::normalize::{Normalizer, UserMeta, UserOutput};
use blazesym::symbolize::Reason;

use super::{NormalizedAddr, UnknownReason};

/// Above this many remembered unmapped addresses per pid, forget them all: the
/// only cost of forgetting is one more refresh.
const MAX_KNOWN_UNMAPPED: usize = 1 << 16;

/// Normalizes user addresses of live processes, caching mappings per pid.
#[derive(Debug)]
pub struct StackNormalizer {
    procs: HashMap<u32, ProcMaps>,
    #[cfg(test)]
    stats: NormalizeStats,
}

/// Counters that tests read to see the cache at work.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NormalizeStats {
    /// Addresses normalized to a file offset.
    pub normalized: u64,
    /// Addresses left unknown.
    pub unknown: u64,
    /// Times a pid's mappings were read (first use and refreshes).
    pub maps_reads: u64,
}

/// The cached mappings of one process.
#[derive(Debug)]
struct ProcMaps {
    normalizer: Normalizer,
    /// Addresses that were unmapped right after the mappings were read.
    known_unmapped: HashSet<u64>,
}

impl Default for StackNormalizer {
    fn default() -> Self {
        Self::new()
    }
}

impl StackNormalizer {
    /// A normalizer with an empty cache.
    pub fn new() -> Self {
        Self {
            procs: HashMap::new(),
            #[cfg(test)]
            stats: NormalizeStats::default(),
        }
    }

    /// Normalizes user addresses of `pid`, one result per address, in order.
    ///
    /// Never fails: an exited process gives [`UnknownReason::ProcessGone`]
    /// unless its mappings were cached while it lived, in which case they are
    /// used (the files outlive the process).
    pub fn normalize_user(&mut self, pid: u32, addrs: &[u64]) -> Vec<NormalizedAddr> {
        let normalized = self.normalize_cached(pid, addrs);
        #[cfg(test)]
        for addr in &normalized {
            match addr {
                NormalizedAddr::Normalized { .. } => self.stats.normalized += 1,
                NormalizedAddr::Unknown { .. } => self.stats.unknown += 1,
            }
        }
        normalized
    }

    /// Drops the cached mappings of `pid`, so a later process with the same
    /// pid is read afresh.
    #[cfg(test)]
    pub fn forget(&mut self, pid: u32) {
        self.procs.remove(&pid);
    }

    /// Counters so far.
    #[cfg(test)]
    pub fn stats(&self) -> NormalizeStats {
        self.stats
    }

    fn normalize_cached(&mut self, pid: u32, addrs: &[u64]) -> Vec<NormalizedAddr> {
        let gone = || {
            let reason = UnknownReason::ProcessGone;
            vec![NormalizedAddr::Unknown { reason }; addrs.len()]
        };
        // `Pid::from(0)` means "this process" to blazesym; pid 0 is the idle
        // task and has no user addresses.
        if pid == 0 || addrs.is_empty() {
            return gone();
        }
        let mut from_cache = None;
        if let Some(proc_maps) = self.procs.get(&pid)
            && let Ok(output) = proc_maps.normalizer.normalize_user_addrs(pid.into(), addrs)
        {
            let converted = convert(&output);
            if !proc_maps.has_new_miss(addrs, &converted) {
                return converted;
            }
            // Mappings grew since they were cached: reread them below.
            from_cache = Some(converted);
        }
        let proc_maps = ProcMaps::new();
        #[cfg(test)]
        {
            self.stats.maps_reads += 1;
        }
        let Ok(output) = proc_maps.normalizer.normalize_user_addrs(pid.into(), addrs) else {
            // The process is gone: an answer from the old cache beats none.
            return from_cache.unwrap_or_else(gone);
        };
        let converted = convert(&output);
        drop(output);
        let proc_maps = self.procs.entry(pid).insert_entry(proc_maps).into_mut();
        proc_maps.remember_unmapped(addrs, &converted);
        converted
    }
}

impl ProcMaps {
    fn new() -> Self {
        // Parsing `/proc/PID/maps` rather than the `PROCMAP_QUERY` ioctl
        // (Linux 6.11+): blazesym reopens the maps file for every ioctl-based
        // call, which fails once the process is gone, while parsed mappings
        // are served from the cache without touching `/proc`. The cost is
        // that build ids are read through the mapped path, so files deleted
        // or in another mount namespace get none.
        let normalizer = Normalizer::builder()
            .enable_procmap_query(false)
            .enable_vma_caching(true)
            .enable_build_ids(true)
            .enable_build_id_caching(true)
            .build();
        Self {
            normalizer,
            known_unmapped: HashSet::new(),
        }
    }

    /// Whether an address missed the cached mappings and was not already
    /// missing when they were read.
    fn has_new_miss(&self, addrs: &[u64], converted: &[NormalizedAddr]) -> bool {
        addrs.iter().zip(converted).any(|(addr, normalized)| {
            is_unmapped(normalized) && !self.known_unmapped.contains(addr)
        })
    }

    fn remember_unmapped(&mut self, addrs: &[u64], converted: &[NormalizedAddr]) {
        if self.known_unmapped.len() > MAX_KNOWN_UNMAPPED {
            self.known_unmapped.clear();
        }
        let unmapped = addrs.iter().zip(converted).filter(|(_, n)| is_unmapped(n));
        self.known_unmapped.extend(unmapped.map(|(addr, _)| *addr));
    }
}

fn is_unmapped(normalized: &NormalizedAddr) -> bool {
    matches!(
        normalized,
        NormalizedAddr::Unknown {
            reason: UnknownReason::Unmapped
        }
    )
}

/// blazesym's output (offsets indexing shared meta) → one value per address.
fn convert(output: &UserOutput<'_>) -> Vec<NormalizedAddr> {
    let metas: Vec<Option<(String, Option<Vec<u8>>)>> = output
        .meta
        .iter()
        .map(|meta| match meta {
            UserMeta::Elf(elf) => Some((
                elf.path.to_string_lossy().into_owned(),
                elf.build_id.as_ref().map(|id| id.to_vec()),
            )),
            _ => None,
        })
        .collect();
    output
        .outputs
        .iter()
        .map(|&(offset, meta_idx)| match &metas[meta_idx] {
            Some((path, build_id)) => NormalizedAddr::Normalized {
                path: path.clone(),
                build_id: build_id.clone(),
                file_offset: offset,
            },
            None => NormalizedAddr::Unknown {
                reason: unknown_reason(&output.meta[meta_idx]),
            },
        })
        .collect()
}

fn unknown_reason(meta: &UserMeta<'_>) -> UnknownReason {
    match meta {
        // blazesym symbolizes vDSO addresses on the spot; the name is not kept
        // because a capture frame is either a file offset or a raw address.
        UserMeta::Sym(_) => UnknownReason::Vdso,
        UserMeta::Unknown(unknown) => match unknown.reason {
            Reason::Unmapped => UnknownReason::Unmapped,
            Reason::MissingComponent => UnknownReason::Anonymous,
            _ => UnknownReason::Unsupported,
        },
        _ => UnknownReason::Unsupported,
    }
}
