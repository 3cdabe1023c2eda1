//! Differential tests: every `tests/differential/*.bt` script runs under wprof and
//! under bpftrace (the oracle), and their normalised stdout must be identical.
//!
//! Script header: the leading `//` comment lines may hold directives.
//! - `// args: -c "{uprobe_target} 5"`: options placed before the script path.
//!   `{name}` becomes the path of `tests/data/name.c`, compiled by the test (also
//!   in the script body, e.g. `uprobe:{uprobe_target}:add`). A `NAME.args` file,
//!   when present, replaces this directive.
//! - `// params: 7 35`: positional parameters placed after the script path.
//! - `// env: NAME=VALUE ...`: environment variables both tools run with
//!   (e.g. `BPFTRACE_STRLEN=8`).
//! - `// oracle: other`: bpftrace cannot run this script (newer spelling), so the
//!   reference is bpftrace's output for `other.bt`, the same program in 0.17 spelling.
//!
//! Reference output: live bpftrace when it is installed, else the committed
//! `NAME.expected` (bpftrace 0.17's output). Normalisation, applied to both sides:
//! workload paths are replaced by `{name}`, `\r` is dropped, and trailing blank lines
//! are trimmed (bpftrace ends with blank lines when no map is left to print).
//! The `Attaching N probes...` line is compared: probe counts must match.
//!
//! Environment:
//! - `WPROF_DIFF_ONLY=a,b`: run only these scripts (names without `.bt`).
//! - `WPROF_DIFF_TOOL=bpftrace`: test bpftrace itself against the committed
//!   expectations (validates them while wprof cannot run yet).
//! - `WPROF_DIFF_REFERENCE=expected`: compare with the committed files even when
//!   bpftrace is installed.
//! - `WPROF_DIFF_BLESS=1`: rewrite `*.expected` from live bpftrace output. With
//!   `WPROF_DIFF_TOOL=bpftrace` too, every script then runs twice under bpftrace:
//!   a determinism check of the new expectations.
//! - `WPROF_DIFF_TIMEOUT_SECS=N`: per-run timeout (default 20).

mod common;

use common::{RunOutput, find_in_path, run_with_timeout, unified_diff, workload, workload_names};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One differential script and its run configuration.
#[derive(Debug)]
struct Script {
    name: String,
    body: String,
    args: Vec<String>,
    params: Vec<String>,
    /// `NAME=VALUE` pairs from the `env` directive.
    env: Vec<(String, String)>,
    oracle: Option<String>,
}

impl Script {
    fn load(dir: &Path, name: &str) -> Result<Script, String> {
        let path = dir.join(format!("{name}.bt"));
        let body = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let directives = header_directives(&body);
        let args_file = dir.join(format!("{name}.args"));
        let args_text = match fs::read_to_string(&args_file) {
            Ok(text) => text,
            Err(_) => directives.get("args").cloned().unwrap_or_default(),
        };
        let params_text = directives.get("params").cloned().unwrap_or_default();
        Ok(Script {
            name: name.to_string(),
            args: split_words(args_text.trim())?,
            params: split_words(params_text.trim())?,
            env: environment(directives.get("env").map_or("", String::as_str))?,
            oracle: directives.get("oracle").cloned(),
            body,
        })
    }
}

