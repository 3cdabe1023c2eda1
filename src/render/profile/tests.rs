use super::*;
use crate::frontend::options::TaskFilter;
use crate::render::filter::{Filter, TaskSelector};
use crate::render::source::FakeCapture;
use crate::render::system_fixture::{MS, US, system};

fn options(profile: &str) -> ProfileOptions {
    ProfileOptions {
        profile: Some(profile.to_owned()),
        ..ProfileOptions::default()
    }
}

fn build(source: &dyn CaptureSource, filter: Filter, options: &ProfileOptions) -> Profile {
    Profile::build(&Capture::test(source, filter), options).expect("a profile")
}

/// The folded lines of `tid`'s samples.
fn folded_of(source: &dyn CaptureSource, profile: &Profile, tid: u32) -> Vec<String> {
    let folded = profile.fold(source, &ProfileOptions::default(), |key| {
        source.thread(key.thread).tid == tid
    });
    folded.to_text().lines().map(str::to_owned).collect()
}

fn only_pid(pid: u32) -> Filter {
    let filter = TaskFilter {
        pids: vec![pid],
        ..TaskFilter::default()
    };
    Filter {
        tasks: vec![TaskSelector::new(&filter).expect("a filter")],
        ..Filter::default()
    }
}

/// A wall-clock profile has each thread's timer samples on-CPU and its
/// off-CPU intervals (the last one still open at the window's end) under
/// the stack of their switch-out.
#[test]
fn wall_clock_splits_on_and_off_cpu() {
    let (capture, _) = system();
    let profile = build(&capture, Filter::default(), &options("wall"));
    assert_eq!(
        folded_of(&capture, &profile, 300),
        [
            format!("sleeper-300/300;main_[c] {}", 100 * MS),
            format!("sleeper-300/300;main_[o] {}", 9 * 50 * MS + 140 * MS),
        ]
    );
    assert_eq!(
        folded_of(&capture, &profile, 400),
        [format!("spinner-400/400;main_[o] {}", 9 * MS + 90 * MS)]
    );
    assert_eq!(profile.total(0), 10, "timer samples");
    assert_eq!(profile.total(1), 100 * MS);
    assert_eq!(profile.total(3), profile.total(1) + profile.total(2));
}

/// `--cpu` keeps what happened on those CPUs: CPU 0's sleeper and spinner,
/// samples and off-CPU time alike, and nothing of CPU 1's ping and pong.
#[test]
fn cpu_list_keeps_the_samples_of_those_cpus() {
    let (capture, t) = system();
    let on = |cpus: &[u32]| {
        let options = ProfileOptions {
            cpus: Some(cpus.to_vec()),
            ..options("wall")
        };
        build(&capture, Filter::default(), &options)
    };
    let all = build(&capture, Filter::default(), &options("wall"));
    let cpu0 = on(&[0]);
    for tid in [300, 400] {
        assert_eq!(
            folded_of(&capture, &cpu0, tid),
            folded_of(&capture, &all, tid)
        );
    }
    let threads: Vec<ThreadId> = on(&[1])
        .threads(&capture)
        .iter()
        .map(|&(_, id)| id)
        .collect();
    assert!(
        threads.contains(&t.ping) && threads.contains(&t.pong),
        "{threads:?}"
    );
    assert!(
        !threads.contains(&t.sleeper) && !threads.contains(&t.spinner),
        "{threads:?}"
    );
    assert_eq!(on(&[1]).total(0), 0, "no timer sample on CPU 1");
}

/// `--min-block` takes the stack from shorter intervals, not their time.
#[test]
fn min_block_keeps_the_time_of_short_blocks() {
    let (capture, _) = system();
    let options = ProfileOptions {
        min_block_ns: 2 * MS,
        ..options("offcpu")
    };
    let profile = build(&capture, Filter::default(), &options);
    assert_eq!(
        folded_of(&capture, &profile, 400),
        [
            format!("spinner-400/400;[no stack: block < 2ms] {}", 9 * MS),
            format!("spinner-400/400;main {}", 90 * MS),
        ]
    );
}

/// Wake-up profiles weigh the wait for a CPU: 10 µs per wake-up of the
/// sleeper, the whole interval of the preempted spinner.
#[test]
fn wakeup_weighs_the_wait() {
    let (capture, _) = system();
    let profile = build(&capture, Filter::default(), &options("wakeup"));
    assert_eq!(
        folded_of(&capture, &profile, 300),
        [format!("sleeper-300/300;main {}", 9 * 10 * US)]
    );
    assert_eq!(
        folded_of(&capture, &profile, 400),
        [format!("spinner-400/400;main {}", 99 * MS)]
    );
}

/// Task filters and the replay window select samples; each thread is named
/// by its latest identity.
#[test]
fn follows_filters_and_window() {
    let (capture, t) = system();
    let profile = build(&capture, only_pid(300), &options("wall"));
    assert_eq!(profile.threads(&capture), [(300, t.sleeper)]);
    let first_100ms = Filter {
        end_ns: Some(100 * MS),
        ..only_pid(300)
    };
    let profile = build(&capture, first_100ms, &options("wall"));
    assert_eq!(profile.total(1), 2 * 10 * MS, "two samples in 100 ms");
    assert_eq!(profile.window.end_ns, 100 * MS);
    assert_eq!(
        profile.total(2),
        50 * MS + 48 * MS,
        "one block and the open one"
    );
}

/// A record profile weighs each event by a field, or counts them.
#[test]
fn records_by_field() {
    let capture = FakeCapture::sample();
    let size = ProfileOptions {
        weight: Some("size".into()),
        fold: FoldOptions {
            annotate: false,
            delimiter: false,
            thread_frame: true,
        },
        ..options("malloc")
    };
    let profile = build(&capture, Filter::default(), &size);
    let folded = profile.fold(&capture, &size, |_| true).to_text();
    assert_eq!(
        folded,
        "app-100/100;func;outer;inner;do_sys_open 192\n\
         ba\u{fffd}sh-200/200;[libbar.so+0x1234];[unknown];[unknown] 1\n"
    );
    let count = build(&capture, Filter::default(), &options("malloc"));
    assert_eq!(count.total(count.spec.weight), 3);
}

/// An empty selection is an error, not an empty file.
#[test]
fn empty_profiles_are_errors() {
    let (capture, _) = system();
    let error = Profile::build(&Capture::test(&capture, only_pid(9999)), &options("cpu"))
        .expect_err("nothing selected");
    assert_eq!(
        error.chain(),
        "the cpu profile is empty: nothing in the window for the selected tasks"
    );
}

/// A capture recorded with `-S offcpu=DUR` names its blocks without a
/// stack by that threshold when shorter, `[no stack]` when not; the time of
/// both counts.
#[test]
fn capture_threshold_names_short_blocks() {
    let (mut c, _) = system();
    c.info.settings.stacks = vec!["offcpu=20ms".into()];
    for event in &mut c.events {
        event.stack = None;
    }
    let profile = build(&c, Filter::default(), &options("offcpu"));
    assert_eq!(profile.min_block_ns, 20 * MS);
    assert_eq!(
        folded_of(&c, &profile, 400),
        [
            format!("spinner-400/400;[no stack: block < 20ms] {}", 9 * MS),
            format!("spinner-400/400;[no stack] {}", 90 * MS),
        ]
    );
}
