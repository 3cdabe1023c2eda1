//! A capture as renderers see it: the [`CaptureSource`] trait, implemented by
//! the capture reader (and, in tests, by the in-memory `FakeCapture`).

use std::ops::ControlFlow;

use crate::capture::format::CaptureError;
use crate::capture::model::{
    CaptureInfo, CaptureStats, Event, FrameAddr, FrameId, RecordSchema, Stack, StackId, StringId,
    Symbol, Thread, ThreadId,
};
use crate::capture::reader::CaptureReader;

/// A capture as renderers see it: tables by typed id, and events streamed in
/// time order so that memory does not grow with the number of events.
pub trait CaptureSource {
    fn info(&self) -> &CaptureInfo;
    /// Indexed by `RecordId`.
    fn schemas(&self) -> &[RecordSchema];
    fn string(&self, id: StringId) -> &str;
    /// Indexed by `ThreadId`.
    fn threads(&self) -> &[Thread];
    fn thread(&self, id: ThreadId) -> &Thread;
    fn stack(&self, id: StackId) -> &Stack;
    fn frame(&self, id: FrameId) -> &FrameAddr;
    /// What the frame resolved to, if it was symbolized.
    fn symbol(&self, id: FrameId) -> Option<&Symbol>;
    fn stacks_len(&self) -> usize;
    /// `None`: the capture was not finished.
    fn stats(&self) -> Option<&CaptureStats>;
    /// A sentence about what was lost (truncation, corruption), if anything.
    fn damage(&self) -> Option<String>;
    /// Calls `f` on each event in time order until it returns `Break`.
    /// `Err` is a read failure part way through. An output that needs
    /// several passes calls it again: each call starts from the first event.
    fn for_each_event(
        &self,
        f: &mut dyn FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<(), CaptureError>;
}

impl CaptureSource for CaptureReader {
    fn info(&self) -> &CaptureInfo {
        CaptureReader::info(self)
    }
    fn schemas(&self) -> &[RecordSchema] {
        CaptureReader::schemas(self)
    }
    fn string(&self, id: StringId) -> &str {
        CaptureReader::string(self, id)
    }
    fn threads(&self) -> &[Thread] {
        CaptureReader::threads(self)
    }
    fn thread(&self, id: ThreadId) -> &Thread {
        CaptureReader::thread(self, id)
    }
    fn stack(&self, id: StackId) -> &Stack {
        CaptureReader::stack(self, id)
    }
    fn frame(&self, id: FrameId) -> &FrameAddr {
        CaptureReader::frame(self, id)
    }
    fn symbol(&self, id: FrameId) -> Option<&Symbol> {
        CaptureReader::symbol(self, id)
    }
    fn stacks_len(&self) -> usize {
        CaptureReader::stacks_len(self)
    }
    fn stats(&self) -> Option<&CaptureStats> {
        CaptureReader::stats(self)
    }
    fn damage(&self) -> Option<String> {
        CaptureReader::damage(self).map(|d| d.to_string())
    }
    fn for_each_event(
        &self,
        f: &mut dyn FnMut(&Event) -> ControlFlow<()>,
    ) -> Result<(), CaptureError> {
        CaptureReader::for_each_event(self, f)
    }
}

#[cfg(test)]
pub use fake::{FakeCapture, MakeEvent};

#[cfg(test)]
mod fake {
    use std::collections::HashMap;

    use super::*;
    use crate::capture::model::{
        DropReason, FieldSchema, FieldType, FieldValue, FieldValue as V, RecordDrops, RecordId,
        RecordKind, RecordOrigin,
    };
    use crate::capture::walk::{StackEnding, StackWalk, Unwinder};
    use crate::tracking::compiled;

    /// Fills the reused event with the event at an index.
    pub type MakeEvent = fn(u64, &mut Event);

    /// An in-memory capture for renderer tests, built with small helpers.
    #[derive(Clone, Debug, Default)]
    pub struct FakeCapture {
        pub info: CaptureInfo,
        pub schemas: Vec<RecordSchema>,
        pub strings: Vec<String>,
        string_ids: HashMap<String, StringId>,
        pub threads: Vec<Thread>,
        pub stacks: Vec<Stack>,
        pub frames: Vec<FrameAddr>,
        pub symbols: Vec<Option<Symbol>>,
        pub events: Vec<Event>,
        pub stats: Option<CaptureStats>,
        pub damage: Option<String>,
        /// `(offset, what)`: `for_each_event` reports the capture corrupt
        /// there after the events, to imitate a read failure.
        pub read_error: Option<(u64, String)>,
        /// After `events`, this many more made on the fly by the function (given
        /// the index and a reused event): for speed tests without the memory.
        pub generated: Option<(u64, MakeEvent)>,
    }

