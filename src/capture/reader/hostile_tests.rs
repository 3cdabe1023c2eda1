//! Tests of the reader against crafted and damaged captures: lengths past
//! the limits, sparse files, chunks removed, repeated or re-kinded with
//! valid checksums, files that are not regular, and older formats.

use super::decode::MAX_RESERVED_BYTES;
use super::tests::{
    RawChunk, chunks, collect, description, open_bytes, unmarked_chunks, with_marks,
};
use super::*;
use crate::capture::format::{
    ChunkKind, MAX_EVENTS_PAYLOAD, MAX_PAYLOAD, SequenceMark, file_header,
};
use crate::capture::writer::tests::{Sample, sample};

/// A chunk header claiming `payload_len` bytes, with a valid checksum.
fn header(kind: ChunkKind, payload_len: u32, items: u32) -> [u8; CHUNK_HEADER_LEN] {
    ChunkHeader {
        kind: kind as u8,
        payload_len,
        items,
        payload_crc: 0,
    }
    .encode()
}

/// The corruption that stopped the walk.
fn corrupt(r: &CaptureReader) -> (u64, String) {
    match &r.damage().expect("damaged").cut {
        Some(Cut::Corrupt { offset, what, .. }) => (*offset, what.clone()),
        other => panic!("not a corrupt cut: {other:?}"),
    }
}

/// A header claiming 4 GiB in a sparse file is refused before anything is
/// allocated, naming the chunk, its offset and the limit.
#[test]
fn refuses_lengths_past_the_limits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.data");
    let s = sample(64);
    let description = description(&s.bytes);
    for (kind, len, limit) in [
        (ChunkKind::Strings, u32::MAX - 100, MAX_PAYLOAD),
        (
            ChunkKind::Events,
            MAX_EVENTS_PAYLOAD + 1,
            MAX_EVENTS_PAYLOAD,
        ),
    ] {
        let mut bytes = description.to_vec();
        bytes.extend(header(kind, len, 1));
        std::fs::write(&path, &bytes).unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(bytes.len() as u64 + u64::from(len)).unwrap();
        let r = CaptureReader::open(&path).unwrap();
        let (offset, what) = corrupt(&r);
        assert_eq!(offset, description.len() as u64);
        assert_eq!(
            what,
            format!(
                "the {} chunk claims {len} bytes; the limit is {limit}",
                kind.name()
            )
        );
        assert!(collect(&r).unwrap().is_empty());
    }
}

/// A table chunk of zeros (a hole in a sparse file, with a valid checksum)
/// stops at its second entry instead of decoding millions of empty ones.
#[test]
fn refuses_runs_of_equal_entries() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let zeros = vec![0u8; 8 << 20];
    for kind in [ChunkKind::Strings, ChunkKind::Stacks] {
        let bytes = with_marks(
            description(&s.bytes),
            &[(kind as u8, 8 << 20, zeros.clone())],
        );
        let started = std::time::Instant::now();
        let r = open_bytes(&dir, &bytes).unwrap();
        let (_, what) = corrupt(&r);
        assert_eq!(what, "table entry 1 repeats the one before it");
        assert!(started.elapsed().as_secs() < 5);
    }
}

/// A table chunk claiming `u32::MAX` entries reserves memory for the entries
/// its bytes could hold, up to `MAX_RESERVED_BYTES`, not for its claim (it
/// reserved 24 bytes for each byte of a stacks chunk: 1.5 GiB for 64 MiB).
#[test]
fn reserves_no_more_than_the_chunk_justifies() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let zeros = vec![0u8; 8 << 20];
    let chunk = (ChunkKind::Stacks as u8, u32::MAX, zeros);
    let r = open_bytes(&dir, &with_marks(description(&s.bytes), &[chunk])).unwrap();
    assert_eq!(corrupt(&r).1, "table entry 1 repeats the one before it");
    let reserved = r.tables.stacks.capacity() * size_of::<Stack>();
    assert!(reserved <= MAX_RESERVED_BYTES, "{reserved} bytes reserved");
}

/// An events chunk claiming more events than its bytes can hold is refused.
#[test]
fn refuses_impossible_event_counts() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let chunk = (ChunkKind::Events as u8, 1000, vec![0; 100]);
    let r = open_bytes(&dir, &with_marks(description(&s.bytes), &[chunk])).unwrap();
    assert_eq!(
        corrupt(&r).1,
        "the events chunk claims 1000 events in 100 bytes"
    );
    assert_eq!(r.events_len(), 0);
}

