//! The compile cache of the built-in trackers (src/compile_cache): a second
//! capture reads the programs instead of parsing BTF and compiling, records
//! the same events, and a damaged, foreign or unsafe entry or directory is
//! passed over, never trusted and never fatal.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use wprof::capture::reader::CaptureReader;

use super::capture::{Ndjson, fresh_dir};
use super::{RUN_TIMEOUT, path_str, workload};
use crate::common::{RunOutput, run_with_timeout, wprof_bin};
use crate::require_bpf;

const COMPILED: &str = "timing: trackers and script compiled";
const FROM_CACHE: &str = "timing: trackers read from the compile cache";
const BTF_PARSED: &str = "timing: kernel BTF mapped";

/// One capture of `sys_tasklife 2` with the cache in `cache`, timed: only
/// the command's own processes (other tests run the same workload).
struct Run {
    stderr: String,
    json: Ndjson,
    data: PathBuf,
}

#[track_caller]
fn capture(dir: &Path, cache: &Path, name: &str, extra: &[&str]) -> Run {
    let (data, json) = (
        dir.join(format!("{name}.data")),
        dir.join(format!("{name}.json")),
    );
    let command = format!("{} 2", workload("sys_tasklife"));
    let mut wprof = Command::new(wprof_bin());
    wprof
        .env("WPROF_CACHE_DIR", cache)
        .env("WPROF_TIMINGS", "1")
        .env_remove("WPROF_NO_CACHE")
        .args([
            "-D",
            &path_str(&data),
            "-J",
            &path_str(&json),
            "--only-command",
            "-c",
            &command,
        ])
        .args(extra);
    let out: RunOutput = run_with_timeout(&mut wprof, RUN_TIMEOUT).expect("run wprof");
    assert!(
        out.success() && !out.stderr.contains("panicked"),
        "wprof {extra:?} failed ({:?}):\n{}",
        out.status,
        out.stderr
    );
    let text = std::fs::read_to_string(&json).expect("NDJSON written");
    Run {
        stderr: out.stderr,
        json: Ndjson::parse(&text),
        data,
    }
}

/// The cache's entries, by file name.
fn entries(cache: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|list| list.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default();
    found.sort();
    found
}

/// What the workload did, as the capture tells it: events per kind that
/// involve its processes, and the capture's record kinds.
fn workload_story(run: &Run) -> (BTreeMap<String, usize>, Vec<String>) {
    let tasklife =
        |e: &&Value| e.to_string().contains("sys_tasklife") || e["filename"] == "/bin/true";
    let mut kinds = BTreeMap::new();
    for event in run.json.events.iter().filter(tasklife) {
        let kind = event["t"].as_str().unwrap_or("?").to_string();
        if ["fork", "exec", "exit", "rename"].contains(&kind.as_str()) {
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }
    let reader = CaptureReader::open(&run.data).expect("capture readable");
    let schemas = reader.schemas().iter().map(|s| format!("{s:?}")).collect();
    (kinds, schemas)
}

/// The first capture compiles and stores one private entry; the second reads
/// it, parses no BTF, compiles nothing and records the same events.
#[test]
fn second_capture_reads_the_cache() {
    require_bpf!();
    let dir = fresh_dir("cache-hit");
    let cache = dir.join("cache");
    let first = capture(&dir, &cache, "first", &[]);
    assert!(first.stderr.contains(COMPILED), "{}", first.stderr);
    let stored = entries(&cache);
    assert_eq!(stored.len(), 1, "{stored:?}");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&stored[0]).expect("entry").permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let second = capture(&dir, &cache, "second", &[]);
    assert!(second.stderr.contains(FROM_CACHE), "{}", second.stderr);
    assert!(!second.stderr.contains(BTF_PARSED), "{}", second.stderr);
    assert!(!second.stderr.contains(COMPILED), "{}", second.stderr);
    let (story, schemas) = workload_story(&first);
    assert_eq!(story.get("fork"), Some(&2), "{story:?}");
    assert_eq!(workload_story(&second), (story, schemas));
    let bypassed = capture(&dir, &cache, "bypassed", &["--no-cache"]);
    assert!(bypassed.stderr.contains(COMPILED), "{}", bypassed.stderr);
}

/// A damaged entry, and an entry made under other options copied in its
/// place, are both ignored: the capture compiles and rewrites a sound entry.
#[test]
fn damaged_or_foreign_entries_are_rebuilt() {
    require_bpf!();
    let dir = fresh_dir("cache-damaged");
    let cache = dir.join("cache");
    capture(&dir, &cache, "store", &[]);
    let entry = entries(&cache).pop().expect("an entry");
    let mut bytes = std::fs::read(&entry).expect("entry");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&entry, &bytes).expect("damage");
    let damaged = capture(&dir, &cache, "damaged", &[]);
    assert!(damaged.stderr.contains(COMPILED), "{}", damaged.stderr);
    assert!(
        capture(&dir, &cache, "healed", &[])
            .stderr
            .contains(FROM_CACHE)
    );
    capture(&dir, &cache, "offcpu", &["-S", "offcpu"]);
    let offcpu = entries(&cache)
        .into_iter()
        .find(|e| *e != entry)
        .expect("2nd entry");
    std::fs::copy(&offcpu, &entry).expect("copy the foreign entry in");
    let foreign = capture(&dir, &cache, "foreign", &[]);
    assert!(foreign.stderr.contains(COMPILED), "{}", foreign.stderr);
    let rewritten = std::fs::read(&entry).expect("entry");
    assert_ne!(
        rewritten,
        std::fs::read(&offcpu).expect("-S entry"),
        "not rewritten"
    );
}

/// A symlinked cache directory and one that cannot be created are not
/// used: a warning, and a correct capture all the same.
#[test]
fn unsafe_or_unusable_dirs_are_passed_over() {
    require_bpf!();
    let dir = fresh_dir("cache-unsafe");
    let real = dir.join("real");
    std::fs::create_dir(&real).expect("mkdir");
    std::os::unix::fs::symlink(&real, dir.join("link")).expect("symlink");
    let linked = capture(&dir, &dir.join("link"), "linked", &[]);
    assert!(
        linked.stderr.contains("compile cache not used"),
        "{}",
        linked.stderr
    );
    assert!(entries(&real).is_empty());
    std::fs::write(dir.join("file"), b"").expect("file");
    let blocked = capture(&dir, &dir.join("file/cache"), "blocked", &[]);
    assert!(
        blocked.stderr.contains("compile cache not used"),
        "{}",
        blocked.stderr
    );
    assert_eq!(workload_story(&blocked).0.get("fork"), Some(&2));
}
