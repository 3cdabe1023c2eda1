//! Helper calls that can fail, and bpftrace's `-k`/`-kk` reports of their
//! failures. Input: a helper call being lowered; output: the call, and under
//! `-k`/`-kk` a branch that sends a [`Message::HelperError`] (the site's
//! helper and script span, the return code) when the call failed.
//!
//! Which helpers each level checks follows bpftrace 0.17: `-k` those whose
//! failure leaves no trace in the result (a failed read or lookup yields
//! zeros the script can test, so only `-kk` reports those).

use crate::codegen::helpers::*;
use crate::codegen::ir::{Arg, Base, Cond, Inst, Src, VReg};
use crate::codegen::lower::Lowerer;
use crate::frontend::options::HelperChecks;
use crate::vocab::{HelperErrorSite, Message};

/// How a helper says it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    /// A negative error code.
    Negative,
    /// A null pointer (`bpf_map_lookup_elem`: no such key).
    Null,
}

/// The level that reports `helper`'s failures, and how it fails; `None` for
/// helpers never checked.
fn checked_from(helper: u32) -> Option<(HelperChecks, Failure)> {
    match helper {
        MAP_UPDATE_ELEM | MAP_DELETE_ELEM | GET_STACKID | GET_CURRENT_COMM | SEND_SIGNAL
        | D_PATH => Some((HelperChecks::Silent, Failure::Negative)),
        PROBE_READ
        | PROBE_READ_STR
        | PROBE_READ_USER
        | PROBE_READ_KERNEL
        | PROBE_READ_USER_STR
        | PROBE_READ_KERNEL_STR => Some((HelperChecks::All, Failure::Negative)),
        MAP_LOOKUP_ELEM => Some((HelperChecks::All, Failure::Null)),
        _ => None,
    }
}

/// The bytes of a helper error message: the message id, the return code.
const HELPER_ERROR_BYTES: u32 = 16;

impl Lowerer<'_> {
    /// Calls `helper` for the script text being lowered and returns its
    /// result; with `-k`/`-kk` a failure is reported to user space.
    pub(crate) fn checked_call(&mut self, helper: u32, args: Vec<Arg>) -> VReg {
        let ret = self.vreg();
        self.call_and_check(helper, args, Some(ret));
        ret
    }

    /// [`Self::checked_call`] of a helper whose result the script does not
    /// use: it is kept only when checked.
    pub(crate) fn checked_call_unused(&mut self, helper: u32, args: Vec<Arg>) {
        self.call_and_check(helper, args, None);
    }

    fn call_and_check(&mut self, helper: u32, args: Vec<Arg>, ret: Option<VReg>) {
        let check = checked_from(helper)
            .filter(|(from, _)| self.program.helper_checks >= *from)
            .zip(self.span);
        let ret = match check {
            Some(_) => Some(ret.unwrap_or_else(|| self.vreg())),
            None => ret,
        };
        self.emit(Inst::Call { helper, args, ret });
        if let (Some(((_, failure), span)), Some(ret)) = (check, ret) {
            self.report_failure(HelperErrorSite { helper, span }, failure, ret);
        }
    }

    /// When `ret` says the call failed: sends the site's message with `ret`.
    fn report_failure(&mut self, site: HelperErrorSite, failure: Failure, ret: VReg) {
        let succeeded = self.label();
        match failure {
            Failure::Negative => self.branch(Cond::Sge, ret, Src::Imm(0), succeeded),
            Failure::Null => self.branch(Cond::Ne, ret, Src::Imm(0), succeeded),
        }
        self.messages.push(Message::HelperError(site));
        let id = self.messages.len() - 1;
        let buffer = self.alloc(HELPER_ERROR_BYTES);
        self.comment(format!("message {id}: helper error"));
        self.store(Base::Frame, buffer, Src::Imm(id as i32));
        self.store(Base::Frame, buffer + 8, Src::Reg(ret));
        self.output(Arg::Frame(buffer), HELPER_ERROR_BYTES);
        self.emit(Inst::Bind(succeeded));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `-k` leaves reads and lookups to `-kk`, as bpftrace 0.17.
    #[test]
    fn levels_follow_bpftrace() {
        assert_eq!(
            checked_from(MAP_DELETE_ELEM),
            Some((HelperChecks::Silent, Failure::Negative))
        );
        assert_eq!(
            checked_from(PROBE_READ_USER),
            Some((HelperChecks::All, Failure::Negative))
        );
        assert_eq!(
            checked_from(MAP_LOOKUP_ELEM),
            Some((HelperChecks::All, Failure::Null))
        );
        assert_eq!(checked_from(RINGBUF_OUTPUT), None);
        assert!(
            HelperChecks::Off < HelperChecks::Silent && HelperChecks::Silent < HelperChecks::All
        );
    }
}
