//! Stacks of recorded events: the frames a message carries after its
//! fields → frames and stacks in the capture. User frames are normalized
//! while their processes live (through the files they mapped), every frame
//! is symbolized at the end. Equal stacks of a process are resolved once.

use std::fs::File;
use std::io::BufWriter;

use super::decode::u64_at;
use super::{RecordError, Recorder};
use crate::capture::model::{FrameAddr, FrameId, StackId, Symbol};
use crate::capture::writer::CaptureWriter;
use crate::codegen::program::Compiled;
use crate::symbols::{AddrKind, ModuleIndex, RawFrame, SymbolizeOptions, symbolize};
use crate::unwind::maps::flags;
use crate::vocab::{AttachPoint, BUILD_ID_FRAME_BYTES, record_header as header};

/// A user frame as the kernel or the unwinder left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum UserFrame {
    /// In a file with this build id (zero-padded to 20 bytes), at this
    /// offset (a kernel walk with build ids).
    File {
        build_id: [u8; 20],
        file_offset: u64,
    },
    /// A process address.
    Ip(u64),
}

/// The stack a message carries, as it came.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RawStack {
    pub(super) pid: u32,
    pub(super) flags: u32,
    /// Innermost first.
    pub(super) kernel: Vec<u64>,
    pub(super) user: Vec<UserFrame>,
    /// At a function-entry uprobe walked by the kernel: the caller's return
    /// address, which the walk missed; 0 otherwise.
    pub(super) entry_return: u64,
}

/// A message's stack description (the header from `KERNEL_FRAMES` on).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct StackHeader {
    pub(super) kernel_frames: u32,
    pub(super) user_frames: u32,
    pub(super) flags: u32,
    /// The kernel stack helper's error (a negative errno), 0 if none.
    pub(super) kernel_error: i32,
    pub(super) entry_return: u64,
}

impl StackHeader {
    pub(super) fn read(bytes: &[u8]) -> Result<StackHeader, RecordError> {
        let word = u64_at(bytes, header::KERNEL_FRAMES)?;
        let flags_word = u64_at(bytes, header::STACK_FLAGS)?;
        Ok(StackHeader {
            kernel_frames: word as u32,
            user_frames: (word >> 32) as u32,
            flags: flags_word as u32,
            kernel_error: (flags_word >> 32) as i32,
            entry_return: u64_at(bytes, header::ENTRY_RETURN)?,
        })
    }

    /// Bytes of the user frames.
    pub(super) fn user_bytes(&self) -> usize {
        let each = if self.flags & flags::BUILD_ID != 0 {
            BUILD_ID_FRAME_BYTES
        } else {
            8
        };
        self.user_frames as usize * each as usize
    }
}

/// The frames after `frames_at` in `bytes`, as `desc` counts them.
pub(super) fn raw_stack(
    bytes: &[u8],
    frames_at: u32,
    desc: &StackHeader,
    pid: u32,
) -> Result<RawStack, RecordError> {
    let user_at = frames_at as usize;
    let kernel_at = user_at + desc.user_bytes();
    let kernel_end = kernel_at + 8 * desc.kernel_frames as usize;
    let (Some(user), Some(kernel)) = (
        bytes.get(user_at..kernel_at),
        bytes.get(kernel_at..kernel_end),
    ) else {
        return Err(RecordError::Malformed(format!(
            "{} bytes, shorter than its {} user and {} kernel frames",
            bytes.len(),
            desc.user_frames,
            desc.kernel_frames
        )));
    };
    let user = if desc.flags & flags::BUILD_ID != 0 {
        user.chunks_exact(BUILD_ID_FRAME_BYTES as usize)
            .filter_map(build_id_frame)
            .collect()
    } else {
        words(user).map(UserFrame::Ip).collect()
    };
    Ok(RawStack {
        pid,
        flags: desc.flags,
        kernel: words(kernel).collect(),
        user,
        entry_return: desc.entry_return,
    })
}

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    (bytes.chunks_exact(8)).map(|c| u64::from_ne_bytes(c.try_into().expect("chunks of 8")))
}

/// `struct bpf_stack_build_id { s32 status; u8 build_id[20]; u64 offset_or_ip; }`
fn build_id_frame(entry: &[u8]) -> Option<UserFrame> {
    let value = u64::from_ne_bytes(entry[24..32].try_into().expect("8 bytes"));
    match i32::from_ne_bytes(entry[..4].try_into().expect("4 bytes")) {
        1 => Some(UserFrame::File {
            build_id: entry[4..24].try_into().expect("20 bytes"),
            file_offset: value,
        }),
        2 => Some(UserFrame::Ip(value)),
        _ => None,
    }
}

