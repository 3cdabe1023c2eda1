//! What the checker may ask about the machine it compiles for: tracepoint
//! formats, functions and USDT probes of binaries, kernel types. The running
//! system answers (`runtime::environment`), and tests answer with a fake.

use std::path::{Path, PathBuf};

use super::context::{BtfArg, TracepointField, UsdtArgSpec};
use super::kernel_types::{EnumConstant, KTypeId, KernelType};

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
    /// Whether kernel BTF is there to read (checked cheaply: scripts test
    /// `BPFTRACE_HAVE_BTF` before any type is needed).
    fn has_btf(&self) -> bool {
        false
    }
    /// Every kernel enum constant called `name` (several when enums
    /// disagree or repeat it).
    fn enum_constants(&self, name: &str) -> Result<Vec<EnumConstant>, String> {
        let _ = name;
        Ok(Vec::new())
    }
    /// The parameters of `function` in `binary`, from its debug info.
    fn function_params(&self, binary: &Path, function: &str) -> Result<Vec<FunctionParam>, String> {
        let _ = function;
        Err(format!("{} has no debug info", binary.display()))
    }
}

/// A function parameter named by a binary's debug info.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionParam {
    pub name: String,
    pub ty: KTypeId,
    /// Where the x86-64 SysV ABI passes it, or why it cannot be read.
    pub passed: Result<PassedIn, String>,
}

impl FunctionParam {
    /// The parameter as bpftrace's `-lv` lists it: `int* n`,
    /// `struct Foo* foo1`.
    pub fn listing(&self, env: &dyn Environment) -> String {
        let ty = env
            .kernel_type(self.ty)
            .map_or_else(|_| "?".into(), |t| t.name.replace(" *", "*"));
        format!("{ty} {}", self.name)
    }
}

/// Where a parameter arrives at a function's first instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PassedIn {
    /// The Nth integer argument register (rdi, rsi, rdx, rcx, r8, r9).
    Register(u8),
    /// On the stack, this many bytes above the return address.
    Stack(u32),
}
