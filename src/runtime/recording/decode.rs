//! Record messages → field values: how each field of a message decodes
//! (by its schema and layout), and the trackers' `task` record, which sets
//! thread identities instead of becoming an event.

use super::{RecordError, Recorder};
use crate::capture::model::{FieldType, FieldValue, RecordSchema, ThreadInfo};
use crate::output::value::{Value, decode};
use crate::tracking::records::{IDENTITY, Kind, Trackers};
use crate::vocab::ValueType;

/// How one field of a record message decodes.
#[derive(Clone, Debug)]
pub(super) enum FieldDecoder {
    Value {
        at: u32,
        ty: ValueType,
    },
    /// A task: the kernel stores its tid as a u64.
    Thread {
        at: u32,
    },
    /// A kernel address stored as the symbol's name.
    KernelSymbol {
        at: u32,
    },
}

/// Positions of the tracker `task` record's fields, in `records::IDENTITY` order.
#[derive(Clone, Copy, Debug)]
pub(super) struct IdentityRecord {
    pub(super) record: u32,
    fields: [usize; IDENTITY.len()],
}

impl Recorder {
    /// The fields of `bytes` into `values`, in schema order.
    pub(super) fn decode(
        &mut self,
        message: usize,
        bytes: &[u8],
        values: &mut Vec<FieldValue>,
    ) -> Result<(), RecordError> {
        let Recorder {
            fields,
            writer,
            threads,
            kernel_symbols,
            ..
        } = self;
        for field in fields.get(message).map(Vec::as_slice).unwrap_or_default() {
            let value = match field {
                FieldDecoder::Thread { at } => {
                    FieldValue::Thread(threads.of_field(writer, u64_at(bytes, *at)? as u32))
                }
                FieldDecoder::KernelSymbol { at } => {
                    let name = kernel_symbols.function_and_offset(u64_at(bytes, *at)?);
                    FieldValue::Str(writer.intern(&name))
                }
                FieldDecoder::Value { at, ty } => {
                    let field = bytes.get(*at as usize..).unwrap_or_default();
                    match decode(field, ty).map_err(|e| RecordError::Malformed(e.to_string()))? {
                        Value::Int(v) => FieldValue::Int(v),
                        Value::UInt(v) | Value::Probe(v) => FieldValue::UInt(v),
                        Value::Str(text) => {
                            FieldValue::Str(writer.intern(&String::from_utf8_lossy(&text)))
                        }
                        other => {
                            return Err(RecordError::Malformed(format!(
                                "unexpected field value {other:?}"
                            )));
                        }
                    }
                }
            };
            values.push(value);
        }
        Ok(())
    }

    /// A tracker `task` record: the thread it describes is who its tid is from now on.
    pub(super) fn set_identity(&mut self, identity: &IdentityRecord, values: &[FieldValue]) {
        let [tid, pid, ppid, comm, pcomm, kthread] = identity.fields.map(|i| values.get(i));
        let number = |v: Option<&FieldValue>| match v {
            Some(FieldValue::UInt(n)) => *n as u32,
            Some(FieldValue::Int(n)) => *n as u32,
            _ => 0,
        };
        let text = |v: Option<&FieldValue>| match v {
            Some(FieldValue::Str(id)) => self.writer.string(*id).to_string(),
            _ => String::new(),
        };
        let (name, process_name) = (text(comm), text(pcomm));
        let info = ThreadInfo {
            tid: number(tid),
            pid: number(pid),
            ppid: number(ppid),
            kthread: number(kthread) != 0,
            name: &name,
            process_name: &process_name,
        };
        self.threads.set_identity(&mut self.writer, &info);
    }
}

