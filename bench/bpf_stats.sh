# Shared by the benchmarks that read BPF program costs (sourced, not run).
#
# prog_stats PID [TYPE]: one line per BPF program PID holds that has run
#   (of program type TYPE, a number of enum bpf_prog_type, when given),
#   `prog_id runs run_time_ns`, from /proc/PID/fdinfo (needs
#   kernel.bpf_stats_enabled=1).
# enable_bpf_stats: turns kernel.bpf_stats_enabled on until the script exits.
# wait_for_programs PID N: waits (up to 30 s) until N of PID's programs ran.

prog_stats() {
  local f
  for f in /proc/"$1"/fdinfo/*; do
    grep -q '^prog_type:' "$f" 2>/dev/null || continue
    awk -v want="${2:-}" '/^prog_type:/ {type=$2} /^prog_id:/ {id=$2}
         /^run_time_ns:/ {t=$2} /^run_cnt:/ {c=$2}
         END {if (c > 0 && (want == "" || type == want)) print id, c, t}' "$f"
  done
}

enable_bpf_stats() {
  BPF_STATS_BEFORE=$(sysctl -n kernel.bpf_stats_enabled)
  trap 'sysctl -q -w kernel.bpf_stats_enabled=$BPF_STATS_BEFORE' EXIT
  sysctl -q -w kernel.bpf_stats_enabled=1
}

wait_for_programs() {
  for _ in $(seq 600); do
    (($(prog_stats "$1" | wc -l) >= $2)) && return 0
    sleep 0.05
  done
  return 1
}
