//! A test capture of the built-in trackers with known behaviour, shared by
//! the renderers' tests:
//!
//! - CPU 0: `sleeper` (tid 300) runs 1 ms, sleeps 50 ms, ten times; `spinner`
//!   (tid 400) runs in between. Before each run `spinner` wakes `sleeper`
//!   (a `waking` 10 µs earlier) and is preempted by it. At 510 ms the CPU goes idle.
//! - CPU 1: `ping` (tid 500) and `pong` (tid 501, same process) take turns
//!   five times, each running 100 µs and waking the other 10 µs before
//!   sleeping; a hardirq (30–35 µs) and a softirq (40–50 µs) interrupt `ping`'s
//!   first run. At 2 ms the kernel thread `kworker/1:0` (tid 20) runs a work
//!   item; at 3 ms `sleeper`'s forked `child` (tid 301) runs, execs and exits.
//! - One PMU counter, `cpu-cycles`: 2 per ns plus a per-CPU base; the
//!   hardirq's end reading is multiplexed (running = half of enabled).
//!
//! And [`hostile`], a capture whose every sum overflows u64.

use crate::capture::model::{
    CaptureStats, DropReason, FieldValue as V, RecordDrops, RecordId, StackId, ThreadId,
};
use crate::capture::walk::{StackEnding, StackWalk, Unwinder};
use crate::render::source::FakeCapture;
use crate::tracking::compiled::{self, COUNTER};
use crate::tracking::records::{PMU_ENABLED, PMU_END_PREFIX, PMU_PREFIX, PMU_RUNNING};

pub const MS: u64 = 1_000_000;
pub const US: u64 = 1_000;

/// The `cpu-cycles` count on `cpu` at `ts_ns`.
pub fn cycles(cpu: u32, ts_ns: u64) -> u64 {
    2 * ts_ns + u64::from(cpu)
}

/// Thread ids of the fixture.
pub struct Threads {
    pub idle0: ThreadId,
    pub idle1: ThreadId,
    pub sleeper: ThreadId,
    pub spinner: ThreadId,
    pub ping: ThreadId,
    pub pong: ThreadId,
    pub kworker: ThreadId,
    pub child: ThreadId,
}

struct Builder {
    c: FakeCapture,
    stack: StackId,
}

/// A field's name and value.
type Named = (String, V);

fn named(name: &str, value: V) -> Named {
    (name.to_owned(), value)
}

impl Builder {
    fn record(&self, name: &str) -> RecordId {
        let found = self.c.schemas.iter().position(|s| s.name == name);
        RecordId(found.expect("a tracker record") as u32)
    }

    fn add(&mut self, ts_ns: u64, cpu: u32, thread: ThreadId, name: &str, values: &[Named]) {
        let record = self.record(name);
        let values: Vec<(&str, V)> = values
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        let values = self.c.values(record, &values);
        self.c.add_event(ts_ns, thread, record, values).cpu = cpu;
    }

    /// The `pmu` item's fields (`prefix` `pmu:` or `pmu_end:`) for a reading
    /// of `count` enabled `ts_ns`, running `running_ns` of that time.
    fn pmu(prefix: &str, count: u64, ts_ns: u64, running_ns: u64) -> [Named; 3] {
        [
            named(&format!("{prefix}{COUNTER}"), V::UInt(count)),
            named(&format!("{prefix}{COUNTER}{PMU_ENABLED}"), V::UInt(ts_ns)),
            named(
                &format!("{prefix}{COUNTER}{PMU_RUNNING}"),
                V::UInt(running_ns),
            ),
        ]
    }

    fn switch(&mut self, ts_ns: u64, cpu: u32, threads: (ThreadId, ThreadId), state: u64) {
        self.switch_reading(ts_ns, cpu, threads, state, cycles(cpu, ts_ns));
    }

