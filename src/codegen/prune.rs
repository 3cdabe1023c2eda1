//! Unreachable-code removal: the verifier rejects programs with instructions
//! no path reaches (e.g. what follows `exit()` or `return` in a block).

use crate::codegen::ir::{Function, Inst};
use crate::codegen::regalloc::successors;

/// Drop every instruction no path from the entry reaches.
pub fn remove_unreachable(function: &mut Function) {
    let insts: Vec<&Inst> = function.insts.iter().map(|a| &a.inst).collect();
    let successors = successors(&insts);
    let mut reachable = vec![false; insts.len()];
    let mut work = vec![0];
    while let Some(i) = work.pop() {
        if i < insts.len() && !reachable[i] {
            reachable[i] = true;
            work.extend(&successors[i]);
        }
    }
    let mut index = 0;
    function.insts.retain(|_| {
        index += 1;
        reachable[index - 1]
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::ir::{Label, Src, VReg};

    /// Code after an unconditional jump, up to the jump's target, is removed.
    #[test]
    fn drops_code_after_jump() {
        let insts = vec![
            Inst::Jump(Label(0)),
            Inst::Mov {
                dst: VReg(0),
                src: Src::Imm(1),
            },
            Inst::Bind(Label(0)),
            Inst::Exit,
            Inst::Exit,
        ];
        let mut function = Function::from_insts(insts, 1, 1, 0);
        remove_unreachable(&mut function);
        let left: Vec<Inst> = function.insts.into_iter().map(|a| a.inst).collect();
        assert_eq!(
            left,
            vec![Inst::Jump(Label(0)), Inst::Bind(Label(0)), Inst::Exit]
        );
    }
}
