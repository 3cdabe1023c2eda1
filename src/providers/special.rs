//! `BEGIN` and `END` (also `begin`, `end`): programs with no arguments that
//! the session runs once through `BPF_PROG_TEST_RUN`, before any other probe
//! is attached and after all are detached.

use libbpf_rs::{Link, ProgramMut};

use super::{ProbeType, Provider, Resolved, ResolvedProbe, Spec};
use crate::vocab::{AttachPoint, Context, Environment};

pub struct Special;

impl Provider for Special {
    fn memory_space_known(&self) -> bool {
        false
    }

    fn types(&self) -> &'static [ProbeType] {
        &[
            ProbeType {
                name: "BEGIN",
                aliases: &["begin"],
            },
            ProbeType {
                name: "END",
                aliases: &["end"],
            },
        ]
    }

    fn resolve(&self, ty: &str, spec: &Spec, _env: &dyn Environment) -> Result<Resolved, String> {
        spec.expect_parts(0, spec.word)?;
        let attach = match ty {
            "BEGIN" => AttachPoint::Begin,
            _ => AttachPoint::End,
        };
        Ok(vec![ResolvedProbe::new(ty.into(), attach, Context::Plain)].into())
    }

    fn owns(&self, point: &AttachPoint) -> bool {
        matches!(point, AttachPoint::Begin | AttachPoint::End)
    }

    fn section(&self, _point: &AttachPoint) -> String {
        // A raw tracepoint program is what BPF_PROG_TEST_RUN can run.
        "raw_tp".into()
    }

    fn runs_once(&self) -> bool {
        true
    }

    fn attach(
        &self,
        _prog: &ProgramMut<'_>,
        _point: &AttachPoint,
        _pid: i32,
    ) -> Result<Vec<Link>, String> {
        Err("BEGIN/END probes run with run_once, not attach".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    /// `begin` is BEGIN; BEGIN takes no parts.
    #[test]
    fn begin_and_end() {
        let spec = Spec {
            word: "begin",
            parts: vec![],
        };
        let probes = Special
            .resolve("BEGIN", &spec, &FakeMachine)
            .unwrap()
            .probes;
        assert_eq!(
            (probes[0].name.as_str(), &probes[0].attach),
            ("BEGIN", &AttachPoint::Begin)
        );
        let spec = Spec {
            word: "END",
            parts: vec!["x"],
        };
        let error = Special.resolve("END", &spec, &FakeMachine).unwrap_err();
        assert_eq!(error, "`END:x`: expected the form `END`");
    }
}
