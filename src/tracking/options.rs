//! System-tracking command-line values: features (`-f`), stack kinds (`-S`)
//! and task filters, parsed into plain types with canonical spellings (what
//! the capture's settings record).

use std::collections::BTreeSet;
use std::fmt;

use crate::frontend::options::TaskFilter;
use crate::render::format::whole_duration;
use crate::tracking::when::parse_duration;
use crate::vocab::PerfSample;

/// A built-in tracker, turned on and off with `-f NAME` / `-f no-NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    Sched,
    Wakeup,
    TaskLife,
    Hardirq,
    Softirq,
    Wq,
}

impl Feature {
    pub const ALL: [Feature; 6] = [
        Feature::Sched,
        Feature::Wakeup,
        Feature::TaskLife,
        Feature::Hardirq,
        Feature::Softirq,
        Feature::Wq,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Feature::Sched => "sched",
            Feature::Wakeup => "wakeup",
            Feature::TaskLife => "task-life",
            Feature::Hardirq => "hardirq",
            Feature::Softirq => "softirq",
            Feature::Wq => "wq",
        }
    }

    pub fn on_by_default(self) -> bool {
        self != Feature::Wq
    }

    /// Features on unless switched off.
    pub fn defaults() -> BTreeSet<Feature> {
        Feature::ALL
            .into_iter()
            .filter(|f| f.on_by_default())
            .collect()
    }
}

/// One `-f` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureSwitch {
    /// `None` for every feature (`-f all`, `-f none`).
    pub feature: Option<Feature>,
    pub on: bool,
}

/// `-f NAME`, `-f no-NAME`, `-f all` or `-f none`.
pub fn parse_feature_switch(text: &str) -> Result<FeatureSwitch, String> {
    match text {
        "all" | "none" => {
            return Ok(FeatureSwitch {
                feature: None,
                on: text == "all",
            });
        }
        _ => {}
    }
    let (name, on) = match text.strip_prefix("no-") {
        Some(name) => (name, false),
        None => (text, true),
    };
    let feature = Feature::ALL
        .into_iter()
        .find(|f| f.name() == name)
        .ok_or_else(|| {
            let known: Vec<&str> = Feature::ALL.iter().map(|f| f.name()).collect();
            format!(
                "unknown feature `{name}` (features: {}; `no-NAME` turns one off, \
                 `all` and `none` all of them)",
                known.join(", ")
            )
        })?;
    Ok(FeatureSwitch {
        feature: Some(feature),
        on,
    })
}

/// The default features with `switches` applied in order.
pub fn features(switches: &[FeatureSwitch]) -> BTreeSet<Feature> {
    let mut set = Feature::defaults();
    for switch in switches {
        let named = match switch.feature {
            Some(feature) => vec![feature],
            None => Feature::ALL.to_vec(),
        };
        for feature in named {
            if switch.on {
                set.insert(feature);
            } else {
                set.remove(&feature);
            }
        }
    }
    set
}

/// What `-S` asks stacks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StackKind {
    /// On-CPU samples at a mean rate or period; with `dither` > 1, drawn at
    /// random, one in `dither`, from a timer `dither` times as fast
    /// ([`TimerRate`]).
    Timer(TimerRate),
    /// The stack of the task switched out; with a threshold, only of
    /// blocks at least this long (ns), decided in the kernel when the task
    /// is switched back in.
    Offcpu { min_block_ns: Option<u64> },
    /// The stack of the waker.
    Waker,
    /// Stacks in the user's probes (`stack(probe)`).
    Probe,
    /// Samples on a perf event: `pmu=EVENT[@RATE]`.
    Pmu { event: String, rate: PerfSample },
    /// `unwind=fp`: user stacks by frame pointers only (the kernel's walk),
    /// no `.eh_frame` tables built or loaded. A setting of every stack
    /// kind, not a kind: for code built with frame pointers, and to measure
    /// what the tables cost.
    FramePointersOnly,
}

/// The sampling rate of `-S timer` without `=Nhz`.
pub const DEFAULT_TIMER_HZ: u64 = 100;
/// The most `,dither=K` may ask for.
pub const MAX_TIMER_DITHER: u64 = 16;
/// The kernel's default `perf_event_max_sample_rate`: a dithered timer
/// (`hz` × `dither`) may not tick faster.
const MAX_TIMER_TICKS_HZ: u64 = 100_000;

