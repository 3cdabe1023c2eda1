//! Tests of the capture reader.

use super::*;
use crate::capture::format::{ChunkKind, SequenceMark, Totals, VERSION, file_header};
use crate::capture::model::{CaptureStats, FieldValue, RecordId};
use crate::capture::writer::tests::{Sample, info, sample, schemas, thread_info};
use crate::capture::writer::{CaptureWriter, encode_stats};
use std::time::Instant;

/// Writes `bytes` to a fresh file and opens it.
pub(super) fn open_bytes(
    dir: &tempfile::TempDir,
    bytes: &[u8],
) -> Result<CaptureReader, CaptureError> {
    let path = dir.path().join("wprof.data");
    std::fs::write(&path, bytes).expect("write test file");
    CaptureReader::open(&path)
}

pub(super) fn collect(reader: &CaptureReader) -> Result<Vec<Event>, CaptureError> {
    let mut events = vec![];
    reader.for_each_event(|e| {
        events.push(e.clone());
        ControlFlow::Continue(())
    })?;
    Ok(events)
}

/// A chunk as `(kind, items, payload)`.
pub(super) type RawChunk = (u8, u32, Vec<u8>);

/// The chunks after the description of an intact file, without their marks.
pub(super) fn unmarked_chunks(bytes: &[u8]) -> Vec<RawChunk> {
    chunks(bytes)[2..]
        .iter()
        .map(|&(start, end)| {
            let raw = bytes[start..start + CHUNK_HEADER_LEN].try_into().unwrap();
            let header = ChunkHeader::decode(raw).unwrap();
            let payload = bytes[start + CHUNK_HEADER_LEN..end].to_vec();
            (header.kind, header.items, payload)
        })
        .filter(|(kind, _, _)| *kind != ChunkKind::Sequence as u8)
        .collect()
}

/// `description` (header, info, schemas) followed by `chunks`, each after a
/// sequence mark counting what the file holds through it, as the writer
/// does (with times 0).
pub(super) fn with_marks(description: &[u8], chunks: &[RawChunk]) -> Vec<u8> {
    let mut bytes = description.to_vec();
    let mut through = Totals::default();
    for (seq, (kind, items, payload)) in chunks.iter().enumerate() {
        let n = u64::from(*items);
        match ChunkKind::from_u8(*kind) {
            Some(ChunkKind::Strings) => through.strings += n,
            Some(ChunkKind::Threads) => through.threads += n,
            Some(ChunkKind::Frames) => through.frames += n,
            Some(ChunkKind::Stacks) => through.stacks += n,
            Some(ChunkKind::Events) => through.events += n,
            _ => {}
        }
        let header = ChunkHeader {
            kind: *kind,
            payload_len: payload.len() as u32,
            items: *items,
            payload_crc: crc32fast::hash(payload),
        }
        .encode();
        let mark = SequenceMark {
            seq: seq as u64,
            header_crc: u32::from_le_bytes(header[16..20].try_into().unwrap()),
            through,
            written_ns: 0,
        };
        let mut mark_payload = vec![];
        mark.encode(&mut mark_payload);
        let mark_header = ChunkHeader::for_payload(ChunkKind::Sequence, 1, &mark_payload);
        bytes.extend(mark_header.unwrap().encode());
        bytes.extend(mark_payload);
        bytes.extend(header);
        bytes.extend(payload);
    }
    bytes
}

/// The bytes of the file header, info and schemas chunks.
pub(super) fn description(bytes: &[u8]) -> &[u8] {
    &bytes[..chunks(bytes)[1].1]
}

/// (start, end) of every chunk in an intact file.
pub(super) fn chunks(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = vec![];
    let mut at = FILE_HEADER_LEN;
    while at < bytes.len() {
        let raw: [u8; CHUNK_HEADER_LEN] = bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap();
        let header = ChunkHeader::decode(&raw).unwrap();
        let end = at + CHUNK_HEADER_LEN + header.payload_len as usize;
        out.push((at, end));
        at = end;
    }
    out
}

