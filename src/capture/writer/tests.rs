//! Tests of the capture writer, and sample captures other tests reuse.

use super::*;
use crate::capture::model::{
    CaptureSettings, DropReason, FieldSchema, RecordDrops, RecordId, StackCount,
};

/// A capture with every kind of entry, and what was put into it.
pub(crate) struct Sample {
    pub info: CaptureInfo,
    pub schemas: Vec<RecordSchema>,
    pub strings: Vec<(StringId, String)>,
    pub threads: Vec<(ThreadId, Thread)>,
    pub frames: Vec<FrameAddr>,
    pub stacks: Vec<(StackId, Vec<FrameId>)>,
    pub events: Vec<Event>,
    pub symbols: Vec<(FrameId, Symbol)>,
    pub stats: CaptureStats,
    pub bytes: Vec<u8>,
}

pub(crate) fn schemas() -> Vec<RecordSchema> {
    let field = |name: &str, ty| FieldSchema {
        name: name.into(),
        ty,
    };
    vec![
        RecordSchema {
            probe: "uprobe:/usr/lib/libc.so.6:malloc".into(),
            name: "malloc".into(),
            kind: RecordKind::Instant,
            fields: vec![
                field("size", FieldType::UInt),
                field("delta", FieldType::Int),
            ],
            has_stack: true,
            origin: RecordOrigin::Script,
        },
        RecordSchema {
            probe: "tracepoint:syscalls:sys_enter_read".into(),
            name: "read".into(),
            kind: RecordKind::Span,
            fields: vec![field("fd", FieldType::Int), field("path", FieldType::Str)],
            has_stack: false,
            origin: RecordOrigin::Script,
        },
        RecordSchema {
            probe: "profile:hz:99".into(),
            name: "tick".into(),
            kind: RecordKind::Instant,
            fields: vec![],
            has_stack: false,
            origin: RecordOrigin::Script,
        },
    ]
}

pub(crate) fn thread_info<'a>(
    tid: u32,
    pid: u32,
    name: &'a str,
    process_name: &'a str,
) -> ThreadInfo<'a> {
    ThreadInfo {
        tid,
        pid,
        name,
        process_name,
        ..ThreadInfo::default()
    }
}

pub(crate) fn info() -> CaptureInfo {
    CaptureInfo {
        command_line: vec![
            "wprof".into(),
            "record".into(),
            "-e".into(),
            "ü \0 ∞".into(),
        ],
        script: "uprobe:libc:malloc { <size = arg0> }".into(),
        script_name: "<script>".into(),
        hostname: "host".into(),
        kernel_release: "6.8.0".into(),
        cpus: 8,
        start_monotonic_ns: 123_456_789_000,
        start_realtime_ns: u64::MAX,
        wprof_version: "0.1.0".into(),
        settings: CaptureSettings {
            features: vec!["sched".into(), "wq".into()],
            stacks: vec!["timer=100hz".into()],
            pmu: vec!["sw:page-faults".into()],
            filters: vec!["-p 42".into(), "--no-idle".into()],
            prepare: None,
            activate: Some("+1s".into()),
        },
        command_pid: Some(4242),
    }
}

/// Writes the sample through `writer`, interleaving table entries and
/// events the way a session does.
fn fill<W: Write>(w: &mut CaptureWriter<W>, s: &mut Sample) -> Result<(), CaptureError> {
    let libc = w.intern("/usr/lib/libc.so.6");
    let frames = [
        FrameAddr::Kernel {
            addr: 0xffff_ffff_8100_0000,
        },
        FrameAddr::User {
            module: libc,
            build_id: Some(vec![0xab; 20]),
            file_offset: 0x9a0f0,
        },
        FrameAddr::User {
            module: libc,
            build_id: None,
            file_offset: 7,
        },
        FrameAddr::User {
            module: libc,
            build_id: Some(vec![]),
            file_offset: 0,
        },
        FrameAddr::UnknownUser { addr: u64::MAX },
    ];
    for i in 0..240u64 {
        let thread = match i % 5 {
            0 => w.thread(&thread_info(100, 100, "main", "app")),
            1 => w.thread(&thread_info(101, 100, &format!("worker-{}", i % 3), "app")),
            _ => w.thread(&thread_info(7, 7, "", "")),
        };
        let f: Vec<FrameId> = (0..(i % 4))
            .map(|k| w.frame(frames[((i + k) % 5) as usize].clone()))
            .collect();
        let stack = w.stack(&f);
        let path = w.intern(&format!("/tmp/file{}", i % 7));
        let (record, values, duration_ns, stack) = match i % 3 {
            0 => (
                0,
                vec![FieldValue::UInt(i * 1000), FieldValue::Int(-(i as i64))],
                None,
                (i % 2 == 0).then_some(stack),
            ),
            1 => (
                1,
                vec![FieldValue::Int(i64::MIN + i as i64), FieldValue::Str(path)],
                Some(i * 7),
                None,
            ),
            _ => (2, vec![], None, None),
        };
        let event = Event {
            // mostly increasing, one step back and one huge jump
            ts_ns: if i == 200 {
                u64::MAX - 5
            } else {
                i * 997 + (i % 4) * 3
            },
            cpu: (i % 8) as u32,
            thread,
            record: RecordId(record),
            duration_ns,
            values,
            stack,
            // every unwinder and ending, and stacks without a walk
            walk: stack.and_then(|_| StackWalk::from_code((i % 5) as u8 * 0x11)),
        };
        w.event(&event)?;
        s.events.push(event);
        if i == 100 {
            w.flush()?;
        }
    }
    Ok(())
}

