//! The validated walk cache of off-CPU stacks on the real kernel (`-S`:
//! every switch-out walks the user stack): a block that starts from the
//! same registers as the task's last one but under another caller gets a
//! fresh walk naming that caller; a block repeating the last walk reuses
//! it, frame for frame, and the capture counts it as cached; blocks at two
//! places in turn reuse each its own walk.

use serde_json::Value;

use super::super::capture::{Ndjson, fresh_dir};
use super::super::{machine_lock, path_str, workload, wprof_ok};
use crate::require_bpf;

const ROUNDS: usize = 200;

/// A nap's switch-out: which of the workload's functions its user stack
/// names, how it was walked, and its frames.
struct Nap {
    caller: &'static str,
    unwinder: String,
    frames: Vec<String>,
}

/// The main thread's switch-outs to sleep in `nanosleep`, in order (not
/// the preemptions: a nap can also be preempted on its way).
fn naps(nd: &Ndjson) -> Vec<Nap> {
    let is_nap = |e: &&Value| {
        e["t"] == "switch"
            && e["task"]["comm"] == "walk_cache"
            && e["prev_state"] == "S"
            && e["stack"].is_u64()
    };
    (nd.events.iter().filter(is_nap))
        .map(|e| (e, nd.stack_of(e).to_vec()))
        .filter(|(_, frames)| frames.iter().any(|f| f.contains(" hrtimer_nanosleep+")))
        .map(|(e, frames)| {
            let names = |f: &str| frames.iter().any(|x| x.contains(&format!(" {f}+")));
            let callers: Vec<&'static str> = (["caller_a", "caller_b", "repeat_here"].into_iter())
                .chain(["site_one", "site_two"])
                .filter(|f| names(f))
                .collect();
            assert!(callers.len() <= 1, "{frames:#?}");
            let unwinder = e["unwind"]["unwinder"].as_str().unwrap_or("none");
            Nap {
                caller: callers.first().copied().unwrap_or("none"),
                unwinder: unwinder.to_string(),
                frames,
            }
        })
        .collect()
}

/// `caller_a` and `caller_b` block alternately from the same pc, sp and
/// bp: every block names its own caller (none is served from the cache);
/// then `repeat_here` blocks from one call site: once its tables are in,
/// the blocks reuse the walk (flagged cached, counted by `-I`) with the
/// same frames through `main` as the walk they reuse.
#[test]
fn cache_serves_repeats_and_never_a_changed_caller() {
    require_bpf!();
    let _machine = machine_lock();
    let dir = fresh_dir("walk-cache");
    let at = |name: &str| path_str(&dir.join(name));
    let rounds = ROUNDS.to_string();
    #[rustfmt::skip]
    let out = wprof_ok(&[
        "-S", "-D", &at("w.data"), "-J", &at("w.ndjson"), "--only-command",
        "--", &workload("walk_cache"), &rounds,
    ]);
    assert!(out.stderr.contains(&format!("two sites rounds={ROUNDS}")));
    let nd = Ndjson::parse(&std::fs::read_to_string(dir.join("w.ndjson")).expect("NDJSON"));
    let naps = naps(&nd);
    let (alternated, rest) = naps.split_at(naps.len().min(2 * ROUNDS));
    let (repeated, two_sites) = rest.split_at(rest.len().min(ROUNDS));
    let expected = ["caller_a", "caller_b"].repeat(ROUNDS);
    let callers: Vec<&str> = alternated.iter().map(|n| n.caller).collect();
    assert_eq!(callers, expected);
    assert!(alternated.iter().all(|n| n.unwinder != "cached"));
    assert_eq!(repeated.len(), ROUNDS);
    assert!(repeated.iter().all(|n| n.caller == "repeat_here"));

    served_from_cache("repeat_here", repeated);

    // Two places in turn: the task keeps a walk for each.
    let sites: Vec<&str> = two_sites.iter().map(|n| n.caller).collect();
    assert_eq!(sites, ["site_one", "site_two"].repeat(ROUNDS));
    for site in ["site_one", "site_two"] {
        let naps: Vec<&Nap> = two_sites.iter().filter(|n| n.caller == site).collect();
        served_from_cache(site, &naps);
    }
    let info = wprof_ok(&["-R", "-D", &at("w.data"), "-I"]).stdout;
    let line = info.lines().find(|l| l.contains("cached off-CPU stacks"));
    let count: Option<usize> = line.and_then(|l| l.split_whitespace().last()?.parse().ok());
    assert!(count >= Some(ROUNDS / 4), "{info}");
}

/// From the first table walk of `site` on, the walk holds: a block reuses
/// it (most of the later ones: a block after the process's mappings entry
/// changed, its last tables coming in, walks again), and every reuse has
/// the walked frames through `main`.
fn served_from_cache<N: std::borrow::Borrow<Nap>>(site: &str, naps: &[N]) {
    let naps: Vec<&Nap> = naps.iter().map(|n| n.borrow()).collect();
    let first = naps.iter().position(|n| n.unwinder == "table");
    let first = first.unwrap_or_else(|| panic!("no table walk of {site}"));
    let walked = naps[first];
    let main = walked.frames.iter().position(|f| f.contains(" main+"));
    let here = (walked.frames.iter()).position(|f| f.contains(&format!(" {site}+")));
    assert!(here < main && here.is_some(), "{:#?}", walked.frames);
    let after = &naps[first + 1..];
    let cached: Vec<&&Nap> = after.iter().filter(|n| n.unwinder == "cached").collect();
    assert!(
        2 * cached.len() >= after.len() && cached.len() >= ROUNDS / 4,
        "{} of {} blocks in {site} after its first table walk were cached",
        cached.len(),
        after.len()
    );
    let user = |frames: &[String]| -> Vec<String> {
        (frames.iter())
            .filter(|f| !f.starts_with("[K]"))
            .cloned()
            .collect()
    };
    for nap in cached {
        assert_eq!(user(&nap.frames), user(&walked.frames), "{site}");
    }
}
