//! User-stack unwinding from `.eh_frame`: tables against readelf, and the
//! BPF unwinder on the real kernel against `perf --call-graph dwarf`.

mod captures;
mod cost;
mod ending;
mod jit;
mod kernel;
mod kernel_stacks;
mod late_libc;
mod offcpu_leaves;
mod plt;
mod prepared;
mod proof;
mod readelf;
mod snapshots;
mod tables;
mod uprobe_xol;
mod uretprobes;
mod walk_cache;
mod workloads;

pub(super) use cost::StatsOn;
