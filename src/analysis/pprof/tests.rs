use std::io::Read;
use std::process::Command;

use flate2::read::GzDecoder;

use super::*;

const TYPES: [SampleType<'static>; 3] = [
    SampleType {
        name: "samples",
        unit: "count",
    },
    SampleType {
        name: "cpu",
        unit: "nanoseconds",
    },
    SampleType {
        name: "off_cpu",
        unit: "nanoseconds",
    },
];

const APP: Module<'static> = Module::File {
    path: "/usr/bin/app",
    build_id: Some(&[0xde, 0xad, 0xbe, 0xef, 0x01]),
};

fn frame(function: &'static str, module: Module<'static>, address: u64) -> Frame<'static> {
    Frame {
        function: Some(function),
        file: None,
        line: None,
        inlined: &[],
        module,
        address,
    }
}

/// A wall-clock profile: 300 ms spinning (30 samples of 10 ms) and 700 ms
/// asleep, on one thread, plus one unresolved frame.
fn wall_profile() -> ProfileBuilder {
    let mut builder = ProfileBuilder::new(&TYPES);
    builder.set_time(1_700_000_000_000_000_000, 1_000_000_000);
    builder.set_period(TYPES[1], 10_000_000);
    builder.set_default_sample_type("cpu");
    builder.add_comment("wprof.data");
    let main = builder.location(&frame("main", APP, 0x1100));
    let spin = builder.location(&Frame {
        file: Some("src/spin.c"),
        line: Some(12),
        inlined: &["spin_inner", "spin_leaf"],
        ..frame("spin_here", APP, 0x1234)
    });
    let libc = Module::File {
        path: "/lib/x86_64-linux-gnu/libc.so.6",
        build_id: None,
    };
    let sleep = builder.location(&frame("clock_nanosleep", libc, 0xe_0000));
    let kernel = builder.location(&frame(
        "do_nanosleep",
        Module::Kernel,
        0xffff_ffff_8100_0000,
    ));
    let unknown = builder.location(&Frame {
        function: None,
        module: Module::Unknown,
        ..frame("", Module::Unknown, 0x7f00_0000_1234)
    });
    let labels = [
        Label::str("thread", "worker"),
        Label::str("process", "app"),
        Label::num("tid", 42),
    ];
    for _ in 0..30 {
        builder
            .add_sample(&[spin, main], &[1, 10_000_000, 0], &labels)
            .expect("three values");
    }
    builder
        .add_sample(&[kernel, sleep, main], &[0, 0, 700_000_000], &labels)
        .expect("three values");
    builder
        .add_sample(
            &[unknown, main],
            &[1, 10_000_000, 0],
            &[Label::num("tid", 7)],
        )
        .expect("three values");
    builder
}

fn decode(bytes: &[u8]) -> proto::Profile {
    let mut raw = Vec::new();
    GzDecoder::new(bytes)
        .read_to_end(&mut raw)
        .expect("the output is gzip");
    proto::Profile::decode(raw.as_slice()).expect("the output is a profile")
}

fn written(builder: ProfileBuilder) -> Vec<u8> {
    let mut out = Vec::new();
    builder.write(&mut out).expect("writes to memory");
    out
}

