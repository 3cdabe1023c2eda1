//! What a capture's settings say it recorded, for the outputs that need
//! stacks: the timer sampling rate (`-S timer=Nhz` or `=PERIOD`) and whether the context
//! switches carry off-CPU stacks (`-S offcpu`, and its threshold once
//! `-S offcpu=DUR` keeps stacks only for blocks of at least DUR).
//!
//! Input: `CaptureSettings::stacks` (canonical `-S` spellings); output:
//! [`RecordedStacks`].

use crate::capture::model::CaptureSettings;
use crate::render::format::whole_duration;
use crate::tracking::options::{DEFAULT_TIMER_HZ, TimerEvery, TimerRate, parse_timer_rate};
use crate::tracking::when::parse_duration;

/// The stacks a capture asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecordedStacks {
    /// `-S timer=…`: on-CPU samples at this mean rate or period.
    pub timer: Option<TimerRate>,
    /// `-S offcpu[=DUR]`: switches carry the stack of the task switched out.
    pub offcpu: Option<OffCpuStacks>,
}

/// Off-CPU stacks as recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OffCpuStacks {
    /// Blocks shorter than this have no stack (their time is still known);
    /// `None`: every block has one.
    pub min_block_ns: Option<u64>,
}

impl RecordedStacks {
    pub fn of(settings: &CaptureSettings) -> Self {
        let mut recorded = RecordedStacks::default();
        for spec in &settings.stacks {
            let (kind, value) = match spec.split_once('=') {
                Some((kind, value)) => (kind, Some(value)),
                None => (spec.as_str(), None),
            };
            match kind {
                "timer" => {
                    let rate = value.and_then(|v| parse_timer_rate(v).ok());
                    recorded.timer = Some(rate.unwrap_or(TimerRate::new(DEFAULT_TIMER_HZ)));
                }
                "offcpu" => {
                    let min_block_ns = value.and_then(duration_ns);
                    recorded.offcpu = Some(OffCpuStacks { min_block_ns });
                }
                _ => {}
            }
        }
        recorded
    }

    /// The time one timer sample stands for.
    pub fn timer_period_ns(&self) -> Option<u64> {
        self.timer.map(|rate| rate.period_ns())
    }

    /// The timer's rate in Hz as given, or its period's (rounded).
    pub fn timer_hz(&self) -> Option<u64> {
        self.timer.map(|rate| match rate.mean {
            TimerEvery::Hz(hz) => hz,
            TimerEvery::PeriodNs(ns) => (1_000_000_000 + ns / 2) / ns,
        })
    }

    /// How `-I` and the report say which off-CPU blocks have stacks.
    pub fn describe_offcpu(&self) -> String {
        match self.offcpu {
            None => "none (record with -S offcpu)".to_owned(),
            Some(OffCpuStacks { min_block_ns: None }) => "every block".to_owned(),
            Some(OffCpuStacks {
                min_block_ns: Some(ns),
            }) => format!("blocks of at least {}", whole_duration(ns)),
        }
    }
}

/// `1ms`, `500us`, `250000ns`.
fn duration_ns(text: &str) -> Option<u64> {
    match text.strip_suffix("ns") {
        Some(ns) => ns.parse().ok(),
        None => parse_duration(text).ok().map(|d| d.as_nanos() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(stacks: &[&str]) -> RecordedStacks {
        RecordedStacks::of(&CaptureSettings {
            stacks: stacks.iter().map(|s| s.to_string()).collect(),
            ..CaptureSettings::default()
        })
    }

    /// Rates, off-CPU stacks and their threshold come from the `-S` specs.
    #[test]
    fn reads_the_stack_specs() {
        assert_eq!(recorded(&[]), RecordedStacks::default());
        let both = recorded(&["timer=99hz", "offcpu", "waker"]);
        assert_eq!(both.timer_hz(), Some(99));
        let dithered = recorded(&["timer=4999hz,dither=4"]);
        assert_eq!(dithered.timer_period_ns(), Some(200_040));
        assert_eq!(both.timer_period_ns(), Some(10_101_010));
        assert_eq!(both.offcpu, Some(OffCpuStacks { min_block_ns: None }));
        assert_eq!(both.describe_offcpu(), "every block");
        let threshold = recorded(&["offcpu=1ms"]);
        assert_eq!(
            threshold.offcpu.and_then(|o| o.min_block_ns),
            Some(1_000_000)
        );
        assert_eq!(threshold.describe_offcpu(), "blocks of at least 1ms");
        assert_eq!(
            recorded(&["offcpu=250us"]).describe_offcpu(),
            "blocks of at least 250us"
        );
        assert_eq!(recorded(&["timer"]).timer_hz(), Some(DEFAULT_TIMER_HZ));
        let period = recorded(&["timer=3ms,dither=2"]);
        assert_eq!(period.timer_period_ns(), Some(3_000_000));
        assert_eq!(period.timer_hz(), Some(333));
    }
}
