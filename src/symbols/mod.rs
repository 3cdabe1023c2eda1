//! Symbols: code addresses from BPF stack maps and `ksym()` values in,
//! function names (with file:line and inlined calls) out.
//!
//! User stacks must outlive their processes, so they take two steps, split
//! in time:
//! 1. While a process lives, [`StackNormalizer::normalize_user`] turns its user
//!    addresses into [`NormalizedAddr`]s: a file path, its build id and a file
//!    offset. These no longer depend on the process' memory layout, so they
//!    stay meaningful after it exits.
//! 2. At the end of the capture, [`symbolize`] resolves [`RawFrame`]s (kernel
//!    addresses and normalized user frames) to [`RawSymbol`]s, reading each
//!    file once. The capture stores the symbols, so replay on another machine
//!    shows names without the binaries.
//!
//! Kernel addresses have one symbolizer, [`KernelSymbols`] (`/proc/kallsyms`),
//! used by [`symbolize`], the recorder and the session's `ksym()` printing.
//!
//! # Return addresses
//! A stack from `bpf_get_stackid` holds the interrupted instruction for its
//! innermost frame and *return addresses* for all others: the instruction after
//! a `call`. When a call is the last instruction of a function (a `noreturn`
//! callee), its return address is the first byte of the *next* function, and
//! even inside one function it points at the line after the call. So each frame
//! comes with an [`AddrKind`]: [`AddrKind::Return`] frames are looked up at
//! `addr - 1` (inside the call instruction), while [`RawSymbol::offset`] stays
//! relative to the real address, as `perf` and `gdb` print it.
//! [`AddrKind::in_stack`] gives the kind from a frame's position in its stack.
//!
//! The same address can occur as the innermost frame of one stack and as an
//! outer frame of another. A caller that keeps one symbol per distinct address
//! should use [`AddrKind::Return`] if the address is ever an outer frame: the
//! innermost frame of a stack taken in a syscall or tracepoint is itself the
//! instruction after a `syscall`/`call`.

mod demangle;
mod kernel;
mod modules;
mod normalize;
mod perf_map;
mod plt;
mod symbolize;
#[cfg(test)]
mod tests;
pub mod vdso;

pub use demangle::{cpp_demangling, demangle, demangle_cpp};
pub use kernel::{KernelSymbol, KernelSymbols};
pub use modules::{FoundCode, ModuleIndex, PaddedBuildId};
pub use normalize::StackNormalizer;
pub use plt::PltStubs;
pub use symbolize::{SymbolizeOptions, SymbolizeStats, Symbolized, symbolize};

/// A user address after normalization.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NormalizedAddr {
    /// The address lies in a file mapping.
    Normalized {
        /// The file's path as the process saw it (lossily converted to UTF-8).
        path: String,
        /// The file's GNU build id, when it has one and it could be read.
        build_id: Option<Vec<u8>>,
        /// Offset of the address in the file (not a virtual address).
        file_offset: u64,
    },
    /// The address could not be tied to a file; keep the raw address.
    Unknown {
        /// Why not.
        reason: UnknownReason,
    },
}

/// Why a user address could not be normalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnknownReason {
    /// The process is gone (or never existed) and nothing about it was cached.
    ProcessGone,
    /// No mapping of the process contains the address.
    Unmapped,
    /// The mapping has no file: anonymous memory, JIT code, heap, stack.
    Anonymous,
    /// The address is in the vDSO, which has no file to read later.
    Vdso,
    /// Any other special mapping (`[vsyscall]`, `[uprobes]`, ...).
    Unsupported,
}

/// Whether a frame's address is the executing instruction or a return address.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AddrKind {
    /// The instruction being executed: the innermost frame of a stack.
    #[default]
    Ip,
    /// The instruction after a call: every frame but the innermost.
    /// Looked up at `addr - 1`.
    Return,
}

impl AddrKind {
    /// The kind of the frame at `index` in a stack stored innermost first
    /// whose first `kernel_frames` frames are the kernel's. Each part's
    /// innermost frame is an instruction, not a return address: the user
    /// part's is where the thread entered the kernel (an interrupted
    /// instruction, or the one after a `syscall`), as perf reads it.
    pub fn in_stack(index: usize, kernel_frames: usize) -> Self {
        if index == 0 || index == kernel_frames {
            Self::Ip
        } else {
            Self::Return
        }
    }

    /// How far before the address to look it up.
    fn lookup_bias(self) -> u64 {
        match self {
            Self::Ip => 0,
            Self::Return => 1,
        }
    }
}

/// A frame to symbolize: the capture's `FrameAddr` without interned strings.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RawFrame {
    /// A kernel address, resolved through `/proc/kallsyms`.
    Kernel {
        /// The kernel virtual address.
        addr: u64,
    },
    /// A normalized user frame (see [`NormalizedAddr::Normalized`]).
    User {
        /// The file's path.
        path: String,
        /// The build id seen when normalizing; a file whose build id differs
        /// now was replaced and is not used.
        build_id: Option<Vec<u8>>,
        /// Offset in the file.
        file_offset: u64,
    },
    /// A user address that could not be normalized; never resolves.
    UnknownUser {
        /// The raw address.
        addr: u64,
    },
}

#[cfg(test)]
impl RawFrame {
    /// The frame for a normalized address, keeping the raw `addr` when it
    /// could not be normalized.
    pub fn from_normalized(addr: u64, normalized: NormalizedAddr) -> Self {
        match normalized {
            NormalizedAddr::Normalized {
                path,
                build_id,
                file_offset,
            } => Self::User {
                path,
                build_id,
                file_offset,
            },
            NormalizedAddr::Unknown { .. } => Self::UnknownUser { addr },
        }
    }
}

/// What a frame resolved to: the capture's `Symbol` without interned strings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawSymbol {
    /// The function (demangled when enabled), `None` when unresolved.
    pub function: Option<String>,
    /// Offset of the frame's real address from the function's start.
    pub offset: u64,
    /// Source file of the looked-up instruction (innermost inlined call).
    pub file: Option<String>,
    /// Source line of the looked-up instruction.
    pub line: Option<u32>,
    /// Functions inlined at this address, outermost first (`function` calls
    /// `inlined[0]`, which calls `inlined[1]`, ...).
    pub inlined: Vec<String>,
}