fn check_round_trip(s: &Sample, r: &CaptureReader) {
    assert_eq!(r.info(), &s.info);
    assert_eq!(r.schemas(), &s.schemas[..]);
    assert_eq!(r.version(), VERSION);
    assert_eq!(r.strings_len(), s.strings.len());
    for (id, text) in &s.strings {
        assert_eq!(r.string(*id), text);
    }
    let threads: Vec<Thread> = s.threads.iter().map(|(_, t)| t.clone()).collect();
    assert_eq!(r.threads(), &threads[..]);
    for (id, t) in &s.threads {
        assert_eq!(r.thread(*id), t);
    }
    assert_eq!(r.frames_len(), s.frames.len());
    for (i, f) in s.frames.iter().enumerate() {
        assert_eq!(r.frame(FrameId(i as u32)), f);
    }
    assert_eq!(r.stacks_len(), s.stacks.len());
    for (id, frames) in &s.stacks {
        assert_eq!(&r.stack(*id).frames, frames);
    }
    for (id, symbol) in &s.symbols {
        assert_eq!(r.symbol(*id), Some(symbol));
    }
    assert_eq!(r.symbol(FrameId(2)), None);
    assert_eq!(r.symbol(FrameId(9999)), None);
    assert_eq!(r.stats(), Some(&s.stats));
    assert_eq!(r.events_len(), s.events.len() as u64);
    assert_eq!(collect(r).unwrap(), s.events);
}

/// Every model type comes back as written, with one or many events chunks.
#[test]
fn round_trips_every_type() {
    let dir = tempfile::tempdir().unwrap();
    for chunk_bytes in [1, 100, 1 << 20] {
        let s = sample(chunk_bytes);
        let r = open_bytes(&dir, &s.bytes).unwrap();
        assert_eq!(r.damage(), None);
        check_round_trip(&s, &r);
    }
}

/// `create` writes a file that opens, even with no events or symbols.
#[test]
fn empty_capture_through_create() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wprof.data");
    let w = CaptureWriter::create(&path, &info(), &[]).unwrap();
    w.finish(&[], &CaptureStats::default()).unwrap();
    let r = CaptureReader::open(&path).unwrap();
    assert_eq!(r.damage(), None);
    assert!(r.schemas().is_empty());
    assert_eq!(r.stats(), Some(&CaptureStats::default()));
    assert_eq!(collect(&r).unwrap(), vec![]);
}

/// Iteration stops when the callback breaks.
#[test]
fn for_each_event_stops_on_break() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let r = open_bytes(&dir, &s.bytes).unwrap();
    let mut seen = 0;
    r.for_each_event(|_| {
        seen += 1;
        if seen == 10 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(seen, 10);
}

/// A file cut at any byte opens with its damage described (or fails
/// cleanly before its description) and yields a prefix of the events.
#[test]
fn truncated_at_every_offset() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let layout = chunks(&s.bytes);
    let description_end = layout[1].1;
    for len in 0..s.bytes.len() {
        let result = open_bytes(&dir, &s.bytes[..len]);
        let r = match result {
            Err(CaptureError::Truncated { offset, .. }) if len < description_end => {
                assert!(offset <= len as u64);
                continue;
            }
            Err(e) => panic!("cut at {len}: {e}"),
            Ok(r) => r,
        };
        assert!(len >= description_end, "cut at {len} opened");
        let damage = r.damage().expect("a cut file is damaged");
        let events = collect(&r).unwrap_or_else(|e| panic!("cut at {len}: {e}"));
        assert_eq!(damage.events, events.len() as u64);
        assert_eq!(events[..], s.events[..events.len()]);
        assert!(damage.readable_end <= len as u64);
        let partial = len as u64 - damage.readable_end;
        if partial > 0 {
            assert!(matches!(damage.cut, Some(Cut::Incomplete { bytes, .. }) if bytes == partial));
        }
        assert_eq!(damage.finished, r.stats().is_some());
    }
}

/// Any flipped byte is detected and reported with an offset inside the
/// damaged chunk (or the file header), never a panic or wrong events.
#[test]
fn flipped_bytes_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let layout = chunks(&s.bytes);
    for i in 0..s.bytes.len() {
        let mut bytes = s.bytes.clone();
        bytes[i] ^= 0x5a;
        let Some(&(start, end)) = layout.iter().find(|(a, b)| (*a..*b).contains(&i)) else {
            let err = open_bytes(&dir, &bytes)
                .err()
                .expect("bad file header opened");
            assert!(
                matches!(
                    err,
                    CaptureError::NotACapture { .. } | CaptureError::Corrupt { offset: 0, .. }
                ),
                "byte {i}: {err}"
            );
            continue;
        };
        let in_chunk = |offset: u64| (start as u64..end as u64).contains(&offset);
        let r = match open_bytes(&dir, &bytes) {
            Err(CaptureError::Corrupt { offset, .. }) if in_chunk(offset) => continue,
            Err(e) => panic!("byte {i}: {e}"),
            Ok(r) => r,
        };
        if let Some(Cut::Corrupt { offset, .. }) = r.damage().and_then(|d| d.cut.as_ref()) {
            assert!(in_chunk(*offset), "byte {i} reported at {offset}");
            let events = collect(&r).unwrap();
            assert_eq!(events[..], s.events[..events.len()]);
            continue;
        }
        // an events chunk's payload: found when that chunk is read
        match collect(&r) {
            Err(CaptureError::Corrupt { offset, .. }) => {
                assert!(in_chunk(offset), "byte {i} reported at {offset}")
            }
            other => panic!("byte {i} not detected: {:?}", other.map(|e| e.len())),
        }
    }
}