/// A CPU number past the limit is refused when read: renderers index
/// per-CPU state by it (the fuzzer made one allocate 1.9 GB that way).
#[test]
fn refuses_cpu_numbers_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    // record 2 (no fields), ts 0, cpu 2^31 - 1, thread 0
    let payload = vec![2 << 2, 0, 0xff, 0xff, 0xff, 0xff, 0x07, 0];
    let thread = (ChunkKind::Threads as u8, 1, vec![1, 1, 0, 0, 0, 0]);
    let strings = (ChunkKind::Strings as u8, 1, vec![1, b'x']);
    let events = (ChunkKind::Events as u8, 1, payload);
    let r = open_bytes(
        &dir,
        &with_marks(description(&s.bytes), &[strings, thread, events]),
    )
    .unwrap();
    let err = collect(&r).unwrap_err().to_string();
    assert!(
        err.contains("CPU 2147483647 is past the limit of 65536"),
        "{err}"
    );
}

/// The chunks of the sample file (with its marks), and the index of the
/// first events chunk that has an events chunk after it.
fn layout(bytes: &[u8]) -> (Vec<(usize, usize)>, usize) {
    let layout = chunks(bytes);
    let is_events = |&(start, _): &(usize, usize)| bytes[start] == ChunkKind::Events as u8;
    let events: Vec<usize> = (0..layout.len())
        .filter(|&i| is_events(&layout[i]))
        .collect();
    assert!(events.len() > 3, "the sample has several events chunks");
    (layout, events[1])
}

/// Events in an events chunk of the sample.
fn items(bytes: &[u8], (start, _): (usize, usize)) -> u64 {
    u64::from(u32::from_le_bytes(
        bytes[start + 8..start + 12].try_into().unwrap(),
    ))
}

/// `bytes` with the mark at `(start, end)` changed by `change`, its checksum
/// redone.
fn with_mark_changed(
    bytes: &[u8],
    (start, end): (usize, usize),
    change: impl FnOnce(&mut SequenceMark),
) -> Vec<u8> {
    let mut d = Decoder::new(&bytes[start + CHUNK_HEADER_LEN..end], 0);
    let mut mark = SequenceMark::decode(&mut d).unwrap();
    change(&mut mark);
    let mut payload = vec![];
    mark.encode(&mut payload);
    let header = ChunkHeader::for_payload(ChunkKind::Sequence, 1, &payload).unwrap();
    [&bytes[..start], &header.encode(), &payload, &bytes[end..]].concat()
}

/// The sample with the mark at `mark` changed by `change` is damage at the
/// mark's offset, saying `what`; the events before it are read.
fn assert_mark_refused(
    s: &Sample,
    mark: (usize, usize),
    change: impl FnOnce(&mut SequenceMark),
    what: &str,
) {
    let dir = tempfile::tempdir().unwrap();
    let bytes = with_mark_changed(&s.bytes, mark, change);
    let r = open_bytes(&dir, &bytes).unwrap();
    assert_eq!(corrupt(&r), (mark.0 as u64, what.to_owned()));
    let events = collect(&r).unwrap();
    assert_eq!(events[..], s.events[..events.len()]);
}

/// A mark numbered `u64::MAX`, which leaves no number for the chunk after
/// it, is damage at its offset (the next number overflowed).
#[test]
fn refuses_the_last_sequence_number() {
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    assert_mark_refused(
        &s,
        layout[i - 1],
        |m| m.seq = u64::MAX,
        "the sequence mark numbers its chunk 18446744073709551615, leaving no number for the \
         next one",
    );
}

/// A mark counting `u64::MAX` events, its tables right, is damage at its
/// offset: the events of the next events chunk overflowed the count of
/// events read and lost.
#[test]
fn refuses_a_mark_counting_too_many_events() {
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    // the mark of the chunk before events chunk `i` (marks and chunks alternate)
    let mark = layout[i - 3];
    assert_eq!(s.bytes[mark.0], ChunkKind::Sequence as u8);
    assert!(items(&s.bytes, layout[i]) > 0);
    assert_mark_refused(
        &s,
        mark,
        |m| m.through.events = u64::MAX,
        "the sequence mark counts 18446744073709551615 events, more than a capture can hold",
    );
}