/// `key: value` directives from the leading `//` comment lines of a script.
fn header_directives(body: &str) -> BTreeMap<String, String> {
    body.lines()
        .map_while(|line| line.trim_start().strip_prefix("//"))
        .filter_map(|comment| {
            let (key, value) = comment.trim().split_once(':')?;
            matches!(key, "args" | "params" | "env" | "oracle")
                .then(|| (key.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// The `env` directive's `NAME=VALUE` words.
fn environment(text: &str) -> Result<Vec<(String, String)>, String> {
    (split_words(text.trim())?.into_iter())
        .map(|word| match word.split_once('=') {
            Some((name, value)) => Ok((name.to_string(), value.to_string())),
            None => Err(format!("env directive `{word}` is not NAME=VALUE")),
        })
        .collect()
}

/// Splits like a shell: whitespace separates words, quotes group, `\` escapes.
fn split_words(text: &str) -> Result<Vec<String>, String> {
    let (mut words, mut cur, mut in_word) = (Vec::new(), String::new(), false);
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"') | None, '\\') => {
                cur.push(chars.next().ok_or("trailing backslash")?);
                in_word = true;
            }
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => (quote, in_word) = (Some(c), true),
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                }
                in_word = false;
            }
            (None, c) => (cur.push(c), in_word = true).1,
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in {text:?}"));
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Workload placeholders and the paths they stand for.
struct Workloads(Vec<(String, PathBuf)>);

impl Workloads {
    /// Builds only the workloads that `texts` mention as `{name}`.
    fn for_texts<'a>(texts: impl IntoIterator<Item = &'a str> + Clone) -> Workloads {
        let used = workload_names()
            .into_iter()
            .filter(|n| {
                texts
                    .clone()
                    .into_iter()
                    .any(|t| t.contains(&format!("{{{n}}}")))
            })
            .map(|n| {
                let path = workload(&n);
                (n, path)
            })
            .collect();
        Workloads(used)
    }

    fn substitute(&self, text: &str) -> String {
        self.0.iter().fold(text.to_string(), |t, (name, path)| {
            t.replace(&format!("{{{name}}}"), &path.to_string_lossy())
        })
    }

    /// The documented normalisation, applied to both outputs before comparing.
    fn normalise(&self, output: &str) -> String {
        let mut text = self
            .0
            .iter()
            .fold(output.replace('\r', ""), |t, (name, path)| {
                t.replace(path.to_string_lossy().as_ref(), &format!("{{{name}}}"))
            });
        let trimmed = text.trim_end_matches(['\n', ' ']).len();
        text.truncate(trimmed);
        if !text.is_empty() {
            text.push('\n');
        }
        text
    }
}

/// How a test run is configured from the environment.
struct Config {
    dir: PathBuf,
    tool: PathBuf,
    tool_name: String,
    bpftrace: Option<PathBuf>,
    bless: bool,
    timeout: Duration,
    only: Option<Vec<String>>,
}

impl Config {
    fn from_env() -> Config {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let bpftrace_installed = find_in_path("bpftrace");
        let use_expected = env("WPROF_DIFF_REFERENCE").is_some_and(|v| v == "expected");
        let tool_is_bpftrace = env("WPROF_DIFF_TOOL").is_some_and(|v| v == "bpftrace");
        let bless = env("WPROF_DIFF_BLESS").is_some();
        let tool = if tool_is_bpftrace {
            bpftrace_installed
                .clone()
                .expect("WPROF_DIFF_TOOL=bpftrace but bpftrace is not in PATH")
        } else {
            common::wprof_bin()
        };
        Config {
            dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/differential"),
            tool_name: if tool_is_bpftrace {
                "bpftrace"
            } else {
                "wprof"
            }
            .to_string(),
            tool,
            // Validating bpftrace against itself live only checks determinism, so that
            // mode reads the committed files, except when blessing (it must run live).
            bpftrace: bpftrace_installed.filter(|_| bless || !(use_expected || tool_is_bpftrace)),
            bless,
            timeout: Duration::from_secs(
                env("WPROF_DIFF_TIMEOUT_SECS").map_or(20, |v| v.parse().expect("timeout secs")),
            ),
            only: env("WPROF_DIFF_ONLY").map(|v| v.split(',').map(|s| s.trim().into()).collect()),
        }
    }

    fn script_names(&self) -> Vec<String> {
        let mut all: Vec<String> = fs::read_dir(&self.dir)
            .expect("tests/differential must exist")
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "bt"))
            .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
            .collect();
        all.sort();
        if let Some(only) = &self.only {
            for name in only {
                assert!(all.contains(name), "WPROF_DIFF_ONLY: no script {name}.bt");
            }
            all.retain(|n| only.contains(n));
        }
        all
    }
}