    /// A switch whose counter reads `count`.
    fn switch_reading(
        &mut self,
        ts_ns: u64,
        cpu: u32,
        (prev, next): (ThreadId, ThreadId),
        state: u64,
        count: u64,
    ) {
        let preempt = u64::from(state == u64::MAX);
        let state = if preempt == 1 { 0 } else { state };
        let mut values = vec![
            named("next", V::Thread(next)),
            named("prev_state", V::UInt(state)),
            named("preempt", V::UInt(preempt)),
            named("prev_prio", V::Int(120)),
            named("next_prio", V::Int(120)),
        ];
        values.extend(Self::pmu(PMU_PREFIX, count, ts_ns, ts_ns));
        self.add(ts_ns, cpu, prev, "switch", &values);
        self.c.events.last_mut().expect("added").stack = Some(self.stack);
    }

    fn waking(&mut self, ts_ns: u64, cpu: u32, waker: ThreadId, wakee: ThreadId) {
        let values = [
            named("wakee", V::Thread(wakee)),
            named("target_cpu", V::UInt(cpu.into())),
        ];
        self.add(ts_ns, cpu, waker, "waking", &values);
    }

    /// An IRQ span `(start, end)` on CPU 1, its counter running
    /// `end_running_ns` of the time enabled at the end.
    fn irq(
        &mut self,
        (ts_ns, end_ns): (u64, u64),
        end_running_ns: u64,
        thread: ThreadId,
        name: &str,
        head: Vec<Named>,
    ) {
        let mut values = head;
        values.extend(Self::pmu(PMU_PREFIX, cycles(1, ts_ns), ts_ns, ts_ns));
        let end_count = cycles(1, end_ns);
        values.extend(Self::pmu(PMU_END_PREFIX, end_count, end_ns, end_running_ns));
        self.add(ts_ns, 1, thread, name, &values);
        self.c.events.last_mut().expect("added").duration_ns = Some(end_ns - ts_ns);
    }
}

/// The capture described in the module docs, events in time order, with
/// the schemas of every compiled tracker record.
pub fn system() -> (FakeCapture, Threads) {
    let mut c = FakeCapture::new();
    c.info.settings.features = ["sched", "wakeup", "task-life", "hardirq", "softirq", "wq"]
        .map(String::from)
        .to_vec();
    c.info.settings.stacks = vec!["timer=100hz".into(), "offcpu".into()];
    c.info.settings.pmu = vec![COUNTER.into()];
    c.info.settings.filters = vec!["--no-tid".into(), "1".into()];
    c.info.settings.activate = Some("+1s".into());
    c.info.command_line = ["wprof", "-f", "wq", "-S", "--pmu", COUNTER, "-d", "1s"]
        .map(String::from)
        .to_vec();
    let t = Threads {
        idle0: c.add_thread(0, 0, "swapper/0", "swapper/0"),
        idle1: c.add_thread(0, 0, "swapper/1", "swapper/1"),
        sleeper: c.add_thread(300, 300, "sleeper", "sleeper"),
        spinner: c.add_thread(400, 400, "spinner", "spinner"),
        ping: c.add_thread(500, 500, "ping", "pingpong"),
        pong: c.add_thread(501, 500, "pong", "pingpong"),
        kworker: c.add_thread(20, 20, "kworker/1:0", "kworker/1:0"),
        child: c.add_thread(301, 301, "child", "child"),
    };
    c.threads[t.kworker.0 as usize].kthread = true;
    c.threads[t.child.0 as usize].ppid = 300;
    for schema in compiled::schemas() {
        c.add_tracker_schema(&schema.name);
    }
    let frame = c.add_user_frame("/usr/bin/sleeper", 0x100, "main", 0x10, None);
    let stack = c.add_stack(&[frame]);
    let mut b = Builder { c, stack };
    cpu0(&mut b, &t);
    cpu1(&mut b, &t);
    let mut c = b.c;
    c.events.sort_by_key(|e| e.ts_ns);
    c.stats.as_mut().expect("finished").duration_ns = 600 * MS;
    (c, t)
}

