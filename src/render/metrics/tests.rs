use super::*;
use crate::analysis::gate::Dimension;
use crate::render::Captures;
use crate::render::Render;
use crate::render::filter::Filter;
use crate::render::output::Destination;
use crate::render::source::{CaptureSource, FakeCapture};
use crate::render::system_fixture::{MS, US, hostile, system};

fn measured(source: &dyn CaptureSource) -> Measurement {
    let (measurement, read) = measure(&Capture::test(source, Filter::default()));
    read.expect("the fixture reads");
    measurement
}

/// The value of the metric named `name`.
#[track_caller]
fn value(metrics: &[Metric], name: &str) -> f64 {
    let metric = metrics.iter().find(|m| m.name.to_string() == name);
    metric.unwrap_or_else(|| panic!("no metric {name}")).value
}

/// Per-thread times and counters of the fixture's known schedule.
#[test]
fn thread_metrics_follow_the_schedule() {
    let (capture, _) = system();
    let measurement = measured(&capture);
    let metrics = measurement.metrics(&capture);
    let ms = |n: u64| (n * MS) as f64;
    assert_eq!(value(&metrics, "thread:sleeper.oncpu"), ms(10));
    assert_eq!(
        value(&metrics, "thread:sleeper.sleeping"),
        (9 * (50 * MS - 10 * US) + 140 * MS) as f64
    );
    assert_eq!(value(&metrics, "thread:sleeper.runnable"), (90 * US) as f64);
    assert_eq!(value(&metrics, "thread:sleeper.coverage"), 1.0);
    let p50 = value(&metrics, "thread:sleeper.wakeup.p50");
    assert!((p50 - 10_000.0).abs() <= 40.0, "{p50}");
    assert_eq!(value(&metrics, "thread:sleeper.voluntary"), 10.0);
    assert_eq!(value(&metrics, "thread:sleeper.samples"), 10.0);
    assert_eq!(
        value(&metrics, "thread:sleeper.pmu.cpu-cycles"),
        2.0 * ms(10)
    );
    assert_eq!(value(&metrics, "thread:spinner.oncpu"), ms(500));
    assert_eq!(value(&metrics, "thread:spinner.runnable"), ms(99));
    assert_eq!(value(&metrics, "thread:spinner.involuntary"), 10.0);
    assert_eq!(value(&metrics, "thread:spinner.coverage"), 599.0 / 600.0);
    assert_eq!(
        value(&metrics, "thread:spinner.pmu.cpu-cycles"),
        2.0 * ms(500)
    );
    assert_eq!(
        value(&metrics, "process:pingpong.oncpu"),
        value(&metrics, "thread:ping.oncpu") + value(&metrics, "thread:pong.oncpu")
    );
}

/// Spans, records, functions and the system have their metrics, with
/// dimensions.
#[test]
fn record_function_and_system_metrics() {
    let (mut capture, _) = system();
    let metrics = measured(&capture).metrics(&capture);
    assert_eq!(value(&metrics, "span:hardirq.count"), 1.0);
    let p99 = value(&metrics, "span:softirq.p99");
    assert!((p99 - 10_000.0).abs() <= 40.0, "{p99}");
    assert_eq!(value(&metrics, "record:timer.count"), 10.0);
    assert_eq!(value(&metrics, "record:timer.rate"), 10.0 / 0.6);
    // Every sample is the sleeper's, in main: its 10 ms on a CPU (not 10
    // samples × the 10 ms period).
    assert_eq!(value(&metrics, "func:main.self"), (10 * MS) as f64);
    assert_eq!(value(&metrics, "func:main.total"), (10 * MS) as f64);
    assert_eq!(value(&metrics, "cpu.context_switches"), 35.0);
    assert!(
        metrics.iter().all(|m| m.name.to_string() != "cpu.idle"),
        "filtered capture"
    );
    capture.info.settings.filters.clear();
    let metrics = measured(&capture).metrics(&capture);
    assert_eq!(
        value(&metrics, "cpu.idle"),
        (90 * MS + 900 * US + 597_790 * US) as f64
    );
    let dimension = |name: &str| {
        metrics
            .iter()
            .find(|m| m.name.to_string() == name)
            .map(|m| m.dimension)
    };
    assert_eq!(dimension("span:softirq.p99"), Some(Dimension::Time));
    assert_eq!(dimension("thread:ping.coverage"), Some(Dimension::Ratio));
}

