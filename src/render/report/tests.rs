use super::*;
use crate::render::filter::Filter;
use crate::render::system_fixture::{MS, hostile, system};

fn report(options: ReportOptions) -> ReportData {
    let (capture, _) = system();
    ReportData::of(&Capture::test(&capture, Filter::default()), &options).expect("a report")
}

/// The text report of the fixture: header, processes, threads, functions.
#[test]
fn text_report() {
    insta::assert_snapshot!(text::render(&report(ReportOptions::default())));
}

/// Rows sort by the key asked for and are cut to the top N; processes sum
/// their threads.
#[test]
fn sorts_and_cuts() {
    let by_offcpu = report(ReportOptions {
        sort: SortKey::OffCpu,
        top: 2,
    });
    let tids: Vec<Option<u32>> = by_offcpu.threads.iter().map(|r| r.tid).collect();
    assert_eq!(
        tids,
        [Some(500), Some(501)],
        "ping and pong, runnable to the end"
    );
    assert_eq!(by_offcpu.thread_count, 6);
    let by_name = report(ReportOptions {
        sort: SortKey::Name,
        top: 0,
    });
    let names: Vec<&str> = (by_name.threads.iter())
        .filter_map(|r| r.thread.as_deref())
        .collect();
    assert_eq!(
        names,
        ["child", "kworker/1:0", "ping", "pong", "sleeper", "spinner"]
    );
    let pingpong = by_name
        .processes
        .iter()
        .find(|p| p.pid == 500)
        .expect("pingpong");
    let ping_pong: Vec<&Row> = (by_name.threads.iter()).filter(|r| r.pid == 500).collect();
    assert_eq!(pingpong.threads, 2);
    assert_eq!(
        pingpong.oncpu_ns,
        ping_pong[0].oncpu_ns + ping_pong[1].oncpu_ns
    );
    assert_eq!(
        pingpong.wakeups,
        ping_pong[0].wakeups + ping_pong[1].wakeups
    );
}

/// The JSON form carries the same numbers, PMU totals by counter.
#[test]
fn json_rows() {
    let data = report(ReportOptions::default());
    let json = serde_json::to_value(&data).expect("serializes");
    let sleeper = (json["threads"].as_array().expect("threads").iter())
        .find(|t| t["tid"] == 300)
        .expect("the sleeper");
    assert_eq!(sleeper["oncpu_ns"], 10 * MS);
    assert_eq!(sleeper["samples"], 10);
    assert_eq!(sleeper["coverage"], 1.0);
    assert_eq!(sleeper["pmu"]["cpu-cycles"], 20 * MS);
    assert_eq!(json["functions"][0]["function"], "main");
    // The sleeper's 10 samples, all in main, stand for its 10 ms on a CPU.
    assert_eq!(json["functions"][0]["self_ns"], 10 * MS);
    assert_eq!(json["offcpu_stacks"], "every block");
    // the sleeper's timer stacks: one kernel walk, then nine table walks
    let walks = &json["user_stacks"];
    assert_eq!(walks.as_array().map(Vec::len), Some(2), "{walks}");
    assert_eq!(walks[0]["unwinder"], "table");
    assert_eq!(walks[0]["ending"], "outermost");
    assert_eq!(walks[0]["events"], 9);
    assert_eq!(walks[1]["unwinder"], "kernel-walk");
    assert_eq!(walks[1]["ending"], serde_json::Value::Null);
    assert_eq!(walks[1]["events"], 1);
    assert_eq!(json["kernel_stacks_truncated"], 1);
}

/// Sort keys parse by name, and an unknown one lists them.
#[test]
fn sort_keys() {
    assert_eq!(SortKey::parse("wakeup"), Ok(SortKey::Wakeup));
    let error = SortKey::parse("cpu").expect_err("not a key");
    assert!(
        error.starts_with("unknown sort key `cpu` (keys: oncpu, offcpu,"),
        "{error}"
    );
}

/// Events found missing (a switch the kernel never delivered) are said in
/// the header with the time they left unknown; a capture without any says
/// nothing.
#[test]
fn missing_events_are_said() {
    let mut data = report(ReportOptions::default());
    assert_eq!(data.missing_events.anomalies, 0);
    assert!(!text::render(&data).contains("\nmissing"));
    data.missing_events = MissingEvents {
        anomalies: 3,
        threads: 1,
        unknown_ns: 144 * MS,
    };
    let text = text::render(&data);
    let line = text.lines().find(|l| l.starts_with("missing"));
    assert_eq!(
        line.map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")),
        Some("missing 3 scheduler events (1 threads: 144.0 ms of their time unknown)".into()),
        "{text}"
    );
}

/// A hostile capture's report: its processes' sums and the rows sorted by
/// on- and off-CPU time saturate.
#[test]
fn report_of_a_hostile_capture_saturates() {
    let capture = hostile();
    let options = ReportOptions {
        sort: SortKey::Total,
        top: 0,
    };
    let data =
        ReportData::of(&Capture::test(&capture, Filter::default()), &options).expect("a report");
    let pool = data.processes.iter().find(|p| p.pid == 600).expect("pool");
    assert_eq!(pool.threads, 2);
    assert_eq!((pool.oncpu_ns, pool.lifetime_ns), (u64::MAX, u64::MAX));
    assert_eq!(pool.pmu["cpu-cycles"], u64::MAX);
    let sleeper = data.threads.iter().find(|t| t.tid == Some(700));
    let sleeper = sleeper.expect("the sleeper");
    assert_eq!((sleeper.offcpu_ns, sleeper.coverage), (u64::MAX, 1.0));
    assert!(text::render(&data).contains("pool"));
}
