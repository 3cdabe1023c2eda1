//! Which events a replay keeps, shared by every renderer so they always
//! agree: a time window, and task filters (the capture's own, re-applied,
//! and those given at replay) with the semantics of docs/system-tracking.md.

use std::collections::{BTreeSet, HashMap};

use crate::capture::model::{Event, FieldValue, Thread};
use crate::frontend::options::TaskFilter;
use crate::render::source::CaptureSource;
use crate::tracking::options::filter_args;

/// Replay selection. Times are relative to the capture start.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    /// Keep events at or after this time.
    pub start_ns: Option<u64>,
    /// Keep events before this time.
    pub end_ns: Option<u64>,
    /// A thread is selected when every one of these selects it.
    pub tasks: Vec<TaskSelector>,
}

impl Filter {
    /// Whether `event` is kept: in the window, and on a selected thread or
    /// naming one in a thread field (a switch to a selected task is kept).
    pub fn keeps(&self, event: &Event, source: &dyn CaptureSource) -> bool {
        if !self.in_window(event.ts_ns) {
            return false;
        }
        if self.tasks.is_empty() || self.selects_thread(source.thread(event.thread), source) {
            return true;
        }
        event.values.iter().any(|value| match value {
            FieldValue::Thread(id) => self.selects_thread(source.thread(*id), source),
            _ => false,
        })
    }

    /// Whether `thread` passes the task filters: renderers draw only these.
    pub fn selects_thread(&self, thread: &Thread, source: &dyn CaptureSource) -> bool {
        let task = Task {
            tid: thread.tid,
            pid: thread.pid,
            name: source.string(thread.name),
            process_name: source.string(thread.process_name),
            kthread: thread.kthread,
        };
        self.tasks.iter().all(|selector| selector.selects(&task))
    }

    pub fn in_window(&self, ts_ns: u64) -> bool {
        self.start_ns.is_none_or(|start| ts_ns >= start)
            && self.end_ns.is_none_or(|end| ts_ns < end)
    }
}

/// A task as filters see it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Task<'a> {
    pub tid: u32,
    pub pid: u32,
    pub name: &'a str,
    pub process_name: &'a str,
    pub kthread: bool,
}

/// A `TaskFilter` with its globs compiled.
#[derive(Clone, Debug, Default)]
pub struct TaskSelector {
    filter: TaskFilter,
    names: Vec<glob::Pattern>,
    no_names: Vec<glob::Pattern>,
}