    impl FakeCapture {
        /// An empty, finished capture with a plausible description.
        pub fn new() -> Self {
            FakeCapture {
                info: CaptureInfo {
                    command_line: vec![
                        "wprof".into(),
                        "-e".into(),
                        "uprobe:libc:malloc < >".into(),
                    ],
                    script: "uprobe:libc:malloc < >".into(),
                    script_name: "<script>".into(),
                    hostname: "testhost".into(),
                    kernel_release: "6.18.0-test".into(),
                    cpus: 2,
                    start_monotonic_ns: 1_000_000_000,
                    start_realtime_ns: 1_781_094_600_123_456_789,
                    wprof_version: "0.1.0".into(),
                    settings: Default::default(),
                    command_pid: None,
                },
                stats: Some(CaptureStats {
                    duration_ns: 1_000_000_000,
                    ..CaptureStats::default()
                }),
                ..Default::default()
            }
        }

        /// Two processes, an instant probe with stacks and a span probe with
        /// strings that need escaping; every kind of frame.
        pub fn sample() -> Self {
            let mut c = FakeCapture::new();
            let app = c.add_thread(100, 100, "app", "app");
            let worker = c.add_thread(101, 100, "work\"er\u{1}", "app");
            let bash = c.add_thread(200, 200, &String::from_utf8_lossy(b"ba\xffsh"), "bash");
            let malloc = c.add_schema(
                "malloc",
                RecordKind::Instant,
                &[("size", FieldType::UInt)],
                true,
            );
            let fields = [("what", FieldType::Str), ("ret", FieldType::Int)];
            let lock = c.add_schema("lock", RecordKind::Span, &fields, false);
            let user = c.add_user_frame(
                "/usr/lib/libfoo.so",
                0x51a,
                "func",
                0x1a,
                Some(("file.c", 12)),
            );
            let inner = c.intern("inner");
            let outer = c.intern("outer");
            c.symbols[user.0 as usize].as_mut().unwrap().inlined = vec![outer, inner];
            let open = Symbol {
                function: Some(c.intern("do_sys_open")),
                offset: 0x10,
                ..Symbol::default()
            };
            let kernel = c.add_frame(
                FrameAddr::Kernel {
                    addr: 0xffff_ffff_8100_0010,
                },
                Some(open),
            );
            let raw_kernel = c.add_frame(
                FrameAddr::Kernel {
                    addr: 0xffff_ffff_8100_0020,
                },
                None,
            );
            let module = c.intern("/opt/libbar.so");
            let unresolved = FrameAddr::User {
                module,
                build_id: None,
                file_offset: 0x1234,
            };
            let unresolved = c.add_frame(unresolved, Some(Symbol::default()));
            let unknown = c.add_frame(
                FrameAddr::UnknownUser {
                    addr: 0x7f00_dead_beef,
                },
                None,
            );
            let deep = c.add_stack(&[user, kernel]);
            let odd = c.add_stack(&[unknown, unresolved, raw_kernel]);
            let e = c.add_event(1_234_567_890, app, malloc, vec![V::UInt(64)]);
            (e.cpu, e.stack) = (1, Some(deep));
            let text = c.intern("a\"b\\c\nd\te");
            let e = c.add_event(1_500_000_000, worker, lock, vec![V::Str(text), V::Int(-5)]);
            e.duration_ns = Some(123_000);
            let e = c.add_event(2_000_000_000, app, malloc, vec![V::UInt(128)]);
            e.stack = Some(deep);
            e.walk = Some(StackWalk {
                unwinder: Some(Unwinder::Table),
                ending: Some(StackEnding::Outermost),
                kernel_truncated: false,
            });
            let e = c.add_event(2_500_000_000, bash, malloc, vec![V::UInt(1)]);
            e.stack = Some(odd);
            e.walk = Some(StackWalk {
                unwinder: Some(Unwinder::KernelWalk),
                ending: None,
                kernel_truncated: true,
            });
            let stats = c.stats.as_mut().expect("a new capture is finished");
            *stats = CaptureStats {
                events: stats.events,
                duration_ns: 3_000_000_000,
                ..CaptureStats::with_record_drops(vec![RecordDrops {
                    record: malloc,
                    reason: DropReason::StackLost,
                    count: 3,
                }])
            };
            c
        }

        /// Interns `text`.
        pub fn intern(&mut self, text: &str) -> StringId {
            if let Some(&id) = self.string_ids.get(text) {
                return id;
            }
            let id = StringId(self.strings.len() as u32);
            self.strings.push(text.to_owned());
            self.string_ids.insert(text.to_owned(), id);
            id
        }

        pub fn add_thread(&mut self, tid: u32, pid: u32, comm: &str, pcomm: &str) -> ThreadId {
            let name = self.intern(comm);
            let process_name = self.intern(pcomm);
            self.threads.push(Thread {
                tid,
                pid,
                name,
                process_name,
                ppid: 0,
                kthread: false,
            });
            ThreadId(self.threads.len() as u32 - 1)
        }