/// `-S timer=Nhz[,dither=K]` or `-S timer=PERIOD[,dither=K]`.
///
/// A timer at a fixed period is not a fair sampler of a task that sleeps
/// and wakes: the sampler's own interrupt delays a wake-up due while it
/// runs, so the task often starts running just after a sample and gets
/// the next one a whole period later, and the code it runs first is
/// under-sampled (`docs/analysis.md`, "Timer samples and CPU time").
/// Dithering keeps one tick in `dither`, at random, of a timer `dither`
/// times as fast: how long until the next sample then hardly depends on
/// when the last one was, at the cost of `dither` times the interrupts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerRate {
    /// How often it samples on average.
    pub mean: TimerEvery,
    /// 1: every tick is a sample.
    pub dither: u64,
}

/// How often a timer fires: `Nhz`, or once every so many nanoseconds of a
/// CPU's time (`10ms`; bcc `profile -c COUNT`, whose count of the
/// `cpu-clock` event is nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerEvery {
    Hz(u64),
    PeriodNs(u64),
}

impl TimerRate {
    pub const fn new(hz: u64) -> Self {
        TimerRate {
            mean: TimerEvery::Hz(hz),
            dither: 1,
        }
    }

    /// How often the timer's perf event ticks (`dither` times as often as
    /// it samples).
    pub fn ticks(&self) -> TimerEvery {
        match self.mean {
            TimerEvery::Hz(hz) => TimerEvery::Hz(hz.saturating_mul(self.dither)),
            TimerEvery::PeriodNs(ns) => TimerEvery::PeriodNs(ns / self.dither),
        }
    }

    /// The CPU time one sample stands for.
    pub fn period_ns(&self) -> u64 {
        match self.mean {
            TimerEvery::Hz(hz) => 1_000_000_000 / hz.max(1),
            TimerEvery::PeriodNs(ns) => ns,
        }
    }
}

impl fmt::Display for TimerRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.mean {
            TimerEvery::Hz(hz) => write!(f, "{hz}hz")?,
            TimerEvery::PeriodNs(ns) => f.write_str(&whole_duration(ns))?,
        }
        match self.dither {
            1 => Ok(()),
            dither => write!(f, ",dither={dither}"),
        }
    }
}

/// The sampling rate of `-S pmu=EVENT` without `@RATE`.
pub const DEFAULT_PMU_HZ: u64 = 1000;

impl StackKind {
    /// The name `stack(KIND)` items use.
    pub fn item_name(&self) -> &'static str {
        match self {
            StackKind::Timer { .. } => "timer",
            StackKind::Offcpu { .. } => "offcpu",
            StackKind::Waker => "waker",
            StackKind::Probe => "probe",
            StackKind::Pmu { .. } => "pmu",
            StackKind::FramePointersOnly => "unwind",
        }
    }
}

impl fmt::Display for StackKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StackKind::Timer(rate) => write!(f, "timer={rate}"),
            StackKind::Pmu { event, rate } => write!(f, "pmu={event}@{}", Rate(*rate)),
            StackKind::Offcpu {
                min_block_ns: Some(ns),
            } => write!(f, "offcpu={}", whole_duration(*ns)),
            StackKind::FramePointersOnly => f.write_str("unwind=fp"),
            other => f.write_str(other.item_name()),
        }
    }
}

/// A sampling rate as written: `4000hz` or a bare period count.
struct Rate(PerfSample);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            PerfSample::FrequencyHz(hz) => write!(f, "{hz}hz"),
            PerfSample::Period(count) => write!(f, "{count}"),
        }
    }
}