/// The written file is gzip of a profile with merged samples, an empty
/// first string, and ids that resolve.
#[test]
fn writes_a_consistent_profile() {
    let builder = wall_profile();
    assert_eq!(builder.totals(), [31, 310_000_000, 700_000_000]);
    let profile = decode(&written(builder));
    let string = |id: i64| profile.string_table[id as usize].as_str();
    assert_eq!(string(0), "");
    assert_eq!(profile.sample.len(), 3, "30 identical samples merged");
    assert_eq!(profile.sample[0].value, [30, 300_000_000, 0]);
    let types: Vec<_> = profile
        .sample_type
        .iter()
        .map(|t| format!("{}/{}", string(t.r#type), string(t.unit)))
        .collect();
    assert_eq!(
        types,
        ["samples/count", "cpu/nanoseconds", "off_cpu/nanoseconds"]
    );
    assert_eq!(string(profile.default_sample_type), "cpu");
    assert_eq!(profile.period, 10_000_000);
    assert_eq!(string(profile.comment[0]), "wprof.data");
    for sample in &profile.sample {
        for id in &sample.location_id {
            assert!(profile.location.iter().any(|l| l.id == *id));
        }
    }
    let labels: Vec<_> = profile.sample[0]
        .label
        .iter()
        .map(|l| (string(l.key), string(l.str), l.num))
        .collect();
    assert_eq!(
        labels,
        [
            ("thread", "worker", 0),
            ("process", "app", 0),
            ("tid", "", 42)
        ]
    );
}

/// Inlined functions come innermost first with the instruction's line; the
/// real function is last.
#[test]
fn inlined_lines_innermost_first() {
    let profile = decode(&written(wall_profile()));
    let string = |id: i64| profile.string_table[id as usize].as_str();
    let function = |id: u64| &profile.function[id as usize - 1];
    let spin = profile
        .location
        .iter()
        .find(|l| l.address == 0x1234)
        .expect("the spin location");
    let chain: Vec<_> = spin
        .line
        .iter()
        .map(|line| (string(function(line.function_id).name), line.line))
        .collect();
    assert_eq!(
        chain,
        [("spin_leaf", 12), ("spin_inner", 0), ("spin_here", 0)]
    );
    assert_eq!(
        string(function(spin.line[0].function_id).filename),
        "src/spin.c"
    );
    let unknown = profile
        .location
        .iter()
        .find(|l| l.address == 0x7f00_0000_1234)
        .expect("the unknown location");
    assert_eq!((unknown.mapping_id, unknown.line.len()), (0, 0));
}

/// Mappings carry path, hex build id, the address range seen, and what
/// symbol information they have.
#[test]
fn mappings_describe_modules() {
    let profile = decode(&written(wall_profile()));
    let string = |id: i64| profile.string_table[id as usize].as_str();
    let app = profile
        .mapping
        .iter()
        .find(|m| string(m.filename) == "/usr/bin/app")
        .expect("the app mapping");
    assert_eq!(string(app.build_id), "deadbeef01");
    assert_eq!(
        (app.memory_start, app.memory_limit, app.file_offset),
        (0x1100, 0x1235, 0x1100)
    );
    assert!(
        app.has_functions && app.has_filenames && app.has_line_numbers && app.has_inline_frames
    );
    let kernel = profile
        .mapping
        .iter()
        .find(|m| string(m.filename) == tables::KERNEL_MAPPING)
        .expect("the kernel mapping");
    assert_eq!((kernel.file_offset, kernel.build_id), (0, 0));
    assert!(kernel.has_functions && !kernel.has_line_numbers);
}

/// Wrong value counts and foreign locations are refused.
#[test]
fn refuses_bad_samples() {
    let mut builder = ProfileBuilder::new(&TYPES);
    let main = builder.location(&frame("main", APP, 1));
    let err = builder
        .add_sample(&[main], &[1], &[])
        .expect_err("one value of three");
    assert!(matches!(
        err,
        PprofError::ValueCount {
            expected: 3,
            got: 1
        }
    ));
    let err = builder
        .add_sample(&[LocationId(99)], &[1, 2, 3], &[])
        .expect_err("unknown location");
    assert!(matches!(err, PprofError::UnknownLocation(LocationId(99))));
}

/// The same calls give the same bytes.
#[test]
fn output_is_deterministic() {
    assert_eq!(written(wall_profile()), written(wall_profile()));
}

/// Runs `go tool pprof ARGS FILE`, or says why it cannot.
fn go_pprof(args: &[&str], file: &std::path::Path) -> Option<String> {
    let home = tempfile::tempdir().expect("a temporary HOME");
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .arg(file)
        .env("HOME", home.path())
        .env("PPROF_BINARY_PATH", home.path())
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "go tool pprof {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `go tool pprof` (Debian `golang-go`) reads the file: `-raw` lists our
/// samples with our values, `-top` totals equal ours for each sample type.
#[test]
fn go_tool_pprof_reads_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("wall.pb.gz");
    let builder = wall_profile();
    let totals = builder.totals();
    std::fs::write(&path, written(builder)).expect("writes the profile");
    let Some(raw) = go_pprof(&["-raw"], &path) else {
        eprintln!("skipped: `go` is not installed (apt-get install golang-go)");
        return;
    };
    assert!(
        raw.contains("samples/count cpu/nanoseconds[dflt] off_cpu/nanoseconds"),
        "{raw}"
    );
    let mut sums = [0i64; 3];
    let mut in_samples = false;
    for line in raw.lines() {
        if line.starts_with("Samples:") {
            in_samples = true;
            continue;
        }
        if line.starts_with("Locations") {
            break;
        }
        let Some((values, _)) = line.split_once(':') else {
            continue;
        };
        let values: Vec<i64> = values
            .split_whitespace()
            .filter_map(|v| v.parse().ok())
            .collect();
        if in_samples && values.len() == 3 {
            for (sum, value) in sums.iter_mut().zip(values) {
                *sum += value;
            }
        }
    }
    assert_eq!(sums.to_vec(), totals, "{raw}");
    assert!(raw.contains("thread:[worker]"), "{raw}");
    assert!(raw.contains("tid:[42]"), "{raw}");
    assert!(
        raw.contains("spin_leaf") && raw.contains("do_nanosleep"),
        "{raw}"
    );

    let top = go_pprof(&["-top", "-sample_index=off_cpu"], &path).expect("go ran before");
    assert!(top.contains("700ms total"), "{top}");
    assert!(top.contains("do_nanosleep"), "{top}");
    let top = go_pprof(&["-top", "-sample_index=cpu"], &path).expect("go ran before");
    assert!(top.contains("310ms total"), "{top}");
    let top = go_pprof(&["-top", "-sample_index=samples"], &path).expect("go ran before");
    assert!(top.contains("of 31 total"), "{top}");
}
