//! Capture reader, payload side: the bytes of a chunk → model values
//! (`docs/data-format.md` gives each layout). Every id is checked against
//! the size of its table, every count against the bytes left.

use super::super::format::{Decoder, MAX_CPUS, Malformed};
use super::super::model::{
    CaptureInfo, CaptureSettings, CaptureStats, DropReason, Event, FieldSchema, FieldType,
    FieldValue, FrameAddr, FrameId, RecordDrops, RecordId, RecordKind, RecordOrigin, RecordSchema,
    Stack, StackCount, StackId, StringId, Symbol, Thread, ThreadId,
};

/// The table sizes an events chunk may refer to.
pub(super) struct Limits<'a> {
    pub schemas: &'a [RecordSchema],
    pub strings: usize,
    pub threads: usize,
    pub stacks: usize,
}

/// Decodes the next event into `event`, reusing its `values`.
#[inline]
pub(super) fn decode_event(
    d: &mut Decoder,
    limits: &Limits,
    ts_ns: &mut u64,
    event: &mut Event,
) -> Result<(), Malformed> {
    let at = d.offset();
    let key = d.uvarint()?;
    let Some(schema) = limits.schemas.get((key >> 2) as usize) else {
        return Err(Malformed {
            offset: at,
            what: format!("record id {} out of range", key >> 2),
        });
    };
    *ts_ns = ts_ns.wrapping_add(d.ivarint()? as u64);
    event.ts_ns = *ts_ns;
    event.record = RecordId((key >> 2) as u32);
    let at = d.offset();
    event.cpu = d.u32()?;
    if event.cpu >= MAX_CPUS {
        return Err(Malformed {
            offset: at,
            what: format!("CPU {} is past the limit of {MAX_CPUS}", event.cpu),
        });
    }
    event.thread = ThreadId(d.index(limits.threads, "thread")?);
    event.duration_ns = if key & 1 != 0 {
        Some(d.uvarint()?)
    } else {
        None
    };
    event.values.clear();
    for field in &schema.fields {
        event.values.push(match field.ty {
            FieldType::Int => FieldValue::Int(d.ivarint()?),
            FieldType::UInt => FieldValue::UInt(d.uvarint()?),
            FieldType::Str => FieldValue::Str(StringId(d.index(limits.strings, "string")?)),
            FieldType::Thread => FieldValue::Thread(ThreadId(d.index(limits.threads, "thread")?)),
        });
    }
    event.stack = if key & 2 != 0 {
        Some(StackId(d.index(limits.stacks, "stack")?))
    } else {
        None
    };
    Ok(())
}

/// The most memory reserved ahead for the entries a count in the file
/// claims: the count is only a claim (a hostile chunk says `u32::MAX`), so
/// past this a vector grows as its entries really decode.
pub(super) const MAX_RESERVED_BYTES: usize = 1 << 20;

/// Reserves room in `v` for `count` more entries to be decoded from `d`,
/// within the bytes `d` has left (an entry takes at least one) and
/// `MAX_RESERVED_BYTES`.
pub(super) fn reserve<T>(v: &mut Vec<T>, count: usize, d: &Decoder) {
    let most = MAX_RESERVED_BYTES / size_of::<T>().max(1);
    v.reserve(count.min(d.remaining()).min(most));
}

pub(super) fn decode_info(d: &mut Decoder) -> Result<CaptureInfo, Malformed> {
    let args = d.count()?;
    let mut command_line = Vec::new();
    reserve(&mut command_line, args, d);
    for _ in 0..args {
        command_line.push(d.string()?);
    }
    Ok(CaptureInfo {
        command_line,
        script: d.string()?,
        script_name: d.string()?,
        hostname: d.string()?,
        kernel_release: d.string()?,
        cpus: d.u32()?,
        start_monotonic_ns: d.uvarint()?,
        start_realtime_ns: d.uvarint()?,
        wprof_version: d.string()?,
        settings: decode_settings(d)?,
        command_pid: None,
    })
}

fn decode_settings(d: &mut Decoder) -> Result<CaptureSettings, Malformed> {
    let mut list = || -> Result<Vec<String>, Malformed> {
        let n = d.count()?;
        (0..n).map(|_| d.string()).collect()
    };
    let (features, stacks, pmu, filters) = (list()?, list()?, list()?, list()?);
    let mut spec = || -> Result<Option<String>, Malformed> {
        let s = d.string()?;
        Ok((!s.is_empty()).then_some(s))
    };
    Ok(CaptureSettings {
        features,
        stacks,
        pmu,
        filters,
        prepare: spec()?,
        activate: spec()?,
    })
}

