use super::*;

fn fold_one(options: FoldOptions, describe: impl Fn(&mut StackBuilder<'_>)) -> String {
    let mut folder = Folder::new();
    folder.add((), 1);
    let folded = folder.fold(options, |_, builder| describe(builder));
    folded.lines()[0].stack.clone()
}

/// Thread first, user frames, the delimiter, then `_[k]` kernel frames.
#[test]
fn orders_thread_user_delimiter_kernel() {
    let stack = fold_one(FoldOptions::default(), |b| {
        b.thread("worker")
            .user("main")
            .user("work")
            .inlined("helper")
            .kernel("entry_SYSCALL_64")
            .kernel("do_nanosleep");
    });
    assert_eq!(
        stack,
        "worker;main;work;helper_[i];-;entry_SYSCALL_64_[k];do_nanosleep_[k]"
    );
}

/// Without options: no thread frame, no delimiter, no annotations.
#[test]
fn options_drop_thread_delimiter_and_annotations() {
    let options = FoldOptions {
        thread_frame: false,
        delimiter: false,
        annotate: false,
    };
    let stack = fold_one(options, |b| {
        b.thread("worker").user("main").kernel("schedule");
    });
    assert_eq!(stack, "main;schedule");
}

/// A kernel-only stack has no delimiter: bcc prints it only between parts.
#[test]
fn kernel_only_stack_has_no_delimiter() {
    let stack = fold_one(FoldOptions::default(), |b| {
        b.thread("kworker/0:1").kernel("worker_thread");
    });
    assert_eq!(stack, "kworker/0:1;worker_thread_[k]");
}

/// Wall-clock states tag every code frame, kernel ones included, but not
/// the thread or delimiter frames.
#[test]
fn wall_clock_states_tag_code_frames() {
    let on = fold_one(FoldOptions::default(), |b| {
        b.state(CpuState::OnCpu).thread("t").user("spin_here");
    });
    assert_eq!(on, "t;spin_here_[c]");
    let off = fold_one(FoldOptions::default(), |b| {
        b.state(CpuState::OffCpu)
            .thread("t")
            .user("main")
            .kernel("do_nanosleep");
    });
    assert_eq!(off, "t;main_[o];-;do_nanosleep_[o]");
}

/// Names that would break the format are escaped.
#[test]
fn escapes_names() {
    let cases = [
        ("a;b", "a:b"),
        ("line\nbreak\ttab", "line break tab"),
        ("  padded  ", "padded"),
        ("", UNKNOWN),
        ("\n", UNKNOWN),
        ("worker 12", "worker_12"),
        ("thread 1.5", "thread_1.5"),
        ("operator new(unsigned long)", "operator new(unsigned long)"),
        (
            "std::vec::Vec<[u8; 8]>::push",
            "std::vec::Vec<[u8: 8]>::push",
        ),
    ];
    for (name, expected) in cases {
        let mut out = String::new();
        push_frame(&mut out, name);
        assert_eq!(out, expected, "{name:?}");
    }
}

/// An empty stack still makes a parseable line.
#[test]
fn empty_stack_is_unknown() {
    let options = FoldOptions {
        thread_frame: false,
        ..FoldOptions::default()
    };
    assert_eq!(
        fold_one(options, |b| {
            b.thread("x");
        }),
        UNKNOWN
    );
}

/// Weights are summed per key, keys with the same text are merged, and
/// lines come out sorted whatever the insertion order.
#[test]
fn sums_merges_and_sorts() {
    let mut folder = Folder::new();
    for (key, weight) in [(3, 5), (1, 2), (2, 7), (1, 3), (4, 1)] {
        folder.add(key, weight);
    }
    assert_eq!(folder.distinct(), 4);
    let folded = folder.fold(FoldOptions::default(), |key, b| {
        // Keys 2 and 4 are two addresses of one function.
        let function = match key {
            1 => "b",
            2 | 4 => "a",
            _ => "c",
        };
        b.thread("t").user(function);
    });
    assert_eq!(folded.to_text(), "t;a 8\nt;b 5\nt;c 5\n");
    assert_eq!(folded.total(), 18);
}

/// Weights saturate instead of wrapping.
#[test]
fn weights_saturate() {
    let mut folder = Folder::new();
    folder.add(0, u64::MAX);
    folder.add(0, 1);
    let folded = folder.fold(FoldOptions::default(), |_, b| {
        b.user("f");
    });
    assert_eq!(folded.total(), u64::MAX);
}

/// Throughput of `add`, then of folding, for a typical mix (tens of
/// thousands of distinct stacks) and a wide one (a million); run with
/// `cargo test --release -- --ignored folded_throughput --nocapture`.
#[test]
#[ignore = "timing print, not a check"]
fn folded_throughput() {
    const SAMPLES: u64 = 10_000_000;
    let frames: Vec<String> = (0..500).map(|i| format!("function_{i}")).collect();
    for (mix, stacks) in [("typical", 20_000), ("wide", 500_000)] {
        let started = std::time::Instant::now();
        let mut folder = Folder::new();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..SAMPLES {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Skewed: most samples hit few stacks, as in real profiles.
            let stack = (state % stacks) * (state >> 40 & 0xff) / 0xff;
            folder.add((stack % 64, stack, state & 1 == 0), 10_000_000);
        }
        let added = started.elapsed();
        let distinct = folder.distinct();
        let folded = folder.fold(FoldOptions::default(), |&(thread, stack, on), b| {
            let state = if on {
                CpuState::OnCpu
            } else {
                CpuState::OffCpu
            };
            b.state(state).thread(&format!("thread-{thread}"));
            for depth in 0..30 {
                b.user(&frames[((stack + depth * 7) % 500) as usize]);
            }
        });
        let total = started.elapsed();
        assert_eq!(folded.total(), SAMPLES * 10_000_000);
        println!(
            "{mix}: {SAMPLES} samples, {distinct} distinct keys: add {:.1} M samples/s; \
             with folding to {} lines: {:.1} M samples/s",
            SAMPLES as f64 / added.as_secs_f64() / 1e6,
            folded.lines().len(),
            SAMPLES as f64 / total.as_secs_f64() / 1e6,
        );
    }
}