/// How the fields of a record message decode: thread fields by the schema,
/// kernel symbols by their layout.
pub(super) fn decoders(
    records: &[RecordSchema],
    record: u32,
    layout: &[(u32, ValueType)],
) -> Vec<FieldDecoder> {
    let schema = records.get(record as usize);
    layout
        .iter()
        .enumerate()
        .map(|(index, (at, ty))| {
            let field_type = schema.and_then(|s| s.fields.get(index)).map(|f| f.ty);
            match (field_type, ty) {
                (Some(FieldType::Thread), _) => FieldDecoder::Thread { at: *at },
                (_, ValueType::Symbol { kernel: true }) => FieldDecoder::KernelSymbol { at: *at },
                _ => FieldDecoder::Value {
                    at: *at,
                    ty: ty.clone(),
                },
            }
        })
        .collect()
}

/// The trackers' `task` record, when it has every identity field.
pub(super) fn identity_record(records: &[RecordSchema]) -> Option<IdentityRecord> {
    let trackers = Trackers::new(records);
    let (record, layout) = trackers.find(Kind::Task)?;
    let mut fields = [0; IDENTITY.len()];
    for (slot, field) in fields.iter_mut().zip(IDENTITY) {
        *slot = layout.position(field)?;
    }
    Some(IdentityRecord {
        record: record as u32,
        fields,
    })
}

pub(super) fn u64_at(bytes: &[u8], at: u32) -> Result<u64, RecordError> {
    bytes
        .get(at as usize..at as usize + 8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        .ok_or_else(|| malformed(bytes))
}

pub(super) fn malformed(bytes: &[u8]) -> RecordError {
    RecordError::Malformed(format!("{} bytes", bytes.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::{FieldSchema, RecordKind, RecordOrigin};

    fn schema(name: &str, origin: RecordOrigin, fields: &[(&str, FieldType)]) -> RecordSchema {
        RecordSchema {
            probe: String::new(),
            name: name.into(),
            kind: RecordKind::Instant,
            fields: fields
                .iter()
                .map(|(name, ty)| FieldSchema {
                    name: (*name).into(),
                    ty: *ty,
                })
                .collect(),
            has_stack: false,
            origin,
        }
    }

    /// Thread fields decode by the schema, kernel symbols by the layout.
    #[test]
    fn picks_decoders() {
        let records = [schema(
            "switch",
            RecordOrigin::Tracker,
            &[
                ("next", FieldType::Thread),
                ("func", FieldType::Str),
                ("n", FieldType::UInt),
            ],
        )];
        let int = ValueType::Int {
            size: 8,
            signed: false,
        };
        let layout = [
            (80, int.clone()),
            (88, ValueType::Symbol { kernel: true }),
            (96, int),
        ];
        let decoders = decoders(&records, 0, &layout);
        assert!(matches!(decoders[0], FieldDecoder::Thread { at: 80 }));
        assert!(matches!(decoders[1], FieldDecoder::KernelSymbol { at: 88 }));
        assert!(matches!(decoders[2], FieldDecoder::Value { at: 96, .. }));
    }

    /// Only the trackers' complete `task` record sets identities, wherever
    /// its fields are.
    #[test]
    fn finds_the_identity_record() {
        let fields: Vec<(&str, FieldType)> = IDENTITY
            .iter()
            .rev()
            .map(|field| (field.name(), field.ty()))
            .collect();
        let task = schema("task", RecordOrigin::Tracker, &fields);
        let user_task = schema("task", RecordOrigin::Script, &fields);
        let found = identity_record(&[user_task.clone(), task.clone()]).expect("found");
        assert_eq!((found.record, found.fields), (1, [5, 4, 3, 2, 1, 0]));
        assert!(identity_record(&[user_task]).is_none());
        let partial = schema("task", RecordOrigin::Tracker, &fields[1..]);
        assert!(identity_record(&[partial]).is_none());
    }

    /// The compiled trackers' `task` record is found.
    #[test]
    fn finds_the_compiled_identity_record() {
        let schemas = crate::tracking::compiled::schemas();
        let found = identity_record(schemas).expect("the trackers record identities");
        assert_eq!(schemas[found.record as usize].name, Kind::Task.name());
    }
}
