//! Built-ins that act outside the probe: `join(argv[, sep])` and
//! `cat(fmt, ...)` print through user space, `system(fmt, ...)` runs a
//! command there; `signal(sig)` and `override(rc)` act on the traced task
//! in the kernel. `system`, `signal` and `override` need `--unsafe`, as in
//! bpftrace.

use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Command, Stdio};

use super::print::{format_call, formatted, send_formatted};
use super::{Entry, Kind, Site, Statement, Written};
use crate::codegen::lower::Lowerer;
use crate::frontend::ast::ExprKind;
use crate::frontend::check::Checker;
use crate::frontend::checked::{TCall, TExprKind};
use crate::frontend::diag::ScriptError;
use crate::output::json::TextKind;
use crate::output::printer::{Printed, Printer};
use crate::providers;
use crate::vocab::{AttachPoint, BuiltinMessage};

/// Elements `join()` reads, and bytes of each, as bpftrace 0.17.
pub const JOIN_ELEMENTS: u32 = 16;
pub const JOIN_ELEMENT_BYTES: u32 = 1024;

/// `join(argv[, sep])`: the strings of a NULL-terminated array of string
/// pointers (at most [`JOIN_ELEMENTS`], each at most [`JOIN_ELEMENT_BYTES`]),
/// printed joined by `sep` (a space by default) and a newline. The call's
/// arg is the array, its text the separator.
pub struct Join;

impl Statement for Join {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let (array, separator) = match site.args {
            [array] => (array, " ".to_string()),
            [array, separator] => match &separator.kind {
                ExprKind::Str(text) => (array, text.clone()),
                _ => {
                    return cx.fail(
                        separator.span,
                        "join()'s separator must be a string literal",
                    );
                }
            },
            _ => {
                return cx.fail(
                    site.span,
                    "join() takes an array of strings and an optional separator",
                );
            }
        };
        let array = cx.expr(array)?;
        if !array.ty.is_int() {
            let message = format!(
                "join() needs a pointer to an array of strings, not {}",
                array.ty
            );
            return cx.fail(array.span, &message);
        }
        cx.values.scratch_bytes = cx.values.scratch_bytes.max(join_message_bytes());
        let mut call = TCall::new(site.id, vec![array]);
        call.text = Some(separator);
        Some(call)
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let mut message = cx.message(call.builtin);
        message.text = call.text.clone();
        cx.join_strings(message, &call.args[0], JOIN_ELEMENTS, JOIN_ELEMENT_BYTES);
    }

    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let separator = message.text.as_deref().unwrap_or(" ").as_bytes();
        let elements = bytes.get(8..).unwrap_or_default();
        let mut text = Vec::new();
        for (i, element) in elements.chunks(JOIN_ELEMENT_BYTES as usize).enumerate() {
            let end = element
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(element.len());
            if end == 0 {
                break;
            }
            if i > 0 {
                text.extend_from_slice(separator);
            }
            text.extend_from_slice(&element[..end]);
        }
        cx.write_text(TextKind::Join, &text, out)?;
        Ok(Printed::Done)
    }
}

/// The size of a `join()` message: its id and the elements.
fn join_message_bytes() -> u32 {
    8 + JOIN_ELEMENTS * JOIN_ELEMENT_BYTES
}

/// Bytes `cat()` prints at most, unless `BPFTRACE_CAT_BYTES_MAX` says otherwise.
const CAT_BYTES_MAX: u64 = 10240;

/// `cat(fmt, args...)`: prints the file whose path the format makes, as is
/// (at most `BPFTRACE_CAT_BYTES_MAX` bytes); a missing file is reported on
/// standard error and the run goes on. The call is a format call.
pub struct Cat;

impl Statement for Cat {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        format_call(cx, site, "cat")
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        send_formatted(cx, call);
    }

    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let path = String::from_utf8_lossy(&formatted(cx, message, bytes)?).into_owned();
        let limit = std::env::var("BPFTRACE_CAT_BYTES_MAX")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(CAT_BYTES_MAX);
        let mut content = Vec::new();
        // Without blocking: a FIFO with no writer must not stop every later print.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path);
        match file.and_then(|f| f.take(limit).read_to_end(&mut content)) {
            Ok(_) => cx.write_text(TextKind::Cat, &content, out)?,
            Err(error) => eprintln!(
                "ERROR: failed to open file '{path}': {}",
                os_message(&error)
            ),
        }
        Ok(Printed::Done)
    }
}

/// An I/O error's text without Rust's ` (os error N)` suffix.
fn os_message(error: &io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(end) => text[..end].to_string(),
        None => text,
    }
}

/// `system(fmt, args...)`: runs the command the format makes with
/// `/bin/sh -c` and prints its standard output. Needs `--unsafe`.
pub struct System;

impl Statement for System {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        require_unsafe(cx, site, "system", "it runs a shell command for each event")?;
        format_call(cx, site, "system")
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        send_formatted(cx, call);
    }

    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        let command = String::from_utf8_lossy(&formatted(cx, message, bytes)?).into_owned();
        let output = Command::new("/bin/sh")
            .arg("-c")
            .arg(&command)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output();
        match output {
            Ok(output) => cx.write_text(TextKind::Syscall, &output.stdout, out)?,
            Err(error) => eprintln!("wprof: system(\"{command}\"): {error}"),
        }
        Ok(Printed::Done)
    }
}

/// An error unless `--unsafe` was given.
fn require_unsafe(cx: &mut Checker, site: &Site, name: &str, why: &str) -> Option<()> {
    if cx.options.unsafe_builtins {
        return Some(());
    }
    let error = ScriptError::new(site.span, format!("{name}() is an unsafe function: {why}"))
        .with_help("run wprof with --unsafe to allow it");
    cx.error(error);
    None
}

