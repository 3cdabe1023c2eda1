//! The current task's identity in a record header — `pid`, `tgid` and
//! `comm` of its `struct task_struct` — read with plain loads from
//! `bpf_get_current_task_btf()` where the probe's pointers are BTF-typed
//! (input: the kernel's offsets of those members; output: the header's
//! `pid_tgid` and `comm` words). A load costs about a nanosecond where
//! `bpf_get_current_comm` costs ~12 (it copies with `strscpy_pad`) and
//! `bpf_get_current_pid_tgid` ~2; other program types keep the helpers.

use crate::codegen::helpers::GET_CURRENT_TASK_BTF;
use crate::codegen::ir::{AluOp, Base, Size, Src};
use crate::codegen::lower::Lowerer;
use crate::frontend::checked::CheckedProgram;
use crate::frontend::types::COMM_LEN;
use crate::providers;
use crate::unwind::layout::member_offset;
use crate::vocab::Environment;

/// Byte offsets in `struct task_struct` of the members a header copies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskFields {
    pub pid: u32,
    pub tgid: u32,
    pub comm: u32,
}

impl TaskFields {
    /// The offsets `program`'s headers load with, when one of its probes
    /// has BTF-typed pointers: a script of plain tracepoints never reads
    /// the kernel's BTF for them (reading it is most of a start).
    pub fn for_program(program: &CheckedProgram, env: &dyn Environment) -> Option<TaskFields> {
        let btf_probe = (program.probes.iter()).any(|p| providers::of(&p.attach).btf_pointers());
        btf_probe.then(|| Self::resolve(env)).flatten()
    }

    /// The offsets on the machine `env` describes; `None` when its BTF
    /// lacks one of them (the headers then use the helpers).
    pub fn resolve(env: &dyn Environment) -> Option<TaskFields> {
        let offset = |name| member_offset(env, "struct task_struct", name).ok();
        Some(TaskFields {
            pid: offset("pid")?,
            tgid: offset("tgid")?,
            comm: offset("comm")?,
        })
    }
}

impl Lowerer<'_> {
    /// The offsets to load the header's identity with, where this probe
    /// can load from a BTF task pointer.
    pub(super) fn header_task_fields(&self) -> Option<TaskFields> {
        let btf = providers::of(&self.probe.attach).btf_pointers();
        self.task_fields.filter(|_| btf)
    }

    /// Stores the current task's `tgid << 32 | pid` at `pid_tgid` and its
    /// 16-byte comm at `comm` (offsets from `base`), as the helpers would.
    pub(super) fn store_current_identity(
        &mut self,
        fields: TaskFields,
        base: Base,
        pid_tgid: i16,
        comm: i16,
    ) {
        let task = self.call_result(GET_CURRENT_TASK_BTF, vec![]);
        let at = |offset: u32| offset as i16;
        let pid = self.load_sized(Base::Reg(task), at(fields.pid), Size::U32);
        let tgid = self.load_sized(Base::Reg(task), at(fields.tgid), Size::U32);
        self.alu(AluOp::Lsh, tgid, Src::Imm(32));
        self.alu(AluOp::Or, tgid, Src::Reg(pid));
        self.store(base, pid_tgid, Src::Reg(tgid));
        for word in (0..COMM_LEN as i16).step_by(8) {
            let bytes = self.load_sized(Base::Reg(task), at(fields.comm) + word, Size::U64);
            self.store(base, comm + word, Src::Reg(bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::RecordOrigin;
    use crate::codegen::listing::render_listing;
    use crate::driver::{Source, compile};
    use crate::frontend::diag::SourceMap;
    use crate::frontend::fake_machine::FakeMachine;
    use crate::frontend::options::CompileOptions;

    /// The listing of the one program `text` compiles to on the fake machine.
    fn listing(text: &str) -> String {
        let source = Source {
            name: "t.bt".into(),
            text: text.into(),
            origin: RecordOrigin::Script,
        };
        let (_, compiled) = compile(&[source], &[], &FakeMachine, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{}", e.render()));
        render_listing(&compiled.programs[0], &SourceMap::new([("t.bt", text)]))
    }

    /// The offsets come from the machine's `struct task_struct`.
    #[test]
    fn resolves_on_the_fake_machine() {
        let fields = TaskFields::resolve(&FakeMachine).expect("the fake kernel has them");
        assert_eq!(
            fields,
            TaskFields {
                pid: 100,
                tgid: 104,
                comm: 200
            }
        );
    }

    /// A tp_btf record loads pid, tgid and both comm words from the current
    /// task at the fake kernel's offsets and calls neither helper.
    #[test]
    fn btf_probe_header_loads_the_task() {
        let listing = listing("tp_btf:sched_switch < a = 1 >");
        let loads = [
            ("u32", "+100)"),
            ("u32", "+104)"),
            ("u64", "+200)"),
            ("u64", "+208)"),
        ];
        for (size, offset) in loads {
            let load = format!(" = *({size} *)(r");
            let found = (listing.lines()).any(|l| l.contains(&load) && l.ends_with(offset));
            assert!(found, "no {size} load at `{offset}` in\n{listing}");
        }
        // (The prologue reads the pid for "ignore wprof itself".)
        let record = &listing[listing.find("; record").expect("the record")..];
        assert!(
            record.contains("call bpf_get_current_task_btf"),
            "{listing}"
        );
        assert!(!record.contains("bpf_get_current_comm"), "{listing}");
        assert!(!record.contains("bpf_get_current_pid_tgid"), "{listing}");
    }

    /// A kprobe record, whose pointers are plain addresses, keeps the helpers.
    #[test]
    fn other_probe_header_calls_the_helpers() {
        let listing = listing("kprobe:f < a = 1 >");
        let record = &listing[listing.find("; record").expect("the record")..];
        assert!(record.contains("call bpf_get_current_comm"), "{listing}");
        assert!(
            record.contains("call bpf_get_current_pid_tgid"),
            "{listing}"
        );
        assert!(!listing.contains("bpf_get_current_task_btf"), "{listing}");
    }
}
