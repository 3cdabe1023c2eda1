//! Lowering record blocks, `record` statements and spans into capture
//! events: a header (time, task, CPU, comm, duration, stack ids) and the
//! fields (counters read on the current CPU), sent through the ring buffer;
//! span starts wait in a map until their end.

use crate::capture::model::{DropReason, RecordId};
use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Label, Size, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::codegen::lower_stack::{Scratch, StackTarget};
use crate::codegen::maps::{SPAN_FRAME_BYTES, SPAN_VALUE_HEADER};
use crate::codegen::program::drop_counter;
use crate::codegen::stack_layout::{
    KERNEL_FRAMES_BYTES, SPAN_FRAMES_BYTES, USER_FRAMES_BYTES, records_of, snapshot,
};
use crate::frontend::checked::{
    CheckedRecord, OffcpuStack, RecordRef, RecordRole, RecordValue, SpanRef, StackKind, TExpr,
};
use crate::frontend::types::{COMM_LEN, Type};
use crate::unwind::maps::flags as stack_flags;
use crate::vocab::{GlobalSlot, MapId, Message, MessageId, record_header as header};

/// Where a record is built: a frame buffer, or a map value (the scratch
/// buffer of a record with a stack), `at` bytes in.
#[derive(Clone, Copy)]
struct Place {
    base: Base,
    at: i16,
}

impl Place {
    fn frame(offset: i16) -> Place {
        Place {
            base: Base::Frame,
            at: offset,
        }
    }

    fn reg(pointer: VReg) -> Place {
        Place {
            base: Base::Reg(pointer),
            at: 0,
        }
    }

    /// The place `bytes` further on.
    fn at(self, bytes: u32) -> Place {
        Place {
            at: self.at + bytes as i16,
            ..self
        }
    }

    /// The offset of byte `bytes` from the base.
    fn offset(self, bytes: u32) -> i16 {
        self.at + bytes as i16
    }
}

/// What the end of a span puts in its event.
struct SpanEndParts<'a> {
    open: VReg,
    message: MessageId,
    start_bytes: u32,
    end_fields: &'a [(String, Type)],
    values: &'a [RecordValue],
}

/// Bytes of a record's fields.
fn fields_size(fields: &[(String, Type)]) -> u32 {
    fields.iter().map(|(_, ty)| ty.size()).sum()
}

/// Records wake the reader of a ring more than a quarter full at most this
/// often.
const WAKE_INTERVAL_NS: i32 = 1_000_000;
/// Records a CPU sends between two looks at the ring's fill (a power of two).
const RING_CHECK_INTERVAL: i32 = 16;

/// `struct bpf_perf_event_value`: counter, enabled, running.
const COUNTER_BYTES: u32 = 24;

