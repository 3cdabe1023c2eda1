//! Lowering record blocks, `record` statements and spans into capture
//! events: a header (time, task, CPU, comm, duration, stack ids) and the
//! fields (counters read on the current CPU), sent through the ring buffer;
//! span starts wait in a map until their end.

use crate::capture::model::DropReason;
use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Size, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::codegen::maps::SPAN_VALUE_HEADER;
use crate::frontend::checked::{
    CheckedRecord, RecordRef, RecordRole, RecordValue, SpanRef, StackKind, TExpr,
};
use crate::frontend::types::{COMM_LEN, Type};
use crate::vocab::{Message, MessageId, record_header as header, x86_64};

/// `-EEXIST` from `bpf_get_stackid`: the stack's bucket holds another stack.
const STACK_COLLISION: i32 = -17;

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
        let (message, size) = self.record_message(id, &fields);
        self.comment(format!("record {}", self.program.records[id.0].name));
        let buffer = self.alloc(size);
        let now = self.call_result(KTIME_GET_NS, vec![]);
        self.record_header(buffer, message, now);
        self.store_stacks(buffer + header::KERNEL_STACK as i16, record.stack);
        self.store_fields(buffer + header::FIELDS as i16, &record.values, &fields);
        self.send(buffer, size, record.stack);
    }

    fn span_start(&mut self, span: SpanRef, key: &TExpr, record: &CheckedRecord) {
        let decl = &self.program.spans[span.0];
        let fields = &decl.start_fields;
        let value_size = SPAN_VALUE_HEADER + fields.iter().map(|(_, t)| t.size()).sum::<u32>();
        self.comment(format!("span {} starts", decl.name));
        let key = self.span_key(span, key);
        let value = self.alloc(value_size);
        let now = self.call_result(KTIME_GET_NS, vec![]);
        self.store(Base::Frame, value, Src::Reg(now));
        self.store_stacks(value + 8, record.stack);
        self.store_fields(value + SPAN_VALUE_HEADER as i16, &record.values, fields);
        self.map_update(self.maps.spans[span.0], key, value);
    }

    fn span_end(&mut self, span: SpanRef, key: &TExpr, record: &CheckedRecord) {
        let decl = &self.program.spans[span.0];
        let id = decl.record;
        let start_bytes: u32 = decl.start_fields.iter().map(|(_, t)| t.size()).sum();
        let fields = self.program.records[id.0].fields.clone();
        let (message, size) = self.record_message(id, &fields);
        self.comment(format!("span {} ends", decl.name));
        let key = self.span_key(span, key);
        let map = self.maps.spans[span.0];
        let open = self.call_result(MAP_LOOKUP_ELEM, vec![Arg::Map(map), Arg::Frame(key)]);
        let (found, done) = (self.label(), self.label());
        self.branch(Cond::Ne, open, Src::Imm(0), found);
        self.count_drop(DropReason::UnmatchedSpanEnd);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(found));
        let buffer = self.alloc(size);
        let start = self.load(Base::Reg(open), 0);
        self.record_header(buffer, message, start);
        let now = self.call_result(KTIME_GET_NS, vec![]);
        self.alu(AluOp::Sub, now, Src::Reg(start));
        self.store(Base::Frame, buffer + header::DURATION as i16, Src::Reg(now));
        if decl.start_stack.is_some() {
            self.copy(
                (Base::Frame, buffer + header::KERNEL_STACK as i16),
                (Base::Reg(open), 8),
                24,
            );
        } else {
            self.store_stacks(buffer + header::KERNEL_STACK as i16, record.stack);
        }
        let fields_at = buffer + header::FIELDS as i16;
        self.copy(
            (Base::Frame, fields_at),
            (Base::Reg(open), SPAN_VALUE_HEADER as i16),
            start_bytes,
        );
        let end_fields = &decl.end_fields;
        self.store_fields(fields_at + start_bytes as i16, &record.values, end_fields);
        let args = vec![Arg::Map(map), Arg::Frame(key)];
        self.emit(Inst::Call {
            helper: MAP_DELETE_ELEM,
            args,
            ret: None,
        });
        self.send(buffer, size, record.stack.or(decl.start_stack));
        self.emit(Inst::Bind(done));
    }

    /// The span's key in a frame buffer laid out as the span map's key.
    fn span_key(&mut self, span: SpanRef, key: &TExpr) -> i16 {
        let key_ty = self.program.spans[span.0].key.clone();
        let buffer = self.alloc(key_ty.size());
        let value = self.expr(key);
        self.store_value(value, &key.ty, Base::Frame, buffer, &key_ty);
        buffer
    }

    /// Register the message for record `id`; returns it and the message size.
    fn record_message(&mut self, id: RecordRef, fields: &[(String, Type)]) -> (MessageId, u32) {
        let mut offset = header::FIELDS;
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
        });
        (message, offset)
    }

    /// Message id, time, task, CPU and comm; no duration and no stacks yet.
    fn record_header(&mut self, buffer: i16, message: MessageId, ts: VReg) {
        self.store(Base::Frame, buffer, Src::Imm(message.0 as i32));
        self.store(Base::Frame, buffer + header::TS as i16, Src::Reg(ts));
        let task = self.call_result(GET_CURRENT_PID_TGID, vec![]);
        self.store(
            Base::Frame,
            buffer + header::PID_TGID as i16,
            Src::Reg(task),
        );
        let cpu = self.call_result(GET_SMP_PROCESSOR_ID, vec![]);
        self.store(Base::Frame, buffer + header::CPU as i16, Src::Reg(cpu));
        let comm = buffer + header::COMM as i16;
        let args = vec![Arg::Frame(comm), Arg::Imm(i64::from(COMM_LEN))];
        self.emit(Inst::Call {
            helper: GET_CURRENT_COMM,
            args,
            ret: None,
        });
        for at in [header::DURATION, header::KERNEL_STACK, header::USER_STACK] {
            let value = if at == header::DURATION { 0 } else { -1 };
            self.store(Base::Frame, buffer + at as i16, Src::Imm(value));
        }
    }

    /// The kernel and user stack ids at `at` and `at + 8` (-1 when not
    /// wanted), and at `at + 16` the entry return address of user stacks.
    fn store_stacks(&mut self, at: i16, stack: Option<StackKind>) {
        self.store(Base::Frame, at + 16, Src::Imm(0));
        let Some(stack) = stack else { return };
        if stack.user() && self.probe.function_entry {
            self.entry_return_address(at + 16);
        }
        let maps = [
            (self.maps.kernel_stacks, 0, at),
            (self.maps.user_stacks, BPF_F_USER_STACK, at + 8),
        ];
        for (wanted, (map, flags, at)) in [stack.kernel(), stack.user()].into_iter().zip(maps) {
            let (true, Some(map)) = (wanted, map) else {
                self.store(Base::Frame, at, Src::Imm(-1));
                continue;
            };
            let ctx = self.ctx;
            let id = self.call_result(
                GET_STACKID,
                vec![Arg::Reg(ctx), Arg::Map(map), Arg::Imm(flags)],
            );
            self.store(Base::Frame, at, Src::Reg(id));
            let kept = self.label();
            self.branch(Cond::Ne, id, Src::Imm(STACK_COLLISION), kept);
            self.count_drop(DropReason::StackLost);
            self.emit(Inst::Bind(kept));
        }
    }

    /// `*(u64 *)regs->sp`: at a function's first instruction, the return
    /// address into its caller.
    fn entry_return_address(&mut self, at: i16) {
        let ctx = self.ctx;
        let sp = self.load(Base::Reg(ctx), x86_64::STACK_POINTER as i16);
        let args = vec![Arg::Frame(at), Arg::Imm(8), Arg::Reg(sp)];
        self.emit(Inst::Call {
            helper: PROBE_READ_USER,
            args,
            ret: None,
        });
    }

    /// Stores `values` at `at` in the layout of the record's `fields` (which
    /// may be wider: strings of a shared record take the longest length).
    fn store_fields(&mut self, at: i16, values: &[RecordValue], fields: &[(String, Type)]) {
        let mut offset = at;
        let mut fields = fields.iter().map(|(_, ty)| ty);
        for value in values {
            match value {
                RecordValue::Expr(value) => {
                    let ty = fields.next().expect("a field per value");
                    let result = self.expr(value);
                    self.store_value(result, &value.ty, Base::Frame, offset, ty);
                    offset += ty.size() as i16;
                }
                RecordValue::Counter(counter) => {
                    self.read_counter(*counter, offset);
                    fields.nth(COUNTER_BYTES as usize / 8 - 1);
                    offset += COUNTER_BYTES as i16;
                }
            }
        }
    }

    /// `bpf_perf_event_read_value` of the counter on this CPU: value, time
    /// enabled and time running (the helper zeroes them when it fails).
    fn read_counter(&mut self, counter: usize, at: i16) {
        let map = self.maps.counters[counter];
        let args = vec![
            Arg::Map(map),
            Arg::Imm(BPF_F_CURRENT_CPU),
            Arg::Frame(at),
            Arg::Imm(i64::from(COUNTER_BYTES)),
        ];
        self.emit(Inst::Call {
            helper: PERF_EVENT_READ_VALUE,
            args,
            ret: None,
        });
    }

    /// Send `size` bytes at `buffer`; count the event as lost when the ring is full.
    fn send(&mut self, buffer: i16, size: u32, stack: Option<StackKind>) {
        let flags = self.wakeup_flags(stack);
        let args = vec![
            Arg::Map(self.maps.ringbuf),
            Arg::Frame(buffer),
            Arg::Imm(i64::from(size)),
            flags,
        ];
        let result = self.call_result(RINGBUF_OUTPUT, args);
        let sent = self.label();
        self.branch(Cond::Eq, result, Src::Imm(0), sent);
        self.count_drop(DropReason::RingBufferFull);
        self.emit(Inst::Bind(sent));
    }

    /// When to wake the recorder. It drains the ring on a timer anyway, so
    /// most events wake it only once the ring is more than half full: a
    /// wake-up per event costs an irq_work and a switch to the reader (it
    /// tripled the time of `perf bench sched pipe` under a sched_switch
    /// record). Events with a user stack keep the kernel's default (wake an
    /// idle reader): their process must still be alive when the recorder
    /// normalizes the stack's addresses.
    fn wakeup_flags(&mut self, stack: Option<StackKind>) -> Arg {
        if stack.is_some_and(StackKind::user) {
            return Arg::Imm(0);
        }
        let queued = self.call_result(
            RINGBUF_QUERY,
            vec![Arg::Map(self.maps.ringbuf), Arg::Imm(BPF_RB_AVAIL_DATA)],
        );
        let flags = self.vreg();
        self.mov_imm(flags, BPF_RB_NO_WAKEUP);
        let quiet = self.label();
        let half = (self.maps.ringbuf_bytes / 2) as i32;
        self.branch(Cond::Le, queued, Src::Imm(half), quiet);
        self.mov_imm(flags, BPF_RB_FORCE_WAKEUP);
        self.emit(Inst::Bind(quiet));
        Arg::Reg(flags)
    }

    /// `drops[reason] += 1` in the per-CPU drops map.
    fn count_drop(&mut self, reason: DropReason) {
        let drops = self.maps.drops.expect("records have a drops map");
        let key = self.alloc(8);
        self.store_sized(Base::Frame, key, Src::Imm(reason as i32), Size::U32);
        let counter = self.call_result(MAP_LOOKUP_ELEM, vec![Arg::Map(drops), Arg::Frame(key)]);
        let missing = self.label();
        self.branch(Cond::Eq, counter, Src::Imm(0), missing);
        let value = self.load(Base::Reg(counter), 0);
        self.alu(AluOp::Add, value, Src::Imm(1));
        self.store(Base::Reg(counter), 0, Src::Reg(value));
        self.emit(Inst::Bind(missing));
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

    /// A disabled `stack(KIND)` compiles to no stack maps and no stack calls.
    #[test]
    fn disabled_stack_kind_compiles_to_nothing() {
        let off = compiled("kprobe:f < stack(offcpu) >", &CompileOptions::default());
        assert!(off.kernel_stacks.is_none() && off.user_stacks.is_none());
        let on = CompileOptions {
            stacks: ["offcpu".to_owned()].into(),
            ..CompileOptions::default()
        };
        let on = compiled("kprobe:f < stack(offcpu) >", &on);
        assert!(on.kernel_stacks.is_some() && on.user_stacks.is_some());
    }
}