/// Runs `tool` on `script` (body and args already substituted) and returns its stdout,
/// or a description of how the run failed.
fn run_tool(cfg: &Config, tool: &Path, script: &Script, w: &Workloads) -> Result<String, String> {
    let file = common::scratch_dir("differential").join(format!("{}.bt", script.name));
    fs::write(&file, w.substitute(&script.body)).map_err(|e| e.to_string())?;
    let mut cmd = Command::new(tool);
    cmd.args(script.args.iter().map(|a| w.substitute(a)))
        .arg(&file)
        .args(&script.params)
        .envs(script.env.iter().map(|(name, value)| (name, value)));
    let out: RunOutput = run_with_timeout(&mut cmd, cfg.timeout)
        .map_err(|e| format!("cannot run {}: {e}", tool.display()))?;
    match out.status {
        None => Err(format!(
            "timed out after {:?}; stdout so far:\n{}\nstderr:\n{}",
            cfg.timeout, out.stdout, out.stderr
        )),
        Some(_) if !out.success() => Err(format!(
            "{} ({:?}); stdout:\n{}\nstderr:\n{}",
            out.status.unwrap(),
            out.elapsed,
            out.stdout,
            out.stderr
        )),
        // Messages name the script file, whose directory is the checkout's.
        Some(_) => Ok(w
            .normalise(&out.stdout)
            .replace(&*file.to_string_lossy(), "{script}")),
    }
}

/// The reference output for `script`: live bpftrace (of the oracle script when one
/// is named) or the committed expectation. Blesses the expectation when asked.
fn reference(cfg: &Config, script: &Script, w: &Workloads) -> Result<(String, String), String> {
    let expected_path = cfg.dir.join(format!("{}.expected", script.name));
    let committed = fs::read_to_string(&expected_path).ok();
    let Some(bpftrace) = &cfg.bpftrace else {
        let text = committed.ok_or(format!(
            "no {} (run with bpftrace installed and WPROF_DIFF_BLESS=1)",
            expected_path.display()
        ))?;
        return Ok((text, format!("{}.expected", script.name)));
    };
    let oracle_script;
    let source = match &script.oracle {
        Some(other) => {
            oracle_script = Script::load(&cfg.dir, other)?;
            &oracle_script
        }
        None => script,
    };
    let live = match (run_tool(cfg, bpftrace, source, w), &committed) {
        (Ok(live), _) => live,
        // The oracle is not under test: when it fails on a loaded machine
        // ("Child died unexpectedly"), its committed output stands in.
        (Err(error), Some(text)) if !cfg.bless => {
            eprintln!(
                "WARNING {}: bpftrace failed, comparing with {}.expected: {error}",
                script.name, script.name
            );
            return Ok((text.clone(), format!("{}.expected", script.name)));
        }
        (Err(error), _) => return Err(format!("bpftrace failed: {error}")),
    };
    if cfg.bless {
        fs::write(&expected_path, &live).map_err(|e| e.to_string())?;
    } else if committed.as_deref().is_some_and(|c| c != live) {
        eprintln!(
            "WARNING {}: live bpftrace differs from the committed expectation:\n{}",
            script.name,
            unified_diff(committed.as_deref().unwrap(), &live, "expected", "bpftrace").unwrap()
        );
    }
    Ok((live, format!("bpftrace {}.bt", source.name)))
}

/// Runs one script under test and against its reference; `Err` describes a mismatch.
fn check_script(cfg: &Config, name: &str) -> Result<(), String> {
    let script = Script::load(&cfg.dir, name)?;
    let oracle = match &script.oracle {
        Some(other) => Some(Script::load(&cfg.dir, other)?),
        None => None,
    };
    let mut texts = vec![script.body.as_str()];
    texts.extend(script.args.iter().map(String::as_str));
    texts.extend(
        oracle.iter().flat_map(|o| {
            std::iter::once(o.body.as_str()).chain(o.args.iter().map(String::as_str))
        }),
    );
    let w = Workloads::for_texts(texts);
    let (want, want_label) = reference(cfg, &script, &w)?;
    // bpftrace cannot run the newer spellings: validating it uses the oracle script.
    let under_test = match &oracle {
        Some(o) if cfg.tool_name == "bpftrace" => o,
        _ => &script,
    };
    let got = run_tool(cfg, &cfg.tool, under_test, &w)
        .map_err(|e| format!("{} failed: {e}", cfg.tool_name))?;
    match unified_diff(
        &want,
        &got,
        &want_label,
        &format!("{} {name}.bt", cfg.tool_name),
    ) {
        None => Ok(()),
        Some(diff) => Err(format!("output differs:\n{diff}")),
    }
}

