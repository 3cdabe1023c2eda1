//! What the checker may ask about the machine it compiles for: tracepoint
//! formats, functions and USDT probes of binaries, kernel types. The running
//! system answers (`runtime::environment`), and tests answer with a fake.

use std::path::{Path, PathBuf};

use super::context::{BtfArg, TracepointField, UsdtArgSpec};
use super::kernel_types::{KTypeId, KernelType};

/// A function found in a binary.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionTarget {
    pub name: String,
    pub file_offset: u64,
    /// Bytes of code; 0 when the symbol table does not say.
    pub size: u64,
}

/// A USDT probe found in a binary.
#[derive(Clone, Debug, PartialEq)]
pub struct UsdtTarget {
    pub provider: String,
    pub name: String,
    pub file_offset: u64,
    pub semaphore_offset: u64,
    pub args: Vec<UsdtArgSpec>,
}

/// A data symbol (`STT_OBJECT`) of a binary, for `uaddr()`.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectSymbol {
    /// The link-time virtual address.
    pub address: u64,
    pub size: u64,
    /// Whether the binary is position independent (`ET_DYN`): its symbols
    /// are then relative to where it is loaded.
    pub relocatable: bool,
}

/// What the checker may ask about the machine. Errors are messages for a
/// diagnostic on the probe spec.
pub trait Environment {
    fn expand_tracepoints(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<(String, String)>, String>;
    fn tracepoint_fields(&self, category: &str, name: &str)
    -> Result<Vec<TracepointField>, String>;
    /// Resolve `binary` (path, program or library name) and the functions matching `pattern`.
    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String>;
    fn usdt(
        &self,
        binary: &str,
        provider: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String>;
    /// The arguments of BTF tracepoint `name` (from the kernel's
    /// `btf_trace_NAME`), each one u64 slot of the context. The error names
    /// close tracepoints when there is no such one.
    fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String>;
    /// A kernel type, with typedefs and qualifiers skipped.
    fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String>;
    /// A kernel type by its C name: `struct task_struct`, `int`.
    fn kernel_type_named(&self, name: &str) -> Result<KTypeId, String>;
    /// The address of kernel symbol `name` (`kaddr()`); the error says why
    /// it is not known.
    fn kernel_symbol(&self, name: &str) -> Result<u64, String>;
    /// Data symbol `name` of `binary` (`uaddr()`).
    fn object_symbol(&self, binary: &Path, name: &str) -> Result<ObjectSymbol, String>;
    /// The link-time virtual address of byte `file_offset` of `binary`'s code.
    fn code_address(&self, binary: &Path, file_offset: u64) -> Result<u64, String>;
    /// The id of the cgroup at `path` (`cgroupid()`): its inode number.
    fn cgroup_id(&self, path: &str) -> Result<u64, String>;
}