/// An events chunk removed with its mark (checksums all valid) is reported
/// with its number, position and events; the events after it are read.
#[test]
fn reports_a_removed_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    let (mark, chunk) = (layout[i - 1], layout[i]);
    let mut bytes = s.bytes.clone();
    bytes.drain(mark.0..chunk.1);
    let r = open_bytes(&dir, &bytes).unwrap();
    let damage = r.damage().expect("reported");
    let lost = items(&s.bytes, chunk);
    assert_eq!(damage.gaps.len(), 1, "{damage}");
    let gap = &damage.gaps[0];
    assert_eq!(gap.offset, mark.0 as u64);
    assert!(matches!(gap.kind, GapKind::Missing { count: 1, .. }));
    assert_eq!(gap.events, Some(lost));
    assert!(damage.finished && damage.cut.is_none());
    assert_eq!(damage.recorded, Some(s.events.len() as u64));
    let events = collect(&r).unwrap();
    assert_eq!(events.len() as u64, s.events.len() as u64 - lost);
    // the events around the gap, stack walks included, are as written
    let before = (layout[..i].iter())
        .filter(|&&(start, _)| s.bytes[start] == ChunkKind::Events as u8)
        .map(|&c| items(&s.bytes, c))
        .sum::<u64>() as usize;
    assert_eq!(events[..before], s.events[..before]);
    assert_eq!(events[before..], s.events[before + lost as usize..]);
    let text = damage.to_string();
    assert!(text.contains(&format!(
        "is missing before byte {}, {lost} events lost",
        mark.0
    )));
}

/// An events chunk removed without its mark is found the same way.
#[test]
fn reports_a_chunk_removed_after_its_mark() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    let mut bytes = s.bytes.clone();
    bytes.drain(layout[i].0..layout[i].1);
    let r = open_bytes(&dir, &bytes).unwrap();
    let gaps = &r.damage().expect("reported").gaps;
    assert!(matches!(
        gaps[..],
        [Gap {
            kind: GapKind::Missing { count: 1, .. },
            ..
        }]
    ));
    assert_eq!(gaps[0].events, Some(items(&s.bytes, layout[i])));
}

/// A repeated events chunk, with or without its mark, is skipped and reported.
#[test]
fn skips_a_repeated_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    for (from, kind) in [
        (layout[i - 1].0, "repeated"),
        (layout[i].0, "no sequence mark"),
    ] {
        let copy = s.bytes[from..layout[i].1].to_vec();
        let mut bytes = s.bytes.clone();
        bytes.splice(layout[i].1..layout[i].1, copy);
        let r = open_bytes(&dir, &bytes).unwrap();
        let damage = r.damage().expect("reported");
        assert_eq!(damage.gaps.len(), 1, "{damage}");
        assert_eq!(damage.gaps[0].offset, layout[i].1 as u64);
        assert!(damage.to_string().contains(kind), "{damage}");
        assert_eq!(collect(&r).unwrap(), s.events);
    }
}

/// An events chunk whose kind byte was changed (header checksum redone) is
/// skipped as not the chunk its mark announced, and its events counted lost.
#[test]
fn skips_a_rekinded_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    for kind in [ChunkKind::Strings as u8, 99] {
        let mut bytes = s.bytes.clone();
        let at = layout[i].0;
        let raw: [u8; CHUNK_HEADER_LEN] = bytes[at..at + CHUNK_HEADER_LEN].try_into().unwrap();
        let rekinded = ChunkHeader {
            kind,
            ..ChunkHeader::decode(&raw).unwrap()
        };
        bytes[at..at + CHUNK_HEADER_LEN].copy_from_slice(&rekinded.encode());
        let r = open_bytes(&dir, &bytes).unwrap();
        let damage = r.damage().expect("reported");
        assert!(
            matches!(damage.gaps[..], [Gap { kind: GapKind::Replaced { .. }, offset, .. }] if offset == at as u64),
            "{damage}"
        );
        assert_eq!(damage.gaps[0].events, Some(items(&s.bytes, layout[i])));
    }
}

