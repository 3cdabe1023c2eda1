//! The built-in trackers as sources for the compiler: the `probes/*.wp`
//! scripts of the enabled features, plus the samplers of `-S timer` and
//! `-S pmu=EVENT@RATE`, whose one-line scripts are generated here because
//! their rate and event come from the command line.

use crate::capture::model::RecordOrigin;
use crate::driver::Source;
use crate::tracking::Tracking;
use crate::tracking::options::{Feature, StackKind, TimerEvery, TimerRate};
use crate::vocab::PerfSample;

/// The script of a feature's tracker.
fn script(feature: Feature) -> (&'static str, &'static str) {
    match feature {
        Feature::Sched => ("probes/sched.wp", include_str!("../../probes/sched.wp")),
        Feature::Wakeup => ("probes/wakeup.wp", include_str!("../../probes/wakeup.wp")),
        Feature::TaskLife => (
            "probes/task-life.wp",
            include_str!("../../probes/task-life.wp"),
        ),
        Feature::Hardirq => ("probes/hardirq.wp", include_str!("../../probes/hardirq.wp")),
        Feature::Softirq => ("probes/softirq.wp", include_str!("../../probes/softirq.wp")),
        Feature::Wq => ("probes/wq.wp", include_str!("../../probes/wq.wp")),
    }
}

/// The tracker sources `tracking` asks for; every record they define has
/// origin `Tracker`.
pub fn sources(tracking: &Tracking) -> Result<Vec<Source>, String> {
    let mut sources: Vec<Source> = tracking
        .features
        .iter()
        .map(|&feature| {
            let (name, text) = script(feature);
            Source {
                name: name.into(),
                text: text.into(),
                origin: RecordOrigin::Tracker,
            }
        })
        .collect();
    for kind in &tracking.stacks {
        let text = match kind {
            StackKind::Timer(rate) => timer_sampler(*rate),
            StackKind::Pmu { event, rate } => pmu_sampler(event, *rate),
            StackKind::Offcpu {
                min_block_ns: Some(_),
            } if tracking.features.contains(&Feature::Sched) => PENDING_STACKS.into(),
            _ => continue,
        };
        sources.push(Source {
            name: format!("<-S {kind}>"),
            text,
            origin: RecordOrigin::Tracker,
        });
    }
    Ok(sources)
}

/// `-S timer=Nhz|PERIOD[,dither=K]`: a dithered timer ticks K times as
/// fast and keeps a tick at random with probability 1/K, before anything
/// else. A period is the `cpu-clock` event's count of nanoseconds (the
/// event `profile:` probes open).
fn timer_sampler(rate: TimerRate) -> String {
    let probe = match rate.ticks() {
        TimerEvery::Hz(hz) => format!("profile:hz:{hz}"),
        TimerEvery::PeriodNs(ns) => format!("software:cpu-clock:{ns}"),
    };
    let keep = match rate.dither {
        1 => String::new(),
        dither => format!("rand % {dither} == 0 && "),
    };
    format!("{probe} /{keep}selected(curtask)/ {{ record timer < stack > }}\n")
}

/// `-S offcpu=DUR`: the user stacks of long blocks in a system call, taken
/// at its return (`docs/unwinding.md`, "Off-CPU stacks"); the program
/// returns at once unless the task has such blocks. Where the kernel has
/// the task-work kfunc this block is no `sys_exit` program but a callback
/// the `sched_switch` program schedules (`codegen::lower_task_work`).
const PENDING_STACKS: &str =
    "tp_btf:sys_exit { record offcpu_pending < stack(offcpu, pending) > }\n";

/// The tracker of the command's process tree (`--only-command` with a
/// command), compiled after every other block on its attach points so that
/// a process leaves the tree after its last record.
pub fn command_tree() -> Source {
    Source {
        name: "probes/command-tree.wp".into(),
        text: include_str!("../../probes/command-tree.wp").into(),
        origin: RecordOrigin::Tracker,
    }
}

