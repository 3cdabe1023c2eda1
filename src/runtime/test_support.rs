//! Hand-assembled programs and helpers for the runtime's kernel tests: a
//! tiny instruction assembler, map specs, a `Compiled` with a ring buffer.
//! The real assembler lives in codegen; this one stays minimal on purpose.

use crate::codegen::program::{BpfProgram, Compiled, MapReloc};

use crate::vocab::{AttachPoint, MapId, MapKind, MapSpec};

/// One raw instruction slot.
pub fn ins(op: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(op)
        | u64::from(dst) << 8
        | u64::from(src) << 12
        | u64::from(off as u16) << 16
        | u64::from(imm as u32) << 32
}
pub fn mov_imm(dst: u8, imm: i32) -> u64 {
    ins(0xb7, dst, 0, 0, imm)
}
pub fn mov_reg(dst: u8, src: u8) -> u64 {
    ins(0xbf, dst, src, 0, 0)
}
pub fn exit() -> u64 {
    ins(0x95, 0, 0, 0, 0)
}
pub fn call(helper: i32) -> u64 {
    ins(0x85, 0, 0, 0, helper)
}

/// A program under construction: slots plus map relocations.
#[derive(Default)]
pub struct Asm {
    pub insns: Vec<u64>,
    pub relocs: Vec<MapReloc>,
}

impl Asm {
    pub fn push(&mut self, insns: &[u64]) -> &mut Self {
        self.insns.extend_from_slice(insns);
        self
    }
    /// `dst = map` as a pseudo map-fd `ld_imm64`.
    pub fn ld_map(&mut self, dst: u8, map: MapId) -> &mut Self {
        self.relocs.push(MapReloc {
            insn: self.insns.len(),
            map,
        });
        self.push(&[ins(0x18, dst, 1, 0, 0), 0])
    }
    /// Skips `body` unless the current thread id is `tid`; leaves
    /// pid_tgid in r6.
    pub fn only_thread(&mut self, tid: i32, body: Asm) -> &mut Self {
        self.push(&[call(14), mov_reg(6, 0), ins(0xbc, 0, 0, 0, 0)]);
        let len = i16::try_from(body.insns.len()).expect("short body");
        self.push(&[ins(0x55, 0, 0, len, tid)]);
        self.append(body)
    }
    pub fn append(&mut self, body: Asm) -> &mut Self {
        let base = self.insns.len();
        self.relocs.extend(body.relocs.iter().map(|r| MapReloc {
            insn: r.insn + base,
            map: r.map,
        }));
        self.push(&body.insns)
    }
    /// Sends r6 as an 8-byte ring buffer record.
    pub fn send_r6(&mut self, ring: MapId) -> &mut Self {
        self.push(&[ins(0x7b, 10, 6, -8, 0)]).ld_map(1, ring);
        self.push(&[
            mov_reg(2, 10),
            ins(0x07, 2, 0, 0, -8),
            mov_imm(3, 8),
            mov_imm(4, 0),
            call(130),
        ])
    }
    /// Atomically adds 1 to the u64 at key 0 of an array map.
    pub fn count(&mut self, map: MapId) -> &mut Self {
        self.push(&[ins(0x62, 10, 0, -4, 0)]).ld_map(1, map);
        self.push(&[
            mov_reg(2, 10),
            ins(0x07, 2, 0, 0, -4),
            call(1),
            ins(0x15, 0, 0, 2, 0),
            mov_imm(1, 1),
            ins(0xdb, 0, 1, 0, 0),
        ])
    }
    /// Adds 1 to the u64 at key 0 (u32) of a hash map, inserting it first.
    pub fn count_hash(&mut self, map: MapId) -> &mut Self {
        self.push(&[ins(0x62, 10, 0, -4, 0)]).ld_map(1, map);
        self.push(&[
            mov_reg(2, 10),
            ins(0x07, 2, 0, 0, -4),
            call(1),
            ins(0x15, 0, 0, 3, 0),
            mov_imm(1, 1),
            ins(0xdb, 0, 1, 0, 0),
            ins(0x05, 0, 0, 9, 0),
            ins(0x7a, 10, 0, -16, 1),
        ])
        .ld_map(1, map);
        self.push(&[
            mov_reg(2, 10),
            ins(0x07, 2, 0, 0, -4),
            mov_reg(3, 10),
            ins(0x07, 3, 0, 0, -16),
            mov_imm(4, 0),
            call(2),
        ])
    }
    /// `return 0`.
    pub fn ret0(&mut self) -> &mut Self {
        self.push(&[mov_imm(0, 0), exit()])
    }
    pub fn program(&self, name: &str, probe: &str, attach: AttachPoint) -> BpfProgram {
        BpfProgram {
            name: name.into(),
            probe: probe.into(),
            attach,
            insns: self.insns.clone(),
            map_relocs: self.relocs.clone(),
            spans: vec![None; self.insns.len()],
            comments: vec![None; self.insns.len()],
        }
    }
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

/// Sums the u64 at the start of each per-CPU value of every entry.
pub fn sum_u64(entries: &[(Vec<u8>, Vec<Vec<u8>>)]) -> u64 {
    entries
        .iter()
        .flat_map(|(_, values)| values)
        .map(|v| u64::from_ne_bytes(v[..8].try_into().expect("8 bytes")))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test assembler agrees with bpf_ins on a few encodings.
    #[test]
    fn test_asm_matches_bpf_ins() {
        use bpf_ins::{Instruction, Register};
        assert_eq!(
            mov_imm(0, 5),
            Instruction::mov64(Register::R0, 5).encode().0
        );
        assert_eq!(
            mov_reg(2, 10),
            Instruction::movx64(Register::R2, Register::R10).encode().0
        );
        assert_eq!(call(130), Instruction::call(130).encode().0);
        assert_eq!(exit(), Instruction::exit().encode().0);
    }
}