impl Lowerer<'_> {
    pub(super) fn record(&mut self, record: &CheckedRecord) {
        match &record.role {
            RecordRole::Instant(id) => self.instant(*id, record),
            RecordRole::SpanStart { span, key } => self.span_start(*span, key, record),
            RecordRole::SpanEnd { span, key } => self.span_end(*span, key, record),
        }
    }

    fn instant(&mut self, id: RecordRef, record: &CheckedRecord) {
        let fields = self.program.records[id.0].fields.clone();
        let fields_bytes = fields_size(&fields);
        let fields_at = match record.stack {
            Some(_) => header::FIELDS,
            None => header::PLAIN_FIELDS,
        };
        let message = self.record_message(id, &fields, fields_at, record.stack.is_some());
        self.comment(format!("record {}", self.program.records[id.0].name));
        // A program that unwinds user stacks shares its 512 bytes of BPF
        // stack with the unwinder: all its records are built in the scratch.
        if record.stack.is_none() && !self.unwinds_user_stacks() {
            self.build_in_ring(id, message, &record.values, &fields);
            return;
        }
        let offcpu = record.offcpu_stack.as_ref();
        let skip = self.label();
        let pending =
            matches!(offcpu, Some(OffcpuStack::Pending)).then(|| self.pending_blocks(skip));
        self.with_scratch(id, |cx, scratch| {
            // The deferred user stack of long blocks goes out at the time of
            // the first's switch-in, which identifies them.
            let now = match (&pending, offcpu) {
                (Some(pending), _) => pending.from,
                // Stamped by the switch's stack once its walk is done.
                (None, Some(OffcpuStack::Switch(_))) => {
                    let unset = cx.vreg();
                    cx.mov_imm(unset, 0);
                    unset
                }
                (None, _) => cx.call_result(KTIME_GET_NS, vec![]),
            };
            let at = Place::reg(scratch.buf);
            cx.record_header(at, message, now, fields_at);
            cx.store_fields(at.at(fields_at), &record.values, &fields);
            let fixed = fields_at + fields_bytes;
            match record.stack {
                Some(parts) => {
                    let target = StackTarget {
                        buf: scratch.buf,
                        frames_at: fixed,
                        desc_at: header::KERNEL_FRAMES as i16,
                    };
                    let frames = cx.take_stack(parts, offcpu, target, now);
                    cx.send_with_frames(id, scratch.buf, fixed, frames, parts);
                }
                None => cx.send(id, Arg::Reg(scratch.buf), Arg::Imm(i64::from(fixed)), None),
            }
        });
        if let Some(pending) = pending {
            self.pending_sent(pending.storage);
        }
        self.emit(Inst::Bind(skip));
    }

    /// Builds a record without a stack straight in the ring buffer (its
    /// size is known) and submits it: no staging copy on the BPF stack and
    /// no copy by `bpf_ringbuf_output`. When the ring has no room the event
    /// of `record` is lost (counted) and its fields are not evaluated.
    fn build_in_ring(
        &mut self,
        record: RecordRef,
        message: MessageId,
        values: &[RecordValue],
        fields: &[(String, Type)],
    ) {
        let size = header::PLAIN_FIELDS + fields_size(fields);
        let (full, done) = (self.label(), self.label());
        let args = vec![
            Arg::Map(self.maps.ringbuf),
            Arg::Imm(i64::from(size)),
            Arg::Imm(0),
        ];
        let buf = self.call_result(RINGBUF_RESERVE, args);
        self.branch(Cond::Eq, buf, Src::Imm(0), full);
        let now = self.call_result(KTIME_GET_NS, vec![]);
        let at = Place::reg(buf);
        self.record_header(at, message, now, header::PLAIN_FIELDS);
        self.store_fields(at.at(header::PLAIN_FIELDS), values, fields);
        let flags = self.wakeup_flags(None);
        self.emit(Inst::Call {
            helper: RINGBUF_SUBMIT,
            args: vec![Arg::Reg(buf), flags],
            ret: None,
        });
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(full));
        self.count_drop(record, DropReason::RingBufferFull);
        self.emit(Inst::Bind(done));
    }

    /// Whether some record of this probe has a user stack.
    fn unwinds_user_stacks(&self) -> bool {
        records_of(self.probe).any(|r| r.stack.is_some_and(StackKind::user))
    }

    /// Runs `build` with a scratch buffer of this CPU (records with stacks
    /// are built there); when none is free the event of `record` is lost
    /// (counted).
    fn with_scratch(&mut self, record: RecordRef, build: impl FnOnce(&mut Self, &Scratch)) {
        let (full, done) = (self.label(), self.label());
        let scratch = self.scratch_acquire(full);
        build(self, &scratch);
        self.scratch_release(&scratch);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(full));
        self.count_drop(record, DropReason::StackLost);
        self.emit(Inst::Bind(done));
    }

    /// Sends the message of `record` at `buf`: `fixed` bytes of header and
    /// fields, then `frames` bytes of frames.
    fn send_with_frames(
        &mut self,
        record: RecordRef,
        buf: VReg,
        fixed: u32,
        frames: VReg,
        parts: StackKind,
    ) {
        let size = self.vreg();
        self.mov(size, frames);
        let frames_max = USER_FRAMES_BYTES + KERNEL_FRAMES_BYTES;
        let most = if parts.user() {
            frames_max + snapshot::BYTES
        } else {
            frames_max
        };
        self.clamp_max(size, most);
        self.alu(AluOp::Add, size, Src::Imm(fixed as i32));
        let urgent = parts.user().then(|| {
            self.load_sized(
                Base::Reg(buf),
                header::STACK_FLAGS as i16,
                crate::codegen::ir::Size::U32,
            )
        });
        self.send(record, Arg::Reg(buf), Arg::Reg(size), urgent);
    }

    fn span_start(&mut self, span: SpanRef, key: &TExpr, record: &CheckedRecord) {
        let decl = &self.program.spans[span.0];
        let fields = decl.start_fields.clone();
        let fields_bytes = fields_size(&fields);
        self.comment(format!("span {} starts", decl.name));
        let key = self.span_key(span, key);
        let map = self.maps.spans[span.0];
        let Some(parts) = record.stack else {
            let value = self.alloc(SPAN_VALUE_HEADER + fields_bytes);
            let now = self.call_result(KTIME_GET_NS, vec![]);
            self.store(Base::Frame, value, Src::Reg(now));
            self.zero(Base::Frame, value + 8, SPAN_VALUE_HEADER - 8);
            self.store_fields(
                Place::frame(value).at(SPAN_VALUE_HEADER),
                &record.values,
                &fields,
            );
            self.map_update(map, key, value);
            return;
        };
        self.with_scratch(decl.record, |cx, scratch| {
            let now = cx.call_result(KTIME_GET_NS, vec![]);
            let value = Place::reg(scratch.buf);
            cx.store(Base::Reg(scratch.buf), 0, Src::Reg(now));
            cx.store_fields(value.at(SPAN_VALUE_HEADER), &record.values, &fields);
            let target = StackTarget {
                buf: scratch.buf,
                frames_at: SPAN_VALUE_HEADER + fields_bytes,
                desc_at: 8,
            };
            let frames = cx.take_stack(parts, None, target, now);
            cx.store(Base::Reg(scratch.buf), SPAN_FRAME_BYTES, Src::Reg(frames));
            let args = vec![
                Arg::Map(map),
                Arg::Frame(key),
                Arg::Reg(scratch.buf),
                Arg::Imm(BPF_ANY),
            ];
            cx.emit(Inst::Call {
                helper: MAP_UPDATE_ELEM,
                args,
                ret: None,
            });
        });
    }

    fn span_end(&mut self, span: SpanRef, key: &TExpr, record: &CheckedRecord) {
        let decl = &self.program.spans[span.0];
        let id = decl.record;
        let start_stack = decl.start_stack;
        let start_bytes = fields_size(&decl.start_fields);
        let end_fields = decl.end_fields.clone();
        let fields = self.program.records[id.0].fields.clone();
        let fields_bytes = fields_size(&fields);
        let stack = record.stack.or(start_stack);
        let message = self.record_message(id, &fields, header::FIELDS, stack.is_some());
        self.comment(format!("span {} ends", decl.name));
        let key = self.span_key(span, key);
        let map = self.maps.spans[span.0];
        let open = self.call_result(MAP_LOOKUP_ELEM, vec![Arg::Map(map), Arg::Frame(key)]);
        let (found, done) = (self.label(), self.label());
        self.branch(Cond::Ne, open, Src::Imm(0), found);
        self.count_drop(id, DropReason::UnmatchedSpanEnd);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(found));
        let end = SpanEndParts {
            open,
            message,
            start_bytes,
            end_fields: &end_fields,
            values: &record.values,
        };
        match stack {
            None => {
                let buffer = self.alloc(header::FIELDS + fields_bytes);
                let at = Place::frame(buffer);
                self.span_end_message(at, &end);
                let size = Arg::Imm(i64::from(header::FIELDS + fields_bytes));
                self.send(id, Arg::Frame(buffer), size, None);
            }
            Some(parts) => self.with_scratch(id, |cx, scratch| {
                let at = Place::reg(scratch.buf);
                let now = cx.span_end_message(at, &end);
                let frames_at = header::FIELDS + fields_bytes;
                let frames = match start_stack {
                    Some(_) => cx.copy_span_frames(open, scratch.buf, start_bytes, frames_at),
                    None => {
                        let target = StackTarget {
                            buf: scratch.buf,
                            frames_at,
                            desc_at: header::KERNEL_FRAMES as i16,
                        };
                        cx.take_stack(parts, None, target, now)
                    }
                };
                cx.send_with_frames(id, scratch.buf, frames_at, frames, parts);
            }),
        }
        let args = vec![Arg::Map(map), Arg::Frame(key)];
        self.emit(Inst::Call {
            helper: MAP_DELETE_ELEM,
            args,
            ret: None,
        });
        self.emit(Inst::Bind(done));
    }

    /// The header (start time, duration; the start's stack description)
    /// and both ends' fields of a span's event at `at`; returns the time now.
    fn span_end_message(&mut self, at: Place, end: &SpanEndParts<'_>) -> VReg {
        let start = self.load(Base::Reg(end.open), 0);
        self.record_header(at, end.message, start, header::FIELDS);
        let now = self.call_result(KTIME_GET_NS, vec![]);
        let duration = self.vreg();
        self.mov(duration, now);
        self.alu(AluOp::Sub, duration, Src::Reg(start));
        self.store(at.base, at.offset(header::DURATION), Src::Reg(duration));
        self.copy(
            (at.base, at.offset(header::KERNEL_FRAMES)),
            (Base::Reg(end.open), 8),
            24,
        );
        let fields_at = at.at(header::FIELDS);
        self.copy(
            (fields_at.base, fields_at.offset(0)),
            (Base::Reg(end.open), SPAN_VALUE_HEADER as i16),
            end.start_bytes,
        );
        self.store_fields(fields_at.at(end.start_bytes), end.values, end.end_fields);
        now
    }

    /// Copies a span start's frames from its open value to `frames_at` of
    /// the end's message; returns their bytes.
    fn copy_span_frames(
        &mut self,
        open: VReg,
        buf: VReg,
        start_bytes: u32,
        frames_at: u32,
    ) -> VReg {
        let bytes = self.load(Base::Reg(open), SPAN_FRAME_BYTES);
        self.clamp_max(bytes, SPAN_FRAMES_BYTES);
        let none = self.label();
        self.branch(Cond::Eq, bytes, Src::Imm(0), none);
        let to = self.offset_pointer(buf, frames_at);
        let from = self.offset_pointer(open, SPAN_VALUE_HEADER + start_bytes);
        self.emit(Inst::Call {
            helper: PROBE_READ_KERNEL,
            args: vec![Arg::Reg(to), Arg::Reg(bytes), Arg::Reg(from)],
            ret: None,
        });
        self.emit(Inst::Bind(none));
        bytes
    }

    /// The span's key in a frame buffer laid out as the span map's key.
    fn span_key(&mut self, span: SpanRef, key: &TExpr) -> i16 {
        let key_ty = self.program.spans[span.0].key.clone();
        let buffer = self.alloc(key_ty.size());
        let value = self.expr(key);
        self.store_value(value, &key.ty, Base::Frame, buffer, &key_ty);
        buffer
    }

    /// Register the message for record `id`, its fields from `fields_at`.
    fn record_message(
        &mut self,
        id: RecordRef,
        fields: &[(String, Type)],
        fields_at: u32,
        stack: bool,
    ) -> MessageId {
        let mut offset = fields_at;
        let layout = fields
            .iter()
            .map(|(_, ty)| {
                let at = offset;
                offset += ty.size();
                (at, ty.layout())
            })
            .collect();
        let message = MessageId(self.messages.len() as u32);
        self.messages.push(Message::Record {
            record: id.0 as u32,
            fields: layout,
            frames_at: stack.then_some(offset),
        });
        message
    }

    /// Message id, time, task, CPU and comm at `at`; no duration and no
    /// stack yet (zeroes up to `fields_at`).
    fn record_header(&mut self, at: Place, message: MessageId, ts: VReg, fields_at: u32) {
        self.store(at.base, at.offset(0), Src::Imm(message.0 as i32));
        self.store(at.base, at.offset(header::TS), Src::Reg(ts));
        let (pid_tgid, comm) = (at.offset(header::PID_TGID), at.offset(header::COMM));
        match self.header_task_fields() {
            Some(fields) => self.store_current_identity(fields, at.base, pid_tgid, comm),
            None => {
                let task = self.call_result(GET_CURRENT_PID_TGID, vec![]);
                self.store(at.base, pid_tgid, Src::Reg(task));
                let comm = self.place_arg(at.at(header::COMM));
                let args = vec![comm, Arg::Imm(i64::from(COMM_LEN))];
                self.emit(Inst::Call {
                    helper: GET_CURRENT_COMM,
                    args,
                    ret: None,
                });
            }
        }
        let cpu = self.call_result(GET_SMP_PROCESSOR_ID, vec![]);
        self.store(at.base, at.offset(header::CPU), Src::Reg(cpu));
        self.zero(
            at.base,
            at.offset(header::DURATION),
            fields_at - header::DURATION,
        );
    }

    /// A helper argument pointing at `place`.
    fn place_arg(&mut self, place: Place) -> Arg {
        match place.base {
            Base::Frame => Arg::Frame(place.offset(0)),
            Base::Reg(pointer) => Arg::Reg(self.offset_pointer(pointer, place.at as u32)),
        }
    }

    /// Stores `values` at `at` in the layout of the record's `fields` (which
    /// may be wider: strings of a shared record take the longest length).
    fn store_fields(&mut self, at: Place, values: &[RecordValue], fields: &[(String, Type)]) {
        let mut offset = 0;
        let mut fields = fields.iter().map(|(_, ty)| ty);
        for value in values {
            match value {
                RecordValue::Expr(value) => {
                    let ty = fields.next().expect("a field per value");
                    let result = self.expr(value);
                    self.store_value(result, &value.ty, at.base, at.offset(offset), ty);
                    offset += ty.size();
                }
                RecordValue::Counter(counter) => {
                    self.read_counter(*counter, at.at(offset));
                    fields.nth(COUNTER_BYTES as usize / 8 - 1);
                    offset += COUNTER_BYTES;
                }
            }
        }
    }

    /// `bpf_perf_event_read_value` of the counter on this CPU: value, time
    /// enabled and time running (the helper zeroes them when it fails).
    fn read_counter(&mut self, counter: usize, at: Place) {
        let map = self.maps.counters[counter];
        let to = self.place_arg(at);
        let args = vec![
            Arg::Map(map),
            Arg::Imm(BPF_F_CURRENT_CPU),
            to,
            Arg::Imm(i64::from(COUNTER_BYTES)),
        ];
        self.emit(Inst::Call {
            helper: PERF_EVENT_READ_VALUE,
            args,
            ret: None,
        });
    }

    /// Send `size` bytes at `buffer`; count the event of `record` as lost
    /// when the ring is full. `stack_flags`: a record with a user stack, how
    /// it was taken.
    fn send(&mut self, record: RecordRef, buffer: Arg, size: Arg, stack_flags: Option<VReg>) {
        let flags = self.wakeup_flags(stack_flags);
        let args = vec![Arg::Map(self.maps.ringbuf), buffer, size, flags];
        let result = self.call_result(RINGBUF_OUTPUT, args);
        let sent = self.label();
        self.branch(Cond::Eq, result, Src::Imm(0), sent);
        self.count_drop(record, DropReason::RingBufferFull);
        self.emit(Inst::Bind(sent));
    }

    /// When to wake the recorder. It drains the ring on a timer anyway, and
    /// once awake until the ring is empty, so events wake it only once the
    /// ring is more than a quarter full (the rest absorbs the recorder's
    /// delay in getting a CPU), and then at most once a millisecond: a
    /// wake-up costs an irq_work, whose self-IPI is a VM exit here
    /// (~2 us in the program), and waking on every event past the quarter
    /// made each one pay it while the reader caught up (a wake-up per
    /// event tripled the time of `perf bench sched pipe` under a
    /// sched_switch record). Past half full every event wakes it again:
    /// the reader is behind (busy building unwind tables, or slower than
    /// the events), and that cost slows the traced work enough for it to
    /// catch up before the ring is full. A user stack that needs its process soon
    /// wakes the reader at once: one walked by the kernel as plain
    /// addresses, or through code mapped since the process's mappings were
    /// read (the recorder reads them again, and normalizes the addresses
    /// while the process lives). The kernel's default would not do: it
    /// wakes only a reader that has consumed everything, and quiet events
    /// before it leave the reader asleep until its poll times out (250 ms),
    /// long after a short-lived process is gone.
    fn wakeup_flags(&mut self, stack_flags: Option<VReg>) -> Arg {
        let flags = self.vreg();
        let quiet = self.label();
        if let Some(stack_flags) = stack_flags {
            let urgent = self.vreg();
            self.mov(urgent, stack_flags);
            let bits = stack_flags::KERNEL_WALK | stack_flags::UNKNOWN_MAPPING;
            self.alu(AluOp::And, urgent, Src::Imm(bits as i32));
            self.mov_imm(flags, BPF_RB_FORCE_WAKEUP);
            self.branch(Cond::Ne, urgent, Src::Imm(0), quiet);
        }
        self.mov_imm(flags, BPF_RB_NO_WAKEUP);
        self.skip_unless_ring_check_due(quiet);
        let queued = self.call_result(
            RINGBUF_QUERY,
            vec![Arg::Map(self.maps.ringbuf), Arg::Imm(BPF_RB_AVAIL_DATA)],
        );
        let quarter = (self.maps.ringbuf_bytes / 4) as i32;
        self.branch(Cond::Le, queued, Src::Imm(quarter), quiet);
        let (rate_limited, wake) = (self.label(), self.label());
        let half = (self.maps.ringbuf_bytes / 2) as i32;
        self.branch(Cond::Le, queued, Src::Imm(half), rate_limited);
        self.mov_imm(flags, BPF_RB_FORCE_WAKEUP);
        self.emit(Inst::Jump(wake));
        self.emit(Inst::Bind(rate_limited));
        self.wake_at_most_once_a_millisecond(flags, quiet);
        self.emit(Inst::Bind(wake));
        self.emit(Inst::Bind(quiet));
        Arg::Reg(flags)
    }

    /// Jumps to `quiet` unless this record is one of every
    /// [`RING_CHECK_INTERVAL`] this CPU sends. Reading the ring's fill costs
    /// ~30 ns a record (the consumer position is a cache line the reader on
    /// another CPU writes), a fifth of a small record's cost; a quarter of
    /// the ring is thousands of records, so looking at every sixteenth per
    /// CPU notices the fill as well.
    fn skip_unless_ring_check_due(&mut self, quiet: Label) {
        let sent = self.maps.sent.expect("records have a sent-counter map");
        let count = self.bump_counter(sent, 0, quiet);
        self.alu(AluOp::And, count, Src::Imm(RING_CHECK_INTERVAL - 1));
        self.branch(Cond::Ne, count, Src::Imm(0), quiet);
    }

    /// Sets `flags` to wake the reader unless one was woken less than a
    /// millisecond ago (else jumps to `quiet`). Two CPUs may both wake it:
    /// harmless.
    pub(super) fn wake_at_most_once_a_millisecond(&mut self, flags: VReg, quiet: Label) {
        let slot = self.vreg();
        self.emit(Inst::MapValueAddr {
            dst: slot,
            map: self.maps.globals,
            offset: 8 * GlobalSlot::ReaderWokenNs as u32,
        });
        let now = self.call_result(KTIME_GET_NS, vec![]);
        let since = self.vreg();
        self.mov(since, now);
        let woken = self.load(Base::Reg(slot), 0);
        self.alu(AluOp::Sub, since, Src::Reg(woken));
        self.branch(Cond::Lt, since, Src::Imm(WAKE_INTERVAL_NS), quiet);
        self.store(Base::Reg(slot), 0, Src::Reg(now));
        self.mov_imm(flags, BPF_RB_FORCE_WAKEUP);
    }

    /// `drops[record][reason] += 1` in the per-CPU drops map.
    pub(super) fn count_drop(&mut self, record: RecordRef, reason: DropReason) {
        let drops = self.maps.drops.expect("records have a drops map");
        let index = drop_counter(RecordId(record.0 as u32), reason);
        let missing = self.label();
        self.bump_counter(drops, index, missing);
        self.emit(Inst::Bind(missing));
    }

    /// Adds one to the u64 at `index` of the per-CPU array `map` and
    /// returns the new value (jumps to `missing` if there is none).
    fn bump_counter(&mut self, map: MapId, index: u32, missing: Label) -> VReg {
        let key = self.alloc(8);
        self.store_sized(Base::Frame, key, Src::Imm(index as i32), Size::U32);
        let counter = self.call_result(MAP_LOOKUP_ELEM, vec![Arg::Map(map), Arg::Frame(key)]);
        self.branch(Cond::Eq, counter, Src::Imm(0), missing);
        let value = self.load(Base::Reg(counter), 0);
        self.alu(AluOp::Add, value, Src::Imm(1));
        self.store(Base::Reg(counter), 0, Src::Reg(value));
        value
    }

    pub(crate) fn call_result(&mut self, helper: u32, args: Vec<Arg>) -> VReg {
        let result = self.vreg();
        self.emit(Inst::Call {
            helper,
            args,
            ret: Some(result),
        });
        result
    }

    pub(crate) fn load(&mut self, base: Base, offset: i16) -> VReg {
        let dst = self.vreg();
        self.emit(Inst::Load {
            dst,
            base,
            offset,
            size: Size::U64,
        });
        dst
    }

    pub(crate) fn store(&mut self, base: Base, offset: i16, src: Src) {
        self.store_sized(base, offset, src, Size::U64);
    }

    pub(crate) fn store_sized(&mut self, base: Base, offset: i16, src: Src, size: Size) {
        self.emit(Inst::Store {
            base,
            offset,
            src,
            size,
        });
    }
}

