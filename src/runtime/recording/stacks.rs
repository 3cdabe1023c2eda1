//! Stacks of recorded events: stack map ids → frames in the capture, user
//! frames normalized while their processes live, and every frame symbolized
//! at the end.

use std::fs::File;
use std::io::BufWriter;

use super::{RecordError, Recorder};
use crate::capture::model::{FrameAddr, FrameId, StackId, Symbol};
use crate::capture::writer::CaptureWriter;
use crate::codegen::program::Compiled;
use crate::runtime::bpf::loader::Loaded;
use crate::runtime::bpf::maps_read::BuildIdFrame;
use crate::symbols::{
    AddrKind, ModuleIndex, NormalizedAddr, RawFrame, SymbolizeOptions, symbolize,
};
use crate::vocab::AttachPoint;

/// A stack as the probe left it: ids in the stack map, and the return
/// address a function-entry uprobe adds after the innermost user frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct RawStack {
    pub(super) pid: u32,
    /// Ids in the kernel and user stack maps, negative for none.
    pub(super) kernel: i64,
    pub(super) user: i64,
    pub(super) entry_return: u64,
}

impl Recorder {
    /// The capture's stack for `raw`, read from the stack maps the first
    /// time this raw stack is seen; `None` when the event has no stack.
    pub(super) fn stack(
        &mut self,
        loaded: &Loaded,
        raw: RawStack,
    ) -> Result<Option<StackId>, RecordError> {
        if raw.kernel < 0 && raw.user < 0 {
            return Ok(None);
        }
        let key = RawStack {
            pid: if raw.user >= 0 { raw.pid } else { 0 },
            ..raw
        };
        if let Some(known) = self.stacks.get(&key) {
            return Ok(*known);
        }
        let mut frames = Vec::new();
        if let (true, Some(map)) = (raw.kernel >= 0, self.kernel_stacks) {
            for addr in loaded.stack(map, raw.kernel as u32)? {
                frames.push(self.frame(FrameAddr::Kernel { addr }, frames.len()));
            }
        }
        if let (true, Some(map)) = (raw.user >= 0, self.user_stacks) {
            let raw_frames = if self.user_build_ids {
                loaded.build_id_stack(map, raw.user as u32)?
            } else {
                let addrs = loaded.stack(map, raw.user as u32)?;
                addrs.into_iter().map(BuildIdFrame::Ip).collect()
            };
            let mut user: Vec<FrameAddr> = raw_frames
                .into_iter()
                .map(|frame| self.user_frame(raw.pid, frame))
                .collect();
            if raw.entry_return != 0 && !user.is_empty() {
                // Kernels that fix up entry stacks themselves (when the function
                // starts with `push %rbp`) already list the caller.
                let caller = self.user_frame(raw.pid, BuildIdFrame::Ip(raw.entry_return));
                if user.get(1) != Some(&caller) {
                    user.insert(1, caller);
                }
            }
            for addr in user {
                frames.push(self.frame(addr, frames.len()));
            }
        }
        let stack = (!frames.is_empty()).then(|| self.writer.stack(&frames));
        self.stacks.insert(key, stack);
        Ok(stack)
    }

    /// A user frame normalized by the kernel (build id) or, failing that,
    /// through the process's mappings while it lives.
    pub(super) fn user_frame(&mut self, pid: u32, frame: BuildIdFrame) -> FrameAddr {
        match frame {
            BuildIdFrame::File {
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
            BuildIdFrame::Ip(addr) => {
                if let Some((path, file_offset)) = self.modules.translate(pid, addr) {
                    let build_id = self.modules.build_id_of(path).map(<[u8]>::to_vec);
                    let module = self.writer.intern(path);
                    return FrameAddr::User {
                        module,
                        build_id,
                        file_offset,
                    };
                }
                self.normalized_frame(pid, addr)
            }
        }
    }

    /// A user frame normalized through the live process's mappings.
    pub(super) fn normalized_frame(&mut self, pid: u32, addr: u64) -> FrameAddr {
        match self.normalizer.normalize_user(pid, &[addr]).pop() {
            Some(NormalizedAddr::Normalized {
                path,
                build_id,
                file_offset,
            }) => FrameAddr::User {
                module: self.writer.intern(&path),
                build_id,
                file_offset,
            },
            _ => FrameAddr::UnknownUser { addr },
        }
    }

    pub(super) fn frame(&mut self, addr: FrameAddr, depth: usize) -> FrameId {
        let id = self.writer.frame(addr);
        if id.0 as usize == self.frame_kinds.len() {
            self.frame_kinds.push(AddrKind::at_depth(depth));
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