/// Ids that point past their table are reported with the offset of the
/// id, even in chunks whose checksums are right.
#[test]
fn rejects_ids_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let description = description(&s.bytes);
    let bytes = with_marks(
        description,
        &[(ChunkKind::Threads as u8, 1, vec![1, 1, 5, 5])],
    );
    let threads_at = *chunks(&bytes).last().map(|(start, _)| start).unwrap() as u64;
    let r = open_bytes(&dir, &bytes).unwrap();
    let cut = r.damage().unwrap().cut.clone();
    assert!(matches!(cut, Some(Cut::Corrupt { offset, .. }) if offset == threads_at + 22));

    // record 2 (no fields), ts 0, cpu 0, thread 3 of none
    let bytes = with_marks(
        description,
        &[(ChunkKind::Events as u8, 1, vec![2 << 2, 0, 0, 3])],
    );
    let events_at = *chunks(&bytes).last().map(|(start, _)| start).unwrap() as u64;
    let r = open_bytes(&dir, &bytes).unwrap();
    assert_eq!(r.events_len(), 1);
    let err = collect(&r).unwrap_err();
    assert!(
        matches!(err, CaptureError::Corrupt { offset, .. } if offset == events_at + 23),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("thread id 3 out of range (0 known)"),
        "{err}"
    );
}

/// A file that is not a capture says so.
#[test]
fn rejects_wrong_magic() {
    let dir = tempfile::tempdir().unwrap();
    for bytes in [&b"PK\x03\x04 not a capture at all"[..], b"x", &[0u8; 64]] {
        let err = open_bytes(&dir, bytes).err().unwrap();
        assert!(matches!(err, CaptureError::NotACapture { .. }), "{err}");
        assert!(err.to_string().ends_with("is not a wprof capture"), "{err}");
    }
    let err = open_bytes(&dir, b"").err().unwrap();
    assert!(
        matches!(err, CaptureError::Truncated { offset: 0, .. }),
        "{err}"
    );
}

/// A file from a newer major version names both versions; a newer minor
/// version is read, skipping the chunk kinds it added.
#[test]
fn newer_versions() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = sample(64).bytes;
    let newer = Version {
        major: VERSION.major + 1,
        minor: 0,
    };
    bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(newer));
    let err = open_bytes(&dir, &bytes).err().unwrap();
    assert!(
        matches!(err, CaptureError::NewerVersion { found, supported, .. }
        if found == newer && supported == VERSION)
    );
    let text = err.to_string();
    assert!(
        text.contains("format 3.0") && text.contains(&format!("format {VERSION}")),
        "{text}"
    );

    let s = sample(64);
    let mut chunks = unmarked_chunks(&s.bytes);
    chunks.insert(0, (200, 1, b"new".to_vec()));
    let mut bytes = with_marks(description(&s.bytes), &chunks);
    let minor = Version {
        major: VERSION.major,
        minor: VERSION.minor + 1,
    };
    bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(minor));
    let r = open_bytes(&dir, &bytes).unwrap();
    assert_eq!(r.version(), minor);
    assert_eq!(r.damage(), None);
    assert_eq!(collect(&r).unwrap(), s.events);
}

/// A format 2.2 capture, whose end chunk has no drops per record kind,
/// still reads: its drops by reason, stack counts and events come back.
#[test]
fn reads_format_2_2_end_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let old_stats = CaptureStats {
        record_drops: vec![],
        ..s.stats.clone()
    };
    let mut chunks = unmarked_chunks(&s.bytes);
    let end = (chunks.iter_mut())
        .find(|(kind, _, _)| *kind == ChunkKind::End as u8)
        .expect("an end chunk");
    end.2.clear();
    encode_stats(&mut end.2, &old_stats);
    assert_eq!(
        end.2.pop(),
        Some(0),
        "the record drops' count, absent in 2.2"
    );
    let mut bytes = with_marks(description(&s.bytes), &chunks);
    let v2_2 = Version { major: 2, minor: 2 };
    bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(v2_2));
    let r = open_bytes(&dir, &bytes).unwrap();
    assert_eq!(r.version(), v2_2);
    assert_eq!(r.damage(), None);
    assert_eq!(r.stats(), Some(&old_stats));
    assert_eq!(collect(&r).unwrap(), s.events);
}

