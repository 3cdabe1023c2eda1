//! The ORC kernel-stack walker on the real kernel: on the same context
//! switches of this process's threads — blocking in `read`, `nanosleep` and
//! futexes, and preempted while spinning in user space and in the kernel —
//! the walker's stacks equal `bpf_get_stack`'s frame for frame
//! (`wprof::unwind::orc_oracle`); with a stack frame marked as a
//! trampoline every walk gives up; and what each costs.

use std::io::Read;
use std::ops::ControlFlow;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wprof::runtime::bpf::loader::{AttachOptions, Loaded, load};
use wprof::runtime::targets::environment::SystemEnvironment;
use wprof::symbols::KernelSymbols;
use wprof::unwind::layout::task_stack_offset;
use wprof::unwind::orc_maps::{OrcMaps, Placement, place, walk};
use wprof::unwind::orc_oracle::{OracleStacks, oracle};
use wprof::unwind::orc_read::{KernelOrc, read};

use super::kernel::short;

/// Threads that leave the CPU in every way the walk must follow, until dropped.
struct Switching {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Switching {
    fn start() -> Switching {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let mut spawn = |work: Box<dyn Fn(&AtomicBool) + Send>| {
            let stop = stop.clone();
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    work(&stop);
                }
            }));
        };
        spawn(Box::new(|_| std::thread::sleep(Duration::from_micros(200))));
        let (reader, writer) = UnixStream::pair().expect("socket pair");
        spawn(Box::new(move |_| {
            use std::io::Write;
            let _ = (&writer).write_all(b"x");
            std::thread::sleep(Duration::from_micros(100));
        }));
        spawn(Box::new(move |_| {
            let _ = (&reader).read(&mut [0u8; 1]);
        }));
        let pair = Arc::new((Mutex::new(0u64), Condvar::new()));
        for _ in 0..2 {
            let pair = pair.clone();
            spawn(Box::new(move |_| {
                let (lock, turn) = &*pair;
                let mut count = lock.lock().expect("lock");
                *count += 1;
                turn.notify_one();
                let _ = turn.wait_timeout(count, Duration::from_millis(1));
            }));
        }
        for _ in 0..2 {
            spawn(Box::new(|stop| {
                let start = Instant::now();
                while start.elapsed() < Duration::from_millis(20) && !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }));
        }
        spawn(Box::new(|_| {
            let mut zero = std::fs::File::open("/dev/zero").expect("/dev/zero");
            let mut buffer = vec![0u8; 1 << 20];
            let _ = zero.read_exact(&mut buffer);
        }));
        Switching { stop, threads }
    }
}

impl Drop for Switching {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The reader may wait for a byte no writer sends any more.
        for thread in self.threads.drain(..) {
            if thread.is_finished() {
                let _ = thread.join();
            }
        }
    }
}

/// The oracle loaded for this process with the kernel's table placed.
fn start_oracle(orc: &KernelOrc, trampolines: &[u64]) -> (Loaded, OrcMaps) {
    let env = SystemEnvironment::default();
    let task_stack = task_stack_offset(&env).expect("task_struct.stack");
    let (compiled, maps) = oracle(std::process::id(), task_stack).expect("assemble the oracle");
    let mut loaded = load(&compiled).unwrap_or_else(|e| panic!("load the oracle: {}", short(&e)));
    let placement = Placement {
        table: &orc.table,
        trampolines,
        skip: 0,
        max_stored: 120,
    };
    place(&loaded, maps, &placement).unwrap_or_else(|e| panic!("{e}"));
    loaded.attach_all(AttachOptions::default()).expect("attach");
    (loaded, maps)
}

/// Records for `time`.
fn collect(loaded: &mut Loaded, time: Duration) -> Vec<OracleStacks> {
    let mut out = Vec::new();
    let deadline = Instant::now() + time;
    while Instant::now() < deadline {
        let _ = loaded
            .poll(Duration::from_millis(50), |record| {
                out.extend(OracleStacks::parse(record));
                ControlFlow::Continue(())
            })
            .expect("poll the ring buffer");
    }
    out
}

/// The kernel's frames without the program's own (its address, once for
/// the helper's caller and once as the walk found its frame): the frames
/// from the glue that ran it on.
fn after_program(kernel: &[u64]) -> &[u64] {
    let own = kernel
        .iter()
        .take_while(|&&f| Some(&f) == kernel.first())
        .count();
    &kernel[own..]
}

fn names(symbols: &KernelSymbols, frames: &[u64]) -> String {
    let names: Vec<String> = frames
        .iter()
        .map(|&f| symbols.function_and_offset(f))
        .collect();
    names.join(" ← ")
}