pub(super) fn decode_schema(d: &mut Decoder) -> Result<RecordSchema, Malformed> {
    let probe = d.string()?;
    let name = d.string()?;
    let kind = match d.u8()? {
        0 => RecordKind::Instant,
        1 => RecordKind::Span,
        k => return Err(d.error(format!("unknown record kind {k}"))),
    };
    let n = d.count()?;
    let mut fields = Vec::new();
    reserve(&mut fields, n, d);
    for _ in 0..n {
        let name = d.string()?;
        let ty = match d.u8()? {
            0 => FieldType::Int,
            1 => FieldType::UInt,
            2 => FieldType::Str,
            3 => FieldType::Thread,
            t => return Err(d.error(format!("unknown field type {t}"))),
        };
        fields.push(FieldSchema { name, ty });
    }
    let has_stack = match d.u8()? {
        0 => false,
        1 => true,
        b => return Err(d.error(format!("has_stack is {b}, not 0 or 1"))),
    };
    let origin = match d.u8()? {
        0 => RecordOrigin::Script,
        1 => RecordOrigin::Tracker,
        o => return Err(d.error(format!("unknown record origin {o}"))),
    };
    Ok(RecordSchema {
        probe,
        name,
        kind,
        fields,
        has_stack,
        origin,
    })
}

pub(super) fn decode_thread(d: &mut Decoder, strings: usize) -> Result<Thread, Malformed> {
    Ok(Thread {
        tid: d.u32()?,
        pid: d.u32()?,
        name: StringId(d.index(strings, "string")?),
        process_name: StringId(d.index(strings, "string")?),
        ppid: d.u32()?,
        kthread: match d.u8()? {
            0 => false,
            1 => true,
            b => return Err(d.error(format!("kthread is {b}, not 0 or 1"))),
        },
    })
}

pub(super) fn decode_frame(d: &mut Decoder, strings: usize) -> Result<FrameAddr, Malformed> {
    Ok(match d.u8()? {
        0 => FrameAddr::Kernel { addr: d.uvarint()? },
        1 => {
            let module = StringId(d.index(strings, "string")?);
            let build_id = match d.option()? {
                None => None,
                Some(len) => Some(d.take(len as usize)?.to_vec()),
            };
            FrameAddr::User {
                module,
                build_id,
                file_offset: d.uvarint()?,
            }
        }
        2 => FrameAddr::UnknownUser { addr: d.uvarint()? },
        t => return Err(d.error(format!("unknown frame kind {t}"))),
    })
}

pub(super) fn decode_stack(d: &mut Decoder, frames: usize) -> Result<Stack, Malformed> {
    let n = d.count()?;
    let mut ids = Vec::new();
    reserve(&mut ids, n, d);
    let mut prev = 0i64;
    for _ in 0..n {
        let at = d.offset();
        let id = prev.wrapping_add(d.ivarint()?);
        if id < 0 || id as u64 >= frames as u64 {
            return Err(Malformed {
                offset: at,
                what: format!("frame id {id} out of range ({frames} known)"),
            });
        }
        ids.push(FrameId(id as u32));
        prev = id;
    }
    Ok(Stack { frames: ids })
}

pub(super) fn decode_symbol(
    d: &mut Decoder,
    frames: usize,
    strings: usize,
) -> Result<(FrameId, Symbol), Malformed> {
    let frame = FrameId(d.index(frames, "frame")?);
    let string = |d: &mut Decoder| -> Result<Option<StringId>, Malformed> {
        let at = d.offset();
        match d.option()? {
            Some(id) if (id as usize) < strings => Ok(Some(StringId(id))),
            Some(id) => Err(Malformed {
                offset: at,
                what: format!("string id {id} out of range ({strings} known)"),
            }),
            None => Ok(None),
        }
    };
    let function = string(d)?;
    let offset = d.uvarint()?;
    let file = string(d)?;
    let line = d.option()?;
    let n = d.count()?;
    let mut inlined = Vec::new();
    reserve(&mut inlined, n, d);
    for _ in 0..n {
        inlined.push(StringId(d.index(strings, "string")?));
    }
    let symbol = Symbol {
        function,
        offset,
        file,
        line,
        inlined,
    };
    Ok((frame, symbol))
}

/// The end chunk's statistics; `records` is the number of record schemas.
pub(super) fn decode_stats(d: &mut Decoder, records: usize) -> Result<CaptureStats, Malformed> {
    let events = d.uvarint()?;
    let n = d.count()?;
    let mut drops = Vec::new();
    reserve(&mut drops, n, d);
    for _ in 0..n {
        let reason = drop_reason(d)?;
        drops.push((reason, d.uvarint()?));
    }
    let duration_ns = d.uvarint()?;
    let mut stacks = Vec::new();
    // Format 2.2 added the stack counts; older end chunks stop here.
    if d.remaining() > 0 {
        for _ in 0..d.count()? {
            let code = d.u8()?;
            let n = d.uvarint()?;
            // Counts of a newer minor version are skipped.
            if let Some(count) = StackCount::ALL.into_iter().find(|c| c.code() == code) {
                stacks.push((count, n));
            }
        }
    }
    // Format 2.3 added the drops of each record kind.
    let mut record_drops = Vec::new();
    if d.remaining() > 0 {
        for _ in 0..d.count()? {
            let record = RecordId(d.index(records, "record")?);
            let reason = drop_reason(d)?;
            let count = d.uvarint()?;
            record_drops.push(RecordDrops {
                record,
                reason,
                count,
            });
        }
    }
    Ok(CaptureStats {
        events,
        drops,
        record_drops,
        duration_ns,
        stacks,
    })
}

fn drop_reason(d: &mut Decoder) -> Result<DropReason, Malformed> {
    let code = d.u8()?;
    DropReason::from_code(code).ok_or_else(|| d.error(format!("unknown drop reason {code}")))
}
