//! Lowering: one checked probe → IR. This file holds the lowering state,
//! the frame (stack buffer) allocator and statements; expressions, maps and
//! messages live in the sibling `lower_*` files.

use crate::builtins;
use crate::capture::model::RecordOrigin;
use crate::codegen::helpers::GET_CURRENT_PID_TGID;
use crate::codegen::ir::{AluOp, Annotated, Base, Cond, Function, Inst, Label, Size, Src, VReg};
use crate::codegen::maps::MapLayouts;
use crate::codegen::task_fields::TaskFields;
use crate::frontend::ast::Span;
use crate::frontend::checked::{CheckedProbe, CheckedProgram, MapDecl, TStmt, TStmtKind};
use crate::frontend::types::Type;
use crate::providers;
use crate::vocab::{GlobalSlot, Message, ProbeState};

/// Where a value produced by an expression lives.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    /// An integer (or probe index) in a register.
    Int(VReg),
    /// A string or tuple in a frame buffer at r10 + offset.
    Mem(i16),
}

/// Where a scratch variable lives.
#[derive(Clone, Copy, Debug)]
enum VarSlot {
    Reg(VReg),
    Mem(i16),
}

pub(crate) struct Lowerer<'a> {
    pub(crate) probe: &'a CheckedProbe,
    pub(crate) probe_index: usize,
    pub(super) program: &'a CheckedProgram,
    pub(super) maps: &'a MapLayouts,
    /// Where the current task's identity is, for record headers.
    pub(super) task_fields: Option<TaskFields>,
    pub(super) messages: &'a mut Vec<Message>,
    pub(super) function: Function,
    pub(super) span: Option<Span>,
    pending_comment: Option<String>,
    frame_top: u32,
    /// The largest frame any statement needed, and that statement.
    pub(super) frame_peak: (u32, Option<Span>),
    pub(super) ctx: VReg,
    vars: Vec<VarSlot>,
    /// (continue target, break target) of the enclosing loops.
    loops: Vec<(Label, Label)>,
    /// The end of the program: the gate and provider prologues jump here.
    exit_label: Label,
    /// Where the current block ends: its predicate, `return` and `exit()` jump here.
    block_end: Label,
    /// Lowering the task-work callback of `-S offcpu=DUR`
    /// (`lower_task_work`): no context, r1 is the work's map.
    pub(super) in_task_work: bool,
}

