//! Built-ins that print: `printf(fmt, ...)`, `print(@m[, top[, div]])`,
//! `print(value)` and `exit()`, each sending a message that user space prints
//! as bpftrace does; and `debugf(fmt, ...)`, which the kernel prints to the
//! trace pipe.

use std::io::{self, Write};

use super::{Entry, Kind, Site, Statement, Written};
use crate::codegen::lower::Lowerer;
use crate::frontend::ast::{Expr, ExprKind};
use crate::frontend::check::Checker;
use crate::frontend::checked::TCall;
use crate::frontend::diag::ScriptError;
use crate::frontend::types::Type;
use crate::output::json::TextKind;
use crate::output::maps::PrintOptions;
use crate::output::printer::{MapOp, Printed, Printer};
use crate::output::printf;
use crate::vocab::BuiltinMessage;
use crate::vocab::printf_format::{ArgKind, Conversion, Length, Spec, parse_format, specs};

/// `printf(fmt, args...)`: the call keeps the format as its text and the
/// arguments as its args; the message carries the parsed format.
pub struct Printf;

impl Statement for Printf {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        format_call(cx, site, "printf")
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
        let text = formatted(cx, message, bytes)?;
        cx.write_text(TextKind::Printf, &text, out)?;
        Ok(Printed::Done)
    }
}

/// `name(fmt, args...)` (`printf`, `cat`, `system`): a format string
/// literal whose conversions match the arguments in number and kind. The
/// call keeps the format as its text and the arguments as its args.
pub(super) fn format_call(cx: &mut Checker, site: &Site, name: &str) -> Option<TCall> {
    let Some((
        Expr {
            kind: ExprKind::Str(format),
            span: format_span,
        },
        rest,
    )) = site.args.split_first()
    else {
        return cx.fail(
            site.span,
            &format!("{name}() needs a format string literal first"),
        );
    };
    let pieces = match parse_format(format) {
        Ok(pieces) => pieces,
        Err(error) => return cx.fail(*format_span, &format!("bad {name} format: {error}")),
    };
    let wanted: Vec<ArgKind> = specs(&pieces).map(|s| s.arg_kind()).collect();
    if wanted.len() != rest.len() {
        let message = format!(
            "the format has {} conversions but {} arguments follow",
            wanted.len(),
            rest.len()
        );
        return cx.fail(site.span, &message);
    }
    let mut args = Vec::new();
    for (arg, kind) in rest.iter().zip(wanted) {
        let arg = cx.expr(arg)?;
        if !formats(kind, &arg.ty) {
            let help = match &arg.ty {
                Type::Buffer { .. } => "print buf() values with `%r`, `%rx` or `%rh`",
                ty if ty.is_text() => "print text with `%s`",
                ty if ty.is_int() => "print integers with `%d`, `%u`, `%x`...",
                _ => "print() shows values of any type",
            };
            let message = format!("{name} cannot format {} here", arg.ty);
            cx.error(ScriptError::new(arg.span, message).with_help(help));
            return None;
        }
        args.push(arg);
    }
    let mut call = TCall::new(site.id, args);
    call.text = Some(format.clone());
    Some(call)
}

/// Sends a call checked by [`format_call`]: its arguments, with the parsed
/// format kept for user space.
pub(super) fn send_formatted(cx: &mut Lowerer, call: &TCall) {
    let mut message = cx.message(call.builtin);
    let format = call.text.as_deref().unwrap_or_default();
    message.format = parse_format(format).expect("the checker parsed the format");
    cx.send_message(message, &call.args);
}

/// The text of a message sent by [`send_formatted`].
pub(super) fn formatted(
    cx: &Printer,
    message: &BuiltinMessage,
    bytes: &[u8],
) -> io::Result<Vec<u8>> {
    let values = cx.decode(bytes, &message.args)?;
    Ok(printf::format(&message.format, &values, cx))
}

/// Whether a conversion of `kind` prints values of type `ty`: integers with
/// integer conversions, text with `%s` (integers too, in decimal: an
/// extension), buffers with `%r`.
fn formats(kind: ArgKind, ty: &Type) -> bool {
    match kind {
        ArgKind::Integer => ty.is_int(),
        ArgKind::Text => ty.is_text() || ty.is_int(),
        ArgKind::Buffer => matches!(ty, Type::Buffer { .. }),
    }
}

/// `debugf(fmt, args...)`: `bpf_trace_printk` to the kernel's trace pipe,
/// as bpftrace does; the kernel formats, so only what it formats is
/// accepted: at most 3 arguments, `%d %i %u %x %X %p` (with `l`/`ll`) of
/// integers and `%s` of strings, with flags and widths but no precision.
pub struct Debugf;

/// Arguments `bpf_trace_printk` formats after its format and size.
const TRACE_PRINTK_MAX_ARGS: usize = 3;

impl Statement for Debugf {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let call = format_call(cx, site, "debugf")?;
        if call.args.len() > TRACE_PRINTK_MAX_ARGS {
            let message = format!(
                "debugf() takes at most {TRACE_PRINTK_MAX_ARGS} arguments after the format"
            );
            return cx.fail(site.span, &message);
        }
        let format = call.text.as_deref().unwrap_or_default();
        let pieces = parse_format(format).expect("format_call parsed the format");
        for (spec, arg) in specs(&pieces).zip(&call.args) {
            if let Some(problem) = trace_printk_refuses(spec) {
                let error = ScriptError::new(site.span, format!("debugf() cannot print {problem}"))
                    .with_help("the kernel formats debugf(): `%d %i %u %x %X %p` (with `l`, `ll`), `%s`, flags `-0+ ` and widths");
                cx.error(error);
                return None;
            }
            if spec.conversion == Conversion::Str && !matches!(arg.ty, Type::Str { .. }) {
                let message = format!("debugf()'s `%s` prints strings, not {}", arg.ty);
                return cx.fail(arg.span, &message);
            }
        }
        cx.warn(
            "The debugf() builtin is not recommended for production use. \
             For more information see bpf_trace_printk in bpf-helpers(7).",
        );
        Some(call)
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        cx.trace_printk(call.text.as_deref().unwrap_or_default(), &call.args);
    }
}