/// `signal(sig)`: sends a signal (a name such as `"SIGKILL"` or `"KILL"`, or
/// a number from 1 to 64) to the current task. Needs `--unsafe`; not in
/// BEGIN or END. The call's arg is the signal number.
pub struct Signal;

impl Statement for Signal {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        require_unsafe(cx, site, "signal", "it signals the traced tasks")?;
        if providers::of(&cx.resolved().attach).runs_once() {
            let probe = cx.resolved().name.clone();
            return cx.fail(
                site.span,
                &format!(
                    "signal() cannot be used in {probe}: it signals the task a probe interrupts"
                ),
            );
        }
        let [sig] = site.args else {
            return cx.fail(site.span, "signal() takes one signal name or number");
        };
        let sig = cx.expr(sig)?;
        let number = match &sig.kind {
            TExprKind::Str(name) => match signal_number(name) {
                Some(n) => Some(n),
                None => return cx.fail(sig.span, &format!("{name} is not a valid signal")),
            },
            TExprKind::Int(n) if !(1..=64).contains(n) => {
                let message = format!("{n} is not a valid signal, allowed range: [1,64]");
                return cx.fail(sig.span, &message);
            }
            _ if sig.ty.is_int() => None,
            _ => {
                return cx.fail(
                    sig.span,
                    "signal() takes a signal name literal or an integer",
                );
            }
        };
        let sig = match number {
            Some(n) => crate::frontend::checked::TExpr {
                kind: TExprKind::Int(n),
                ty: crate::frontend::types::Type::U64,
                span: sig.span,
            },
            None => sig,
        };
        Some(TCall::new(site.id, vec![sig]))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        cx.send_signal(&call.args[0]);
    }
}

/// The number of a signal written `SIGKILL`, `sigkill` or `KILL`.
fn signal_number(name: &str) -> Option<u64> {
    const SIGNALS: [&str; 31] = [
        "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "BUS", "FPE", "KILL", "USR1", "SEGV", "USR2",
        "PIPE", "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN", "TTOU", "URG",
        "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS",
    ];
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    let index = SIGNALS.iter().position(|s| *s == bare)?;
    Some(index as u64 + 1)
}

/// `override(rc)`: makes the probed kernel function return `rc` without
/// running (kprobes on functions open to error injection, with
/// `CONFIG_BPF_KPROBE_OVERRIDE`). Needs `--unsafe`. The call's arg is `rc`.
pub struct Override;

impl Statement for Override {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        require_unsafe(
            cx,
            site,
            "override",
            "it changes what a kernel function returns",
        )?;
        if !matches!(
            cx.resolved().attach,
            AttachPoint::Kprobe {
                retprobe: false,
                ..
            }
        ) {
            return cx.fail(site.span, "override() can only be used in kprobes");
        }
        let [rc] = site.args else {
            return cx.fail(site.span, "override() takes the value to return");
        };
        let rc = cx.int_arg(rc, "override")?;
        Some(TCall::new(site.id, vec![rc]))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        cx.override_return(&call.args[0]);
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "join",
        written: Written::Call,
        indexed: false,
        signature: "join(argv[, sep])",
        doc: "Prints the strings of an array (at most 16, of 1024 bytes each) joined by `sep` (a space).",
        example: "uprobe:/bin/x:f { join(arg1, \",\"); }",
        kind: Kind::Statement(&Join),
    },
    Entry {
        name: "cat",
        written: Written::Call,
        indexed: false,
        signature: "cat(fmt, args...)",
        doc: "Prints the file whose path the format makes (at most 10 KiB, `BPFTRACE_CAT_BYTES_MAX`).",
        example: "interval:s:1 { cat(\"/proc/loadavg\"); }",
        kind: Kind::Statement(&Cat),
    },
    Entry {
        name: "system",
        written: Written::Call,
        indexed: false,
        signature: "system(fmt, args...)",
        doc: "Runs the command the format makes with /bin/sh and prints its output (needs --unsafe).",
        example: "interval:s:1 { system(\"uptime\"); }",
        kind: Kind::Statement(&System),
    },
    Entry {
        name: "signal",
        written: Written::Call,
        indexed: false,
        signature: "signal(sig)",
        doc: "Sends a signal (`\"SIGKILL\"`, `\"KILL\"` or a number) to the current task (needs --unsafe).",
        example: "tracepoint:syscalls:sys_enter_write /comm == \"x\"/ { signal(\"SIGSTOP\"); }",
        kind: Kind::Statement(&Signal),
    },
    Entry {
        name: "override",
        written: Written::Call,
        indexed: false,
        signature: "override(rc)",
        doc: "Makes the probed kernel function return `rc` without running it (kprobes; needs --unsafe).",
        example: "kprobe:should_fail_bio { override(-5); }",
        kind: Kind::Statement(&Override),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// Signal names with or without `SIG`, in any case.
    #[test]
    fn signal_numbers() {
        assert_eq!(signal_number("SIGKILL"), Some(9));
        assert_eq!(signal_number("kill"), Some(9));
        assert_eq!(signal_number("SIGUSR1"), Some(10));
        assert_eq!(signal_number("SIGSYS"), Some(31));
        assert_eq!(signal_number("SIGFOO"), None);
    }

    /// I/O errors print as the C library's message.
    #[test]
    fn error_messages() {
        let error = io::Error::from_raw_os_error(2);
        assert_eq!(os_message(&error), "No such file or directory");
    }
}
