//! What differs between the captures of a comparison, from what each says
//! about itself (`CaptureInfo`): the script, the kernel, the machine, the CPU
//! count, wprof's version and the tracking settings. Different scripts are
//! an error unless allowed; other differences are reported, and those that
//! change what a metric means leave it uncompared.

use std::path::PathBuf;

use super::CompareError;
use crate::capture::model::CaptureInfo;

/// One property whose value is not the same in every capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// What it is: `script`, `kernel`, `host`, `CPUs`, `wprof`, `features`,
    /// `stacks`, `counters`, `filters`.
    pub what: &'static str,
    /// The distinct values of each side, in the order of their captures.
    pub baseline: Vec<String>,
    pub candidate: Vec<String>,
    /// The metrics it leaves uncompared, and why, if any.
    pub uncompared: Option<(&'static [&'static str], &'static str)>,
}

/// A property of a capture that a comparison checks.
struct Property {
    what: &'static str,
    value: fn(&CaptureInfo) -> String,
    /// Globs of the metrics whose meaning it changes, and the reason shown.
    uncompared: Option<(&'static [&'static str], &'static str)>,
}

const PROPERTIES: [Property; 9] = [
    Property {
        what: "script",
        value: |info| short_script(&info.script),
        uncompared: None,
    },
    Property {
        what: "kernel",
        value: |info| info.kernel_release.clone(),
        uncompared: None,
    },
    Property {
        what: "host",
        value: |info| info.hostname.clone(),
        uncompared: None,
    },
    Property {
        what: "CPUs",
        value: |info| info.cpus.to_string(),
        uncompared: Some((&["cpu.idle", "cpu.oncpu"], "the CPU counts differ")),
    },
    Property {
        what: "wprof",
        value: |info| info.wprof_version.clone(),
        uncompared: None,
    },
    Property {
        what: "features",
        value: |info| list(&info.settings.features),
        uncompared: None,
    },
    Property {
        what: "stacks",
        value: |info| list(&info.settings.stacks),
        uncompared: Some((
            &["*.samples", "record:timer.*", "record:pmu_sample.*"],
            "the sampling settings differ",
        )),
    },
    Property {
        what: "counters",
        value: |info| list(&info.settings.pmu),
        uncompared: None,
    },
    Property {
        what: "filters",
        value: |info| list(&info.settings.filters),
        uncompared: Some((&["cpu.*"], "the task filters differ")),
    },
];

/// Settings as one value: `none`, or the items space-separated.
fn list(items: &[String]) -> String {
    match items {
        [] => "none".to_owned(),
        _ => items.join(" "),
    }
}

/// A script on one line, cut to a length a message can show.
fn short_script(script: &str) -> String {
    const SHOWN: usize = 60;
    let line = script.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        return "no script".to_owned();
    }
    match line.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("`{}…`", &line[..cut]),
        None => format!("`{line}`"),
    }
}

/// Captures of different scripts measure different things under the same
/// names: an error naming the first two that differ, unless `allowed`.
pub(super) fn check_scripts(
    baseline: &[(PathBuf, CaptureInfo)],
    candidate: &[(PathBuf, CaptureInfo)],
    allowed: bool,
) -> Result<(), CompareError> {
    let mut all = baseline.iter().chain(candidate);
    let Some((first_path, first)) = all.next() else {
        return Ok(());
    };
    match all.find(|(_, info)| info.script != first.script) {
        Some((second_path, second)) if !allowed => Err(CompareError::DifferentScripts {
            first_path: first_path.clone(),
            first: short_script(&first.script),
            second_path: second_path.clone(),
            second: short_script(&second.script),
        }),
        _ => Ok(()),
    }
}

/// Every property whose value is not the same in all captures.
pub(super) fn differences(
    baseline: &[(PathBuf, CaptureInfo)],
    candidate: &[(PathBuf, CaptureInfo)],
) -> Vec<Difference> {
    let distinct = |infos: &[(PathBuf, CaptureInfo)], value: fn(&CaptureInfo) -> String| {
        let mut values: Vec<String> = Vec::new();
        for (_, info) in infos {
            let value = value(info);
            if !values.contains(&value) {
                values.push(value);
            }
        }
        values
    };
    PROPERTIES
        .iter()
        .filter_map(|property| {
            let baseline = distinct(baseline, property.value);
            let candidate = distinct(candidate, property.value);
            let mut all = baseline.iter().chain(&candidate);
            let first = all.next()?;
            all.any(|value| value != first).then_some(Difference {
                what: property.what,
                baseline,
                candidate,
                uncompared: property.uncompared,
            })
        })
        .collect()
}

/// The metrics the differences leave uncompared: a glob and the reason.
pub(super) fn exclusions(differences: &[Difference]) -> Vec<(glob::Pattern, &'static str)> {
    differences
        .iter()
        .filter_map(|difference| difference.uncompared)
        .flat_map(|(globs, reason)| {
            globs.iter().map(move |glob| {
                let pattern = glob::Pattern::new(glob).expect("the property globs are valid");
                (pattern, reason)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::source::FakeCapture;

    fn info(edit: impl Fn(&mut CaptureInfo)) -> (PathBuf, CaptureInfo) {
        let mut info = FakeCapture::new().info;
        edit(&mut info);
        (PathBuf::from("x.data"), info)
    }

    /// Equal captures differ in nothing; a kernel and a CPU count that
    /// differ are reported per side, the CPU count with what it leaves out.
    #[test]
    fn reports_what_differs() {
        let same = [info(|_| {})];
        let twice = [same[0].clone(), same[0].clone()];
        assert!(differences(&same, &twice).is_empty());
        let newer = info(|i| i.kernel_release = "6.19".into());
        let bigger = info(|i| i.cpus = 8);
        let found = differences(&same, &[newer, bigger]);
        let whats: Vec<&str> = found.iter().map(|d| d.what).collect();
        assert_eq!(whats, ["kernel", "CPUs"]);
        assert_eq!(found[0].baseline, ["6.18.0-test"]);
        assert_eq!(found[0].candidate, ["6.19", "6.18.0-test"]);
        let excluded = exclusions(&found);
        assert!(excluded.iter().any(|(g, _)| g.matches("cpu.idle")));
        assert!(!excluded.iter().any(|(g, _)| g.matches("span:request.p99")));
    }

    /// Different scripts are an error naming both captures, unless allowed.
    #[test]
    fn different_scripts() {
        let a = [info(|_| {})];
        let mut b = info(|i| i.script = "span req { uprobe:./a:f < > uretprobe:./a:f }".into());
        b.0 = PathBuf::from("new.data");
        let b = [b];
        let error = check_scripts(&a, &b, false).expect_err("different");
        assert_eq!(
            error.to_string(),
            "x.data and new.data were recorded with different scripts \
             (`uprobe:libc:malloc < >` and `span req { uprobe:./a:f < > uretprobe:./a:f }`); \
             pass --allow-different-scripts to compare the metrics they share"
        );
        assert!(check_scripts(&a, &b, true).is_ok());
        assert!(check_scripts(&a, &a, false).is_ok());
        assert_eq!(short_script(&"x ".repeat(40)).chars().count(), 63);
    }
}
