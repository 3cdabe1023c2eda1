//! System tracking as the command line asks for it: which built-in trackers
//! run (`-f`), which stacks they take (`-S`), which counters they read
//! (`--pmu`), which tasks they follow (filters), and when the capture starts
//! (`--prepare` / `--activate`). Produces the tracker sources, the
//! `CompileOptions` every script compiles with, and the capture's settings.

#[cfg(test)]
pub mod compiled;
pub mod options;
pub mod records;
pub mod trackers;
pub mod when;

use std::collections::BTreeSet;

use crate::capture::model::CaptureSettings;
use crate::frontend::options::{CompileOptions, TaskFilter};
use options::{Feature, StackKind, filter_args};
use when::When;

/// Everything the command line says about system tracking, parsed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tracking {
    pub features: BTreeSet<Feature>,
    pub stacks: Vec<StackKind>,
    /// `--pmu` events as given.
    pub pmu: Vec<String>,
    pub filter: TaskFilter,
    pub prepare: Option<When>,
    pub activate: Option<When>,
}

/// At most this many `--pmu` counters.
pub const MAX_PMU_COUNTERS: usize = 16;

/// The environment variable that makes `-S offcpu=DUR` take its deferred
/// user stacks in a `sys_exit` program even where the kernel can run a
/// task-work callback instead (`docs/unwinding.md`): a diagnostic switch.
pub const FORCE_SYS_EXIT: &str = "WPROF_OFFCPU_SYS_EXIT";

impl Tracking {
    /// The options every script (trackers and the user's) compiles with.
    pub fn compile_options(&self) -> Result<CompileOptions, String> {
        Ok(CompileOptions {
            stacks: (self.stacks.iter())
                .filter(|k| **k != StackKind::FramePointersOnly)
                .map(|k| k.item_name().to_string())
                .collect(),
            pmu: crate::frontend::pmu::parse_counters(&self.pmu)?,
            filter: self.filter.clone(),
            frame_pointers_only: self.stacks.contains(&StackKind::FramePointersOnly),
            offcpu_min_block_ns: self.stacks.iter().find_map(|k| match k {
                StackKind::Offcpu { min_block_ns } => *min_block_ns,
                _ => None,
            }),
            offcpu_sys_exit: std::env::var_os(FORCE_SYS_EXIT).is_some(),
            includes: Default::default(),
            map_keys_max: None,
            output_pages_per_cpu: None,
            unsafe_builtins: false,
            helper_checks: Default::default(),
            string_len: None,
        })
    }

    /// The settings saved in the capture, in canonical spellings.
    pub fn settings(&self) -> CaptureSettings {
        CaptureSettings {
            features: self.features.iter().map(|f| f.name().to_string()).collect(),
            stacks: self.stacks.iter().map(ToString::to_string).collect(),
            pmu: self.pmu.clone(),
            filters: filter_args(&self.filter),
            prepare: self.prepare.map(|w| w.to_string()),
            activate: self.activate.map(|w| w.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings list features, stacks, filters and specs canonically.
    #[test]
    fn settings_are_canonical() {
        let tracking = Tracking {
            features: Feature::defaults(),
            stacks: options::parse_stack_arg("").unwrap(),
            filter: TaskFilter {
                no_pids: vec![1],
                ..TaskFilter::default()
            },
            activate: Some(when::parse_when("+1s").unwrap()),
            ..Tracking::default()
        };
        let settings = tracking.settings();
        assert_eq!(
            settings.features,
            ["sched", "wakeup", "task-life", "hardirq", "softirq"]
        );
        assert_eq!(settings.stacks, ["timer=100hz", "offcpu"]);
        assert_eq!(settings.filters, ["-P 1"]);
        assert_eq!(settings.prepare, None);
        assert_eq!(settings.activate.as_deref(), Some("+1000ms"));
        let options = tracking.compile_options().unwrap();
        assert_eq!(
            options.stacks.iter().collect::<Vec<_>>(),
            ["offcpu", "timer"]
        );
    }
}