#[cfg(test)]
mod tests {
    use crate::capture::model::RecordOrigin;
    use crate::codegen::listing::render_listing;
    use crate::codegen::program::Compiled;
    use crate::driver::{Source, compile};
    use crate::frontend::diag::SourceMap;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::frontend::options::CompileOptions;
    use crate::frontend::pmu::parse_counters;
    use crate::vocab::GlobalSlot;
    use crate::vocab::MapKind;

    fn compiled(text: &str, options: &CompileOptions) -> Compiled {
        let source = Source {
            name: "t.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        };
        let (_, compiled) = compile(&[source], &[], &FakeMachine, options)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        compiled
    }

    /// Each counter reads its perf event array on the current CPU straight
    /// into the event's three fields.
    #[test]
    fn pmu_reads_each_counter_into_the_event() {
        let names = ["sw:page-faults".to_owned(), "cycles".to_owned()];
        let options = CompileOptions {
            pmu: parse_counters(&names).expect("known"),
            ..CompileOptions::default()
        };
        let compiled = compiled("kprobe:f < a = arg0; pmu >", &options);
        let names: Vec<&str> = compiled.counters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["sw:page-faults", "cycles"]);
        for counter in &compiled.counters {
            let spec = &compiled.maps[counter.map.0 as usize];
            assert_eq!(spec.kind, MapKind::PerfEventArray);
            assert_eq!(
                spec.max_entries as usize,
                libbpf_rs::num_possible_cpus().unwrap()
            );
        }
        assert_eq!(compiled.records[0].fields.len(), 7);
        let listing = render_listing(
            &compiled.programs[0],
            &SourceMap::new([("t.bt", "kprobe:f < a = arg0; pmu >")]),
        );
        let reads: Vec<&str> = listing
            .lines()
            .filter(|l| l.contains("perf_event_read_value"))
            .collect();
        assert_eq!(reads.len(), 2, "{listing}");
        // Flags must be exactly BPF_F_CURRENT_CPU: a sign-extended -1 is EINVAL.
        assert!(listing.contains("r2 = 0xffffffff\n"), "{listing}");
        assert!(listing.contains("r4 = 24"), "{listing}");
    }

