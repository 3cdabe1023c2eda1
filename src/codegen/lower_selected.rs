//! Lowering `selected(task)`: the task filters of the command line compiled
//! inline (pid and tid lists, idle, kernel threads, name globs run as NFAs
//! over `comm` and the process's `comm`; see `glob_nfa`).

use crate::codegen::glob_nfa::{COMM_CHARS, Lane};
use crate::codegen::ir::{AluOp, Base, Cond, Inst, Label, Size, Src, VReg};
use crate::codegen::lower::{Lowerer, Value};
use crate::frontend::checked::TExpr;

/// `PF_KTHREAD` in `task->flags`.
const PF_KTHREAD: i32 = 0x0020_0000;

/// Registers holding the task's members.
struct Task {
    tgid: VReg,
    tid: VReg,
    flags: VReg,
    /// Frame buffers of `comm` and the process's `comm`.
    comms: [i16; 2],
}

impl Lowerer<'_> {
    /// 1 when the task passes every exclude filter and (if any is given)
    /// some include filter, else 0. `fields` are the task's tgid, pid (the
    /// tid), flags, comm and its group leader's comm.
    pub(crate) fn selected(&mut self, fields: &[TExpr]) -> VReg {
        let [tgid, tid, flags, comm, leader_comm] = fields else {
            unreachable!("selected() reads five task members");
        };
        let filter = self.program.filter.clone();
        let task = Task {
            tgid: self.int_expr(tgid),
            tid: self.int_expr(tid),
            flags: self.int_expr(flags),
            comms: [self.buffer(comm), self.buffer(leader_comm)],
        };
        let (yes, no, done) = (self.label(), self.label(), self.label());
        self.comment("selected(): exclude filters");
        self.any_id(task.tgid, &filter.no_pids, no);
        self.any_id(task.tid, &filter.no_tids, no);
        let globs = self.maps.glob_set.clone();
        if globs.always_exclude {
            self.emit(Inst::Jump(no));
        }
        if filter.idle == Some(false) {
            self.branch(Cond::Eq, task.tid, Src::Imm(0), no);
        }
        if filter.kthread == Some(false) {
            self.kthread(task.flags, no);
        }
        let (include, exclude) = self.run_globs(&globs.lanes, &task);
        self.branch(Cond::Ne, exclude, Src::Imm(0), no);
        let includes = !filter.pids.is_empty()
            || !filter.tids.is_empty()
            || !filter.names.is_empty()
            || filter.idle == Some(true)
            || filter.kthread == Some(true);
        if !includes || globs.always_include {
            self.emit(Inst::Jump(yes));
        }
        self.comment("selected(): include filters");
        self.any_id(task.tgid, &filter.pids, yes);
        self.any_id(task.tid, &filter.tids, yes);
        if filter.idle == Some(true) {
            self.branch(Cond::Eq, task.tid, Src::Imm(0), yes);
        }
        if filter.kthread == Some(true) {
            self.kthread(task.flags, yes);
        }
        self.branch(Cond::Ne, include, Src::Imm(0), yes);
        self.emit(Inst::Jump(no));
        let result = self.vreg();
        self.emit(Inst::Bind(yes));
        self.mov_imm(result, 1);
        self.emit(Inst::Jump(done));
        self.emit(Inst::Bind(no));
        self.mov_imm(result, 0);
        self.emit(Inst::Bind(done));
        result
    }

    fn buffer(&mut self, comm: &TExpr) -> i16 {
        match self.expr(comm) {
            Value::Mem(offset) => offset,
            Value::Int(_) => unreachable!("comm is a string"),
        }
    }

    fn any_id(&mut self, value: VReg, ids: &[u32], target: Label) {
        for id in ids {
            let id = self.constant(u64::from(*id));
            self.branch(Cond::Eq, value, Src::Reg(id), target);
        }
    }

    fn kthread(&mut self, flags: VReg, target: Label) {
        let bit = self.vreg();
        self.mov(bit, flags);
        self.alu(AluOp::And, bit, Src::Imm(PF_KTHREAD));
        self.branch(Cond::Ne, bit, Src::Imm(0), target);
    }

    /// Registers that are non-zero when an include (exclude) glob matches
    /// either name.
    fn run_globs(&mut self, lanes: &[Lane], task: &Task) -> (VReg, VReg) {
        let (include, exclude) = (self.vreg(), self.vreg());
        self.mov_imm(include, 0);
        self.mov_imm(exclude, 0);
        for (index, lane) in lanes.iter().enumerate() {
            for comm in task.comms {
                self.comment(format!("name globs, lane {index}"));
                let states = self.run_lane(lane, index as u32, comm);
                for (accept, result) in [
                    (lane.accept_include, include),
                    (lane.accept_exclude, exclude),
                ] {
                    let hit = self.vreg();
                    self.mov(hit, states);
                    let accept = self.constant(accept);
                    self.alu(AluOp::And, hit, Src::Reg(accept));
                    self.alu(AluOp::Or, result, Src::Reg(hit));
                }
            }
        }
        (include, exclude)
    }

    /// The NFA states reached after the name at `r10 + comm` (unrolled
    /// over its characters, stopping at the NUL).
    fn run_lane(&mut self, lane: &Lane, index: u32, comm: i16) -> VReg {
        let map = self.maps.globs.expect("name filters have a table map");
        let (states, next, char) = (self.vreg(), self.vreg(), self.vreg());
        let (not_first, first_star, loops) = (
            self.constant(!lane.first),
            self.constant(lane.first_star),
            self.constant(lane.loops),
        );
        let end = self.label();
        self.mov_imm(states, 0);
        for i in 0..=COMM_CHARS {
            self.emit(Inst::Load {
                dst: char,
                base: Base::Frame,
                offset: comm + i as i16,
                size: Size::U8,
            });
            self.branch(Cond::Eq, char, Src::Imm(0), end);
            self.mov(next, states);
            self.alu(AluOp::Lsh, next, Src::Imm(1));
            self.alu(AluOp::And, next, Src::Reg(not_first));
            let start = if i == 0 {
                self.constant(lane.first)
            } else {
                first_star
            };
            self.alu(AluOp::Or, next, Src::Reg(start));
            let mask = self.vreg();
            self.emit(Inst::MapValueAddr {
                dst: mask,
                map,
                offset: index * crate::codegen::glob_nfa::LANE_TABLE_BYTES,
            });
            self.alu(AluOp::Lsh, char, Src::Imm(3));
            self.alu(AluOp::Add, mask, Src::Reg(char));
            self.emit(Inst::Load {
                dst: mask,
                base: Base::Reg(mask),
                offset: 0,
                size: Size::U64,
            });
            self.alu(AluOp::And, next, Src::Reg(mask));
            self.alu(AluOp::And, states, Src::Reg(loops));
            self.alu(AluOp::Or, states, Src::Reg(next));
        }
        self.emit(Inst::Bind(end));
        states
    }
}