/// What of `spec` `bpf_trace_printk` does not format, if anything.
fn trace_printk_refuses(spec: &Spec) -> Option<&'static str> {
    if spec.precision.is_some() {
        return Some("a precision");
    }
    if spec.flags.alt {
        return Some("the `#` flag");
    }
    if !matches!(spec.length, Length::Int | Length::Long) {
        return Some("`h` or `hh` lengths");
    }
    match spec.conversion {
        Conversion::Signed
        | Conversion::Unsigned
        | Conversion::Hex
        | Conversion::HexUpper
        | Conversion::Str
        | Conversion::Pointer => None,
        Conversion::Octal => Some("`%o`"),
        Conversion::Char => Some("`%c`"),
        Conversion::Buffer(_) => Some("buf() values"),
    }
}

/// `print(@m[, top[, div]])` (the call's map, with top and div as its
/// consts) or `print(value)` (its one arg).
pub struct Print;

impl Statement for Print {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        let args = site.args;
        if let Some(Expr {
            kind: ExprKind::Map { keys, .. },
            ..
        }) = args.first()
            && keys.is_empty()
        {
            let map = cx.whole_map("print", args, site.span)?;
            let mut constant = |e: Option<&Expr>| match e.map(|e| &e.kind) {
                None => Some(0),
                Some(ExprKind::Int(n)) => Some(*n),
                Some(_) => cx.fail(site.span, "print()'s top and div must be integer literals"),
            };
            let (top, div) = (constant(args.get(1))?, constant(args.get(2))?);
            if args.len() > 3 {
                return cx.fail(site.span, "print() takes a map and optional top and div");
            }
            let mut call = TCall::new(site.id, Vec::new());
            call.map = Some(map);
            call.consts = vec![top, div];
            return Some(call);
        }
        let [value] = args else {
            return cx.fail(site.span, "print() takes a map or one value");
        };
        let value = cx.expr(value)?;
        Some(TCall::new(site.id, vec![value]))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let mut message = cx.message(call.builtin);
        message.map = call.map.map(|map| cx.map_id(map));
        message.consts = call.consts.clone();
        cx.send_message(message, &call.args);
    }

    fn print(
        &self,
        cx: &Printer,
        message: &BuiltinMessage,
        bytes: &[u8],
        out: &mut dyn Write,
    ) -> io::Result<Printed> {
        if let (Some(map), &[top, div]) = (message.map, &message.consts[..]) {
            let options = PrintOptions { top, div };
            return Ok(Printed::Map(MapOp::Print { map, options }));
        }
        let values = cx.decode(bytes, &message.args)?;
        cx.print_value(&values[0], out)?;
        Ok(Printed::Done)
    }
}

/// `exit()`: ends tracing once user space reads the message; its block
/// ends at once.
pub struct Exit;

impl Statement for Exit {
    fn check(&self, cx: &mut Checker, site: &Site) -> Option<TCall> {
        if !site.args.is_empty() {
            return cx.fail(site.span, "exit() takes no arguments");
        }
        Some(TCall::new(site.id, Vec::new()))
    }

    fn lower(&self, cx: &mut Lowerer, call: &TCall) {
        let message = cx.message(call.builtin);
        cx.send_message(message, &[]);
        cx.return_from_block();
    }

    fn print(
        &self,
        _cx: &Printer,
        _message: &BuiltinMessage,
        _bytes: &[u8],
        _out: &mut dyn Write,
    ) -> io::Result<Printed> {
        Ok(Printed::Exit)
    }
}

pub(super) const TABLE: &[Entry] = &[
    Entry {
        name: "printf",
        written: Written::Call,
        indexed: false,
        signature: "printf(fmt, args...)",
        doc: "Prints the arguments with a C format (`%d %u %x %s %c %p`, flags, width, precision).",
        example: "tracepoint:syscalls:sys_enter_write { printf(\"%-6d %s\\n\", pid, comm); }",
        kind: Kind::Statement(&Printf),
    },
    Entry {
        name: "print",
        written: Written::Call,
        indexed: false,
        signature: "print(@m[, top[, div]]), print(value)",
        doc: "Prints a map now (its `top` largest entries, values divided by `div`), or one value.",
        example: "profile:hz:99 { @[comm] = count(); } interval:s:1 { print(@, 10); print(1); }",
        kind: Kind::Statement(&Print),
    },
    Entry {
        name: "debugf",
        written: Written::Call,
        indexed: false,
        signature: "debugf(fmt, args...)",
        doc: "Prints to the kernel's trace pipe (`bpf_trace_printk`): up to 3 integers or strings, formatted by the kernel; for debugging only.",
        example: "tracepoint:syscalls:sys_enter_write { debugf(\"write by %d: %s\", pid, comm); }",
        kind: Kind::Statement(&Debugf),
    },
    Entry {
        name: "exit",
        written: Written::Call,
        indexed: false,
        signature: "exit()",
        doc: "Ends tracing: maps print and END runs, as after Ctrl-C.",
        example: "interval:s:5 { exit(); }",
        kind: Kind::Statement(&Exit),
    },
];
