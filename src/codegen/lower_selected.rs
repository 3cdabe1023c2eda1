//! Lowering `selected(task)`: the task filters of the command line compiled
//! inline (pid and tid lists, idle, kernel threads, name globs run as NFAs
//! over `comm` and the process's `comm`; see `glob_nfa`). The names are
//! read into a per-CPU scratch slot and every other member is read where a
//! filter checks it, so the filters cost the BPF stack only a map key.

use crate::codegen::glob_nfa::{COMM_CHARS, LANE_TABLE_BYTES, Lane};
use crate::codegen::helpers::MAP_LOOKUP_ELEM;
use crate::codegen::ir::{AluOp, Arg, Base, Cond, Inst, Label, Size, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::frontend::checked::TExpr;
use crate::frontend::options::COMMAND_TREE_MAP;
use crate::vocab::MapId;

/// `PF_KTHREAD` in `task->flags`.
const PF_KTHREAD: i32 = 0x0020_0000;

/// Bytes of a probe's slot in the filter scratch map: the task's `comm`,
/// its process's `comm`, then the include globs' hits (a u64).
pub const FILTER_SCRATCH_BYTES: u32 = 2 * NAME_BYTES + 8;
/// Where the include globs' hits are.
const INCLUDE_AT: i16 = 2 * NAME_BYTES as i16;
/// Bytes of a task name (`TASK_COMM_LEN`).
const NAME_BYTES: u32 = 16;

/// The task members `selected()` reads, each evaluated where a filter
/// checks it so that no value stays live across the name matching (a value
/// live there would be spilled onto the BPF stack).
struct Task<'e> {
    tgid: &'e TExpr,
    tid: &'e TExpr,
    flags: &'e TExpr,
    comm: &'e TExpr,
    leader_comm: &'e TExpr,
    leader_start: &'e TExpr,
}