fn cpu0(b: &mut Builder, t: &Threads) {
    let mut prev = t.idle0;
    for i in 0..10 {
        let start = i * 51 * MS;
        if i > 0 {
            b.waking(start - 10 * US, 0, t.spinner, t.sleeper);
        }
        let state = if prev == t.spinner { u64::MAX } else { 0 };
        b.switch(start, 0, (prev, t.sleeper), state);
        b.add(start + MS / 2, 0, t.sleeper, "timer", &[]);
        let timer = b.c.events.last_mut().expect("added");
        timer.stack = Some(b.stack);
        // one stack walked before the process's tables loaded, then tables;
        // the second one's kernel part cut at the depth limit
        timer.walk = Some(StackWalk {
            unwinder: Some(if i == 0 {
                Unwinder::KernelWalk
            } else {
                Unwinder::Table
            }),
            ending: (i > 0).then_some(StackEnding::Outermost),
            kernel_truncated: i == 1,
        });
        b.switch(start + MS, 0, (t.sleeper, t.spinner), 1);
        prev = t.spinner;
    }
    b.add(100 * MS, 0, t.spinner, "pmu_sample", &[]);
    b.c.events.last_mut().expect("added").stack = Some(b.stack);
    b.switch(510 * MS, 0, (t.spinner, t.idle0), u64::MAX);
    let child = [named("child", V::Thread(t.child))];
    b.add(MS / 4, 0, t.sleeper, "fork", &child);
    let wakee = [
        named("wakee", V::Thread(t.child)),
        named("target_cpu", V::UInt(1)),
    ];
    b.add(MS / 4 + 1, 0, t.sleeper, "wakeup_new", &wakee);
}

fn cpu1(b: &mut Builder, t: &Threads) {
    let mut prev = t.idle1;
    let (mut running, mut other) = (t.ping, t.pong);
    for i in 0..10 {
        let start = i * 110 * US;
        let state = if prev == t.idle1 { 0 } else { 1 };
        b.switch(start, 1, (prev, running), state);
        b.waking(start + 100 * US, 1, running, other);
        prev = running;
        (running, other) = (other, running);
    }
    b.switch(1100 * US, 1, (prev, t.idle1), 1);
    let action = b.c.intern("virtio0-input");
    let irq = vec![
        named("irq", V::Int(42)),
        named("action", V::Str(action)),
        named("ret", V::Int(1)),
    ];
    b.irq((30 * US, 35 * US), 35 * US / 2, t.ping, "hardirq", irq);
    let softirq = vec![named("vec", V::UInt(1))];
    b.irq((40 * US, 50 * US), 50 * US, t.ping, "softirq", softirq);
    b.switch(2 * MS, 1, (t.idle1, t.kworker), 0);
    let func = b.c.intern("vmstat_update");
    let work = [
        named("func", V::Str(func)),
        named("work", V::UInt(0xffff_8880_0000_1000)),
    ];
    b.add(2 * MS + 10 * US, 1, t.kworker, "wq", &work);
    b.c.events.last_mut().expect("added").duration_ns = Some(20 * US);
    b.switch(2 * MS + 100 * US, 1, (t.kworker, t.child), 0x402);
    let filename = b.c.intern("/bin/true");
    let exec = [
        named("filename", V::Str(filename)),
        named("old_tid", V::Int(301)),
    ];
    b.add(2 * MS + 150 * US, 1, t.child, "exec", &exec);
    let (old, new) = (b.c.intern("child"), b.c.intern("true"));
    let rename = [
        named("task", V::Thread(t.child)),
        named("old_comm", V::Str(old)),
        named("new_comm", V::Str(new)),
    ];
    b.add(2 * MS + 160 * US, 1, t.child, "rename", &rename);
    let exit = [named("exit_code", V::Int(0))];
    b.add(2 * MS + 200 * US, 1, t.child, "exit", &exit);
    b.switch(2 * MS + 210 * US, 1, (t.child, t.idle1), 0x80);
    let free = [named("task", V::Thread(t.child))];
    b.add(3 * MS, 1, t.idle1, "free", &free);
}

