//! Fuzz target: capture file bytes → `CaptureReader` → every renderer, with
//! the capture's saved task filters re-applied: Perfetto, NDJSON, the
//! summary, metrics and the wall-clock report (whole capture and a window
//! of its middle half), the profiles (folded stacks, flame graph, pprof;
//! the default profile, `wakeup` and each recorded record's), and a
//! comparison of the capture with itself (tables, JSON, differential
//! profiles). Damage must be reported, never a panic, a hang or an
//! allocation the file's size does not justify.
//!
//! Each input runs twice: as it is, and with its checksums (file header,
//! chunk headers, payloads, sequence marks) recomputed, so that mutations
//! reach the payload decoders and the renderers instead of stopping at the
//! first checksum.

#![no_main]

use std::fs::File;
use std::io::{self, Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::PathBuf;
use std::sync::Mutex;

use libfuzzer_sys::fuzz_target;
use wprof::capture::format::{
    CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, Decoder, FILE_HEADER_LEN, Version, file_header,
};
use wprof::capture::reader::CaptureReader;
use wprof::cli::task_filter_from_args;
use wprof::render::compare::{
    CompareJson, CompareOptions, CompareTable, DifferentialProfile, ProfileShape, TableFormat,
};
use wprof::render::filter::{Filter, TaskSelector};
use wprof::render::flamegraph::FlameGraph;
use wprof::render::folded::FoldedStacks;
use wprof::render::metrics::Metrics;
use wprof::render::ndjson::Ndjson;
use wprof::render::perfetto::Perfetto;
use wprof::render::pprof::Pprof;
use wprof::render::profile::ProfileOptions;
use wprof::render::report::{Report, ReportJson};
use wprof::render::summary::Summary;
use wprof::render::{Capture, CaptureSource, Captures, Destination, Render};

/// One in-memory file, rewritten for each input: the reader wants a path.
static CAPTURE: Mutex<Option<(File, PathBuf)>> = Mutex::new(None);

fn memory_file() -> (File, PathBuf) {
    // SAFETY: a plain syscall with a NUL-terminated name; the fd is new and ours.
    let fd = unsafe { libc::memfd_create(c"capture".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
    // SAFETY: `fd` was just created and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    (file, path)
}

fn render(path: &std::path::Path) {
    let Ok(reader) = CaptureReader::open(path) else {
        return;
    };
    if let Some(damage) = reader.damage() {
        std::hint::black_box(damage.to_string());
    }
    let Ok(saved) = task_filter_from_args(&reader.info().settings.filters) else {
        return;
    };
    let tasks = if saved.is_empty() {
        Vec::new()
    } else {
        match TaskSelector::new(&saved) {
            Ok(selector) => vec![selector],
            Err(_) => return,
        }
    };
    let whole = Filter {
        tasks,
        ..Filter::default()
    };
    let duration_ns = reader.stats().map_or(0, |stats| stats.duration_ns);
    let middle = Filter {
        start_ns: Some(duration_ns / 4),
        end_ns: Some(duration_ns / 4 * 3),
        ..whole.clone()
    };
    let capture = |filter: &Filter| Capture {
        path,
        source: &reader,
        filter: filter.clone(),
    };
    let one = Captures::one(capture(&whole));
    for renderer in every_single_capture_renderer(&reader) {
        let _ = renderer.render(&one, &null());
    }
    let one = Captures::one(capture(&middle));
    for renderer in [Box::new(Metrics::default()) as Box<dyn Render>, Box::new(Report::default())] {
        let _ = renderer.render(&one, &null());
    }
    let itself = Captures::new(vec![capture(&whole)], vec![capture(&middle)]);
    for renderer in comparison_renderers() {
        let _ = renderer.render(&itself, &null());
    }
}

fn null() -> Destination {
    Destination::File("/dev/null".into())
}

/// The renderers of one capture, a profile renderer for each profile the
/// capture may have.
fn every_single_capture_renderer(source: &dyn CaptureSource) -> Vec<Box<dyn Render>> {
    let mut renderers: Vec<Box<dyn Render>> = vec![
        Box::new(Perfetto::default()),
        Box::new(Ndjson::default()),
        Box::new(Summary::default()),
        Box::new(Metrics::default()),
        Box::new(Report::default()),
        Box::new(ReportJson::default()),
    ];
    let records = source.schemas().iter().take(3).map(|s| Some(s.name.clone()));
    for profile in [None, Some("wakeup".to_owned())].into_iter().chain(records) {
        let options = ProfileOptions {
            profile,
            ..ProfileOptions::default()
        };
        renderers.push(Box::new(FoldedStacks {
            options: options.clone(),
        }));
        renderers.push(Box::new(FlameGraph {
            options: options.clone(),
        }));
        renderers.push(Box::new(Pprof { options }));
    }
    renderers
}

fn comparison_renderers() -> Vec<Box<dyn Render>> {
    let options = CompareOptions::default();
    let profile = ProfileOptions::default();
    vec![
        Box::new(CompareTable {
            format: TableFormat::Text,
            options: options.clone(),
        }),
        Box::new(CompareJson { options }),
        Box::new(DifferentialProfile {
            shape: ProfileShape::Folded,
            profile: profile.clone(),
        }),
        Box::new(DifferentialProfile {
            shape: ProfileShape::Svg,
            profile,
        }),
    ]
}

/// `bytes` with every checksum made right, as a writer would have made them.
fn fix_checksums(bytes: &mut [u8]) {
    if bytes.len() < FILE_HEADER_LEN {
        return;
    }
    let version = Version {
        major: u16::from_le_bytes([bytes[8], bytes[9]]),
        minor: u16::from_le_bytes([bytes[10], bytes[11]]),
    };
    bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(version));
    let mut chunks = Vec::new();
    let mut at = FILE_HEADER_LEN;
    while at + CHUNK_HEADER_LEN <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let Some(end) = (at + CHUNK_HEADER_LEN)
            .checked_add(len)
            .filter(|&e| e <= bytes.len())
        else {
            break;
        };
        bytes[at + 1..at + 4].fill(0);
        chunks.push((at, end));
        at = end;
    }
    // Marks name the next chunk's header checksum: fix the others first.
    let is_mark = |bytes: &[u8], at: usize| bytes[at] == ChunkKind::Sequence as u8;
    for pass_marks in [false, true] {
        for (i, &(start, end)) in chunks.iter().enumerate() {
            if is_mark(bytes, start) != pass_marks {
                continue;
            }
            if pass_marks && let Some(&(next, _)) = chunks.get(i + 1) {
                let crc: [u8; 4] = bytes[next + 16..next + 20].try_into().unwrap();
                let payload = &mut bytes[start + CHUNK_HEADER_LEN..end];
                let mut d = Decoder::new(payload, 0);
                if d.uvarint().is_ok() && d.remaining() >= 4 {
                    let at = d.offset() as usize;
                    payload[at..at + 4].copy_from_slice(&crc);
                }
            }
            let raw: [u8; CHUNK_HEADER_LEN] =
                bytes[start..start + CHUNK_HEADER_LEN].try_into().unwrap();
            let header = ChunkHeader {
                kind: raw[0],
                payload_len: u32::from_le_bytes(raw[4..8].try_into().unwrap()),
                items: u32::from_le_bytes(raw[8..12].try_into().unwrap()),
                payload_crc: crc32fast::hash(&bytes[start + CHUNK_HEADER_LEN..end]),
            };
            bytes[start..start + CHUNK_HEADER_LEN].copy_from_slice(&header.encode());
        }
    }
}

fn run(file: &mut File, path: &std::path::Path, data: &[u8]) {
    file.set_len(0).expect("truncating a memfd");
    file.rewind().expect("seeking a memfd");
    file.write_all(data).expect("writing a memfd");
    render(path);
}

fuzz_target!(|data: &[u8]| {
    let mut capture = CAPTURE.lock().unwrap_or_else(|e| e.into_inner());
    let (file, path) = capture.get_or_insert_with(memory_file);
    run(file, path, data);
    let mut fixed = data.to_vec();
    fix_checksums(&mut fixed);
    if fixed != data {
        run(file, path, &fixed);
    }
});