/// A removed table chunk makes later ids meaningless: reading stops there.
#[test]
fn stops_at_a_removed_table_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let layout = chunks(&s.bytes);
    let strings = (3..layout.len())
        .rev()
        .find(|&i| s.bytes[layout[i].0] == ChunkKind::Strings as u8 && i > 4)
        .expect("a later strings chunk");
    let mut bytes = s.bytes.clone();
    bytes.drain(layout[strings - 1].0..layout[strings].1);
    let r = open_bytes(&dir, &bytes).unwrap();
    let (_, what) = corrupt(&r);
    assert!(what.contains("chunks are missing or repeated"), "{what}");
    let events = collect(&r).unwrap();
    assert_eq!(events[..], s.events[..events.len()]);
}

/// A file cut right after a mark says how many events the lost chunk held.
#[test]
fn cut_after_a_mark_counts_the_lost_events() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    let r = open_bytes(&dir, &s.bytes[..layout[i].0]).unwrap();
    let damage = r.damage().unwrap();
    let lost = items(&s.bytes, layout[i]);
    assert!(
        matches!(damage.cut, Some(Cut::Incomplete { events: Some(n), .. }) if n == lost),
        "{damage}"
    );
    assert!(damage.to_string().contains(&format!("({lost} events)")));
}

/// A last mark counting fewer events than were read, before a cut, leaves
/// the lost events unknown (the fuzzer found it overflowing).
#[test]
fn cut_after_an_inconsistent_mark() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let (layout, i) = layout(&s.bytes);
    let mark = layout[i - 1];
    let mut bytes = with_mark_changed(&s.bytes[..mark.1], mark, |m| m.through.events = 0);
    bytes.extend([7, 0, 0]);
    let r = open_bytes(&dir, &bytes).unwrap();
    let damage = r.damage().unwrap();
    assert!(
        matches!(damage.cut, Some(Cut::Incomplete { events: None, .. })),
        "{damage}"
    );
}

/// The sample as format 2.0 wrote it: no sequence marks.
fn format_2_0(chunks: &[RawChunk], description: &[u8]) -> Vec<u8> {
    let mut bytes = description.to_vec();
    bytes[..FILE_HEADER_LEN].copy_from_slice(&file_header(Version { major: 2, minor: 0 }));
    for (kind, items, payload) in chunks {
        let header = ChunkHeader {
            kind: *kind,
            payload_len: payload.len() as u32,
            items: *items,
            payload_crc: crc32fast::hash(payload),
        };
        bytes.extend(header.encode());
        bytes.extend(payload);
    }
    bytes
}

/// Format 2.0 captures (no marks) still read in full; there a removed
/// events chunk shows only in the end chunk's count.
#[test]
fn reads_format_2_0() {
    let dir = tempfile::tempdir().unwrap();
    let s = sample(64);
    let mut chunks = unmarked_chunks(&s.bytes);
    let r = open_bytes(&dir, &format_2_0(&chunks, description(&s.bytes))).unwrap();
    assert_eq!(r.version(), Version { major: 2, minor: 0 });
    assert_eq!(r.damage(), None);
    assert_eq!(collect(&r).unwrap(), s.events);
    let events = chunks
        .iter()
        .position(|c| c.0 == ChunkKind::Events as u8)
        .unwrap();
    chunks.remove(events);
    let r = open_bytes(&dir, &format_2_0(&chunks, description(&s.bytes))).unwrap();
    let damage = r.damage().expect("the count differs");
    assert_eq!(damage.recorded, Some(s.events.len() as u64));
    assert!(
        damage
            .to_string()
            .contains("the end chunk counts 240 events"),
        "{damage}"
    );
}

/// A FIFO, a directory and a device are refused at once: nothing blocks or
/// reads forever.
#[test]
fn refuses_files_that_are_not_regular() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    for (path, kind) in [
        (fifo.as_path(), "a FIFO"),
        (dir.path(), "a directory"),
        (Path::new("/dev/zero"), "a device"),
    ] {
        let err = CaptureReader::open(path).err().expect("refused");
        assert_eq!(
            err.to_string(),
            format!("{} is {kind}, not a capture file", path.display())
        );
    }
}

/// I/O errors carry the operating system's cause with the path.
#[test]
fn io_errors_name_the_cause() {
    let err = CaptureReader::open(Path::new("/nonexistent/wprof.data"))
        .err()
        .unwrap();
    assert_eq!(
        err.to_string(),
        "cannot open /nonexistent/wprof.data: No such file or directory (ENOENT)"
    );
}
