//! Annotated listing: a [`BpfProgram`] plus the script text → the disassembly
//! `wprof --dump-bpf` prints, each run of instructions headed by the script
//! line it came from. Also maps instruction indices (as a verifier log names
//! them) back to script spans.

use std::fmt::Write;

use crate::codegen::disasm::disassemble_at;
use crate::codegen::program::BpfProgram;
use crate::frontend::ast::Span;
use crate::frontend::diag::SourceMap;

/// Column where instruction comments start.
const COMMENT_COLUMN: usize = 32;

/// Renders `program` one instruction per line as `  12: r1 = ...   ; comment`,
/// numbered by slot like the verifier. Whenever an instruction's span starts
/// on a different script line than the last one shown, that line is printed
/// first as `; <line>: <text>`. Instructions without a span show no header.
pub fn render_listing(program: &BpfProgram, sources: &SourceMap) -> String {
    let insns = &program.insns;
    let width = insns.len().saturating_sub(1).to_string().len().max(4);
    let mut out = String::new();
    let mut shown_line = None;
    let mut at = 0;
    while at < insns.len() {
        if let Some(span) = instruction_span(program, at)
            && let Some((file, line_no, text)) = sources.line(span.start)
            && shown_line != Some((file, line_no))
        {
            shown_line = Some((file, line_no));
            let file = file.map(|name| format!("{name}:")).unwrap_or_default();
            writeln!(out, "; {file}{line_no}: {}", text.trim()).expect("writing to a String");
        }
        let (text, slots) = disassemble_at(insns, at);
        let comment = program.comments.get(at).and_then(Option::as_deref);
        let line = match comment {
            Some(comment) => format!("{at:>width$}: {text:<COMMENT_COLUMN$} ; {comment}"),
            None => format!("{at:>width$}: {text}"),
        };
        writeln!(out, "{line}").expect("writing to a String");
        at += slots;
    }
    out
}

/// The script span instruction slot `insn_index` was generated from, if any.
/// Both slots of an `ld_imm64` carry its span.
pub fn instruction_span(program: &BpfProgram, insn_index: usize) -> Option<Span> {
    program.spans.get(insn_index).copied().flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::asm::{Assembler, Cond, Reg};
    use crate::vocab::{AttachPoint, MapId};

    const SCRIPT: &str = "BEGIN {\n    @x = 1;\n    exit();\n}\n";

    fn span_of(needle: &str) -> Option<Span> {
        let start = SCRIPT.find(needle).expect("needle in script");
        Some(Span::new(start, start + needle.len()))
    }

    fn program() -> BpfProgram {
        let mut asm = Assembler::new();
        asm.comment("prologue");
        asm.mov64_reg(Reg::R6, Reg::R1);
        asm.set_span(span_of("@x = 1"));
        asm.ld_map_fd(Reg::R1, MapId(0));
        asm.comment("value");
        asm.store_imm(crate::codegen::asm::Size::U64, Reg::R10, -8, 1);
        asm.set_span(span_of("exit()"));
        let done = asm.new_label();
        asm.jmp_imm(Cond::Eq, Reg::R6, 0, done);
        asm.set_span(span_of("@x"));
        asm.mov64_imm(Reg::R0, 1);
        asm.bind(done).unwrap();
        asm.set_span(None);
        asm.exit();
        asm.finish()
            .unwrap()
            .into_program("begin".into(), "BEGIN".into(), AttachPoint::Begin)
    }

    /// Instructions are numbered by slot, grouped under their script line, with comments aligned.
    #[test]
    fn renders_annotated_listing() {
        let expected = "   0: r6 = r1                          ; prologue
; 2: @x = 1;
   1: r1 = map[0]
   3: *(u64 *)(r10 -8) = 1             ; value
; 3: exit();
   4: if r6 == 0x0 goto pc+1
; 2: @x = 1;
   5: r0 = 1
   6: exit
";
        assert_eq!(
            render_listing(&program(), &SourceMap::new([("t.bt", SCRIPT)])),
            expected
        );
    }

    /// Slot indices, including the second half of an `ld_imm64`, map back to spans.
    #[test]
    fn maps_instructions_to_spans() {
        let program = program();
        assert_eq!(instruction_span(&program, 0), None);
        assert_eq!(instruction_span(&program, 1), span_of("@x = 1"));
        assert_eq!(instruction_span(&program, 2), span_of("@x = 1"));
        assert_eq!(instruction_span(&program, 4), span_of("exit()"));
        assert_eq!(instruction_span(&program, 99), None);
    }
}