/// One `-S` argument: a kind, or (bare `-S`, given as "") timer + offcpu.
pub fn parse_stack_arg(text: &str) -> Result<Vec<StackKind>, String> {
    let bad = |why: String| format!("bad stack kind `{text}`: {why}");
    let (kind, value) = match text.split_once('=') {
        Some((kind, value)) => (kind, Some(value)),
        None => (text, None),
    };
    let kinds = match (kind, value) {
        ("", None) => vec![
            StackKind::Timer(TimerRate::new(DEFAULT_TIMER_HZ)),
            StackKind::Offcpu { min_block_ns: None },
        ],
        ("timer", None) => vec![StackKind::Timer(TimerRate::new(DEFAULT_TIMER_HZ))],
        ("timer", Some(rate)) => vec![StackKind::Timer(parse_timer_rate(rate).map_err(bad)?)],
        ("offcpu", None) => vec![StackKind::Offcpu { min_block_ns: None }],
        ("offcpu", Some(duration)) => vec![StackKind::Offcpu {
            min_block_ns: Some(parse_threshold(duration).map_err(bad)?),
        }],
        ("waker", None) => vec![StackKind::Waker],
        ("probe", None) => vec![StackKind::Probe],
        ("pmu", Some(spec)) => {
            let (event, rate) = match spec.split_once('@') {
                Some((event, rate)) => (event, parse_rate(rate).map_err(bad)?),
                None => (spec, PerfSample::FrequencyHz(DEFAULT_PMU_HZ)),
            };
            if event.is_empty() {
                return Err(bad("`pmu=EVENT[@RATE]` needs an event".into()));
            }
            vec![StackKind::Pmu {
                event: event.to_string(),
                rate,
            }]
        }
        ("pmu", None) => return Err(bad("`pmu=EVENT[@RATE]` needs an event".into())),
        ("unwind", Some("fp")) => vec![StackKind::FramePointersOnly],
        ("unwind", Some("tables")) => vec![],
        ("unwind", _) => return Err(bad("user stacks unwind with `tables` or `fp`".into())),
        _ => {
            return Err(bad(
                "kinds are timer[=Nhz|PERIOD[,dither=K]], offcpu[=DUR], waker, probe, pmu=EVENT[@RATE]; \
                 unwind=fp|tables chooses the user-stack unwinder"
                    .into(),
            ));
        }
    };
    Ok(kinds)
}

/// `Nhz[,dither=K]` or `PERIOD[,dither=K]` (a duration with its unit:
/// `10ms`, `250us`, `1000000ns`).
pub fn parse_timer_rate(text: &str) -> Result<TimerRate, String> {
    let (rate, dither) = match text.split_once(',') {
        Some((rate, option)) => {
            let value = option
                .strip_prefix("dither=")
                .ok_or_else(|| format!("unknown timer option `{option}` (expected dither=K)"))?;
            let dither = value
                .parse()
                .ok()
                .filter(|k| (1..=MAX_TIMER_DITHER).contains(k));
            let dither = dither.ok_or_else(|| {
                format!("`dither={value}`: K is a whole number from 1 to {MAX_TIMER_DITHER}")
            })?;
            (rate, dither)
        }
        None => (text, 1),
    };
    let positive = |digits: &str| digits.parse().ok().filter(|&n: &u64| n > 0);
    let mean = match rate.strip_suffix("hz") {
        Some(digits) => TimerEvery::Hz(positive(digits).ok_or_else(|| not_a_timer_rate(rate))?),
        None => TimerEvery::PeriodNs(parse_period_ns(rate).ok_or_else(|| not_a_timer_rate(rate))?),
    };
    if too_fast(mean) {
        return Err(format!(
            "`{rate}` samples faster than the kernel's perf_event_max_sample_rate \
             ({MAX_TIMER_TICKS_HZ} Hz)"
        ));
    }
    let timer = TimerRate { mean, dither };
    let ticks = timer.ticks();
    if too_fast(ticks) {
        let ticks = match ticks {
            TimerEvery::Hz(hz) => format!("{hz} Hz"),
            TimerEvery::PeriodNs(ns) => format!("every {}", whole_duration(ns)),
        };
        return Err(format!(
            "`{rate}` dithered {dither} times ticks at {ticks}, over the kernel's \
             perf_event_max_sample_rate ({MAX_TIMER_TICKS_HZ} Hz)"
        ));
    }
    Ok(timer)
}

/// Whether a timer this fast is over the kernel's default
/// `perf_event_max_sample_rate`.
fn too_fast(every: TimerEvery) -> bool {
    match every {
        TimerEvery::Hz(hz) => hz > MAX_TIMER_TICKS_HZ,
        TimerEvery::PeriodNs(ns) => ns < 1_000_000_000 / MAX_TIMER_TICKS_HZ,
    }
}

/// A timer period: a positive duration with its unit (`ns` included); a
/// bare number is neither a rate nor a period here.
fn parse_period_ns(text: &str) -> Option<u64> {
    let ns = match text.strip_suffix("ns") {
        Some(digits) => digits.parse().ok(),
        None if text.bytes().all(|b| b.is_ascii_digit()) => None,
        None => parse_duration(text)
            .ok()
            .and_then(|d| u64::try_from(d.as_nanos()).ok()),
    };
    ns.filter(|&ns| ns > 0)
}

fn not_a_timer_rate(text: &str) -> String {
    format!(
        "`{text}` is not a timer rate or period (a rate such as `99hz`, or a period \
         such as `10ms`, `250us`, `1000000ns`)"
    )
}