/// A script's numeric fields are summed and averaged; sizes are bytes.
#[test]
fn field_sums_of_script_records() {
    let capture = FakeCapture::sample();
    let metrics = measured(&capture).metrics(&capture);
    assert_eq!(value(&metrics, "record:malloc.size.sum"), 193.0);
    assert_eq!(value(&metrics, "record:malloc.size.mean"), 193.0 / 3.0);
    assert_eq!(value(&metrics, "span:lock.ret.sum"), -5.0);
    assert_eq!(value(&metrics, "span:lock.p50"), 123_000.0);
    let size = metrics
        .iter()
        .find(|m| m.name.to_string() == "record:malloc.size.sum");
    assert_eq!(size.map(|m| m.unit), Some("bytes"));
}

/// `--metrics` writes the selected metrics as JSON, and says when a
/// selection matches nothing.
#[test]
fn writes_selected_metrics_as_json() {
    let capture = FakeCapture::sample();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("m.json");
    let select = |globs: &[&str]| Metrics {
        options: MetricsOptions {
            select: globs
                .iter()
                .map(|g| glob::Pattern::new(g).expect("a glob"))
                .collect(),
        },
    };
    let captures = Captures::one(Capture::test(&capture, Filter::default()));
    (select(&["record:malloc.*"]).render(&captures, &Destination::File(path.clone())))
        .expect("written");
    let text = std::fs::read_to_string(&path).expect("read back");
    insta::assert_snapshot!(text);
    let error = select(&["nothing*"])
        .render(&captures, &Destination::File(path))
        .expect_err("no match");
    assert_eq!(
        error.chain(),
        "--metrics has no metric matching --metric nothing* in test.data"
    );
}

/// Field names tell sizes and durations from plain numbers.
#[test]
fn field_dimensions_from_names() {
    assert_eq!(field_dimension("size"), Dimension::Bytes);
    assert_eq!(field_dimension("alloc_bytes"), Dimension::Bytes);
    assert_eq!(field_dimension("wait_ns"), Dimension::Time);
    assert_eq!(field_dimension("sizes"), Dimension::Number);
}

/// Every sum over a hostile capture saturates: span time, idle time over
/// CPUs, a thread's counter total, a function's time (its samples standing
/// for a thread's on-CPU time, or for an enormous timer period), and the
/// metrics adding threads up.
#[test]
fn sums_of_a_hostile_capture_saturate() {
    let capture = hostile();
    let m = measured(&capture);
    let wq = capture.schemas.iter().position(|s| s.name == "wq");
    assert_eq!(m.records[wq.expect("a tracker")].span_ns, u64::MAX);
    assert_eq!(m.system.idle_ns, Some(u64::MAX));
    assert_eq!(m.system.oncpu_ns, Some(u64::MAX));
    assert_eq!(m.threads[&600].pmu, [u64::MAX]);
    assert_eq!(m.threads[&601].pmu, [u64::MAX]);
    let main = m
        .functions
        .iter()
        .find(|f| f.name == "main")
        .expect("sampled");
    assert_eq!(
        (main.self_ns, main.total_ns),
        (Some(u64::MAX), Some(u64::MAX))
    );
    let metrics = m.metrics(&capture);
    for name in [
        "thread:worker.pmu.cpu-cycles",
        "process:pool.oncpu",
        "thread:sleeper.sleeping",
        "thread:sleeper.offcpu",
        "cpu.idle",
        "func:main.self",
    ] {
        assert_eq!(value(&metrics, name), u64::MAX as f64, "{name}");
    }
    assert_eq!(value(&metrics, "thread:sleeper.coverage"), 1.0);
}
