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
    /// The link-time virtual address (what `uprobe:BIN:0x401126` names).
    pub address: u64,
    pub file_offset: u64,
    /// Bytes of code; 0 when the symbol table does not say.
    pub size: u64,
    /// The C++ name of a mangled symbol (`ns::func(int)`).
    pub demangled: Option<String>,
}

/// A kernel function `kprobe:` can name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFunction {
    pub name: String,
    /// The module it is in; `None` for the kernel itself (`vmlinux`).
    pub module: Option<String>,
    /// Bytes up to the next kernel symbol; 0 when unknown.
    pub size: u64,
}

/// The kernel functions matching a spec, and a note when they come from a
/// list wider than the kernel's traceable functions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelFunctionMatches {
    pub functions: Vec<KernelFunction>,
    pub note: Option<String>,
    /// Set when the one function named is not in the kernel's list and is
    /// kept as written (a compile-only run): why attaching it would fail.
    pub absent: Option<String>,
}

/// A function a binary lacks, named exactly (`uprobe:libpthread:pthread_create`
/// since glibc 2.34 moved it into libc).
#[derive(Clone, Debug, PartialEq)]
pub struct MissingFunction {
    /// The binary, as its name resolved.
    pub binary: PathBuf,
    /// A library the binary loads (`DT_NEEDED`) that defines the function.
    pub defined_in: Option<PathBuf>,
    /// A compile-only run (`--dump-bpf`, `--emit-elf`): nothing is attached,
    /// so the probe is compiled as written, with a warning.
    pub compile_as_written: bool,
}

/// A kernel function as BTF describes it, for `fentry:`/`fexit:`.
#[derive(Clone, Debug, PartialEq)]
pub struct BtfFunction {
    pub name: String,
    /// Its parameters, each one u64 slot of an fentry context.
    pub args: Vec<BtfArg>,
    /// Its return type (`KTypeId(0)` is `void`).
    pub ret: KTypeId,
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
    /// The binaries a uprobe or USDT target names: the files of a path glob
    /// (`/usr/lib/*/libc.so.6`), any other name as it is.
    fn expand_binary(&self, binary: &str) -> Result<Vec<String>, String> {
        Ok(vec![binary.to_string()])
    }
    /// Resolve `binary` (path, program or library name) and the functions matching `pattern`.
    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String>;
    /// When `binary` resolves but lacks `function` (an exact name): where
    /// the function really is, and whether to compile the probe anyway.
    fn missing_function(&self, binary: &str, function: &str) -> Option<MissingFunction> {
        let _ = (binary, function);
        None
    }
    fn usdt(
        &self,
        binary: &str,
        provider: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String>;
    /// The binary of the traced process (`-c` command or `-p` pid), whose
    /// functions watchpoints watch.
    fn traced_binary(&self) -> Option<PathBuf> {
        None
    }
    /// Kernel functions whose name matches the glob `pattern`, in modules
    /// matching `module` (`vmlinux` is the kernel; `None` is any module).
    /// No match is an error naming close functions.
    fn kernel_functions(
        &self,
        module: Option<&str>,
        pattern: &str,
    ) -> Result<KernelFunctionMatches, String> {
        let _ = module;
        Err(format!(
            "no kernel functions are known here to match `{pattern}`"
        ))
    }
    /// Kernel functions in BTF whose names match the glob `pattern`, typed;
    /// no match is an error naming close functions.
    fn btf_functions(&self, pattern: &str) -> Result<Vec<BtfFunction>, String> {
        Err(format!("no kernel BTF is known here to match `{pattern}`"))
    }
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
    /// The kernel BTF id of `name`, a kernel function BPF programs may call
    /// (a kfunc such as `bpf_rdonly_cast`); `None` when it is not known.
    fn kfunc_id(&self, name: &str) -> Option<u32> {
        let _ = name;
        None
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

/// A function parameter named by a binary's debug info.
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionParam {
    pub name: String,
    pub ty: KTypeId,
    /// The C type as the debug info spells it (typedef names kept), for `-lv`.
    pub spelled: String,
    /// Where the x86-64 SysV ABI passes it, or why it cannot be read.
    pub passed: Result<PassedIn, String>,
}

impl FunctionParam {
    /// The parameter as bpftrace's `-lv` lists it: `int* n`,
    /// `struct Foo* foo1`, `size_t len`.
    pub fn listing(&self) -> String {
        format!("{} {}", self.spelled, self.name)
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