/// `-S pmu=EVENT@RATE`: `sw:NAME` is a software event, other names (and raw
/// `rXXXX` codes) hardware.
fn pmu_sampler(event: &str, rate: PerfSample) -> String {
    let probe = match event.strip_prefix("sw:") {
        Some(name) => format!("software:{name}"),
        None => format!("hardware:{event}"),
    };
    let rate = match rate {
        PerfSample::FrequencyHz(hz) => format!("{hz}hz"),
        PerfSample::Period(count) => count.to_string(),
    };
    format!("{probe}:{rate} /selected(curtask)/ {{ record pmu_sample < stack > }}\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracking::options::parse_stack_arg;
    use crate::vocab::{AttachPoint, PerfEvent};

    fn tracking(features: &[Feature], stacks: &[&str]) -> Tracking {
        Tracking {
            features: features.iter().copied().collect(),
            stacks: stacks
                .iter()
                .flat_map(|s| parse_stack_arg(s).unwrap())
                .collect(),
            ..Tracking::default()
        }
    }

    /// Features pick their scripts; samplers are generated from their rates.
    #[test]
    fn sources_follow_features_and_stacks() {
        let sources = sources(&tracking(
            &[Feature::Sched, Feature::Wq],
            &[
                "timer=99hz,dither=3",
                "offcpu",
                "pmu=sw:page-faults@10",
                "pmu=cycles@4000hz",
            ],
        ))
        .unwrap();
        let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "probes/sched.wp",
                "probes/wq.wp",
                "<-S timer=99hz,dither=3>",
                "<-S pmu=sw:page-faults@10>",
                "<-S pmu=cycles@4000hz>"
            ]
        );
        assert!(sources[1].text.contains("span wq"));
        assert_eq!(
            sources[2].text,
            "profile:hz:297 /rand % 3 == 0 && selected(curtask)/ { record timer < stack > }\n"
        );
        assert_eq!(
            sources[3].text,
            "software:page-faults:10 /selected(curtask)/ { record pmu_sample < stack > }\n"
        );
        assert_eq!(
            sources[4].text,
            "hardware:cycles:4000hz /selected(curtask)/ { record pmu_sample < stack > }\n"
        );
    }

    /// A timer period is the `cpu-clock` event's period in nanoseconds,
    /// divided among the dithered ticks.
    #[test]
    fn timer_periods_tick_the_cpu_clock() {
        let text = |stack: &str| sources(&tracking(&[], &[stack])).unwrap()[0].text.clone();
        assert_eq!(
            text("timer=10ms"),
            "software:cpu-clock:10000000 /selected(curtask)/ { record timer < stack > }\n"
        );
        assert_eq!(
            text("timer=1000003ns,dither=4"),
            "software:cpu-clock:250000 /rand % 4 == 0 && selected(curtask)/ \
             { record timer < stack > }\n"
        );
    }

    /// `-S offcpu=DUR` with the sched tracker adds the `sys_exit` probe of
    /// the deferred user stacks; without a threshold or without sched, none.
    #[test]
    fn offcpu_threshold_adds_the_pending_stacks_probe() {
        let names = |features: &[Feature], stacks: &[&str]| -> Vec<String> {
            let sources = sources(&tracking(features, stacks)).unwrap();
            sources.into_iter().map(|s| s.name).collect()
        };
        assert_eq!(
            names(&[Feature::Sched], &["offcpu=1ms"]),
            ["probes/sched.wp", "<-S offcpu=1ms>"]
        );
        assert_eq!(names(&[Feature::Sched], &["offcpu"]), ["probes/sched.wp"]);
        assert_eq!(names(&[Feature::Wq], &["offcpu=1ms"]), ["probes/wq.wp"]);
    }

    /// Where the kernel has the task-work kfunc, `-S offcpu=1ms` attaches no
    /// `sys_exit` program: the `sched_switch` program schedules the
    /// deferred stacks' callback (a kfunc call and a callback address);
    /// forced to `sys_exit`, it attaches one and calls no kfunc.
    #[test]
    fn offcpu_threshold_schedules_a_task_work_callback() {
        use crate::vocab::Environment;
        let env = crate::runtime::targets::environment::SystemEnvironment::default();
        let tracking = tracking(&[Feature::Sched], &["offcpu=1ms"]);
        let compile = |sys_exit: bool| {
            let mut options = tracking.compile_options().unwrap();
            options.offcpu_sys_exit = sys_exit;
            let sources = sources(&tracking).unwrap();
            let (_, compiled) = crate::driver::compile(&sources, &[], &env, &options)
                .unwrap_or_else(|e| panic!("{}", e.render()));
            compiled.programs
        };
        let attached = |programs: &[crate::codegen::program::BpfProgram]| -> Vec<String> {
            programs.iter().map(|p| p.probe.clone()).collect()
        };
        let names = crate::codegen::helpers::TASK_WORK_SCHEDULE_RESUME;
        let Some(kfunc) = names.iter().find_map(|name| env.kfunc_id(name)) else {
            println!("SKIPPED: this kernel has no bpf_task_work_schedule_resume kfunc");
            return;
        };
        // `call` with src_reg BPF_PSEUDO_KFUNC_CALL (2) and imm the kfunc's id.
        let calls = |programs: &[crate::codegen::program::BpfProgram]| {
            let call =
                |i: &u64| i & 0xff == 0x85 && (i >> 12) & 0xf == 2 && i >> 32 == u64::from(kfunc);
            (programs.iter().flat_map(|p| &p.insns))
                .filter(|i| call(i))
                .count()
        };
        let forced = compile(true);
        assert!(attached(&forced).contains(&"tp_btf:sys_exit".to_string()));
        assert_eq!(calls(&forced), 0, "no task work");
        let scheduled = compile(false);
        assert!(!attached(&scheduled).contains(&"tp_btf:sys_exit".to_string()));
        assert_eq!(calls(&scheduled), 1, "one place schedules the callback");
    }

    /// A raw code samples as a raw perf event, at the rate given.
    #[test]
    fn raw_pmu_sampling_is_a_raw_event() {
        let tracking = tracking(&[], &["pmu=r003c@4000hz"]);
        let sources = sources(&tracking).unwrap();
        let env = crate::frontend::fake_machine::FakeMachine;
        let (_, compiled) =
            crate::driver::compile(&sources, &[], &env, &tracking.compile_options().unwrap())
                .unwrap_or_else(|e| panic!("{}", e.render()));
        assert_eq!(
            compiled.programs[0].attach,
            AttachPoint::PerfEvent {
                event: PerfEvent {
                    type_: 4,
                    config: 0x3c
                },
                sample: PerfSample::FrequencyHz(4000),
                all_cpus: true,
            }
        );
    }

    /// Every tracker, alone and with the others, with and without stacks,
    /// compiles on this machine's kernel.
    #[test]
    fn every_tracker_combination_compiles() {
        let env = crate::runtime::targets::environment::SystemEnvironment::default();
        for mask in 1u32..(1 << Feature::ALL.len()) {
            let features: Vec<Feature> = Feature::ALL
                .into_iter()
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, f)| f)
                .collect();
            let all = ["", "waker", "pmu=sw:cpu-clock@1000"];
            for stacks in [&[][..], &all[..], &["offcpu=1ms"][..]] {
                let tracking = tracking(&features, stacks);
                let options = tracking.compile_options().unwrap();
                let sources = sources(&tracking).unwrap();
                if let Err(errors) = crate::driver::compile(&sources, &[], &env, &options) {
                    panic!("{features:?} {stacks:?}: {}", errors.render());
                }
            }
        }
    }

    /// The command-tree tracker compiles with every tracker and a filter
    /// of the command, on the real kernel's BTF; its map is the one the
    /// session fills, and is not printed at exit.
    #[test]
    fn command_tree_compiles_with_the_trackers() {
        let env = crate::runtime::targets::environment::SystemEnvironment::default();
        let tracking = tracking(&Feature::ALL, &["offcpu=1ms"]);
        let mut options = tracking.compile_options().unwrap();
        options.filter.command = true;
        options.filter.names.push("bench".into());
        let mut sources = sources(&tracking).unwrap();
        sources.push(command_tree());
        let (_, compiled) = crate::driver::compile(&sources, &[], &env, &options)
            .unwrap_or_else(|errors| panic!("{}", errors.render()));
        let tree = compiled.command_tree.expect("the command tree's map");
        let spec = &compiled.maps[tree.map.0 as usize];
        assert_eq!(spec.kind, crate::vocab::MapKind::Hash);
        assert!(spec.script_map.is_none(), "printed at exit");
        assert!(tree.key_size >= 4 && tree.value_size == 8, "{tree:?}");
    }
}
