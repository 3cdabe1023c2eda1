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

use crate::capture::model::{FieldValue as V, RecordId, StackId, ThreadId};
use crate::render::source::FakeCapture;

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
    records: Vec<RecordId>,
    stack: StackId,
}

const KINDS: [&str; 13] = [
    "switch",
    "waking",
    "wakeup_new",
    "fork",
    "exec",
    "rename",
    "exit",
    "free",
    "hardirq",
    "softirq",
    "wq",
    "timer",
    "pmu_sample",
];

impl Builder {
    fn record(&self, name: &str) -> RecordId {
        self.records[KINDS.iter().position(|&k| k == name).expect("a tracker")]
    }

    fn add(&mut self, ts_ns: u64, cpu: u32, thread: ThreadId, name: &str, values: Vec<V>) {
        let record = self.record(name);
        self.c.add_event(ts_ns, thread, record, values).cpu = cpu;
    }

    fn pmu(cpu: u32, ts_ns: u64) -> [V; 3] {
        [V::UInt(cycles(cpu, ts_ns)), V::UInt(ts_ns), V::UInt(ts_ns)]
    }

    fn switch(&mut self, ts_ns: u64, cpu: u32, (prev, next): (ThreadId, ThreadId), state: u64) {
        let preempt = u64::from(state == u64::MAX);
        let state = if preempt == 1 { 0 } else { state };
        let mut values = vec![
            V::Thread(next),
            V::UInt(state),
            V::UInt(preempt),
            V::Int(120),
            V::Int(120),
        ];
        values.extend(Self::pmu(cpu, ts_ns));
        self.add(ts_ns, cpu, prev, "switch", values);
        self.c.events.last_mut().expect("added").stack = Some(self.stack);
    }

    fn waking(&mut self, ts_ns: u64, cpu: u32, waker: ThreadId, wakee: ThreadId) {
        let values = vec![V::Thread(wakee), V::UInt(cpu.into())];
        self.add(ts_ns, cpu, waker, "waking", values);
    }

    fn irq(&mut self, (ts_ns, end_ns): (u64, u64), thread: ThreadId, name: &str, head: Vec<V>) {
        let mut values = head;
        values.extend(Self::pmu(1, ts_ns));
        values.extend(Self::pmu(1, end_ns));
        self.add(ts_ns, 1, thread, name, values);
        self.c.events.last_mut().expect("added").duration_ns = Some(end_ns - ts_ns);
    }
}

/// The capture described in the module docs, events in time order.
pub fn system() -> (FakeCapture, Threads) {
    let mut c = FakeCapture::new();
    c.info.settings.features = ["sched", "wakeup", "task-life", "hardirq", "softirq", "wq"]
        .map(String::from)
        .to_vec();
    c.info.settings.stacks = vec!["timer=100hz".into(), "offcpu".into()];
    c.info.settings.pmu = vec!["cpu-cycles".into()];
    c.info.settings.filters = vec!["--no-tid".into(), "1".into()];
    c.info.settings.activate = Some("+1s".into());
    c.info.command_line = ["wprof", "-f", "wq", "-S", "--pmu", "cpu-cycles", "-d", "1s"]
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
    let records = KINDS
        .iter()
        .map(|name| c.add_tracker_schema(name, &["cpu-cycles"]))
        .collect();
    let frame = c.add_user_frame("/usr/bin/sleeper", 0x100, "main", 0x10, None);
    let stack = c.add_stack(&[frame]);
    let mut b = Builder { c, records, stack };
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
        b.add(start + MS / 2, 0, t.sleeper, "timer", vec![]);
        b.c.events.last_mut().expect("added").stack = Some(b.stack);
        b.switch(start + MS, 0, (t.sleeper, t.spinner), 1);
        prev = t.spinner;
    }
    b.add(100 * MS, 0, t.spinner, "pmu_sample", vec![]);
    b.c.events.last_mut().expect("added").stack = Some(b.stack);
    b.switch(510 * MS, 0, (t.spinner, t.idle0), u64::MAX);
    let child = vec![V::Thread(t.child)];
    b.add(MS / 4, 0, t.sleeper, "fork", child);
    let wakee = vec![V::Thread(t.child), V::UInt(1)];
    b.add(MS / 4 + 1, 0, t.sleeper, "wakeup_new", wakee);
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
    let irq = vec![V::UInt(42), V::Str(action), V::UInt(1)];
    b.irq((30 * US, 35 * US), t.ping, "hardirq", irq);
    let end = b.c.events.last_mut().expect("added");
    (end.values[7], end.values[8]) = (V::UInt(35 * US), V::UInt(35 * US / 2));
    b.irq((40 * US, 50 * US), t.ping, "softirq", vec![V::UInt(1)]);
    b.switch(2 * MS, 1, (t.idle1, t.kworker), 0);
    let func = b.c.intern("vmstat_update");
    let work = vec![V::Str(func), V::UInt(0xffff_8880_0000_1000)];
    b.add(2 * MS + 10 * US, 1, t.kworker, "wq", work);
    b.c.events.last_mut().expect("added").duration_ns = Some(20 * US);
    b.switch(2 * MS + 100 * US, 1, (t.kworker, t.child), 0x402);
    let filename = b.c.intern("/bin/true");
    let exec = vec![V::Str(filename), V::UInt(301)];
    b.add(2 * MS + 150 * US, 1, t.child, "exec", exec);
    let (old, new) = (b.c.intern("child"), b.c.intern("true"));
    let rename = vec![V::Thread(t.child), V::Str(old), V::Str(new)];
    b.add(2 * MS + 160 * US, 1, t.child, "rename", rename);
    b.add(2 * MS + 200 * US, 1, t.child, "exit", vec![V::Int(0)]);
    b.switch(2 * MS + 210 * US, 1, (t.child, t.idle1), 0x80);
    b.add(3 * MS, 1, t.idle1, "free", vec![V::Thread(t.child)]);
}