impl TaskSelector {
    pub fn new(filter: &TaskFilter) -> Result<TaskSelector, String> {
        let compile = |globs: &[String]| {
            globs
                .iter()
                .map(|g| glob::Pattern::new(g).map_err(|e| format!("`{g}` is not a glob: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(TaskSelector {
            filter: filter.clone(),
            names: compile(&filter.names)?,
            no_names: compile(&filter.no_names)?,
        })
    }

    /// The filter as command-line arguments (`-p 100 --no-idle`), if any.
    pub fn describe(&self) -> Option<String> {
        let args = filter_args(&self.filter);
        (!args.is_empty()).then(|| args.join(" "))
    }

    /// Selected: no include filter or one matches, and no exclude filter matches.
    pub fn selects(&self, task: &Task) -> bool {
        let f = &self.filter;
        let named = |globs: &[glob::Pattern]| {
            globs
                .iter()
                .any(|g| g.matches(task.name) || g.matches(task.process_name))
        };
        let idle = task.tid == 0;
        let includes = !f.pids.is_empty()
            || !f.tids.is_empty()
            || !self.names.is_empty()
            || f.idle == Some(true)
            || f.kthread == Some(true);
        let included = f.pids.contains(&task.pid)
            || f.tids.contains(&task.tid)
            || named(&self.names)
            || (f.idle == Some(true) && idle)
            || (f.kthread == Some(true) && task.kthread);
        let excluded = f.no_pids.contains(&task.pid)
            || f.no_tids.contains(&task.tid)
            || named(&self.no_names)
            || (f.idle == Some(false) && idle)
            || (f.kthread == Some(false) && task.kthread);
        (!includes || included) && !excluded
    }
}

/// The processes descended from process `ancestor` (children first seen
/// with it as their parent, their children, …), by the parent pids of the
/// capture's threads, sorted; `ancestor` itself is not one (even when a
/// damaged capture's parent pids loop back to it).
pub fn descendants(threads: &[Thread], ancestor: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for thread in threads {
        children.entry(thread.ppid).or_default().push(thread.pid);
    }
    let mut reached = BTreeSet::from([ancestor]);
    let mut parents = vec![ancestor];
    while let Some(parent) = parents.pop() {
        for &child in children.get(&parent).into_iter().flatten() {
            if reached.insert(child) {
                parents.push(child);
            }
        }
    }
    reached.remove(&ancestor);
    reached.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::source::FakeCapture;

    fn task(tid: u32, pid: u32, name: &'static str, process_name: &'static str) -> Task<'static> {
        Task {
            tid,
            pid,
            name,
            process_name,
            kthread: false,
        }
    }

    fn selector(filter: TaskFilter) -> TaskSelector {
        TaskSelector::new(&filter).unwrap()
    }

    /// Without filters every task is selected, the idle task included.
    #[test]
    fn empty_filter_selects_all() {
        assert!(selector(TaskFilter::default()).selects(&task(0, 0, "swapper/0", "swapper/0")));
    }

    /// Includes combine with "or"; any exclude wins.
    #[test]
    fn includes_and_excludes() {
        let s = selector(TaskFilter {
            pids: vec![10],
            names: vec!["ba*".into()],
            no_tids: vec![11],
            ..TaskFilter::default()
        });
        assert!(s.selects(&task(10, 10, "main", "main")));
        assert!(!s.selects(&task(11, 10, "worker", "main")));
        assert!(
            s.selects(&task(20, 20, "x", "bash")),
            "process name matches"
        );
        assert!(
            s.selects(&task(21, 20, "bazel", "java")),
            "thread name matches"
        );
        assert!(!s.selects(&task(30, 30, "vim", "vim")));
    }

    /// --idle / --no-idle and --kthread / --no-kthread.
    #[test]
    fn idle_and_kernel_threads() {
        let no_idle = selector(TaskFilter {
            idle: Some(false),
            ..TaskFilter::default()
        });
        assert!(!no_idle.selects(&task(0, 0, "swapper/1", "swapper/1")));
        assert!(no_idle.selects(&task(5, 5, "sh", "sh")));
        let kthreads = selector(TaskFilter {
            kthread: Some(true),
            ..TaskFilter::default()
        });
        let kworker = Task {
            kthread: true,
            ..task(7, 7, "kworker/0:1", "kworker/0:1")
        };
        assert!(kthreads.selects(&kworker));
        assert!(!kthreads.selects(&task(5, 5, "sh", "sh")));
        let only_idle = selector(TaskFilter {
            idle: Some(true),
            no_names: vec!["swapper/1".into()],
            ..TaskFilter::default()
        });
        assert!(only_idle.selects(&task(0, 0, "swapper/0", "swapper/0")));
        assert!(!only_idle.selects(&task(0, 0, "swapper/1", "swapper/1")));
    }

    /// The window is half-open; task filters combine with it.
    #[test]
    fn window_and_processes() {
        let capture = FakeCapture::sample();
        let filter = Filter {
            start_ns: Some(10),
            end_ns: Some(20),
            ..Filter::default()
        };
        let event = |ts_ns| Event {
            ts_ns,
            ..Event::default()
        };
        assert!(filter.keeps(&event(10), &capture));
        assert!(!filter.keeps(&event(20), &capture));
        let none = Filter {
            tasks: vec![selector(TaskFilter {
                pids: vec![u32::MAX],
                ..TaskFilter::default()
            })],
            ..Filter::default()
        };
        assert!(!none.keeps(&event(15), &capture));
    }

    /// Descendants follow parent pids down the generations, and only them.
    #[test]
    fn finds_descendants() {
        let mut capture = FakeCapture::new();
        for (tid, pid, ppid) in [
            (10, 10, 1),
            (11, 11, 10),
            (12, 11, 10),
            (13, 13, 11),
            (20, 20, 1),
        ] {
            let id = capture.add_thread(tid, pid, "t", "p");
            capture.threads[id.0 as usize].ppid = ppid;
        }
        assert_eq!(descendants(&capture.threads, 10), [11, 13]);
        assert_eq!(descendants(&capture.threads, 1), [10, 11, 13, 20]);
        assert!(descendants(&capture.threads, 99).is_empty());
    }

    /// A damaged capture's parent pids may loop, name a process its own
    /// parent, or chain every process to the next: descendants end, leave
    /// the ancestor out, and take time linear in the threads (`--only-command`
    /// looks them up for every replay of such a capture).
    #[test]
    fn descendants_of_looping_and_long_chains() {
        let threads = |links: &[(u32, u32)]| -> Vec<Thread> {
            let mut capture = FakeCapture::new();
            for &(pid, ppid) in links {
                let id = capture.add_thread(pid, pid, "t", "p");
                capture.threads[id.0 as usize].ppid = ppid;
            }
            capture.threads
        };
        let looping = threads(&[(1, 3), (2, 1), (3, 2), (4, 4), (5, 4), (4, 5)]);
        assert_eq!(descendants(&looping, 1), [2, 3]);
        assert_eq!(descendants(&looping, 4), [5]);
        const CHAIN: u32 = 100_000;
        let chain: Vec<(u32, u32)> = (1..=CHAIN).map(|pid| (pid, pid - 1)).collect();
        let chain = threads(&chain);
        let all = descendants(&chain, 0);
        assert_eq!(all.len(), CHAIN as usize);
        assert!(all.iter().copied().eq(1..=CHAIN));
        assert_eq!(descendants(&chain, CHAIN - 1), [CHAIN]);
    }

    /// An event naming another thread is kept when either thread is selected.
    #[test]
    fn two_task_events_keep_either_side() {
        let mut capture = FakeCapture::new();
        let app = capture.add_thread(100, 100, "app", "app");
        let bash = capture.add_thread(200, 200, "bash", "bash");
        let only = |pid| Filter {
            tasks: vec![selector(TaskFilter {
                pids: vec![pid],
                ..TaskFilter::default()
            })],
            ..Filter::default()
        };
        let switch = Event {
            thread: app,
            values: vec![FieldValue::Thread(bash)],
            ..Event::default()
        };
        assert!(only(100).keeps(&switch, &capture));
        assert!(only(200).keeps(&switch, &capture));
        assert!(!only(300).keeps(&switch, &capture));
        assert!(!only(100).selects_thread(capture.thread(bash), &capture));
    }
}