impl Lowerer<'_> {
    /// 1 when the task passes every exclude filter and (if any is given)
    /// some include filter, else 0. `fields` are the task's tgid, pid (the
    /// tid), flags, comm and its group leader's comm and start time.
    pub(crate) fn selected(&mut self, fields: &[TExpr]) -> VReg {
        let [tgid, tid, flags, comm, leader_comm, leader_start] = fields else {
            unreachable!("selected() reads six task members");
        };
        let filter = self.program.filter.clone();
        let task = Task {
            tgid,
            tid,
            flags,
            comm,
            leader_comm,
            leader_start,
        };
        let (yes, no, done) = (self.label(), self.label(), self.label());
        if filter.command {
            self.comment("selected(): the command's process tree");
            let tgid = self.int_expr(task.tgid);
            let joined = self.unless_in_command_tree(tgid, no);
            self.unless_same_process(joined, task.leader_start, no);
        }
        self.comment("selected(): exclude filters");
        self.any_id(task.tgid, &filter.no_pids, no);
        self.any_id(task.tid, &filter.no_tids, no);
        let globs = self.maps.glob_set.clone();
        if globs.always_exclude {
            self.emit(Inst::Jump(no));
        }
        if filter.idle == Some(false) {
            let tid = self.int_expr(task.tid);
            self.branch(Cond::Eq, tid, Src::Imm(0), no);
        }
        if filter.kthread == Some(false) {
            self.kthread(task.flags, no);
        }
        let include = self.run_globs(&globs.lanes, &task, no);
        // The command tree is required, not one of the alternatives.
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
            let tid = self.int_expr(task.tid);
            self.branch(Cond::Eq, tid, Src::Imm(0), yes);
        }
        if filter.kthread == Some(true) {
            self.kthread(task.flags, yes);
        }
        if let Some(include) = include {
            self.branch(Cond::Ne, include, Src::Imm(0), yes);
        }
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

    fn any_id(&mut self, member: &TExpr, ids: &[u32], target: Label) {
        if ids.is_empty() {
            return;
        }
        let value = self.int_expr(member);
        for id in ids {
            let id = self.constant(u64::from(*id));
            self.branch(Cond::Eq, value, Src::Reg(id), target);
        }
    }

    fn kthread(&mut self, flags: &TExpr, target: Label) {
        let bit = self.int_expr(flags);
        self.alu(AluOp::And, bit, Src::Imm(PF_KTHREAD));
        self.branch(Cond::Ne, bit, Src::Imm(0), target);
    }

    /// Jumps to `no` unless the process `tgid` is in the command's tree
    /// ([`COMMAND_TREE_MAP`], which `--only-command` adds to the program);
    /// else the pointer to its entry's value.
    pub(super) fn unless_in_command_tree(&mut self, tgid: VReg, no: Label) -> VReg {
        let index = (self.program.maps.iter())
            .position(|m| m.name == COMMAND_TREE_MAP)
            .expect("the command tree's tracker declares its map");
        let layout = &self.maps.script[index];
        let (map, size) = (layout.id, layout.key_size);
        let key = self.alloc(8);
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: key,
            src: Src::Imm(0),
            size: Size::U64,
        });
        let width = if size == 4 { Size::U32 } else { Size::U64 };
        self.store_reg(Base::Frame, key, tgid, width);
        self.lookup_or_jump(map, key, no)
    }

    /// Jumps to `no` unless the tree's entry (`joined`, the pointer to its
    /// value) is this task's process: the entry holds its leader's start
    /// time from when it joined (1 for the command until it execs), so a
    /// process that got an exited member's pid before that member's entry
    /// left is not in the tree.
    pub(super) fn unless_same_process(&mut self, joined: VReg, leader_start: &TExpr, no: Label) {
        let recorded = self.vreg();
        self.emit(Inst::Load {
            dst: recorded,
            base: Base::Reg(joined),
            offset: 0,
            size: Size::U64,
        });
        let same = self.label();
        self.branch(Cond::Eq, recorded, Src::Imm(1), same);
        let start = self.int_expr(leader_start);
        self.branch(Cond::Ne, recorded, Src::Reg(start), no);
        self.emit(Inst::Bind(same));
    }

    /// The value at the key in the frame at `key`; jumps to `no` without one.
    fn lookup_or_jump(&mut self, map: MapId, key: i16, no: Label) -> VReg {
        let found = self.vreg();
        self.emit(Inst::Call {
            helper: MAP_LOOKUP_ELEM,
            args: vec![Arg::Map(map), Arg::Frame(key)],
            ret: Some(found),
        });
        self.branch(Cond::Eq, found, Src::Imm(0), no);
        found
    }

    /// Jumps to `no` when an exclude glob matches either name; else the
    /// register that is non-zero when an include glob matches one (`None`
    /// without name filters). The names are read into this probe's slot
    /// of the filter scratch map, not onto the BPF stack.
    fn run_globs(&mut self, lanes: &[Lane], task: &Task, no: Label) -> Option<VReg> {
        if lanes.is_empty() {
            return None;
        }
        let scratch = self.filter_scratch(no);
        for (at, name) in [(0, task.comm), (NAME_BYTES, task.leader_comm)] {
            let to = self.offset_pointer(scratch, at);
            self.read_bytes_to(name, to);
        }
        // The include hits gather in the slot: a register would be one
        // more value live across the matching, spilled onto the stack.
        let include = (Base::Reg(scratch), INCLUDE_AT);
        self.emit(Inst::Store {
            base: include.0,
            offset: include.1,
            src: Src::Imm(0),
            size: Size::U64,
        });
        for (index, lane) in lanes.iter().enumerate() {
            for at in [0, NAME_BYTES as i16] {
                self.comment(format!("name globs, lane {index}"));
                let states = self.run_lane(lane, index as u32, (scratch, at));
                let hit = self.vreg();
                self.mov(hit, states);
                self.and_mask(hit, lane.accept_exclude);
                self.branch(Cond::Ne, hit, Src::Imm(0), no);
                self.and_mask(states, lane.accept_include);
                let so_far = self.load_sized(include.0, include.1, Size::U64);
                self.alu(AluOp::Or, states, Src::Reg(so_far));
                self.store_reg(include.0, include.1, states, Size::U64);
            }
        }
        Some(self.load_sized(include.0, include.1, Size::U64))
    }

    /// This probe's slot of the filter scratch map; jumps to `no` if the
    /// lookup fails (it cannot: the key is in range).
    fn filter_scratch(&mut self, no: Label) -> VReg {
        let map = (self.maps.filter_scratch).expect("name filters have a scratch map");
        let key = self.alloc(8);
        self.emit(Inst::Store {
            base: Base::Frame,
            offset: key,
            src: Src::Imm(self.probe_index as i32),
            size: Size::U32,
        });
        self.lookup_or_jump(map, key, no)
    }

    /// `reg &= mask`, as an immediate when the mask sign-extends from 32 bits.
    fn and_mask(&mut self, reg: VReg, mask: u64) {
        let src = match i32::try_from(mask as i64) {
            Ok(imm) => Src::Imm(imm),
            Err(_) => Src::Reg(self.constant(mask)),
        };
        self.alu(AluOp::And, reg, src);
    }

    /// `reg |= bits`, likewise.
    fn or_mask(&mut self, reg: VReg, bits: u64) {
        let src = match i32::try_from(bits as i64) {
            Ok(imm) => Src::Imm(imm),
            Err(_) => Src::Reg(self.constant(bits)),
        };
        self.alu(AluOp::Or, reg, src);
    }

    /// The NFA states reached after the name at `name` (a register holding
    /// a buffer's address, and an offset), unrolled over its characters,
    /// stopping at the NUL.
    fn run_lane(&mut self, lane: &Lane, index: u32, name: (VReg, i16)) -> VReg {
        let map = self.maps.globs.expect("name filters have a table map");
        let (states, next, char) = (self.vreg(), self.vreg(), self.vreg());
        let end = self.label();
        self.mov_imm(states, 0);
        for i in 0..=COMM_CHARS {
            self.emit(Inst::Load {
                dst: char,
                base: Base::Reg(name.0),
                offset: name.1 + i as i16,
                size: Size::U8,
            });
            self.branch(Cond::Eq, char, Src::Imm(0), end);
            self.mov(next, states);
            self.alu(AluOp::Lsh, next, Src::Imm(1));
            self.and_mask(next, !lane.first);
            self.or_mask(next, if i == 0 { lane.first } else { lane.first_star });
            let mask = self.vreg();
            self.emit(Inst::MapValueAddr {
                dst: mask,
                map,
                offset: index * LANE_TABLE_BYTES,
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
            self.and_mask(states, lane.loops);
            self.alu(AluOp::Or, states, Src::Reg(next));
        }
        self.emit(Inst::Bind(end));
        states
    }
}

#[cfg(test)]
mod tests {
    use crate::capture::model::RecordOrigin;
    use crate::codegen::program::BpfProgram;
    use crate::driver::{Source, compile};
    use crate::frontend::fake_machine::FakeMachine;
    use crate::frontend::options::{CompileOptions, TaskFilter};

    /// The deepest byte below r10 that `program` loads or stores.
    fn stack_depth(program: &BpfProgram) -> i64 {
        let depth = |insn: u64| {
            let (class, regs) = (insn as u8 & 7, (insn >> 8) as u8);
            let offset = i64::from((insn >> 16) as u16 as i16);
            // BPF_LDX, BPF_ST, BPF_STX with r10 as base.
            let frame = regs & 0xf == 10 || regs >> 4 == 10;
            (matches!(class, 1..=3) && frame).then_some(-offset)
        };
        program
            .insns
            .iter()
            .filter_map(|&i| depth(i))
            .max()
            .unwrap_or(0)
    }

    fn switch_program(filter: TaskFilter) -> BpfProgram {
        let text = "tp_btf:sched_switch /selected(args.prev) || selected(args.next)/ \
                    { @switches = count(); }";
        let sources = [Source {
            name: "s.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        }];
        let options = CompileOptions {
            filter,
            ..CompileOptions::default()
        };
        let (_, mut compiled) = compile(&sources, &[], &FakeMachine, &options)
            .unwrap_or_else(|e| panic!("{}", e.render()));
        compiled.programs.remove(0)
    }

    /// Every filter at once costs the BPF stack 16 bytes, the scratch
    /// map's key and one spill slot (the matching needs five values live
    /// in four registers): the names are matched in the scratch slot and no
    /// task member stays live across the matching.
    #[test]
    fn filters_cost_the_stack_one_key() {
        let bare = switch_program(TaskFilter {
            pids: vec![1],
            ..TaskFilter::default()
        });
        let every = switch_program(TaskFilter {
            pids: vec![1, 2, 3],
            no_pids: vec![4],
            tids: vec![5, 6],
            no_tids: vec![7],
            names: vec!["bash".into(), "sys_*".into()],
            no_names: vec!["*x".into()],
            idle: Some(false),
            kthread: Some(false),
            command: false,
        });
        assert!(
            stack_depth(&every) <= stack_depth(&bare) + 16,
            "{} bytes against {}",
            stack_depth(&every),
            stack_depth(&bare)
        );
    }
}