/// The sample written to memory with events chunks of about `chunk_bytes`.
pub(crate) fn sample(chunk_bytes: usize) -> Sample {
    let mut s = Sample {
        info: info(),
        schemas: schemas(),
        strings: vec![],
        threads: vec![],
        frames: vec![],
        stacks: vec![],
        events: vec![],
        symbols: vec![],
        stats: CaptureStats {
            events: 240,
            drops: vec![
                (DropReason::RingBufferFull, 3),
                (DropReason::StackLost, 0),
                (DropReason::UnmatchedSpanEnd, u64::MAX),
            ],
            record_drops: vec![
                RecordDrops {
                    record: RecordId(0),
                    reason: DropReason::RingBufferFull,
                    count: 3,
                },
                RecordDrops {
                    record: RecordId(1),
                    reason: DropReason::UnmatchedSpanEnd,
                    count: u64::MAX,
                },
            ],
            duration_ns: 1_000_000_000,
            stacks: vec![(StackCount::Table, 7), (StackCount::TableRows, 1 << 20)],
        },
        bytes: vec![],
    };
    let mut w = CaptureWriter::new(Vec::new(), &s.info, &s.schemas).expect("write to memory");
    w.set_events_chunk_bytes(chunk_bytes);
    fill(&mut w, &mut s).expect("sample events are valid");
    let malloc = w.intern("malloc");
    let file = w.intern("malloc.c");
    let inl = w.intern("inlined_helper");
    s.symbols = vec![
        (
            FrameId(1),
            Symbol {
                function: Some(malloc),
                offset: 16,
                file: Some(file),
                line: Some(3120),
                inlined: vec![inl, malloc],
            },
        ),
        (FrameId(0), Symbol::default()),
    ];
    s.frames = w.frames().to_vec();
    s.strings = (0..w.strings.len() as u32)
        .map(|i| (StringId(i), w.string(StringId(i)).to_owned()))
        .collect();
    let mut threads: Vec<_> = w.threads.iter().map(|(k, v)| (*v, k)).collect();
    threads.sort_by_key(|(id, _)| *id);
    s.threads = threads
        .into_iter()
        .map(|(id, thread)| (id, thread.clone()))
        .collect();
    s.stacks = w.stacks.iter().map(|(k, v)| (*v, k.to_vec())).collect();
    s.stacks.sort_by_key(|(id, _)| *id);
    s.bytes = w.finish(&s.symbols, &s.stats).expect("write to memory");
    s
}

/// Writing the same inputs twice gives byte-identical files.
#[test]
fn deterministic() {
    assert_eq!(sample(200).bytes, sample(200).bytes);
    assert_eq!(
        sample(EVENTS_CHUNK_BYTES).bytes,
        sample(EVENTS_CHUNK_BYTES).bytes
    );
}

/// Equal strings, threads, frames and stacks get one id; a rename gets a new one.
#[test]
fn dedups_tables() {
    let mut w = CaptureWriter::new(Vec::new(), &info(), &schemas()).unwrap();
    assert_eq!(w.intern("a"), w.intern("a"));
    assert_ne!(w.intern("a"), w.intern("b"));
    let t = w.thread(&thread_info(1, 1, "x", "p"));
    assert_eq!(w.thread(&thread_info(1, 1, "x", "p")), t);
    assert_ne!(w.thread(&thread_info(1, 1, "renamed", "p")), t);
    let k = FrameAddr::Kernel { addr: 1 };
    let f = w.frame(k.clone());
    assert_eq!(w.frame(k), f);
    assert_ne!(w.frame(FrameAddr::UnknownUser { addr: 1 }), f);
    assert_eq!(w.stack(&[f, f]), w.stack(&[f, f]));
    assert_ne!(w.stack(&[f]), w.stack(&[f, f]));
    assert_eq!(w.frames().len(), 2);
    assert_eq!(w.string(StringId(1)), "b");
}