/// A 128-bit digest of a raw stack: equal digests are taken as equal stacks.
pub(super) fn digest(stack_bytes: &[u8], pid: u32, generation: u32, desc: &StackHeader) -> u128 {
    let build_id = desc.flags & flags::BUILD_ID;
    let key = (stack_bytes, pid, generation, build_id, desc.entry_return);
    let [a, b] = [(1, 2, 3, 4), (5, 6, 7, 8)]
        .map(|(k0, k1, k2, k3)| ahash::RandomState::with_seeds(k0, k1, k2, k3).hash_one(key));
    (u128::from(a) << 64) | u128::from(b)
}

/// A 128-bit digest of a stack put together from two messages (a joined
/// off-CPU stack), hashed apart from messages' [`digest`]s (another key,
/// other seeds).
pub(super) fn raw_digest(raw: &RawStack) -> u128 {
    let key = ("joined", raw);
    let [a, b] = [(9, 10, 11, 12), (13, 14, 15, 16)]
        .map(|(k0, k1, k2, k3)| ahash::RandomState::with_seeds(k0, k1, k2, k3).hash_one(key));
    (u128::from(a) << 64) | u128::from(b)
}

impl Recorder {
    /// The capture's stack for `raw`; `None` when it has no frames.
    pub(super) fn resolve_stack(&mut self, raw: &RawStack) -> Option<StackId> {
        let mut frames = Vec::with_capacity(raw.kernel.len() + raw.user.len() + 1);
        for &addr in &raw.kernel {
            let kind = AddrKind::in_stack(frames.len(), raw.kernel.len());
            frames.push(self.frame(FrameAddr::Kernel { addr }, kind));
        }
        let mut user: Vec<FrameAddr> = (raw.user.iter())
            .map(|&frame| self.user_frame(raw.pid, frame))
            .collect();
        if raw.entry_return != 0 && !user.is_empty() {
            // Kernels that fix up entry stacks themselves (when the function
            // starts with `push %rbp`) already list the caller.
            let caller = self.user_frame(raw.pid, UserFrame::Ip(raw.entry_return));
            if user.get(1) != Some(&caller) {
                user.insert(1, caller);
            }
        }
        let kernel_frames = frames.len();
        for addr in user {
            let kind = AddrKind::in_stack(frames.len(), kernel_frames);
            frames.push(self.frame(addr, kind));
        }
        (!frames.is_empty()).then(|| self.writer.stack(&frames))
    }

    /// A user frame normalized by the kernel (build id) or, failing that,
    /// through the process's mappings while it lives.
    pub(super) fn user_frame(&mut self, pid: u32, frame: UserFrame) -> FrameAddr {
        match frame {
            UserFrame::File {
                build_id,
                file_offset,
            } => {
                let (path, id) = match self.modules.lookup(&build_id) {
                    Some((path, id)) => (path.to_string(), id.to_vec()),
                    None => (String::new(), build_id.to_vec()),
                };
                FrameAddr::User {
                    module: self.writer.intern(&path),
                    build_id: Some(id),
                    file_offset,
                }
            }
            UserFrame::Ip(addr) => self.mapped_frame(pid, addr),
        }
    }

    /// A user frame found in the process's mappings; for code mapped since
    /// they were read (a `dlopen`, JIT code), or anonymous code whose perf
    /// map was written since, they are read again.
    fn mapped_frame(&mut self, pid: u32, addr: u64) -> FrameAddr {
        if self.modules.needs_reading(pid, addr) {
            self.modules.refresh_for(pid, addr);
        }
        match self.modules.translate(pid, addr) {
            Some((path, file_offset)) => {
                let build_id = self.modules.build_id_of(path).map(<[u8]>::to_vec);
                let module = self.writer.intern(path);
                FrameAddr::User {
                    module,
                    build_id,
                    file_offset,
                }
            }
            None => FrameAddr::UnknownUser { addr },
        }
    }

    /// The capture's frame for `addr`, a return address if it ever is one
    /// (see `symbols`: one symbol per distinct address).
    pub(super) fn frame(&mut self, addr: FrameAddr, kind: AddrKind) -> FrameId {
        let id = self.writer.frame(addr);
        match self.frame_kinds.get_mut(id.0 as usize) {
            Some(seen) if kind == AddrKind::Return => *seen = kind,
            Some(_) => {}
            None => self.frame_kinds.push(kind),
        }
        id
    }

    /// The symbol of every frame of the capture, its strings interned.
    pub(super) fn symbols(&mut self) -> Vec<(FrameId, Symbol)> {
        let raw: Vec<(RawFrame, AddrKind)> = self
            .writer
            .frames()
            .iter()
            .zip(&self.frame_kinds)
            .map(|(frame, kind)| (raw_frame(frame, &self.writer), *kind))
            .collect();
        let symbolized = symbolize(&raw, &SymbolizeOptions::default(), &self.kernel_symbols);
        symbolized
            .symbols
            .into_iter()
            .enumerate()
            .map(|(index, raw)| {
                let mut intern = |s: &str| self.writer.intern(s);
                let symbol = Symbol {
                    function: raw.function.as_deref().map(&mut intern),
                    offset: raw.offset,
                    file: raw.file.as_deref().map(&mut intern),
                    line: raw.line,
                    inlined: raw.inlined.iter().map(|s| intern(s)).collect(),
                };
                (FrameId(index as u32), symbol)
            })
            .collect()
    }
}