/// `offcpu=DUR` in ns: a positive duration with its unit (`1ms`, `500us`);
/// a bare number (milliseconds elsewhere) is more likely a slip here.
fn parse_threshold(text: &str) -> Result<u64, String> {
    let examples = "examples: 1ms, 500us";
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the off-CPU threshold `{text}` needs a unit ({examples})"
        ));
    }
    let duration = parse_duration(text)
        .map_err(|_| format!("the off-CPU threshold `{text}` is not a duration ({examples})"))?;
    u64::try_from(duration.as_nanos())
        .ok()
        .filter(|&ns| ns > 0)
        .ok_or_else(|| format!("the off-CPU threshold is a positive duration ({examples})"))
}

/// `Nhz` (a frequency) or `N` (a period in events); zero is rejected.
fn parse_rate(text: &str) -> Result<PerfSample, String> {
    let (digits, hz) = match text.strip_suffix("hz") {
        Some(digits) => (digits, true),
        None => (text, false),
    };
    let n: u64 = digits.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
        format!("`{text}` is not a rate (`4000hz`, or a period such as `100000`)")
    })?;
    Ok(if hz {
        PerfSample::FrequencyHz(n)
    } else {
        PerfSample::Period(n)
    })
}

/// The stack kinds of every `-S`, without repeats, in first-given order
/// (a later `timer=N` replaces an earlier timer rate).
pub fn stack_kinds(args: &[Vec<StackKind>]) -> Vec<StackKind> {
    let mut kinds: Vec<StackKind> = Vec::new();
    for kind in args.iter().flatten() {
        let same = |k: &StackKind| match (k, kind) {
            (StackKind::Pmu { event: a, .. }, StackKind::Pmu { event: b, .. }) => a == b,
            _ => k.item_name() == kind.item_name(),
        };
        match kinds.iter_mut().find(|k| same(k)) {
            Some(known) => *known = kind.clone(),
            None => kinds.push(kind.clone()),
        }
    }
    kinds
}

