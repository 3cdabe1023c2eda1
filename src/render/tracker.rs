//! How renderers show the values of tracker records (docs/system-tracking.md):
//! `prev_state` as the kernel reports it and as its `ps` letter, softirq
//! vectors by name. Where the fields are is `tracking::records`.

/// `TASK_*` bits of `prev->__state` (include/linux/sched.h, Linux 6.x).
const TASK_UNINTERRUPTIBLE: u64 = 0x2;
const TASK_DEAD: u64 = 0x80;
const TASK_NOLOAD: u64 = 0x400;
const TASK_RTLOCK_WAIT: u64 = 0x1000;
/// The bits the kernel reports (`TASK_REPORT`): S D T t X Z P.
const TASK_REPORT: u64 = 0x7f;
/// What `sched_switch`'s `prev_state` says for an idle-waiting task.
pub const TASK_REPORT_IDLE: u64 = TASK_REPORT + 1;
/// What `sched_switch`'s `prev_state` says for a preempted task (`R+`).
pub const TASK_REPORT_MAX: u64 = TASK_REPORT_IDLE << 1;

/// `prev_state` and `preempt` of a switch as the kernel's `sched_switch`
/// tracepoint reports them (`__trace_sched_switch_state`): one bit per
/// state, `TASK_REPORT_MAX` when preempted. Perfetto decodes this form.
pub fn reported_state(prev_state: u64, preempt: bool) -> u64 {
    if preempt {
        return TASK_REPORT_MAX;
    }
    if prev_state == TASK_UNINTERRUPTIBLE | TASK_NOLOAD {
        return TASK_REPORT_IDLE;
    }
    // A dying task's last switch: its exit_state (X or Z) is not recorded.
    let mut state = prev_state & TASK_REPORT;
    if prev_state & TASK_DEAD != 0 {
        state |= 0x10;
    }
    if prev_state & TASK_RTLOCK_WAIT != 0 {
        state |= TASK_UNINTERRUPTIBLE;
    }
    match state {
        0 => 0,
        // The kernel reports the highest state bit (`fls`).
        state => 1 << (63 - state.leading_zeros()),
    }
}

/// The off-CPU state letter of a switch, as `ps` and the tracepoint print it:
/// `R` runnable, `R+` preempted, `S` sleeping, `D` uninterruptible, `T`
/// stopped, `t` traced, `X` dead, `Z` zombie, `P` parked, `I` idle.
pub fn state_letter(prev_state: u64, preempt: bool) -> &'static str {
    match reported_state(prev_state, preempt) {
        TASK_REPORT_MAX => "R+",
        TASK_REPORT_IDLE => "I",
        0 => "R",
        bit => ["S", "D", "T", "t", "X", "Z", "P"][bit.trailing_zeros() as usize],
    }
}

/// The softirq vector's name (`TIMER`, `NET_RX`, ...).
pub fn softirq_name(vec: u64) -> &'static str {
    const NAMES: [&str; 10] = [
        "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER",
        "RCU",
    ];
    NAMES.get(vec as usize).copied().unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state the kernel reports gets its `ps` letter; preemption wins.
    #[test]
    fn decodes_prev_state() {
        let cases = [
            (0, false, "R"),
            (1, true, "R+"),
            (0, true, "R+"),
            (0x1, false, "S"),
            (0x2, false, "D"),
            (0x102, false, "D"),
            (0x402, false, "I"),
            (0x4, false, "T"),
            (0x104, false, "T"),
            (0x8, false, "t"),
            (0x10, false, "X"),
            (0x20, false, "Z"),
            (0x40, false, "P"),
            (0x80, false, "X"),
            (0x1000, false, "D"),
            (0x2001, false, "S"),
        ];
        for (raw, preempt, letter) in cases {
            assert_eq!(state_letter(raw, preempt), letter, "{raw:#x} {preempt}");
        }
        assert_eq!(reported_state(0x1, true), 0x100);
        assert_eq!(reported_state(0x402, false), 0x80);
    }
}