/// A writer killed after `flush` (dropped without `finish`) leaves a file
/// that replays the flushed events and says the writer did not finish.
#[test]
fn killed_writer_replays_flushed_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wprof.data");
    let s = sample(1 << 20);
    let mut w = CaptureWriter::create(&path, &s.info, &s.schemas).unwrap();
    let thread = w.thread(&thread_info(1, 1, "t", "p"));
    let event = |ts_ns| Event {
        ts_ns,
        cpu: 1,
        thread,
        record: RecordId(2),
        duration_ns: None,
        values: vec![],
        stack: None,
        walk: None,
    };
    for ts in 0..1234 {
        w.event(&event(ts)).unwrap();
    }
    w.flush().unwrap();
    let complete = std::fs::metadata(&path).unwrap().len();
    for ts in 2000..2100 {
        w.event(&event(ts)).unwrap();
    }
    w.flush().unwrap();
    w.event(&event(5000)).unwrap();
    std::mem::forget(w); // SIGKILL: no destructor runs, the unflushed event is lost
    // the second flush's write was cut short after 30 bytes
    let bytes = &std::fs::read(&path).unwrap()[..complete as usize + 30];
    let r = open_bytes(&dir, bytes).unwrap();
    assert_eq!(r.stats(), None);
    let damage = r.damage().unwrap();
    let text = damage.to_string();
    let lost = "the writer did not finish (no end chunk: wprof was killed, or the disk \
                filled): events after 0.000001 s are lost (its last write was at ";
    assert!(
        text.starts_with(&format!(
            "the capture ends after 1234 events at byte {complete}: {lost}"
        )),
        "{text}"
    );
    assert!(
        text.ends_with("; 30 bytes of an incomplete chunk ignored"),
        "{text}"
    );
    assert_eq!(damage.stopped.map(|s| s.newest_ns), Some(1233));
    assert_eq!(collect(&r).unwrap().len(), 1234);
}

/// Bytes after the end chunk are reported, the capture is still read.
#[test]
fn reports_bytes_after_end() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let mut bytes = s.bytes.clone();
    bytes.extend_from_slice(&[0; 100]);
    let r = open_bytes(&dir, &bytes).unwrap();
    let damage = r.damage().unwrap();
    assert!(damage.finished);
    assert_eq!(
        damage.cut,
        Some(Cut::AfterEnd {
            offset: s.bytes.len() as u64,
            bytes: 100
        })
    );
    assert!(
        damage
            .to_string()
            .ends_with("100 bytes after the end chunk ignored")
    );
    check_round_trip(&s, &r);
}

/// Decoding is far faster than the 10 M events/s replay target.
#[test]
fn decode_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wprof.data");
    let mut w = CaptureWriter::create(&path, &info(), &schemas()).unwrap();
    let threads: Vec<ThreadId> = (0..64)
        .map(|i| w.thread(&thread_info(i, i, "t", "p")))
        .collect();
    let stack = w.stack(&[]);
    let n = 2_000_000u64;
    for i in 0..n {
        let event = Event {
            ts_ns: i * 1000,
            cpu: (i % 8) as u32,
            thread: threads[(i % 64) as usize],
            record: RecordId(0),
            duration_ns: None,
            values: vec![FieldValue::UInt(i % 4096), FieldValue::Int(-1)],
            stack: Some(stack),
            walk: None,
        };
        w.event(&event).unwrap();
    }
    w.finish(&[], &CaptureStats::default()).unwrap();
    let r = CaptureReader::open(&path).unwrap();
    let started = Instant::now();
    let mut sum = 0u64;
    r.for_each_event(|e| {
        sum = sum.wrapping_add(e.ts_ns);
        ControlFlow::Continue(())
    })
    .unwrap();
    let rate = n as f64 / started.elapsed().as_secs_f64();
    println!("decoded {n} events at {:.1} M events/s", rate / 1e6);
    assert_eq!(sum, (0..n).map(|i| i * 1000).sum::<u64>());
}