/// Entries each CPU's row cache holds (a walk keeps every row it searched
/// for there; the later steps at those pcs take it from there).
fn cached_rows(loaded: &Loaded, maps: OrcMaps) -> Vec<usize> {
    use libbpf_rs::{MapCore, MapFlags};
    let walk = loaded.map(maps.walk).expect("the walk map");
    let values = walk
        .lookup_percpu(&0u32.to_ne_bytes(), MapFlags::ANY)
        .expect("read the walk map")
        .expect("a walk value");
    let entries = 0..walk::ROW_CACHE_ENTRIES as usize;
    let tag_at = |i: usize| walk::ROW_CACHE as usize + 16 * i;
    values
        .iter()
        .map(|value| {
            (entries.clone())
                .filter(|&i| value[tag_at(i)..tag_at(i) + 8] != [0; 8])
                .count()
        })
        .collect()
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// Every stack the walker finishes equals the kernel's frame for frame;
/// it finishes nearly all of them; each costs less than the kernel's.
#[test]
fn walker_equals_bpf_get_stack() {
    let orc = read().unwrap_or_else(|e| panic!("read the kernel's ORC tables: {e}"));
    println!(
        "{} entries, {} rows, {} blocks; copy {:?}, build {:?}",
        orc.table.entries,
        orc.table.rows.len(),
        orc.table.blocks.len(),
        orc.copy_time,
        orc.build_time
    );
    let (mut loaded, maps) = start_oracle(&orc, &orc.trampolines);
    let switching = Switching::start();
    let stacks = collect(&mut loaded, Duration::from_secs(2));
    drop(switching);
    let symbols = KernelSymbols::default();
    let (mut equal, mut given_up, mut program_frames) = (0, 0, Vec::new());
    let mut depths = std::collections::BTreeMap::<usize, usize>::new();
    for stack in &stacks {
        let Ok(kernel) = &stack.kernel else { continue };
        let Some(walk) = &stack.walk else {
            given_up += 1;
            if given_up <= 3 {
                println!("given up: {}", names(&symbols, kernel));
            }
            continue;
        };
        let expected = after_program(kernel);
        assert_eq!(
            walk.as_slice(),
            expected,
            "walk {}\nkernel {}",
            names(&symbols, walk),
            names(&symbols, kernel)
        );
        program_frames.push(kernel.len() - expected.len());
        *depths.entry(walk.len()).or_default() += 1;
        equal += 1;
    }
    println!(
        "{equal} equal, {given_up} given up of {}; depths {depths:?}",
        stacks.len()
    );
    program_frames.sort_unstable();
    program_frames.dedup();
    println!("program frames in the kernel's stacks: {program_frames:?}");
    assert!(equal >= 1000, "only {equal} stacks compared");
    assert!(given_up * 100 <= equal, "{given_up} given up");
    let cached = cached_rows(&loaded, maps);
    println!("rows in the CPUs' row caches: {cached:?}");
    assert!(
        cached.iter().sum::<usize>() >= 10,
        "the walks kept no rows: {cached:?}"
    );
    let kernel_ns = median(stacks.iter().map(|s| s.kernel_ns).collect());
    let walk_ns = median(stacks.iter().map(|s| s.walk_ns).collect());
    println!("median ns per stack: bpf_get_stack {kernel_ns}, walker {walk_ns}");
    assert!(
        walk_ns < kernel_ns,
        "walker {walk_ns} ns, kernel {kernel_ns} ns"
    );
}

/// A frame every stack holds, marked as a return-address trampoline (the
/// kernel would put the real address back), makes every walk give up.
#[test]
fn walker_gives_up_at_a_trampoline() {
    let orc = read().unwrap_or_else(|e| panic!("read the kernel's ORC tables: {e}"));
    let (mut loaded, _) = start_oracle(&orc, &orc.trampolines);
    let switching = Switching::start();
    let before = collect(&mut loaded, Duration::from_millis(500));
    drop(loaded);
    // The glue that runs the program: the first frame after its own.
    let glue = (before.iter())
        .find_map(|s| {
            s.kernel
                .as_ref()
                .ok()
                .and_then(|k| after_program(k).first().copied())
        })
        .expect("a stack");
    let (mut loaded, _) = start_oracle(&orc, &[glue]);
    let after = collect(&mut loaded, Duration::from_millis(500));
    drop(switching);
    let kernel_ok = after.iter().filter(|s| s.kernel.is_ok()).count();
    let walked = after.iter().filter(|s| s.walk.is_some()).count();
    println!("{kernel_ok} kernel stacks, {walked} walked");
    assert!(kernel_ok >= 100, "{kernel_ok}");
    assert_eq!(walked, 0);
}