/// Events that do not match their schema or name unknown ids are refused.
#[test]
fn rejects_bad_events() {
    let mut w = CaptureWriter::new(Vec::new(), &info(), &schemas()).unwrap();
    let thread = w.thread(&thread_info(1, 1, "t", "p"));
    let good = Event {
        ts_ns: 1,
        cpu: 0,
        thread,
        record: RecordId(2),
        duration_ns: None,
        values: vec![],
        stack: None,
        walk: None,
    };
    w.event(&good).unwrap();
    let bad = [
        Event {
            record: RecordId(3),
            ..good.clone()
        },
        Event {
            values: vec![FieldValue::Int(1)],
            ..good.clone()
        },
        Event {
            record: RecordId(0),
            values: vec![FieldValue::Int(1), FieldValue::Int(1)],
            ..good.clone()
        },
        Event {
            record: RecordId(1),
            values: vec![FieldValue::Int(1), FieldValue::Str(StringId(99))],
            ..good.clone()
        },
        Event {
            thread: ThreadId(5),
            ..good.clone()
        },
        Event {
            stack: Some(StackId(0)),
            ..good.clone()
        },
    ];
    for event in &bad {
        let err = w.event(event).unwrap_err();
        assert!(
            matches!(err, CaptureError::Rejected { .. }),
            "{event:?}: {err}"
        );
    }
    assert_eq!(w.events_written(), 1);
    let symbol = Symbol {
        function: Some(StringId(50)),
        ..Symbol::default()
    };
    let f = w.frame(FrameAddr::Kernel { addr: 1 });
    assert!(w.finish(&[(f, symbol)], &CaptureStats::default()).is_err());
}

/// xorshift64*: deterministic pseudo-random numbers for the size measurement.
fn next(state: &mut u64) -> u64 {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    state.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// A typical stream (one or two small ints and a stack id, a few hundred
/// threads and stacks, ~1 µs apart on 8 CPUs) costs at most 20 bytes an event.
#[test]
fn bytes_per_event() {
    let mut w = CaptureWriter::new(Vec::new(), &info(), &schemas()).unwrap();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let threads: Vec<ThreadId> = (0..300)
        .map(|i| {
            w.thread(&thread_info(
                1000 + i,
                1000 + i / 10,
                &format!("t{i}"),
                &format!("p{}", i / 10),
            ))
        })
        .collect();
    let stacks: Vec<StackId> = (0..500u64)
        .map(|i| {
            let frames: Vec<FrameId> = (0..12)
                .map(|k| {
                    w.frame(FrameAddr::Kernel {
                        addr: 0xffff_0000 + (i * 7 + k) % 900,
                    })
                })
                .collect();
            w.stack(&frames)
        })
        .collect();
    let n = 1_000_000u64;
    let mut ts_ns = 0;
    for _ in 0..n {
        let r = next(&mut rng);
        ts_ns += 200 + r % 1600;
        let (record, values) = if r >> 40 & 1 == 0 {
            (
                0,
                vec![
                    FieldValue::UInt(16 << (r >> 20 & 7)),
                    FieldValue::Int(-3 + (r >> 24 & 7) as i64),
                ],
            )
        } else {
            (
                0,
                vec![FieldValue::UInt(r >> 28 & 0xfff), FieldValue::Int(0)],
            )
        };
        let event = Event {
            ts_ns,
            cpu: (r >> 8 & 7) as u32,
            thread: threads[(r >> 32) as usize % threads.len()],
            record: RecordId(record),
            duration_ns: None,
            values,
            stack: Some(stacks[(r >> 48) as usize % stacks.len()]),
            walk: None,
        };
        w.event(&event).unwrap();
    }
    let bytes = w.finish(&[], &CaptureStats::default()).unwrap();
    let per_event = bytes.len() as f64 / n as f64;
    println!(
        "{n} events, {} bytes: {per_event:.2} bytes/event (tables included)",
        bytes.len()
    );
    assert!(per_event <= 20.0, "{per_event} bytes per event");
}
