//! Unwinding workload in Rust: main -> a -> b -> c, spinning in c.
//!
//! Built with `rustc -C opt-level=2` (no frame pointers, Rust's default).
//! Usage: chain_rs [MS]   (default 1000): spins for MS milliseconds, then exits.

use std::hint::black_box;
use std::time::{Duration, Instant};

/// The leaf: spins until the deadline.
#[inline(never)]
fn c(end: Instant) -> u64 {
    let mut rounds = 0u64;
    while Instant::now() < end {
        for i in 0..200_000u64 {
            black_box(i);
        }
        rounds += 1;
    }
    rounds
}

/// A frame with a buffer of its own, using its result after the call.
#[inline(never)]
fn b(end: Instant, x: u64) -> u64 {
    let mut pad = [0u8; 200];
    pad[(x & 127) as usize] = x as u8;
    let r = c(end);
    r + u64::from(black_box(&pad)[((x + 1) & 127) as usize])
}

#[inline(never)]
fn a(end: Instant, x: u64) -> u64 {
    let mut buf = [0u64; 40];
    buf[(x & 31) as usize] = x;
    let r = b(end, x + 1);
    r + black_box(&buf)[((x + 3) & 31) as usize]
}

fn main() {
    let ms = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let end = Instant::now() + Duration::from_millis(ms);
    let r = a(end, black_box(1));
    println!("chain done {}", r > 0);
}
