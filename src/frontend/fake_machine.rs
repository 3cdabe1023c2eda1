//! A fake machine for front-end tests: the checker asks it what a real
//! system would answer from tracefs and ELF files.

use std::path::PathBuf;

use crate::frontend::checked::{FieldKind, TracepointField, UsdtArgSpec};
use crate::frontend::probes::{Environment, FunctionTarget, UsdtTarget};

/// A machine with a few tracepoints (`syscalls:sys_enter_openat`,
/// `syscalls:sys_enter_write`, `syscalls:sys_exit_read`, `sched:named`) and
/// every function in every binary, at file offset 0x1000.
pub struct FakeMachine;

const TRACEPOINTS: [(&str, &str); 4] = [
    ("syscalls", "sys_enter_openat"),
    ("syscalls", "sys_enter_write"),
    ("syscalls", "sys_exit_read"),
    ("sched", "named"),
];

impl Environment for FakeMachine {
    fn expand_tracepoints(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<(String, String)>, String> {
        let matches = |tp: &str| match name.strip_suffix('*') {
            Some(prefix) => tp.starts_with(prefix),
            None => tp == name,
        };
        let found: Vec<(String, String)> = TRACEPOINTS
            .iter()
            .filter(|(cat, tp)| *cat == category && matches(tp))
            .map(|(cat, tp)| (cat.to_string(), tp.to_string()))
            .collect();
        if found.is_empty() {
            Err(format!("no tracepoint matches `{category}:{name}`"))
        } else {
            Ok(found)
        }
    }

    fn tracepoint_fields(
        &self,
        _category: &str,
        name: &str,
    ) -> Result<Vec<TracepointField>, String> {
        let field = |name: &str, offset, kind| TracepointField {
            name: name.into(),
            offset,
            kind,
        };
        let int = FieldKind::Int {
            size: 8,
            signed: true,
        };
        Ok(match name {
            "sys_exit_read" => vec![field("ret", 16, int)],
            "named" => vec![field("ret", 16, FieldKind::CharArray(16))],
            "sys_enter_openat" => vec![
                field("dfd", 16, int.clone()),
                field("filename", 24, FieldKind::Pointer { user: true }),
                field("flags", 32, int),
            ],
            _ => vec![
                field(
                    "fd",
                    16,
                    FieldKind::Int {
                        size: 4,
                        signed: false,
                    },
                ),
                field("buf", 24, FieldKind::Pointer { user: true }),
                field(
                    "count",
                    32,
                    FieldKind::Int {
                        size: 8,
                        signed: false,
                    },
                ),
            ],
        })
    }

    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String> {
        let target = FunctionTarget {
            name: pattern.into(),
            file_offset: 0x1000,
        };
        Ok((PathBuf::from(binary), vec![target]))
    }

    fn usdt(
        &self,
        _: &str,
        _: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String> {
        let arg = UsdtArgSpec::Constant(1);
        let target = UsdtTarget {
            provider: "p".into(),
            name: name.into(),
            file_offset: 0,
            semaphore_offset: 0,
            args: vec![arg],
        };
        Ok((PathBuf::from("/bin/x"), vec![target]))
    }
}
