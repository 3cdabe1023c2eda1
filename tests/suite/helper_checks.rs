//! `-k`/`-kk`: failed helper calls reported at run time where the script
//! makes them (the forms bpftrace prints identically are differential tests:
//! `tests/differential/helper_errors_*.bt`).

use super::{workload, wprof, wprof_ok};
use crate::require_bpf;

/// `-kk` reports a failed user read with its helper, errno and the script
/// text; `-k` leaves reads and lookups unreported, as bpftrace does.
#[test]
fn kk_reports_reads_and_k_does_not() {
    require_bpf!();
    let target = workload("uprobe_target");
    let script = format!(
        "uprobe:{target}:answer /pid == cpid/ {{ @m[2] = 2; $bad = *(int32 *)8; printf(\"bad=%d missing=%d\\n\", $bad, @m[1]); }}"
    );
    let command = format!("{target} 1");
    let all = wprof_ok(&["-kk", "-e", &script, "-c", &command]).stdout;
    assert!(
        all.contains("<script>:1:")
            && all.contains("WARNING: Failed to probe_read_user: Bad address (-14)\n"),
        "{all}"
    );
    assert!(
        all.contains("WARNING: Failed to map_lookup_elem: 0\n"),
        "{all}"
    );
    assert!(all.contains("bad=0 missing=0\n"), "{all}");
    let silent = wprof_ok(&["-k", "-e", &script, "-c", &command]).stdout;
    assert!(!silent.contains("WARNING"), "{silent}");
    assert!(silent.contains("bad=0 missing=0\n"), "{silent}");
}

/// Without -k nothing is checked; a third -k is refused.
#[test]
fn off_by_default_and_at_most_kk() {
    require_bpf!();
    let script = "BEGIN { @m[2] = 1; delete(@m[1]); printf(\"done\\n\"); exit(); }";
    let out = wprof_ok(&["-e", script]).stdout;
    assert_eq!(out, "Attaching 1 probe...\ndone\n\n\n@m[2]: 1\n");
    let checked = wprof_ok(&["-k", "-e", script]).stdout;
    assert!(
        checked.contains("WARNING: Failed to map_delete_elem"),
        "{checked}"
    );
    let refused = wprof(&["-kkk", "-e", script]);
    assert!(!refused.success());
    assert!(
        refused.stderr.contains("-k is given at most twice"),
        "{}",
        refused.stderr
    );
}
