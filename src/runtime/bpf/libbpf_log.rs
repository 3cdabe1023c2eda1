//! Captures libbpf's printing per thread instead of letting it reach stderr,
//! and reads what failed from it: the program's name, the verifier log and
//! the verifier's last instruction.

use std::cell::RefCell;
use std::sync::Once;

use libbpf_rs::PrintLevel;

thread_local! {
    /// libbpf output printed on this thread while a capture is active.
    static CAPTURED: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn capture_print(_level: PrintLevel, msg: String) {
    CAPTURED.with(|c| {
        if let Some(buf) = c.borrow_mut().as_mut() {
            buf.push_str(&msg);
        }
    });
}

/// Routes libbpf's printing (warnings and worse) to [`CAPTURED`]: silent
/// unless a capture is active on the printing thread.
pub(super) fn install_print_capture() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        libbpf_rs::set_print(Some((PrintLevel::Warn, capture_print)));
    });
}

/// Captures libbpf's debug lines too, where the verifier logs of programs
/// that loaded are (`-v`).
pub(super) fn capture_debug_print() {
    install_print_capture();
    libbpf_rs::set_print(Some((PrintLevel::Debug, capture_print)));
}

/// The verifier log of each program that loaded, by program name, from
/// libbpf's `prog 'NAME': -- BEGIN PROG LOAD LOG --` blocks (printed at
/// debug level when a program's log level is set).
pub(super) fn load_logs(printed: &str) -> Vec<(String, String)> {
    const BEGIN: &str = "': -- BEGIN PROG LOAD LOG --\n";
    const END: &str = "-- END PROG LOAD LOG --";
    let mut logs = Vec::new();
    let mut rest = printed;
    while let Some(at) = rest.find(BEGIN) {
        let name = rest[..at].rsplit("prog '").next().unwrap_or_default();
        let body = &rest[at + BEGIN.len()..];
        let Some(len) = body.find(END) else { break };
        logs.push((name.to_string(), body[..len].to_string()));
        rest = &body[len..];
    }
    logs
}

pub(super) fn with_captured_print<T>(f: impl FnOnce() -> T) -> (T, String) {
    CAPTURED.with(|c| *c.borrow_mut() = Some(String::new()));
    let out = f();
    let printed = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
    (out, printed)
}

/// The program named in libbpf's `prog 'NAME': failed to load` line.
pub(super) fn failed_program(printed: &str) -> Option<&str> {
    printed.lines().rev().find_map(|line| {
        let rest = line.strip_prefix("libbpf: ").unwrap_or(line);
        let rest = rest.strip_prefix("prog '")?;
        let (name, tail) = rest.split_once("': ")?;
        tail.starts_with("failed to load").then_some(name)
    })
}

/// The verifier log libbpf printed between its BEGIN/END markers.
pub(super) fn verifier_log(printed: &str) -> Option<String> {
    const BEGIN: &str = "-- BEGIN PROG LOAD LOG --\n";
    const END: &str = "-- END PROG LOAD LOG --";
    let start = printed.rfind(BEGIN)? + BEGIN.len();
    let len = printed[start..].find(END)?;
    let log = printed[start..start + len].trim_end();
    (!log.is_empty()).then(|| log.to_string())
}

/// The index of the last `N: (op) ...` instruction line of a verifier log.
pub fn failing_insn(log: &str) -> Option<usize> {
    log.lines().rev().find_map(|line| {
        let (index, rest) = line.split_once(": (")?;
        let op = rest.get(..3)?;
        (op.ends_with(')') && op[..2].chars().all(|c| c.is_ascii_hexdigit()))
            .then(|| index.trim().parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program's log block is found, with its program's name.
    #[test]
    fn finds_each_load_log() {
        let printed = "libbpf: loading object\n\
             libbpf: prog 'p0_BEGIN': -- BEGIN PROG LOAD LOG --\nprocessed 3 insns\n-- END PROG LOAD LOG --\n\
             libbpf: prog 'p1_x': -- BEGIN PROG LOAD LOG --\nprocessed 9 insns\n-- END PROG LOAD LOG --\n";
        assert_eq!(
            load_logs(printed),
            [
                ("p0_BEGIN".to_string(), "processed 3 insns\n".to_string()),
                ("p1_x".to_string(), "processed 9 insns\n".to_string())
            ]
        );
        assert!(load_logs("libbpf: nothing\n").is_empty());
    }
}