        /// Adds a schema; `fields` are `(name, type)`.
        pub fn add_schema(
            &mut self,
            name: &str,
            kind: RecordKind,
            fields: &[(&str, FieldType)],
            has_stack: bool,
        ) -> RecordId {
            self.schemas.push(RecordSchema {
                probe: format!("uprobe:/usr/lib/libc.so.6:{name}"),
                name: name.to_owned(),
                kind,
                fields: fields
                    .iter()
                    .map(|&(name, ty)| FieldSchema {
                        name: name.to_owned(),
                        ty,
                    })
                    .collect(),
                has_stack,
                origin: RecordOrigin::Script,
            });
            RecordId(self.schemas.len() as u32 - 1)
        }

        /// Adds the schema of the built-in tracker record `name` as the real
        /// `probes/*.wp` compile (see `tracking::compiled`: every stack kind,
        /// one `--pmu` counter).
        pub fn add_tracker_schema(&mut self, name: &str) -> RecordId {
            self.schemas.push(compiled::schema(name).clone());
            RecordId(self.schemas.len() as u32 - 1)
        }

        /// The values of an event of `record` given by field name, in schema
        /// order. Panics unless `named` gives every field of the schema and no
        /// other, so fixtures follow the compiled layout.
        #[track_caller]
        pub fn values(&self, record: RecordId, named: &[(&str, FieldValue)]) -> Vec<FieldValue> {
            let schema = &self.schemas[record.0 as usize];
            for (name, _) in named {
                assert!(
                    schema.fields.iter().any(|f| f.name == *name),
                    "{} records no field {name}",
                    schema.name
                );
            }
            (schema.fields.iter())
                .map(|field| {
                    let given = named.iter().find(|(name, _)| *name == field.name);
                    let given = given
                        .unwrap_or_else(|| panic!("no value for {}.{}", schema.name, field.name));
                    given.1.clone()
                })
                .collect()
        }

        pub fn add_frame(&mut self, addr: FrameAddr, symbol: Option<Symbol>) -> FrameId {
            self.frames.push(addr);
            self.symbols.push(symbol);
            FrameId(self.frames.len() as u32 - 1)
        }

        /// A user frame in `module` resolved to `function` (with `file:line` if given).
        pub fn add_user_frame(
            &mut self,
            module: &str,
            file_offset: u64,
            function: &str,
            offset: u64,
            source: Option<(&str, u32)>,
        ) -> FrameId {
            let module = self.intern(module);
            let symbol = Symbol {
                function: Some(self.intern(function)),
                offset,
                file: source.map(|(file, _)| self.intern(file)),
                line: source.map(|(_, line)| line),
                inlined: vec![],
            };
            let addr = FrameAddr::User {
                module,
                build_id: None,
                file_offset,
            };
            self.add_frame(addr, Some(symbol))
        }

        pub fn add_stack(&mut self, frames: &[FrameId]) -> StackId {
            self.stacks.push(Stack {
                frames: frames.to_vec(),
            });
            StackId(self.stacks.len() as u32 - 1)
        }

        /// Appends an event (keep them in time order).
        pub fn add_event(
            &mut self,
            ts_ns: u64,
            thread: ThreadId,
            record: RecordId,
            values: Vec<FieldValue>,
        ) -> &mut Event {
            self.events.push(Event {
                ts_ns,
                cpu: 0,
                thread,
                record,
                duration_ns: None,
                values,
                stack: None,
                walk: None,
            });
            if let Some(stats) = &mut self.stats {
                stats.events += 1;
            }
            self.events.last_mut().expect("just pushed")
        }
    }

    impl CaptureSource for FakeCapture {
        fn info(&self) -> &CaptureInfo {
            &self.info
        }
        fn schemas(&self) -> &[RecordSchema] {
            &self.schemas
        }
        fn string(&self, id: StringId) -> &str {
            &self.strings[id.0 as usize]
        }
        fn threads(&self) -> &[Thread] {
            &self.threads
        }
        fn thread(&self, id: ThreadId) -> &Thread {
            &self.threads[id.0 as usize]
        }
        fn stack(&self, id: StackId) -> &Stack {
            &self.stacks[id.0 as usize]
        }
        fn frame(&self, id: FrameId) -> &FrameAddr {
            &self.frames[id.0 as usize]
        }
        fn symbol(&self, id: FrameId) -> Option<&Symbol> {
            self.symbols[id.0 as usize].as_ref()
        }
        fn stacks_len(&self) -> usize {
            self.stacks.len()
        }
        fn stats(&self) -> Option<&CaptureStats> {
            self.stats.as_ref()
        }
        fn damage(&self) -> Option<String> {
            self.damage.clone()
        }
        fn for_each_event(
            &self,
            f: &mut dyn FnMut(&Event) -> ControlFlow<()>,
        ) -> Result<(), CaptureError> {
            for event in &self.events {
                if f(event).is_break() {
                    return Ok(());
                }
            }
            if let Some((count, make)) = self.generated {
                let mut event = Event::default();
                for index in 0..count {
                    make(index, &mut event);
                    if f(&event).is_break() {
                        return Ok(());
                    }
                }
            }
            match &self.read_error {
                Some((offset, what)) => Err(CaptureError::Corrupt {
                    path: "test.data".into(),
                    offset: *offset,
                    what: what.clone(),
                }),
                None => Ok(()),
            }
        }
    }
}