pub(super) fn raw_frame(frame: &FrameAddr, writer: &CaptureWriter<BufWriter<File>>) -> RawFrame {
    match frame {
        FrameAddr::Kernel { addr } => RawFrame::Kernel { addr: *addr },
        FrameAddr::User {
            module,
            build_id,
            file_offset,
        } => RawFrame::User {
            path: writer.string(*module).to_string(),
            build_id: build_id.clone(),
            file_offset: *file_offset,
        },
        FrameAddr::UnknownUser { addr } => RawFrame::UnknownUser { addr: *addr },
    }
}

/// The binaries the script's uprobes and USDT probes attach to: their build
/// ids are known even if no process using them is seen alive.
pub(super) fn probed_binaries(compiled: &Compiled) -> ModuleIndex {
    let mut modules = ModuleIndex::new();
    for program in &compiled.programs {
        if let AttachPoint::Uprobe { binary, .. } | AttachPoint::Usdt { binary, .. } =
            &program.attach
        {
            modules.add_path(&binary.to_string_lossy());
        }
    }
    modules
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(user: &[u64], kernel: &[u64], flags: u32) -> (Vec<u8>, StackHeader) {
        let mut bytes = vec![0u8; header::FIELDS as usize + 8];
        let desc = StackHeader {
            kernel_frames: kernel.len() as u32,
            user_frames: user.len() as u32,
            flags,
            kernel_error: -14,
            entry_return: 0x1234,
        };
        let word = u64::from(desc.kernel_frames) | u64::from(desc.user_frames) << 32;
        bytes[56..64].copy_from_slice(&word.to_ne_bytes());
        let flags_word = u64::from(flags) | u64::from(desc.kernel_error as u32) << 32;
        bytes[64..72].copy_from_slice(&flags_word.to_ne_bytes());
        bytes[72..80].copy_from_slice(&0x1234u64.to_ne_bytes());
        for v in user.iter().chain(kernel) {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        (bytes, desc)
    }

    /// The header's counts, flags and error come back, and the frames after
    /// the fields split into user frames, then kernel frames.
    #[test]
    fn reads_frames_after_the_fields() {
        let (bytes, desc) = message(&[0x400100, 0x400200], &[0xffff_ffff_8100_0000], 2);
        assert_eq!(StackHeader::read(&bytes).unwrap(), desc);
        let raw = raw_stack(&bytes, header::FIELDS + 8, &desc, 7).unwrap();
        assert_eq!(raw.user, [UserFrame::Ip(0x400100), UserFrame::Ip(0x400200)]);
        assert_eq!(raw.kernel, [0xffff_ffff_8100_0000]);
        assert_eq!((raw.pid, raw.flags, raw.entry_return), (7, 2, 0x1234));
        let short = raw_stack(&bytes[..bytes.len() - 1], header::FIELDS + 8, &desc, 7);
        assert!(matches!(short, Err(RecordError::Malformed(_))));
    }

    /// Build-id frames are 32 bytes: status, build id, offset or address;
    /// unused entries are dropped.
    #[test]
    fn reads_build_id_frames() {
        let mut entry = vec![0u8; 32];
        entry[..4].copy_from_slice(&1i32.to_ne_bytes());
        entry[4..24].copy_from_slice(&[7u8; 20]);
        entry[24..].copy_from_slice(&0x99u64.to_ne_bytes());
        let mut ip = vec![0u8; 32];
        ip[..4].copy_from_slice(&2i32.to_ne_bytes());
        ip[24..].copy_from_slice(&0x7f00u64.to_ne_bytes());
        assert_eq!(
            build_id_frame(&entry),
            Some(UserFrame::File {
                build_id: [7; 20],
                file_offset: 0x99
            })
        );
        assert_eq!(build_id_frame(&ip), Some(UserFrame::Ip(0x7f00)));
        assert_eq!(build_id_frame(&[0u8; 32]), None);
    }

    /// Digests tell stacks apart by frames, process and its generation.
    #[test]
    fn digests_separate_processes_and_frames() {
        let desc = StackHeader::default();
        let a = digest(&[1, 2, 3], 10, 0, &desc);
        assert_eq!(a, digest(&[1, 2, 3], 10, 0, &desc));
        assert_ne!(a, digest(&[1, 2, 4], 10, 0, &desc));
        assert_ne!(a, digest(&[1, 2, 3], 11, 0, &desc));
        assert_ne!(a, digest(&[1, 2, 3], 10, 1, &desc));
    }
}