/// The filter as command-line arguments, in a fixed order (saved in the capture).
pub fn filter_args(filter: &TaskFilter) -> Vec<String> {
    let mut args = Vec::new();
    let mut list = |flag: &str, values: Vec<String>| {
        args.extend(values.into_iter().map(|v| format!("{flag} {v}")));
    };
    let numbers = |v: &[u32]| v.iter().map(u32::to_string).collect();
    list("-p", numbers(&filter.pids));
    list("-P", numbers(&filter.no_pids));
    list("--tid", numbers(&filter.tids));
    list("--no-tid", numbers(&filter.no_tids));
    list("-n", filter.names.clone());
    list("-N", filter.no_names.clone());
    for (flag, value) in [("idle", filter.idle), ("kthread", filter.kthread)] {
        match value {
            Some(true) => args.push(format!("--{flag}")),
            Some(false) => args.push(format!("--no-{flag}")),
            None => {}
        }
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-f` switches features on and off from the defaults; unknown names list the valid ones.
    #[test]
    fn feature_switches() {
        let none: Vec<FeatureSwitch> = ["none", "wq"]
            .iter()
            .map(|t| parse_feature_switch(t).unwrap())
            .collect();
        assert_eq!(features(&none), BTreeSet::from([Feature::Wq]));
        let switches: Vec<FeatureSwitch> = ["no-sched", "wq", "no-hardirq", "sched"]
            .iter()
            .map(|t| parse_feature_switch(t).unwrap())
            .collect();
        let names: Vec<&str> = features(&switches).iter().map(|f| f.name()).collect();
        assert_eq!(names, ["sched", "wakeup", "task-life", "softirq", "wq"]);
        assert_eq!(features(&[]).len(), 5);
        let error = parse_feature_switch("no-ipi").unwrap_err();
        assert!(
            error.contains("`ipi`") && error.contains("task-life, hardirq"),
            "{error}"
        );
    }

    /// Every stack kind parses and prints canonically; bare `-S` is timer + offcpu.
    #[test]
    fn stack_kinds_parse() {
        let canonical = |text: &str| -> Vec<String> {
            parse_stack_arg(text)
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect()
        };
        assert_eq!(canonical(""), ["timer=100hz", "offcpu"]);
        assert_eq!(canonical("timer=999hz"), ["timer=999hz"]);
        assert_eq!(canonical("timer=999hz,dither=1"), ["timer=999hz"]);
        assert_eq!(canonical("timer=999hz,dither=4"), ["timer=999hz,dither=4"]);
        assert_eq!(canonical("timer=10ms"), ["timer=10ms"]);
        assert_eq!(canonical("timer=1000000ns"), ["timer=1ms"]);
        assert_eq!(canonical("timer=250us,dither=2"), ["timer=250us,dither=2"]);
        assert_eq!(canonical("timer=1000003ns"), ["timer=1000003ns"]);
        assert_eq!(canonical("waker"), ["waker"]);
        assert_eq!(canonical("probe"), ["probe"]);
        assert_eq!(
            canonical("pmu=cpu-cycles@4000hz"),
            ["pmu=cpu-cycles@4000hz"]
        );
        assert_eq!(
            canonical("pmu=sw:page-faults@100"),
            ["pmu=sw:page-faults@100"]
        );
        assert_eq!(canonical("pmu=instructions"), ["pmu=instructions@1000hz"]);
        assert_eq!(canonical("offcpu=1ms"), ["offcpu=1ms"]);
        assert_eq!(canonical("offcpu=1500us"), ["offcpu=1500us"]);
        assert_eq!(canonical("offcpu=2s"), ["offcpu=2s"]);
        assert_eq!(canonical("unwind=fp"), ["unwind=fp"]);
        assert!(canonical("unwind=tables").is_empty());
        let bad = parse_stack_arg("unwind=dwarf").expect_err("not an unwinder");
        assert!(bad.contains("`tables` or `fp`"), "{bad}");
    }

    /// Bad kinds, rates and missing events are errors naming the argument.
    #[test]
    fn stack_kinds_reject() {
        for text in [
            "stack",
            "timer=0hz",
            "timer=100",
            "timer=fast",
            "timer=99hz,dither=0",
            "timer=99hz,dither=17",
            "timer=99hz,dither=x",
            "timer=99hz,jitter=4",
            "timer=50000hz,dither=4",
            "timer=,dither=4",
            "timer=0ms",
            "timer=0ns",
            "timer=9us",
            "timer=40us,dither=8",
            "timer=10xs",
            "pmu",
            "pmu=",
            "pmu=x@",
            "offcpu=0ms",
            "offcpu=soon",
            "offcpu=-1",
            "offcpu=5",
            "offcpu=",
        ] {
            let error = parse_stack_arg(text).unwrap_err();
            assert!(error.contains(&format!("`{text}`")), "{error}");
        }
    }

    /// A rate or period past the kernel's limit is refused before dithering
    /// multiplies it (`u64::MAX` Hz dithered overflowed); dithering may not
    /// take a rate within the limit past it either.
    #[test]
    fn timer_rates_past_the_limit() {
        for text in [
            "18446744073709551615hz,dither=2",
            "18446744073709551615hz",
            "100001hz",
            "9999ns,dither=2",
        ] {
            let rate = text.split(',').next().unwrap();
            assert_eq!(
                parse_timer_rate(text),
                Err(format!(
                    "`{rate}` samples faster than the kernel's perf_event_max_sample_rate \
                     (100000 Hz)"
                ))
            );
        }
        assert_eq!(
            parse_timer_rate("100000hz,dither=2"),
            Err(
                "`100000hz` dithered 2 times ticks at 200000 Hz, over the kernel's \
                 perf_event_max_sample_rate (100000 Hz)"
                    .into()
            )
        );
        assert!(parse_timer_rate("100000hz").is_ok());
        assert!(parse_timer_rate("10us").is_ok());
    }

    /// Repeated kinds merge; a later timer rate wins.
    #[test]
    fn stack_kinds_merge() {
        let args: Vec<Vec<StackKind>> = ["", "timer=50hz", "offcpu", "waker"]
            .iter()
            .map(|t| parse_stack_arg(t).unwrap())
            .collect();
        let kinds: Vec<String> = stack_kinds(&args).iter().map(ToString::to_string).collect();
        assert_eq!(kinds, ["timer=50hz", "offcpu", "waker"]);
    }

    /// Filters print back as the arguments that make them.
    #[test]
    fn filter_arguments() {
        let filter = TaskFilter {
            pids: vec![1, 2],
            no_names: vec!["kworker*".into()],
            tids: vec![7],
            idle: Some(false),
            kthread: Some(true),
            ..TaskFilter::default()
        };
        assert_eq!(
            filter_args(&filter),
            [
                "-p 1",
                "-p 2",
                "--tid 7",
                "-N kworker*",
                "--no-idle",
                "--kthread"
            ]
        );
        assert!(filter_args(&TaskFilter::default()).is_empty());
    }
}
