//! Lowering map operations (reads, stores, aggregations, delete) and
//! sending the messages of built-in statements to user space.

use crate::codegen::helpers::*;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::checked::{MapRef, TExpr};
use crate::frontend::types::Type;
use crate::vocab::{
    AggFunc, BuiltinId, BuiltinMessage, MapId, Message, MessageId, hist::HIST_MAX_LOG2,
};

impl Lowerer<'_> {
    /// Build the key of `map` in a frame buffer, with a histogram bucket after it.
    fn key(&mut self, map: MapRef, key: Option<&TExpr>, bucket: Option<VReg>) -> i16 {
        let layout = self.maps.script[map.0].clone();
        let offset = self.alloc(layout.key_size);
        match key {
            Some(key) => {
                let value = self.expr(key);
                let key_ty = self.map_key_type(map);
                self.store_value(value, &key.ty, Base::Frame, offset, &key_ty);
            }
            None if bucket.is_none() => self.emit(Inst::Store {
                base: Base::Frame,
                offset,
                src: Src::Imm(0),
                size: Size::U64,
            }),
            None => {}
        }
        if let Some(bucket) = bucket {
            let at = offset + layout.key_bytes as i16;
            self.emit(Inst::Store {
                base: Base::Frame,
                offset: at,
                src: Src::Reg(bucket),
                size: Size::U64,
            });
        }
        offset
    }

    fn map_key_type(&self, map: MapRef) -> Type {
        self.program_maps()[map.0]
            .key
            .clone()
            .expect("keyed access to a keyed map")
    }

    fn lookup(&mut self, map: MapRef, key: i16) -> VReg {
        let args = vec![Arg::Map(self.maps.script[map.0].id), Arg::Frame(key)];
        self.checked_call(MAP_LOOKUP_ELEM, args)
    }

    fn update(&mut self, map: MapRef, key: i16, value: i16) {
        self.map_update(self.maps.script[map.0].id, key, value);
    }

    /// `bpf_map_update_elem(map, &key, &value, BPF_ANY)` with both in the frame.
    pub(super) fn map_update(&mut self, map: MapId, key: i16, value: i16) {
        let args = vec![
            Arg::Map(map),
            Arg::Frame(key),
            Arg::Frame(value),
            Arg::Imm(BPF_ANY),
        ];
        self.checked_call_unused(MAP_UPDATE_ELEM, args);
    }

    /// `@m[key]` as a value: the stored value, or zero when absent.
    pub(super) fn map_read(&mut self, map: MapRef, key: Option<&TExpr>, ty: &Type) -> Value {
        let pointer = match key {
            Some(task) if self.maps.script[map.0].task_storage => {
                self.task_storage_get(map, task, false)
            }
            _ => {
                let key = self.key(map, key, None);
                self.lookup(map, key)
            }
        };
        let missing = self.label();
        let done = self.label();
        let result = match ty.in_memory() {
            true => {
                let buffer = self.alloc(ty.size());
                self.zero(Base::Frame, buffer, ty.size());
                self.branch(Cond::Eq, pointer, Src::Imm(0), missing);
                self.copy((Base::Frame, buffer), (Base::Reg(pointer), 0), ty.size());
                Value::Mem(buffer)
            }
            false => {
                let reg = self.vreg();
                self.mov_imm(reg, 0);
                self.branch(Cond::Eq, pointer, Src::Imm(0), missing);
                self.emit(Inst::Load {
                    dst: reg,
                    base: Base::Reg(pointer),
                    offset: 0,
                    size: Size::U64,
                });
                Value::Int(reg)
            }
        };
        self.emit(Inst::Bind(missing));
        self.emit(Inst::Bind(done));
        result
    }

    pub(super) fn assign_map(&mut self, map: MapRef, key: Option<&TExpr>, value: &TExpr) {
        let result = self.expr(value);
        let stored = match &self.program_maps()[map.0].value {
            crate::frontend::checked::MapValueKind::Plain(ty) => ty.clone(),
            _ => unreachable!("plain assignment to a plain map"),
        };
        let buffer = self.alloc(stored.size());
        self.store_value(result, &value.ty, Base::Frame, buffer, &stored);
        if let Some(task) = key
            && self.maps.script[map.0].task_storage
        {
            return self.task_storage_store(map, task, buffer, stored.size());
        }
        let key = self.key(map, key, None);
        self.comment(format!("{} update", self.program_maps()[map.0].name));
        self.update(map, key, buffer);
    }

    pub(crate) fn delete(&mut self, map: MapRef, key: Option<&TExpr>) {
        if let Some(task) = key
            && self.maps.script[map.0].task_storage
        {
            return self.task_storage_delete(map, task);
        }
        let key = self.key(map, key, None);
        let layout = &self.maps.script[map.0];
        if layout.single_slot {
            // An array entry cannot be deleted: zero it (this CPU's, as bpftrace).
            let size = layout.value_size;
            let zeros = self.alloc(size);
            self.zero(Base::Frame, zeros, size);
            return self.update(map, key, zeros);
        }
        let args = vec![Arg::Map(self.maps.script[map.0].id), Arg::Frame(key)];
        self.checked_call_unused(MAP_DELETE_ELEM, args);
    }

    /// `@m[key] = count()` and friends: update the value in place when it
    /// exists (no atomics needed in per-CPU maps), insert the first value otherwise.
    pub(super) fn aggregate(
        &mut self,
        map: MapRef,
        key: Option<&TExpr>,
        func: AggFunc,
        arg: Option<&TExpr>,
    ) {
        let value = match arg {
            Some(arg) => self.int_expr(arg),
            None => self.constant(1),
        };
        let bucket = match func {
            AggFunc::Hist => Some(self.log2_bucket(value)),
            AggFunc::Lhist { min, max, step } => Some(self.linear_bucket(value, min, max, step)),
            _ => None,
        };
        let key = self.key(map, key, bucket);
        let per_cpu = self.maps.script[map.0].per_cpu;
        self.comment(format!(
            "{}() on {}",
            func.name(),
            self.program_maps()[map.0].name
        ));
        let pointer = self.lookup(map, key);
        let (insert, done) = (self.label(), self.label());
        self.branch(Cond::Eq, pointer, Src::Imm(0), insert);
        self.update_in_place(func, pointer, value, per_cpu);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(insert));
        let size = self.maps.script[map.0].value_size;
        let initial = self.alloc(size);
        self.initial_value(func, initial, value);
        self.update(map, key, initial);
        self.emit(Inst::Bind(done));
    }

    /// Value layouts: count/sum/hist `{u64}`, min/max `{value, set}`, avg/stats `{count, total}`.
    fn update_in_place(&mut self, func: AggFunc, pointer: VReg, value: VReg, per_cpu: bool) {
        let base = Base::Reg(pointer);
        match func {
            AggFunc::Count | AggFunc::Sum | AggFunc::Hist | AggFunc::Lhist { .. } => {
                let amount = if matches!(func, AggFunc::Sum) {
                    value
                } else {
                    self.constant(1)
                };
                self.add_to(pointer, 0, amount, per_cpu);
            }
            AggFunc::Avg | AggFunc::Stats => {
                let one = self.constant(1);
                self.add_to(pointer, 0, one, per_cpu);
                self.add_to(pointer, 8, value, per_cpu);
            }
            AggFunc::Min | AggFunc::Max => {
                let current = self.vreg();
                let keep = self.label();
                self.emit(Inst::Load {
                    dst: current,
                    base,
                    offset: 0,
                    size: Size::U64,
                });
                let cond = if func == AggFunc::Min {
                    Cond::Sle
                } else {
                    Cond::Sge
                };
                self.emit(Inst::Branch {
                    cond,
                    lhs: current,
                    rhs: Src::Reg(value),
                    target: keep,
                });
                self.emit(Inst::Store {
                    base,
                    offset: 0,
                    src: Src::Reg(value),
                    size: Size::U64,
                });
                self.emit(Inst::Bind(keep));
            }
        }
    }

    fn add_to(&mut self, pointer: VReg, offset: i16, amount: VReg, per_cpu: bool) {
        if per_cpu {
            let current = self.vreg();
            self.emit(Inst::Load {
                dst: current,
                base: Base::Reg(pointer),
                offset,
                size: Size::U64,
            });
            self.alu(AluOp::Add, current, Src::Reg(amount));
            self.emit(Inst::Store {
                base: Base::Reg(pointer),
                offset,
                src: Src::Reg(current),
                size: Size::U64,
            });
        } else {
            self.emit(Inst::AtomicAdd {
                base: pointer,
                offset,
                src: amount,
                size: Size::U64,
            });
        }
    }

    fn initial_value(&mut self, func: AggFunc, buffer: i16, value: VReg) {
        let store = |src: Src, offset: i16| Inst::Store {
            base: Base::Frame,
            offset: buffer + offset,
            src,
            size: Size::U64,
        };
        match func {
            AggFunc::Count | AggFunc::Hist | AggFunc::Lhist { .. } => {
                self.emit(store(Src::Imm(1), 0))
            }
            AggFunc::Sum => self.emit(store(Src::Reg(value), 0)),
            AggFunc::Min | AggFunc::Max => {
                self.emit(store(Src::Reg(value), 0));
                self.emit(store(Src::Imm(1), 8));
            }
            AggFunc::Avg | AggFunc::Stats => {
                self.emit(store(Src::Imm(1), 0));
                self.emit(store(Src::Reg(value), 8));
            }
        }
    }

    /// Bucket of `hist()`: 0 for negatives, 1 for zero, 2 + floor(log2(v))
    /// above, as `output::hist::hist_bucket` defines.
    fn log2_bucket(&mut self, value: VReg) -> VReg {
        let (bucket, v, high) = (self.vreg(), self.vreg(), self.vreg());
        let done = self.label();
        self.mov_imm(bucket, 0);
        self.branch(Cond::Slt, value, Src::Imm(0), done);
        self.mov_imm(bucket, 1);
        self.branch(Cond::Eq, value, Src::Imm(0), done);
        self.mov_imm(bucket, 2);
        self.mov(v, value);
        for bits in [32, 16, 8, 4, 2, 1] {
            let skip = self.label();
            self.mov(high, v);
            self.alu(AluOp::Rsh, high, Src::Imm(bits));
            self.branch(Cond::Eq, high, Src::Imm(0), skip);
            self.mov(v, high);
            self.alu(AluOp::Add, bucket, Src::Imm(bits));
            self.emit(Inst::Bind(skip));
        }
        // bpftrace 0.17 puts everything from 2^31 up into its last bucket.
        let last = HIST_MAX_LOG2 as i32 + 2;
        self.branch(Cond::Le, bucket, Src::Imm(last), done);
        self.mov_imm(bucket, last);
        self.emit(Inst::Bind(done));
        bucket
    }

    /// Bucket of `lhist()`: 0 below min, 1 + (v - min) / step inside, the last above.
    fn linear_bucket(&mut self, value: VReg, min: i64, max: i64, step: i64) -> VReg {
        let (bucket, low, high) = (
            self.vreg(),
            self.constant(min as u64),
            self.constant(max as u64),
        );
        let done = self.label();
        self.mov_imm(bucket, 0);
        self.branch(Cond::Slt, value, Src::Reg(low), done);
        let last = (max - min) / step + 1;
        self.mov_imm(bucket, last as i32);
        self.branch(Cond::Sge, value, Src::Reg(high), done);
        self.mov(bucket, value);
        self.alu(AluOp::Sub, bucket, Src::Reg(low));
        let step = self.constant(step as u64);
        self.alu(AluOp::Div, bucket, Src::Reg(step));
        self.alu(AluOp::Add, bucket, Src::Imm(1));
        self.emit(Inst::Bind(done));
        bucket
    }

    /// A message of `builtin` with nothing in it yet.
    pub(crate) fn message(&self, builtin: BuiltinId) -> BuiltinMessage {
        BuiltinMessage {
            builtin,
            args: Vec::new(),
            format: Vec::new(),
            text: None,
            map: None,
            consts: Vec::new(),
        }
    }

    /// The map a checked map reference became.
    pub(crate) fn map_id(&self, map: MapRef) -> MapId {
        self.maps.script[map.0].id
    }

    /// Send a message to user space: its id, then the values of `args` at
    /// 8-byte aligned offsets (their layout becomes the message's args).
    pub(crate) fn send_message(&mut self, mut message: BuiltinMessage, args: &[TExpr]) {
        message.args = message_layout(args.iter().map(|a| &a.ty));
        let offsets: Vec<u32> = message.args.iter().map(|(at, _)| *at).collect();
        let size = 8 + args.iter().map(|a| a.ty.size()).sum::<u32>();
        let id = MessageId(self.messages.len() as u32);
        self.messages.push(Message::Builtin(message));
        let values: Vec<Value> = args.iter().map(|a| self.expr(a)).collect();
        let buffer = self.alloc(size);
        self.comment(format!("message {}", id.0));
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: buffer,
            src: Src::Imm(id.0 as i32),
            size: Size::U64,
        });
        for ((value, arg), at) in values.into_iter().zip(args).zip(offsets) {
            self.store_value(value, &arg.ty, Base::Frame, buffer + at as i16, &arg.ty);
        }
        self.output(Arg::Frame(buffer), size);
    }

    /// End the current block at once (`exit()`); the attach point's later
    /// blocks still run, as bpftrace's separate programs do.
    pub(crate) fn return_from_block(&mut self) {
        let end = self.block_end();
        self.emit(Inst::Jump(end));
    }
}

/// Offsets and layouts of message fields after the 8-byte message id.
fn message_layout<'t>(
    types: impl IntoIterator<Item = &'t Type>,
) -> Vec<(u32, crate::vocab::ValueType)> {
    let mut offset = 8;
    types
        .into_iter()
        .map(|ty| {
            let at = offset;
            offset += ty.size();
            (at, ty.layout())
        })
        .collect()
}
