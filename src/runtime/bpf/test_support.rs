//! Small programs for the runtime's kernel tests, written with codegen's
//! assembler: count into a map, send a value through the ring buffer, only
//! for one thread. Plus map specs and a `Compiled` with a ring buffer.

use crate::codegen::asm::{AluOp, AtomicOp, AtomicSize, Cond, Reg, Size};
use crate::codegen::helpers::{GET_CURRENT_PID_TGID, MAP_UPDATE_ELEM, RINGBUF_OUTPUT};
use crate::codegen::program::{BpfProgram, Compiled};
use crate::vocab::{AttachPoint, MapId, MapKind, MapSpec};

pub use crate::codegen::asm::Assembler;

/// Pieces of test programs, chainable.
pub trait TestProgram {
    /// Runs `body` only when the current thread id is `tid`; leaves
    /// pid_tgid in r6.
    fn only_thread(&mut self, tid: i32, body: impl FnOnce(&mut Self)) -> &mut Self;
    /// Sends r6 as an 8-byte ring buffer record.
    fn send_r6(&mut self, ring: MapId) -> &mut Self;
    /// Atomically adds 1 to the u64 at key 0 of an array map.
    fn count(&mut self, map: MapId) -> &mut Self;
    /// Adds 1 to the u64 at key 0 (u32) of a hash map, inserting it first.
    fn count_hash(&mut self, map: MapId) -> &mut Self;
    /// `r6 = value`.
    fn set_r6(&mut self, value: i32) -> &mut Self;
    /// `return 0`.
    fn ret0(&mut self) -> &mut Self;
    /// The finished program.
    fn program(self, name: &str, probe: &str, attach: AttachPoint) -> BpfProgram;
}

impl TestProgram for Assembler {
    fn only_thread(&mut self, tid: i32, body: impl FnOnce(&mut Self)) -> &mut Self {
        let skip = self.new_label();
        self.call_helper(GET_CURRENT_PID_TGID);
        self.mov64_reg(Reg::R6, Reg::R0);
        self.mov32_reg(Reg::R0, Reg::R0);
        self.jmp_imm(Cond::Ne, Reg::R0, tid, skip);
        body(self);
        self.bind(skip).expect("a new label");
        self
    }

    fn send_r6(&mut self, ring: MapId) -> &mut Self {
        self.store_reg(Size::U64, Reg::R10, -8, Reg::R6);
        self.ld_map_fd(Reg::R1, ring);
        self.mov64_reg(Reg::R2, Reg::R10);
        self.alu64_imm(AluOp::Add, Reg::R2, -8);
        self.mov64_imm(Reg::R3, 8);
        self.mov64_imm(Reg::R4, 0);
        self.call_helper(RINGBUF_OUTPUT);
        self
    }

    fn count(&mut self, map: MapId) -> &mut Self {
        let missing = self.new_label();
        self.lookup_u32_key(map, 0);
        self.jmp_imm(Cond::Eq, Reg::R0, 0, missing);
        self.mov64_imm(Reg::R1, 1);
        self.atomic(AtomicSize::U64, AtomicOp::Add, Reg::R0, 0, Reg::R1);
        self.bind(missing).expect("a new label");
        self
    }

    fn count_hash(&mut self, map: MapId) -> &mut Self {
        let (insert, done) = (self.new_label(), self.new_label());
        self.lookup_u32_key(map, 0);
        self.jmp_imm(Cond::Eq, Reg::R0, 0, insert);
        self.mov64_imm(Reg::R1, 1);
        self.atomic(AtomicSize::U64, AtomicOp::Add, Reg::R0, 0, Reg::R1);
        self.jmp(done);
        self.bind(insert).expect("a new label");
        self.store_imm(Size::U64, Reg::R10, -16, 1);
        self.ld_map_fd(Reg::R1, map);
        self.mov64_reg(Reg::R2, Reg::R10);
        self.alu64_imm(AluOp::Add, Reg::R2, -4);
        self.mov64_reg(Reg::R3, Reg::R10);
        self.alu64_imm(AluOp::Add, Reg::R3, -16);
        self.mov64_imm(Reg::R4, 0);
        self.call_helper(MAP_UPDATE_ELEM);
        self.bind(done).expect("a new label");
        self
    }

    fn set_r6(&mut self, value: i32) -> &mut Self {
        self.mov64_imm(Reg::R6, value);
        self
    }

    fn ret0(&mut self) -> &mut Self {
        self.mov64_imm(Reg::R0, 0);
        self.exit();
        self
    }

    fn program(self, name: &str, probe: &str, attach: AttachPoint) -> BpfProgram {
        self.finish()
            .expect("test programs bind their labels")
            .into_program(name.into(), probe.into(), attach)
    }
}

/// A `return 0` program.
pub fn empty_program(name: &str, probe: &str, attach: AttachPoint) -> BpfProgram {
    let mut asm = Assembler::new();
    asm.ret0();
    asm.program(name, probe, attach)
}

pub fn map(name: &str, kind: MapKind, key: u32, value: u32, entries: u32) -> MapSpec {
    MapSpec {
        name: name.into(),
        kind,
        key_size: key,
        value_size: value,
        max_entries: entries,
        script_map: None,
    }
}

/// A `Compiled` with a 64 KiB ring buffer as map 0 and `maps` after it.
pub fn with_ring(maps: Vec<MapSpec>, programs: Vec<BpfProgram>) -> Compiled {
    let mut all = vec![map("ring", MapKind::RingBuf, 0, 0, 1 << 16)];
    all.extend(maps);
    Compiled {
        programs,
        maps: all,
        ringbuf: Some(MapId(0)),
        ..Default::default()
    }
}

/// The calling thread's id.
pub fn tid() -> i32 {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    let tid = link.file_name().expect("tid").to_string_lossy();
    tid.parse().expect("numeric tid")
}

/// The file holding a function or variable of this test binary, and its
/// file offset, from /proc/self/maps.
pub fn self_file_offset(addr: usize) -> (std::path::PathBuf, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = fields[0].split_once('-').expect("range");
        let start = usize::from_str_radix(start, 16).expect("hex");
        let end = usize::from_str_radix(end, 16).expect("hex");
        if (start..end).contains(&addr) {
            let off = u64::from_str_radix(fields[2], 16).expect("hex");
            return (fields[5].into(), (addr - start) as u64 + off);
        }
    }
    panic!("address {addr:#x} not mapped");
}

/// Sums the u64 at the start of each per-CPU value of every entry.
pub fn sum_u64(entries: &[(Vec<u8>, Vec<Vec<u8>>)]) -> u64 {
    entries
        .iter()
        .flat_map(|(_, values)| values)
        .map(|v| u64::from_ne_bytes(v[..8].try_into().expect("8 bytes")))
        .sum()
}