    /// A record without a stack is reserved in the ring at its exact size
    /// and submitted; past a quarter-full ring it wakes the reader only
    /// when the last wake-up is a millisecond old (and stamps the new one),
    /// past half full always.
    #[test]
    fn plain_record_is_built_in_the_ring_and_wakes_rarely() {
        let text = "kprobe:f < a = 1; b = 2 >";
        let compiled = compiled(text, &CompileOptions::default());
        let listing = render_listing(&compiled.programs[0], &SourceMap::new([("t.bt", text)]));
        let lines: Vec<&str> = listing.lines().collect();
        let at = |needle: &str| {
            (lines.iter().position(|l| l.contains(needle)))
                .unwrap_or_else(|| panic!("no `{needle}` in\n{listing}"))
        };
        let reserve = at("call bpf_ringbuf_reserve");
        assert!(lines[reserve - 2].ends_with("r2 = 64"), "{listing}");
        assert!(!listing.contains("ringbuf_output"), "{listing}");
        let (query, submit) = (at("call bpf_ringbuf_query"), at("call bpf_ringbuf_submit"));
        let since = at("< 0xf4240 goto");
        assert!(
            reserve < query && query < since && since < submit,
            "{listing}"
        );
        let slot = 8 * GlobalSlot::ReaderWokenNs as u32;
        assert!(listing.contains(&format!(".value + {slot}")), "{listing}");
        let ring = (compiled.maps.iter())
            .find(|m| m.kind == MapKind::RingBuf)
            .expect("the ring");
        let half = format!("<= {:#x} goto", ring.max_entries / 2);
        assert!(
            listing.contains(&half),
            "past half full every record wakes:\n{listing}"
        );
    }