/// Every differential script prints the same under the tool as under bpftrace.
#[test]
fn differential_scripts_match_bpftrace() {
    require_bpf!();
    let cfg = Config::from_env();
    let names = cfg.script_names();
    assert!(
        !names.is_empty(),
        "no scripts selected in {}",
        cfg.dir.display()
    );
    eprintln!(
        "differential: {} scripts, tool {}, reference {}",
        names.len(),
        cfg.tool.display(),
        cfg.bpftrace
            .as_ref()
            .map_or("committed .expected files".into(), |b| b
                .display()
                .to_string())
    );
    let mut failures = Vec::new();
    for name in &names {
        let result = check_script(&cfg, name);
        eprintln!("  {name}: {}", if result.is_ok() { "ok" } else { "FAILED" });
        if let Err(e) = result {
            failures.push(format!("==== {name} ====\n{e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differential scripts failed:\n\n{}",
        failures.len(),
        names.len(),
        failures.join("\n")
    );
}

/// Every script names only existing workloads and oracles, and has an expectation.
#[test]
fn scripts_are_well_formed() {
    let cfg = Config::from_env();
    let names = cfg.script_names();
    let workloads = workload_names();
    let mut problems = Vec::new();
    for name in &names {
        let script = Script::load(&cfg.dir, name).expect("script loads");
        if !cfg.dir.join(format!("{name}.expected")).exists() {
            problems.push(format!("{name}: no .expected file"));
        }
        if let Some(other) = script.oracle.as_ref()
            && !cfg.dir.join(format!("{other}.bt")).exists()
        {
            problems.push(format!("{name}: oracle {other}.bt does not exist"));
        }
        let text = format!("{} {}", script.body, script.args.join(" "));
        for placeholder in text.split('{').skip(1).filter_map(|s| s.split_once('}')) {
            let word = placeholder.0;
            let looks_like_name =
                !word.is_empty() && word.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
            if looks_like_name && !workloads.iter().any(|w| w == word) {
                problems.push(format!("{name}: unknown workload {{{word}}}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The shell-like splitter groups quoted words and honours escapes.
#[test]
fn split_words_handles_quotes() {
    let words = split_words(r#"-c "{w} 5" 'a b' x\ y -d 1"#).unwrap();
    assert_eq!(words, ["-c", "{w} 5", "a b", "x y", "-d", "1"]);
    assert!(split_words("\"open").is_err());
    assert_eq!(split_words("").unwrap(), Vec::<String>::new());
}

/// Directives come only from the leading comment block.
#[test]
fn header_directives_stop_at_code() {
    let body = "// oracle: other\n// args: -c \"x 1\"\nBEGIN {}\n// params: 9\n";
    let d = header_directives(body);
    assert_eq!(d.get("oracle").map(String::as_str), Some("other"));
    assert_eq!(d.get("args").map(String::as_str), Some("-c \"x 1\""));
    assert_eq!(d.get("params"), None);
}

/// Normalisation maps workload paths back to placeholders and trims trailing blank lines.
#[test]
fn normalise_replaces_paths_and_trailing_blanks() {
    let w = Workloads(vec![("t".into(), PathBuf::from("/tmp/x/t"))]);
    assert_eq!(w.normalise("exec /tmp/x/t\r\n\n\n"), "exec {t}\n");
    assert_eq!(w.normalise("\n\n"), "");
    assert_eq!(w.substitute("uprobe:{t}:f {u}"), "uprobe:/tmp/x/t:f {u}");
}

/// The unified diff reports every changed region, not only the first.
#[test]
fn unified_diff_reports_all_hunks() {
    let a = "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n";
    let b = "1\nTWO\n3\n4\n5\n6\n7\n8\n9\n10\nELEVEN\n12\n";
    let diff = unified_diff(a, b, "a", "b").unwrap();
    assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
    assert!(
        diff.contains("-2\n+TWO\n") && diff.contains("-11\n+ELEVEN\n"),
        "{diff}"
    );
    assert!(unified_diff(a, a, "a", "b").is_none());
}
