//! The shipped tools bpftrace 0.17 runs here, run under bpftrace and under
//! wprof (one after the other, never at once) with the same workload, then
//! compared by shape. The machine is shared, so the workload marks its own
//! lines (a uniquely named copy of a binary as its comm, a unique path or
//! text) and only those are compared: header lines exactly, the marked lines
//! as shapes (digit runs and histogram bars normalised, spacing collapsed),
//! which must be the same non-empty set on both sides.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use super::tools::{TOOLS, assert_still_pending, pending, tool_path};
use super::{path_str, workload};
use crate::common::{find_in_path, scratch_dir, wprof_bin};
use crate::require_bpf;

/// One tool run at a time: tools trace the whole system.
static TRACE_LOCK: Mutex<()> = Mutex::new(());

/// How the lines a workload produced are found in a tool's output.
enum Select {
    /// Lines containing this text.
    Lines(&'static str),
    /// The block of lines from one starting with this text to a blank line.
    Block(&'static str),
}

/// The leading lines (banner and column headers) checked.
enum Header {
    /// This many lines, identical under both tools.
    Same(usize),
    /// bpftrace cannot run the tool here (see the catalog): wprof alone runs
    /// and prints exactly these lines first.
    WprofOnly(&'static str),
}

/// One tool's comparison.
struct Case {
    tool: &'static str,
    header: Header,
    /// `sh -c` text run while the tool traces; `$D` is a scratch directory,
    /// `{name}` the path of workload `tests/data/name.c`.
    workload: &'static str,
    select: Select,
    /// The last non-blank line both tools print, when fixed.
    last_line: Option<&'static str>,
    /// The lines end in (or maps are keyed by) a function of a process that
    /// may have exited: bpftrace then prints a raw address where wprof names
    /// the function (a documented deviation), so that symbol is not compared.
    symbols: bool,
}

/// Runs `case` under both tools and compares; skips (with a reason) when a
/// tool, a helper program or BPF is missing; a pending tool only checks that
/// it is still pending.
fn compare(case: &Case) {
    let Some(path) = tool_path(case.tool) else {
        return;
    };
    if let Some((construct, error)) = pending(case.tool) {
        assert_still_pending(case.tool, &path, construct, error);
        return;
    }
    let dir = scratch_dir(&format!("tools/{}", case.tool));
    let script = expand(case.workload, &dir);
    let _turn = TRACE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let lines = match case.header {
        Header::Same(lines) => lines,
        Header::WprofOnly(expected) => {
            let ours = trace(&wprof_bin(), &path, &script, &dir, Ending::Required);
            assert!(
                ours.starts_with(expected) && !shapes(&ours, &case.select).is_empty(),
                "{}: expected to start with\n{expected}\ngot:\n{ours}",
                case.tool
            );
            return;
        }
    };
    let Some(bpftrace) = find_in_path("bpftrace") else {
        eprintln!("SKIPPED {}: bpftrace is not installed", case.tool);
        return;
    };
    let theirs = trace(&bpftrace, &path, &script, &dir, Ending::Oracle);
    let ours = trace(&wprof_bin(), &path, &script, &dir, Ending::Required);
    let header = |out: &str| out.lines().take(lines).collect::<Vec<_>>().join("\n");
    assert_eq!(
        header(&ours),
        header(&theirs),
        "{}: header lines differ\nwprof:\n{ours}\nbpftrace:\n{theirs}",
        case.tool
    );
    let shapes = |out: &str| {
        let all = shapes(out, &case.select);
        match case.symbols {
            true => all.iter().map(|l| without_symbol(l)).collect(),
            false => all,
        }
    };
    let (our_shapes, their_shapes) = (shapes(&ours), shapes(&theirs));
    assert!(
        !their_shapes.is_empty(),
        "{}: bpftrace printed no workload line:\n{theirs}",
        case.tool
    );
    assert_eq!(
        our_shapes, their_shapes,
        "{}: workload lines differ in shape\nwprof:\n{ours}\nbpftrace:\n{theirs}",
        case.tool
    );
    if let Some(last) = case.last_line {
        for (who, out) in [("wprof", &ours), ("bpftrace", &theirs)] {
            let end = out.lines().rev().find(|l| !l.trim().is_empty());
            assert_eq!(
                end,
                Some(last),
                "{}: last line under {who}:\n{out}",
                case.tool
            );
        }
    }
}

/// `{name}` (a word) → the built workload's path, `$D` → `dir`; other
/// braces are the shell's.
fn expand(text: &str, dir: &Path) -> String {
    let text = text.replace("$D", &path_str(dir));
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let word = after
            .find('}')
            .map(|end| &after[..end])
            .filter(|w| !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        match word {
            Some(name) => {
                out.push_str(&workload(name));
                rest = &after[name.len() + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// How a tool must end after SIGINT.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    /// Within the limit, with status 0 (wprof: its exit is under test).
    Required,
    /// The oracle: bpftrace sometimes takes longer than the limit to exit
    /// on a busy machine; it is then killed and its output compared.
    Oracle,
}

/// Runs `tool script` until it has attached, then the workload, then SIGINT;
/// returns its stdout. bpftrace's harmless RLIMIT_MEMLOCK complaint goes to
/// stderr, which is not compared.
fn trace(tool: &Path, script: &str, workload: &str, dir: &Path, ending: Ending) -> String {
    let out_path = dir.join("trace.out");
    let out = File::create(&out_path).expect("create trace.out");
    let err = File::create(dir.join("trace.err")).expect("create trace.err");
    let mut child = Command::new(tool)
        .arg(script)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", tool.display()));
    let attached = wait_for(&out_path, "Attaching", Duration::from_secs(30));
    if !attached {
        let _ = child.kill();
        let _ = child.wait();
        let stderr = fs::read_to_string(dir.join("trace.err")).unwrap_or_default();
        panic!(
            "{} {script} did not attach within 30 s:\n{stderr}",
            tool.display()
        );
    }
    thread::sleep(Duration::from_secs(1));
    let status = Command::new("sh")
        .args(["-c", workload])
        .env("D", dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("run the workload");
    assert!(status.success(), "workload failed ({status}): {workload}");
    thread::sleep(Duration::from_millis(1500));
    stop(&mut child, tool, ending);
    fs::read_to_string(&out_path).expect("read trace.out")
}

/// SIGINT (the tools' Ctrl-C), then SIGKILL when it does not end within
/// 15 s (the machine may be loaded); wprof must exit with status 0. The
/// oracle gets SIGINT again every 5 s: bpftrace 0.17 notices one only when
/// it interrupts its epoll_wait (or with its next event), so on a loaded
/// machine a quiet tool can lose it and never print its maps.
fn stop(child: &mut Child, tool: &Path, ending: Ending) {
    let pid = child.id() as libc::pid_t;
    let interrupt = || {
        // SAFETY: kill has no memory-safety preconditions; the process is our child.
        unsafe { libc::kill(pid, libc::SIGINT) };
    };
    interrupt();
    let start = Instant::now();
    let mut signalled = start;
    while start.elapsed() < Duration::from_secs(15) {
        if matches!(ending, Ending::Oracle) && signalled.elapsed() >= Duration::from_secs(5) {
            interrupt();
            signalled = Instant::now();
        }
        if let Ok(Some(status)) = child.try_wait() {
            assert!(
                status.success(),
                "the tool ended with {status} after SIGINT"
            );
            return;
        }
        thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    match ending {
        Ending::Required => panic!("{} did not end within 15 s of SIGINT", tool.display()),
        Ending::Oracle => eprintln!(
            "NOTE {} did not end within 15 s of SIGINT: killed, its output so far compared",
            tool.display()
        ),
    }
}

fn wait_for(path: &Path, text: &str, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if fs::read_to_string(path).is_ok_and(|s| s.contains(text)) {
            return true;
        }
        thread::sleep(Duration::from_millis(50));
    }
    false
}

/// The shapes of the selected lines.
fn shapes(out: &str, select: &Select) -> BTreeSet<String> {
    let lines: Vec<&str> = match select {
        Select::Lines(marker) => out.lines().filter(|l| l.contains(marker)).collect(),
        Select::Block(start) => out
            .lines()
            .skip_while(|l| !l.starts_with(start))
            .take_while(|l| !l.trim().is_empty())
            .collect(),
    };
    lines.into_iter().map(shape).collect()
}

/// A line with digit runs as `9`, a histogram bar as `|bar|` and whitespace
/// runs as one space: what stays is the layout the tool's formats fix.
fn shape(line: &str) -> String {
    let line = match line.split_once('|') {
        Some((head, bar)) if bar.trim_end().ends_with('|') => format!("{head}|bar|"),
        _ => line.to_string(),
    };
    let mut out = String::new();
    for c in line.trim().chars() {
        let mapped = match c {
            '0'..='9' => '9',
            c if c.is_whitespace() => ' ',
            c => c,
        };
        if (mapped == '9' || mapped == ' ') && out.ends_with(mapped) {
            continue;
        }
        out.push(mapped);
    }
    out
}

/// `@map[symbol]: ...` → `@map[SYM]: ...`; any other line's last word → `SYM`.
fn without_symbol(line: &str) -> String {
    if line.starts_with('@')
        && let (Some(open), Some(close)) = (line.find('['), line.find("]:"))
    {
        return format!("{}[SYM{}", &line[..open], &line[close..]);
    }
    match line.rsplit_once(' ') {
        Some((head, _)) => format!("{head} SYM"),
        None => line.to_string(),
    }
}

/// Every tool of kind `Runs` has a case here.
#[test]
fn every_running_tool_has_a_case() {
    let missing: Vec<&str> = TOOLS
        .iter()
        .filter(|(_, kind)| *kind == super::tools::Kind::Runs)
        .map(|(name, _)| *name)
        .filter(|name| !CASES.iter().any(|c| c.tool == *name))
        .collect();
    assert!(missing.is_empty(), "no run case for {missing:?}");
}

/// Shapes keep fixed text and drop what varies.
#[test]
fn shape_normalises_numbers_bars_and_spacing() {
    assert_eq!(shape("16:41:04  27435  kill   0"), "9:9:9 9 kill 9");
    assert_eq!(shape("[4K, 8K)    12 |@@@@@@     |"), "[9K, 9K) 9 |bar|");
    assert_eq!(
        without_symbol("@stat[0x9f9]: count 9"),
        "@stat[SYM]: count 9"
    );
    assert_eq!(
        without_symbol("9 wlopenssl 9 SSL_write"),
        "9 wlopenssl 9 SYM"
    );
}

const CASES: &[Case] = &[
    Case {
        tool: "bashreadline",
        header: Header::Same(3),
        workload: "printf 'echo hello-readline-wprof\\nexit\\n' | \
                   script -qfc '/bin/bash --norc --noprofile -i' /dev/null",
        select: Select::Lines("hello-readline-wprof"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "bitesize",
        header: Header::Same(2),
        workload: "cp /bin/dd $D/wlbitesize && \
                   $D/wlbitesize if=/dev/zero of=$D/bs.dat bs=64k count=16 oflag=direct 2>/dev/null; \
                   rm -f $D/bs.dat",
        select: Select::Block("@[wlbitesize]:"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "cpuwalk",
        header: Header::Same(2),
        workload: "timeout 1 sh -c 'while :; do :; done' || true",
        select: Select::Block("@cpu:"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "execsnoop",
        header: Header::Same(2),
        workload: "/bin/true marker-execsnoop a b c",
        select: Select::Lines("marker-execsnoop"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "gethostlatency",
        header: Header::Same(3),
        workload: "cp /usr/bin/getent $D/wlgetent && $D/wlgetent hosts localhost",
        select: Select::Lines("wlgetent"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "killsnoop",
        header: Header::Same(3),
        workload: "cp /bin/kill $D/wlkill && $D/wlkill -0 $$",
        select: Select::Lines("wlkill"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "naptime",
        header: Header::Same(3),
        workload: "cp {sleeper} $D/wlnap && $D/wlnap 2 200",
        select: Select::Lines("wlnap"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "opensnoop",
        header: Header::Same(3),
        workload: "cd $D && echo x > marker-opensnoop && cat marker-opensnoop",
        select: Select::Lines("marker-opensnoop"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "pidpersec",
        header: Header::Same(2),
        workload: "for i in 1 2 3; do /bin/true & done; wait; sleep 1.2",
        select: Select::Lines("PIDs/sec"),
        last_line: Some("@: 0"),
        symbols: false,
    },
    Case {
        tool: "runqlat",
        header: Header::WprofOnly(
            "Attaching 5 probes...\nTracing CPU scheduler... Hit Ctrl-C to end.\n",
        ),
        workload: "timeout 1 sh -c 'while :; do :; done' || true",
        select: Select::Block("@usecs:"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "setuids",
        header: Header::Same(3),
        workload: "cp /usr/bin/python3 $D/wlsetuid && \
                   $D/wlsetuid -c 'import os; os.setuid(0); os.setresuid(0, 0, 0)'",
        select: Select::Lines("wlsetuid"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "ssllatency",
        header: Header::Same(2),
        workload: SSL_WORKLOAD,
        select: Select::Lines("@stat"),
        last_line: None,
        symbols: true,
    },
    Case {
        tool: "sslsnoop",
        header: Header::Same(3),
        workload: SSL_WORKLOAD,
        select: Select::Lines("wlopenssl"),
        last_line: None,
        symbols: true,
    },
    Case {
        tool: "statsnoop",
        header: Header::Same(3),
        workload: "cd $D && echo x > marker-statsnoop && stat marker-statsnoop",
        select: Select::Lines("marker-statsnoop"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "syncsnoop",
        header: Header::Same(3),
        workload: "cp /bin/sync $D/wlsync && $D/wlsync",
        select: Select::Lines("wlsync"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "syscount",
        header: Header::Same(2),
        workload: "true",
        select: Select::Block("Top 10 syscalls IDs:"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "tcpdrop",
        header: Header::WprofOnly(
            "Attaching 3 probes...\nTracing tcp drops. Hit Ctrl-C to end.\n\
             TIME     PID      COMM             SADDR:SPORT           DADDR:DPORT           STATE   \n",
        ),
        workload: "true",
        select: Select::Lines("TIME"),
        last_line: None,
        symbols: false,
    },
    Case {
        tool: "writeback",
        header: Header::Same(3),
        workload: "dd if=/dev/zero of=$D/wb.dat bs=1M count=8 2>/dev/null; sync; rm -f $D/wb.dat",
        select: Select::Lines(" sync "),
        last_line: None,
        symbols: false,
    },
];

/// A TLS server and one client exchange, both a copy of openssl named
/// `wlopenssl`, with a throwaway self-signed certificate: a TLS 1.2 web
/// request answered by `s_server -www`, which closes the connection when it
/// has answered, so the calls each side makes do not depend on timing (TLS
/// 1.3's session tickets, read or not before the client stops, would).
const SSL_WORKLOAD: &str = "cp /usr/bin/openssl $D/wlopenssl && cd $D && \
    { [ -e cert.pem ] || ./wlopenssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost \
      -keyout key.pem -out cert.pem -days 1 2>/dev/null; } && \
    { ./wlopenssl s_server -accept 24433 -cert cert.pem -key key.pem -tls1_2 -www \
      >/dev/null 2>&1 & server=$!; } && \
    sleep 1 && printf 'GET / HTTP/1.0\\r\\n\\r\\n' | timeout 5 ./wlopenssl s_client \
      -connect 127.0.0.1:24433 -tls1_2 -quiet -ign_eof >/dev/null 2>&1; kill $server; wait; true";

macro_rules! tool_cases {
    ($($name:ident),* $(,)?) => {$(
        /// The tool's output under wprof has bpftrace's shape for the same workload.
        #[test]
        fn $name() {
            require_bpf!();
            let case = CASES
                .iter()
                .find(|c| c.tool == stringify!($name))
                .expect("a case per tool");
            compare(case);
        }
    )*};
}

tool_cases!(
    bashreadline,
    bitesize,
    cpuwalk,
    execsnoop,
    gethostlatency,
    killsnoop,
    naptime,
    opensnoop,
    pidpersec,
    runqlat,
    setuids,
    ssllatency,
    sslsnoop,
    statsnoop,
    syncsnoop,
    syscount,
    tcpdrop,
    writeback,
);