    /// At `sys_exit` under `-S offcpu=DUR`, the count of tasks with long
    /// blocks waiting is read before the record's first helper call (most
    /// returns end there), and answering the blocks takes the task out of the count.
    #[test]
    fn pending_record_reads_the_waiting_count_first() {
        let options = CompileOptions {
            stacks: ["offcpu".to_owned()].into(),
            offcpu_min_block_ns: Some(1_000_000),
            ..CompileOptions::default()
        };
        let text = "tp_btf:sys_exit < stack(offcpu, pending) >";
        let source = Source {
            name: "t.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        };
        let machine = crate::tracking::compiled::TrackerMachine;
        let (_, compiled) = compile(&[source], &[], &machine, &options)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        let waiting = (compiled.maps.iter())
            .position(|m| m.name == "wprof_offcpu_waiting")
            .expect("the count's map");
        let listing = render_listing(&compiled.programs[0], &SourceMap::new([("t.bt", text)]));
        let count = format!("&map[{waiting}].value");
        let comment = listing.find("; record").expect("the record");
        let record = &listing[listing[..comment].rfind('\n').unwrap_or(0)..];
        let first_read = record.find(&count).expect("the count is read");
        let first_call = record.find("call ").expect("helper calls");
        assert!(first_read < first_call, "{listing}");
        let decrement = listing.rfind("lock *(u64 *)").expect("a locked add");
        assert!(
            listing.rfind(&count).is_some_and(|at| at < decrement),
            "{listing}"
        );
    }

    /// A disabled `stack(KIND)` compiles to no stack maps and no stack calls.
    #[test]
    fn disabled_stack_kind_compiles_to_nothing() {
        let off = compiled("kprobe:f < stack(offcpu) >", &CompileOptions::default());
        assert!(off.unwind.is_none() && off.kernel_stack_skips.is_empty());
        assert!(!off.maps.iter().any(|m| m.name == "wprof_scratch"));
        let on = CompileOptions {
            stacks: ["offcpu".to_owned()].into(),
            ..CompileOptions::default()
        };
        let on = compiled("kprobe:f < stack(offcpu) >", &on);
        assert!(on.unwind.is_some());
        assert!(on.maps.iter().any(|m| m.name == "wprof_scratch"));
    }
}
