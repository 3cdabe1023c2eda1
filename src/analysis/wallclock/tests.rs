use super::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn switch(
    ts_ns: u64,
    prev: Tid,
    reason: BlockReason,
    next: Tid,
    tag: &'static str,
) -> SchedEvent<&'static str> {
    SchedEvent::Switch {
        ts_ns,
        prev,
        reason,
        next,
        tag,
    }
}

fn run(
    window: Window,
    events: &[SchedEvent<&'static str>],
) -> (
    WallClockReport<&'static str>,
    Vec<OffCpuInterval<&'static str>>,
) {
    let mut clock = WallClock::new(window);
    let completed = events.iter().filter_map(|e| clock.feed(e)).collect();
    (clock.finish(), completed)
}

fn window(start_ns: u64, end_ns: u64) -> Window {
    Window { start_ns, end_ns }
}

/// A thread created at 0 spins, sleeps 100 ms, is preempted for 20 ms and
/// exits at 900 ms; every number computed by hand.
#[test]
fn accounts_a_threads_life() {
    use BlockReason::*;
    let events = [
        SchedEvent::WakeupNew { ts_ns: 0, tid: 10 },
        switch(50 * US, 1, Runnable, 10, "t1-preempted"),
        switch(300 * MS, 10, Sleeping, 0, "nanosleep"),
        SchedEvent::Sample {
            ts_ns: 310 * MS,
            tid: 10,
        },
        SchedEvent::Waking {
            ts_ns: 400 * MS,
            tid: 10,
        },
        switch(400 * MS + 10 * US, 0, Other, 10, "idle"),
        switch(500 * MS, 10, Runnable, 20, "preempted"),
        switch(520 * MS, 20, Sleeping, 10, "t20-sleep"),
        SchedEvent::Sample {
            ts_ns: 600 * MS,
            tid: 10,
        },
        SchedEvent::Exit {
            ts_ns: 900 * MS,
            tid: 10,
        },
        switch(900 * MS, 10, Dead, 0, "dead"),
    ];
    let (report, completed) = run(window(0, 1000 * MS), &events);
    let t = &report.threads[&10];
    assert_eq!(
        t.on_cpu_ns,
        300 * MS - 50 * US + 100 * MS - 10 * US + 380 * MS
    );
    assert_eq!(t.sleeping_ns, 100 * MS);
    assert_eq!(t.runnable_ns, 50 * US + 10 * US + 20 * MS);
    assert_eq!((t.uninterruptible_ns, t.other_ns, t.unknown_ns), (0, 0, 0));
    assert_eq!(t.lifetime_ns, 900 * MS);
    assert_eq!(t.coverage(), 1.0);
    assert_eq!((t.voluntary_switches, t.involuntary_switches), (2, 1));
    assert_eq!(t.samples, 2);
    assert_eq!(t.wakeup_latency.count(), 2);
    assert_eq!(t.wakeup_latency.min(), Some(10 * US));
    assert_eq!(t.wakeup_latency.max(), Some(50 * US));
    assert_eq!(t.anomalies, 0);

    assert_eq!(
        completed,
        [
            // Created runnable: no switch began the wait for its first run.
            OffCpuInterval {
                tid: 10,
                start_ns: 0,
                end_ns: 50 * US,
                reason: Runnable,
                runnable_ns: 50 * US,
                tag: None,
                complete: true,
            },
            OffCpuInterval {
                tid: 10,
                start_ns: 300 * MS,
                end_ns: 400 * MS + 10 * US,
                reason: Sleeping,
                runnable_ns: 10 * US,
                tag: Some("nanosleep"),
                complete: true,
            },
            OffCpuInterval {
                tid: 10,
                start_ns: 500 * MS,
                end_ns: 520 * MS,
                reason: Runnable,
                runnable_ns: 20 * MS,
                tag: Some("preempted"),
                complete: true,
            },
        ]
    );

    // Thread 20, first seen switching in at 500 ms: unknown before, then
    // 20 ms on-CPU and asleep to the end.
    let t20 = &report.threads[&20];
    assert_eq!(
        (t20.unknown_ns, t20.on_cpu_ns, t20.sleeping_ns),
        (500 * MS, 20 * MS, 480 * MS)
    );
    assert_eq!(t20.lifetime_ns, 1000 * MS);
    assert_eq!(t20.coverage(), 0.5);
    // Thread 1, first seen switching out: running since the window start.
    let t1 = &report.threads[&1];
    assert_eq!(
        (t1.on_cpu_ns, t1.runnable_ns),
        (50 * US, 1000 * MS - 50 * US)
    );
    assert_eq!(t1.coverage(), 1.0);
    assert!(
        !report.threads.contains_key(&0),
        "the idle task is not accounted"
    );

    let open: Vec<_> = report
        .open_intervals
        .iter()
        .map(|i| (i.tid, i.start_ns, i.end_ns, i.tag, i.complete))
        .collect();
    assert_eq!(
        open,
        [
            (1, 50 * US, 1000 * MS, Some("t1-preempted"), false),
            (20, 520 * MS, 1000 * MS, Some("t20-sleep"), false)
        ]
    );
}

/// Time outside the window is clipped; events before it still set state.
#[test]
fn clips_to_the_window() {
    let events = [
        switch(50, 5, BlockReason::Sleeping, 0, "before"),
        SchedEvent::Waking { ts_ns: 150, tid: 5 },
        switch(160, 0, BlockReason::Other, 5, "idle"),
        switch(250, 5, BlockReason::Sleeping, 0, "after"),
    ];
    let (report, completed) = run(window(100, 200), &events);
    let t = &report.threads[&5];
    assert_eq!((t.sleeping_ns, t.runnable_ns, t.on_cpu_ns), (50, 10, 40));
    assert_eq!((t.lifetime_ns, t.coverage()), (100, 1.0));
    assert_eq!(t.wakeup_latency.count(), 1);
    assert_eq!(
        (t.voluntary_switches, t.involuntary_switches),
        (0, 0),
        "switches outside"
    );
    assert_eq!(
        (
            completed[0].start_ns,
            completed[0].end_ns,
            completed[0].runnable_ns
        ),
        (100, 160, 10)
    );
    assert!(
        report.open_intervals.is_empty(),
        "the last block starts after the window"
    );
}

/// Uninterruptible sleep is its own bucket; a waking while runnable or
/// running changes nothing.
#[test]
fn uninterruptible_and_redundant_wakeups() {
    let events = [
        SchedEvent::WakeupNew { ts_ns: 0, tid: 3 },
        switch(0, 0, BlockReason::Other, 3, "idle"),
        SchedEvent::Waking { ts_ns: 5, tid: 3 },
        switch(10, 3, BlockReason::Uninterruptible, 0, "io"),
        SchedEvent::Waking { ts_ns: 40, tid: 3 },
        SchedEvent::Waking { ts_ns: 45, tid: 3 },
        switch(50, 0, BlockReason::Other, 3, "idle"),
        switch(60, 3, BlockReason::Runnable, 4, "preempt"),
        SchedEvent::Waking { ts_ns: 65, tid: 3 },
        switch(70, 4, BlockReason::Sleeping, 3, "t4"),
    ];
    let (report, _) = run(window(0, 100), &events);
    let t = &report.threads[&3];
    assert_eq!(t.uninterruptible_ns, 30);
    assert_eq!(t.runnable_ns, 10 + 10);
    assert_eq!(t.on_cpu_ns, 10 + 10 + 30);
    assert_eq!(
        t.wakeup_latency.count(),
        2,
        "the first run and the wake-up at 40"
    );
    assert_eq!(t.wakeup_latency.max(), Some(10));
    assert_eq!(t.coverage(), 1.0);
}

/// Contradicting events (a lost switch) become unknown time and anomalies.
#[test]
fn lost_events_are_anomalies() {
    let events = [
        switch(10, 0, BlockReason::Other, 8, "idle"),
        // The switch-out of 8 was lost: it switches in again.
        switch(30, 0, BlockReason::Other, 8, "idle"),
        switch(40, 8, BlockReason::Sleeping, 0, "sleep"),
        // Its switch-in was lost: it switches out again.
        switch(70, 8, BlockReason::Sleeping, 0, "sleep"),
    ];
    let (report, _) = run(window(0, 100), &events);
    let t = &report.threads[&8];
    assert_eq!(t.anomalies, 2);
    assert_eq!(t.unknown_ns, 10 + 20 + 30);
    assert_eq!((t.on_cpu_ns, t.sleeping_ns), (10, 30));
    assert_eq!(t.on_cpu_ns + t.off_cpu_ns() + t.unknown_ns, t.lifetime_ns);
}

/// A reused tid lives twice: lifetimes add up, the gap is not counted.
#[test]
fn reused_tid_lives_twice() {
    let events = [
        SchedEvent::WakeupNew { ts_ns: 0, tid: 9 },
        switch(0, 0, BlockReason::Other, 9, "idle"),
        SchedEvent::Exit { ts_ns: 20, tid: 9 },
        switch(20, 9, BlockReason::Sleeping, 0, "exit"),
        SchedEvent::WakeupNew { ts_ns: 50, tid: 9 },
        switch(55, 0, BlockReason::Other, 9, "idle"),
    ];
    let (report, _) = run(window(0, 100), &events);
    let t = &report.threads[&9];
    assert_eq!(t.lifetime_ns, 20 + 50);
    assert_eq!((t.on_cpu_ns, t.runnable_ns), (20 + 45, 5));
    assert_eq!(t.coverage(), 1.0);
}

/// State letters map to reasons; only runnable switches are involuntary.
#[test]
fn reasons_from_state_letters() {
    let cases = [
        ("R", BlockReason::Runnable),
        ("R+", BlockReason::Runnable),
        ("S", BlockReason::Sleeping),
        ("D", BlockReason::Uninterruptible),
        ("X", BlockReason::Dead),
        ("Z", BlockReason::Dead),
        ("T", BlockReason::Other),
        ("I", BlockReason::Other),
    ];
    for (letter, reason) in cases {
        assert_eq!(BlockReason::from_state_letter(letter), reason, "{letter}");
        assert_eq!(reason.voluntary(), reason != BlockReason::Runnable);
    }
}

/// A hostile capture's timestamps (any u64, restarting in every events
/// chunk) count the same long spans again: every time saturates, in every
/// state, and so do the sums of a thread's and of a process's times.
#[test]
fn long_spans_counted_twice_saturate() {
    use BlockReason::*;
    const LATE: u64 = u64::MAX - 1;
    let chunk = [
        // 10 runs from 0 to LATE and dies.
        switch(0, 0, Other, 10, "idle"),
        switch(LATE, 10, Dead, 0, "dead"),
        // 20 to 23 are off-CPU from 0 to LATE, each for another reason.
        switch(0, 20, Sleeping, 0, "sleep"),
        switch(0, 21, Uninterruptible, 0, "disk"),
        switch(0, 22, Other, 0, "stopped"),
        switch(0, 23, Runnable, 0, "preempted"),
        switch(LATE, 0, Other, 20, "idle"),
        switch(LATE, 0, Other, 21, "idle"),
        switch(LATE, 0, Other, 22, "idle"),
        switch(LATE, 0, Other, 23, "idle"),
        // 24 sleeps half of that time and is runnable the other half.
        switch(0, 24, Sleeping, 0, "sleep"),
        SchedEvent::Waking {
            ts_ns: 1 << 63,
            tid: 24,
        },
        switch(LATE, 0, Other, 24, "idle"),
        // 30 switches in at LATE and at 0, never out: the time between its
        // switch-ins is unknown (events were lost).
        switch(LATE, 0, Other, 30, "idle"),
        switch(0, 0, Other, 30, "idle"),
        // 40 is first seen woken at LATE.
        SchedEvent::Waking {
            ts_ns: LATE,
            tid: 40,
        },
    ];
    let mut events = [chunk, chunk].concat();
    // 10 runs again to the window's end.
    events.push(switch(0, 0, Other, 10, "idle"));
    let (report, _) = run(window(0, u64::MAX), &events);
    let t = |tid: Tid| &report.threads[&tid];
    assert_eq!((t(10).on_cpu_ns, t(10).lifetime_ns), (u64::MAX, u64::MAX));
    assert_eq!(t(20).sleeping_ns, u64::MAX);
    assert_eq!(t(21).uninterruptible_ns, u64::MAX);
    assert_eq!(t(22).other_ns, u64::MAX);
    assert_eq!(t(23).runnable_ns, u64::MAX);
    assert_eq!(
        (t(24).sleeping_ns, t(24).runnable_ns),
        (u64::MAX, 2 * (LATE - (1 << 63)))
    );
    assert_eq!(t(24).off_cpu_ns(), u64::MAX);
    assert_eq!((t(24).known_ns(), t(24).coverage()), (u64::MAX, 1.0));
    assert_eq!(t(30).unknown_ns, u64::MAX);
    assert_eq!(t(40).unknown_ns, LATE);
    let mut all = ThreadTimes::default();
    for times in report.threads.values() {
        all.merge(times);
    }
    assert_eq!((all.on_cpu_ns, all.lifetime_ns), (u64::MAX, u64::MAX));
    assert_eq!((all.off_cpu_ns(), all.coverage()), (u64::MAX, 1.0));
    assert_eq!(
        all.anomalies,
        report.threads.values().map(|t| t.anomalies).sum::<u64>()
    );
}