/// A capture a fuzzer could write: every sum of its times, counter readings
/// and drop counts overflows u64 (the capture reader bounds none of them).
/// Its window is all of time; it has no filters. Its events, twice over (as
/// timestamps restart in every events chunk, so that each span counts
/// twice):
///
/// - CPU 0 and 1: a `worker` (tids 600, 601 of process `pool`) runs from 0
///   to u64::MAX - 1, its counter reading 0 then u64::MAX; at 1 it is
///   sampled in `main` and runs a work item lasting u64::MAX ns.
/// - CPU 2: `sleeper` (tid 700) sleeps from 0, is woken at 2^63 and runs
///   from u64::MAX - 1; the CPU idles meanwhile.
/// - CPU 3: `stray` (tid 800) is sampled in `main` at u64::MAX, past the
///   window: the sample stands for the timer's period, u64::MAX ns.
///
/// Drops, u64::MAX each: by reason, ring buffer full twice and stack lost;
/// by record, `switch` for both reasons and the internal `offcpu_pending`
/// (ring buffer full) twice.
pub fn hostile() -> FakeCapture {
    let mut c = FakeCapture::new();
    c.info.settings.features = vec!["sched".into(), "wq".into()];
    c.info.settings.stacks = vec![format!("timer={}ns", u64::MAX), "offcpu".into()];
    c.info.settings.pmu = vec![COUNTER.into()];
    let idle: Vec<ThreadId> = (0..3)
        .map(|cpu| c.add_thread(0, 0, &format!("swapper/{cpu}"), "swapper"))
        .collect();
    let workers = [600, 601].map(|tid| c.add_thread(tid, 600, "worker", "pool"));
    let sleeper = c.add_thread(700, 700, "sleeper", "sleeper");
    let stray = c.add_thread(800, 800, "stray", "stray");
    for schema in compiled::schemas() {
        c.add_tracker_schema(&schema.name);
    }
    let frame = c.add_user_frame("/usr/bin/worker", 0x100, "main", 0x10, None);
    let stack = c.add_stack(&[frame]);
    let func = c.intern("drain");
    let mut b = Builder { c, stack };
    const LATE: u64 = u64::MAX - 1;
    const SLEEPING: u64 = 1;
    for (cpu, worker) in (0..).zip(workers) {
        b.switch_reading(0, cpu, (idle[cpu as usize], worker), 0, 0);
        b.add(1, cpu, worker, "timer", &[]);
        b.c.events.last_mut().expect("added").stack = Some(stack);
        let work = [named("func", V::Str(func)), named("work", V::UInt(1))];
        b.add(1, cpu, worker, "wq", &work);
        b.c.events.last_mut().expect("added").duration_ns = Some(u64::MAX);
        let out = (worker, idle[cpu as usize]);
        b.switch_reading(LATE, cpu, out, SLEEPING, u64::MAX);
    }
    b.switch_reading(0, 2, (sleeper, idle[2]), SLEEPING, 0);
    b.waking(1 << 63, 2, idle[2], sleeper);
    b.switch_reading(LATE, 2, (idle[2], sleeper), 0, 0);
    b.add(u64::MAX, 3, stray, "timer", &[]);
    b.c.events.last_mut().expect("added").stack = Some(stack);
    let (switch, pending) = (b.record("switch"), b.record("offcpu_pending"));
    let mut c = b.c;
    c.events.sort_by_key(|e| e.ts_ns);
    c.events.extend_from_within(..);
    let drop = |record, reason| RecordDrops {
        record,
        reason,
        count: u64::MAX,
    };
    c.stats = Some(CaptureStats {
        events: c.events.len() as u64,
        drops: vec![
            (DropReason::RingBufferFull, u64::MAX),
            (DropReason::RingBufferFull, u64::MAX),
            (DropReason::StackLost, u64::MAX),
        ],
        record_drops: vec![
            drop(switch, DropReason::RingBufferFull),
            drop(switch, DropReason::StackLost),
            drop(pending, DropReason::RingBufferFull),
            drop(pending, DropReason::RingBufferFull),
        ],
        duration_ns: u64::MAX,
        stacks: Vec::new(),
    });
    c
}
