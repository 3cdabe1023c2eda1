//! `iter:task[:PIN]` and `iter:task_file[:PIN]` (also `it`): BPF iterators
//! (`BPF_PROG_TYPE_TRACING`, `BPF_TRACE_ITER`). The program runs once per
//! task (or per open file of each task) when user space reads the
//! iterator; `ctx` is `struct bpf_iter__task *` (`ctx->task`) or
//! `struct bpf_iter__task_file *` (`ctx->task`, `ctx->fd`, `ctx->file`).
//! A script with an iterator runs it once and ends (BEGIN and END may
//! surround it; no other probe may run with it). With `PIN`, the link is
//! pinned under `/sys/fs/bpf` instead, for others to read.

use std::path::{Path, PathBuf};

use libbpf_rs::{IterOpts, Link, ProgramMut};

use super::{ProbeType, Prologue, Provider, Resolved, ResolvedProbe, Spec, explain};
use crate::vocab::{AttachPoint, Context, Environment, IterTarget, KernelFeature};

pub struct Iter;

/// Where relative pin paths go.
const BPFFS: &str = "/sys/fs/bpf";

impl Provider for Iter {
    fn types(&self) -> &'static [ProbeType] {
        &[ProbeType {
            name: "iter",
            aliases: &["it"],
        }]
    }

    fn resolve(&self, _ty: &str, spec: &Spec, _env: &dyn Environment) -> Result<Resolved, String> {
        let (name, pin) = match spec.parts[..] {
            [name] => (name, None),
            [name, pin] if !pin.is_empty() => (name, Some(pin_path(pin))),
            _ => {
                return Err(format!(
                    "`{spec}`: iter probe type takes 2 arguments (1 optional): `iter:task[:PIN]`"
                ));
            }
        };
        let target = match name {
            "task" => IterTarget::Task,
            "task_file" => IterTarget::TaskFile,
            wild if wild.contains('*') => {
                return Err(format!(
                    "`{spec}`: iter probe type does not support wildcards"
                ));
            }
            other => {
                return Err(format!(
                    "`{spec}`: unsupported iter type `{other}` (wprof iterates `task` and `task_file`)"
                ));
            }
        };
        let probe = ResolvedProbe::new(
            format!("iter:{name}"),
            AttachPoint::Iter { target, pin },
            Context::Plain,
        );
        Ok(vec![probe].into())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Iter { .. })
    }

    fn section(&self, point: &AttachPoint) -> String {
        match point {
            AttachPoint::Iter { target, .. } => format!("iter/{}", target.name()),
            _ => unreachable!("not an iterator: {point:?}"),
        }
    }

    fn feature(&self, _point: &AttachPoint) -> Option<KernelFeature> {
        Some(KernelFeature::TaskIterators)
    }

    fn btf_pointers(&self) -> bool {
        true
    }

    fn context_type(&self, point: &AttachPoint) -> Result<&'static str, String> {
        match point {
            AttachPoint::Iter {
                target: IterTarget::Task,
                ..
            } => Ok("struct bpf_iter__task"),
            _ => Ok("struct bpf_iter__task_file"),
        }
    }

    fn prologue(&self, _point: &AttachPoint) -> Prologue {
        // Both contexts hold `task` after `meta`.
        Prologue::Iterator { object: 8 }
    }

    fn runs_alone(&self) -> bool {
        true
    }

    fn fires_in_wprof(&self) -> bool {
        true
    }

    fn attach(
        &self,
        prog: &ProgramMut<'_>,
        point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        let mut link = prog
            .attach_iter_with_opts(IterOpts::None)
            .map_err(|e| explain(&e, "BPF iterators need Linux 5.8+ and kernel BTF"))?;
        if let AttachPoint::Iter {
            pin: Some(path), ..
        } = point
        {
            link.pin(path).map_err(|e| {
                explain(
                    &e,
                    &format!("cannot pin at {} (is bpffs mounted?)", path.display()),
                )
            })?;
        }
        Ok(vec![link])
    }
}

/// A pin path as given, or under `/sys/fs/bpf` when relative.
fn pin_path(text: &str) -> PathBuf {
    match text.starts_with('/') {
        true => PathBuf::from(text),
        false => Path::new(BPFFS).join(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    fn resolve(parts: &[&str]) -> Result<Resolved, String> {
        let spec = Spec {
            word: "iter",
            parts: parts.to_vec(),
        };
        Iter.resolve("iter", &spec, &FakeMachine)
    }

    /// task and task_file, with an optional pin under /sys/fs/bpf.
    #[test]
    fn targets_and_pins() {
        let probes = resolve(&["task_file", "files"]).unwrap().probes;
        assert_eq!(probes[0].name, "iter:task_file");
        assert_eq!(
            probes[0].attach,
            AttachPoint::Iter {
                target: IterTarget::TaskFile,
                pin: Some(PathBuf::from("/sys/fs/bpf/files")),
            }
        );
        assert_eq!(Iter.section(&probes[0].attach), "iter/task_file");
        assert_eq!(
            Iter.context_type(&probes[0].attach),
            Ok("struct bpf_iter__task_file")
        );
        let error = resolve(&["ta*"]).unwrap_err();
        assert!(error.contains("does not support wildcards"), "{error}");
        let error = resolve(&["tcp"]).unwrap_err();
        assert!(error.contains("unsupported iter type `tcp`"), "{error}");
    }
}