impl<'a> Lowerer<'a> {
    /// One program for every block at one attach point: `blocks` (each with
    /// its index in `program.probes`) run in script order. Each block has its
    /// own predicate, variables and frame (blocks reuse the same stack bytes),
    /// and `return` or `exit()` end only that block, as when bpftrace gives
    /// each block a program of its own, but the order no longer depends on
    /// how the kernel orders programs on one attach point. With
    /// `in_task_work` the blocks are a task-work callback's instead.
    pub(super) fn lower(
        blocks: &[(usize, &'a CheckedProbe)],
        program: &'a CheckedProgram,
        maps: &'a MapLayouts,
        task_fields: Option<TaskFields>,
        messages: &'a mut Vec<Message>,
        in_task_work: bool,
    ) -> (Function, (u32, Option<Span>)) {
        let &(first_index, first) = blocks.first().expect("a program has at least one block");
        let mut lowerer = Lowerer::new(first, first_index, program, maps, messages);
        lowerer.task_fields = task_fields;
        lowerer.in_task_work = in_task_work;
        if !in_task_work {
            let ctx = lowerer.ctx;
            lowerer.emit(Inst::Ctx { dst: ctx });
            lowerer.provider_prologue();
        }
        if !providers::of(&first.attach).runs_once() {
            lowerer.gate();
        }
        for (position, &(index, probe)) in blocks.iter().enumerate() {
            if blocks.len() > 1 {
                lowerer.comment(format!("block {} of {}", position + 1, blocks.len()));
            }
            lowerer.block(index, probe);
        }
        lowerer.finish()
    }

    /// A lowerer for code that runs at `probe`'s attach point, or for it.
    pub(super) fn new(
        probe: &'a CheckedProbe,
        probe_index: usize,
        program: &'a CheckedProgram,
        maps: &'a MapLayouts,
        messages: &'a mut Vec<Message>,
    ) -> Self {
        let mut lowerer = Lowerer {
            probe,
            probe_index,
            program,
            maps,
            task_fields: None,
            messages,
            function: Function::default(),
            span: Some(probe.span),
            pending_comment: None,
            frame_top: 0,
            frame_peak: (0, None),
            ctx: VReg(0),
            vars: Vec::new(),
            loops: Vec::new(),
            exit_label: Label(0),
            block_end: Label(0),
            in_task_work: false,
        };
        lowerer.ctx = lowerer.vreg();
        lowerer.exit_label = lowerer.label();
        lowerer
    }

    /// Ends the program: the exit label, then `exit`.
    pub(super) fn finish(mut self) -> (Function, (u32, Option<Span>)) {
        self.span = None;
        let exit = self.exit_label;
        self.emit(Inst::Bind(exit));
        self.emit(Inst::Exit);
        self.function.frame_bytes = self.frame_peak.0;
        (self.function, self.frame_peak)
    }

    /// One block: predicate, record, statements; its end is where its
    /// predicate, `return` and `exit()` jump.
    fn block(&mut self, index: usize, probe: &'a CheckedProbe) {
        self.probe = probe;
        self.probe_index = index;
        self.span = Some(probe.span);
        self.frame_top = 0;
        self.block_end = self.label();
        self.variables();
        if let Some(predicate) = &probe.predicate {
            self.span = Some(predicate.span);
            self.comment("predicate");
            let end = self.block_end;
            // The predicate's buffers are dead once it has branched.
            let mark = self.frame_top;
            self.branch_unless(predicate, end);
            self.frame_top = mark;
        }
        if let Some(record) = &probe.record {
            self.span = Some(probe.span);
            self.record(record);
        }
        self.stmts(&probe.body);
        let end = self.block_end;
        self.emit(Inst::Bind(end));
    }

    /// Return at once unless tracing is active, and for wprof's own events
    /// in the user's probes (and, under `--only-command`, for processes
    /// outside the command's tree, pid reuse included). Trackers record
    /// wprof like any task: a switch away from it is the next task's switch-in.
    pub(super) fn gate(&mut self) {
        let exit = self.exit_label;
        self.comment("return unless tracing is active");
        let state = self.global(GlobalSlot::State);
        self.branch(Cond::Ne, state, Src::Imm(ProbeState::Active as i32), exit);
        if self.probe.origin == RecordOrigin::Tracker
            || providers::of(&self.probe.attach).fires_in_wprof()
        {
            return;
        }
        self.comment("ignore wprof itself");
        let me = self.global(GlobalSlot::SelfPid);
        let task = self.vreg();
        self.emit(Inst::Call {
            helper: GET_CURRENT_PID_TGID,
            args: vec![],
            ret: Some(task),
        });
        self.alu(AluOp::Rsh, task, Src::Imm(32));
        self.branch(Cond::Eq, task, Src::Reg(me), exit);
        let probe = self.probe;
        if let Some(leader_start) = &probe.command_identity {
            self.comment("only the command's process tree");
            let joined = self.unless_in_command_tree(task, exit);
            self.unless_same_process(joined, leader_start, exit);
        }
    }

    /// The block's scratch variables, zeroed (bpftrace reads an unassigned one as 0).
    fn variables(&mut self) {
        self.vars.clear();
        for ty in &self.probe.variables {
            let slot = match ty {
                ty if ty.in_memory() => {
                    let offset = self.alloc(ty.size());
                    self.zero(Base::Frame, offset, ty.size());
                    VarSlot::Mem(offset)
                }
                _ => {
                    let reg = self.vreg();
                    self.mov_imm(reg, 0);
                    VarSlot::Reg(reg)
                }
            };
            self.vars.push(slot);
        }
    }

    pub(super) fn program_maps(&self) -> &'a [MapDecl] {
        &self.program.maps
    }

    pub(super) fn exit_label(&self) -> Label {
        self.exit_label
    }

    pub(super) fn block_end(&self) -> Label {
        self.block_end
    }

    pub(crate) fn vreg(&mut self) -> VReg {
        self.function.vregs += 1;
        VReg(self.function.vregs - 1)
    }

    pub(crate) fn label(&mut self) -> Label {
        self.function.labels += 1;
        Label(self.function.labels - 1)
    }

    pub(crate) fn emit(&mut self, inst: Inst) {
        self.function.insts.push(Annotated {
            inst,
            span: self.span,
            comment: self.pending_comment.take(),
        });
    }

    pub(crate) fn mov_imm(&mut self, dst: VReg, imm: i32) {
        self.emit(Inst::Mov {
            dst,
            src: Src::Imm(imm),
        });
    }

    pub(crate) fn mov(&mut self, dst: VReg, src: VReg) {
        self.emit(Inst::Mov {
            dst,
            src: Src::Reg(src),
        });
    }

    pub(crate) fn alu(&mut self, op: AluOp, dst: VReg, src: Src) {
        self.emit(Inst::Alu { op, dst, src });
    }

    pub(crate) fn branch(&mut self, cond: Cond, lhs: VReg, rhs: Src, target: Label) {
        self.emit(Inst::Branch {
            cond,
            lhs,
            rhs,
            target,
        });
    }

    pub(crate) fn comment(&mut self, text: impl Into<String>) {
        self.pending_comment = Some(text.into());
    }

    pub(super) fn with_span<T>(&mut self, span: Span, f: impl FnOnce(&mut Self) -> T) -> T {
        let saved = self.span.replace(span);
        let result = f(self);
        self.span = saved;
        result
    }

    /// A frame buffer of `bytes` (rounded up to 8), valid until the statement ends.
    pub(crate) fn alloc(&mut self, bytes: u32) -> i16 {
        self.frame_top += bytes.next_multiple_of(8).max(8);
        if self.frame_top > self.frame_peak.0 {
            self.frame_peak = (self.frame_top, self.span);
        }
        // Offsets beyond i16 only arise far past the 512-byte limit, which
        // compile() reports; clamp so lowering can finish first.
        -(self.frame_top.min(i16::MAX as u32) as i16)
    }

    /// Zero `bytes` (a multiple of 8) at `base + offset`.
    pub(crate) fn zero(&mut self, base: Base, offset: i16, bytes: u32) {
        for at in (0..bytes).step_by(8) {
            self.emit(Inst::Store {
                base,
                offset: offset + at as i16,
                src: Src::Imm(0),
                size: Size::U64,
            });
        }
    }

    /// Copy `bytes` (a multiple of 8) between buffers through a register.
    pub(crate) fn copy(&mut self, to: (Base, i16), from: (Base, i16), bytes: u32) {
        let temp = self.vreg();
        for at in (0..bytes).step_by(8) {
            let at = at as i16;
            self.emit(Inst::Load {
                dst: temp,
                base: from.0,
                offset: from.1 + at,
                size: Size::U64,
            });
            self.emit(Inst::Store {
                base: to.0,
                offset: to.1 + at,
                src: Src::Reg(temp),
                size: Size::U64,
            });
        }
    }

    /// Store `value` of type `from` at `base + offset` in the layout of type `to`
    /// (strings are zero-padded to the longer buffer; tuple fields likewise).
    pub(super) fn store_value(
        &mut self,
        value: Value,
        from: &Type,
        base: Base,
        offset: i16,
        to: &Type,
    ) {
        match (value, from, to) {
            (Value::Int(reg), _, _) => self.emit(Inst::Store {
                base,
                offset,
                src: Src::Reg(reg),
                size: Size::U64,
            }),
            (Value::Mem(src), Type::Tuple(from_fields), Type::Tuple(to_fields)) => {
                let from_layout = from.layout_offsets();
                let to_layout = to.layout_offsets();
                for (i, (f, t)) in from_fields.iter().zip(to_fields).enumerate() {
                    let field = self.field_value(src, from_layout[i], f);
                    self.store_value(field, f, base, offset + to_layout[i] as i16, t);
                }
            }
            (Value::Mem(src), _, _) => {
                let copied = from.size().min(to.size());
                self.copy((base, offset), (Base::Frame, src), copied);
                self.zero(base, offset + copied as i16, to.size() - copied);
            }
        }
    }

    /// A field of a tuple held in a frame buffer.
    pub(super) fn field_value(&mut self, tuple: i16, field_offset: u32, ty: &Type) -> Value {
        let at = tuple + field_offset as i16;
        match ty {
            ty if ty.in_memory() => Value::Mem(at),
            _ => {
                let reg = self.vreg();
                self.emit(Inst::Load {
                    dst: reg,
                    base: Base::Frame,
                    offset: at,
                    size: Size::U64,
                });
                Value::Int(reg)
            }
        }
    }

    pub(super) fn stmts(&mut self, stmts: &[TStmt]) {
        for stmt in stmts {
            let mark = self.frame_top;
            self.span = Some(stmt.span);
            self.stmt(stmt);
            self.frame_top = mark;
        }
    }

    fn stmt(&mut self, stmt: &TStmt) {
        match &stmt.kind {
            TStmtKind::Expr(expr) => {
                self.expr(expr);
            }
            TStmtKind::AssignVar { var, value } => self.assign_var(var.0, value),
            TStmtKind::AssignMap { map, key, value } => self.assign_map(*map, key.as_ref(), value),
            TStmtKind::Aggregate {
                map,
                key,
                func,
                arg,
            } => self.aggregate(*map, key.as_ref(), *func, arg.as_ref()),
            TStmtKind::Call(call) => builtins::statement_hooks(call.builtin).lower(self, call),
            TStmtKind::If {
                cond,
                then,
                otherwise,
            } => {
                let else_label = self.label();
                let end = self.label();
                self.branch_unless(cond, else_label);
                self.stmts(then);
                self.emit(Inst::Jump(end));
                self.emit(Inst::Bind(else_label));
                self.stmts(otherwise);
                self.emit(Inst::Bind(end));
            }
            TStmtKind::While { cond, body } => {
                let (top, end) = (self.label(), self.label());
                self.emit(Inst::Bind(top));
                self.branch_unless(cond, end);
                self.loops.push((top, end));
                self.stmts(body);
                self.loops.pop();
                self.emit(Inst::Jump(top));
                self.emit(Inst::Bind(end));
            }
            TStmtKind::Unroll { count, body } => {
                let end = self.label();
                for _ in 0..*count {
                    let next = self.label();
                    self.loops.push((next, end));
                    self.stmts(body);
                    self.loops.pop();
                    self.emit(Inst::Bind(next));
                }
                self.emit(Inst::Bind(end));
            }
            TStmtKind::Record(record) => self.record(record),
            TStmtKind::Break | TStmtKind::Continue => {
                let (next, end) = *self
                    .loops
                    .last()
                    .expect("the checker rejects break outside loops");
                let target = if matches!(stmt.kind, TStmtKind::Break) {
                    end
                } else {
                    next
                };
                self.emit(Inst::Jump(target));
            }
            TStmtKind::Return => {
                let exit = self.block_end;
                self.emit(Inst::Jump(exit));
            }
        }
    }

    fn assign_var(&mut self, var: usize, value: &crate::frontend::checked::TExpr) {
        let target_ty = self.probe.variables[var].clone();
        let result = self.expr(value);
        match (self.vars[var], result) {
            (VarSlot::Reg(reg), Value::Int(src)) => self.mov(reg, src),
            (VarSlot::Mem(offset), result) => {
                self.store_value(result, &value.ty, Base::Frame, offset, &target_ty)
            }
            (VarSlot::Reg(_), Value::Mem(_)) => {
                unreachable!("the checker gives integer variables integer values")
            }
        }
    }

    /// The value of variable `var`.
    pub(super) fn var(&mut self, var: usize) -> Value {
        match self.vars[var] {
            VarSlot::Reg(reg) => Value::Int(reg),
            VarSlot::Mem(offset) => Value::Mem(offset),
        }
    }
}
