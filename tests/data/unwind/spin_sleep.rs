//! The stack-trust workload of issue 12 in Rust: main alternates
//! spin_here (on CPU) and sleep_here (off CPU in nanosleep).
//!
//! Built with `rustc -C opt-level=3` (no frame pointers, Rust's default).
//! Usage: spin_sleep_rs [ROUNDS [MS]]   (defaults 20 rounds of 10 ms each way)

use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn spin_here(ms: u64) -> u64 {
    let end = Instant::now() + Duration::from_millis(ms);
    let mut rounds = 0u64;
    while Instant::now() < end {
        for i in 0..200_000u64 {
            black_box(i);
        }
        rounds += 1;
    }
    rounds
}

#[inline(never)]
fn sleep_here(ms: u64) {
    std::thread::sleep(Duration::from_millis(black_box(ms)));
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse().ok());
    let rounds: u64 = args.next().flatten().unwrap_or(20);
    let ms: u64 = args.next().flatten().unwrap_or(10);
    let mut spun = 0;
    for _ in 0..rounds {
        spun += spin_here(ms);
        sleep_here(ms);
    }
    black_box(spun);
}
