//! The running machine as the checker sees it: tracepoint formats from
//! tracefs, functions and USDT probes from ELF files.

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::debug_info::{self, DebugTypes};
use super::{binary_glob, elf, kallsyms, library_search, tracefs, usdt};
use crate::runtime::bpf::loader::TracepointIds;
use crate::runtime::targets::kernel_btf::KernelBtf;
use crate::runtime::targets::kernel_functions::KernelFunctions;
use crate::runtime::targets::usdt::{UsdtArg, UsdtArgLocation};
use crate::vocab::kernel_types::{
    DEBUG_INFO_TYPES, EnumConstant, KTypeId, KernelType, close_names_note,
};
use crate::vocab::{
    AttachPoint, BtfArg, BtfFunction, Environment, FieldKind, FunctionParam, FunctionTarget,
    KernelFunction, KernelFunctionMatches, MissingFunction, ObjectSymbol, TracepointField,
    UsdtArgSpec, UsdtIndex, UsdtTarget, x86_64,
};

/// A function's parameters, or why its debug info does not give them.
type ParamsRead = Result<Vec<FunctionParam>, String>;

/// Answers the checker's questions from this machine.
#[derive(Default)]
pub struct SystemEnvironment {
    /// `-p PID`: resolve libraries as mapped in this process.
    pub pid: Option<i32>,
    /// The program `-c` runs, as its first word names it.
    pub command: Option<String>,
    /// Kernel BTF, read the first time a script needs it.
    btf: OnceCell<Result<KernelBtf, String>>,
    /// `--dump-bpf`/`--emit-elf`: nothing is attached, so a kprobe naming a
    /// function this kernel lacks, or a uprobe one its binary lacks, is
    /// compiled as written, with a warning (bpftrace compiles both).
    pub compile_only: bool,
    /// Kernel functions, read the first time a `kprobe:` needs them.
    kernel_functions: OnceCell<Result<KernelFunctions, String>>,
    /// Types read from binaries' debug info.
    debug_types: RefCell<DebugTypes>,
    /// Parameters read so far, by binary and function.
    params: RefCell<HashMap<(PathBuf, String), ParamsRead>>,
    /// Binaries the script probes, whose debug info also names types.
    probed: RefCell<Vec<PathBuf>>,
    /// Types looked up by name in the probed binaries' debug info.
    debug_named: RefCell<HashMap<String, Option<KTypeId>>>,
}

impl SystemEnvironment {
    pub fn new(pid: Option<i32>) -> Self {
        SystemEnvironment {
            pid,
            ..Default::default()
        }
    }

    fn kernel_function_list(&self) -> Result<&KernelFunctions, String> {
        self.kernel_functions
            .get_or_init(|| KernelFunctions::load(tracefs::tracefs_root().ok().as_deref()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The BTF ids of the tracepoints `programs` attach to as `tp_btf`, from
    /// the kernel BTF compiling them read (never read for this alone).
    pub fn tracepoint_ids<'p>(
        &self,
        programs: impl IntoIterator<Item = &'p AttachPoint>,
    ) -> TracepointIds {
        let Some(Ok(btf)) = self.btf.get() else {
            return TracepointIds::new();
        };
        (programs.into_iter())
            .filter_map(|point| match point {
                AttachPoint::TpBtf { name } => Some((name.clone(), btf.tracepoint_typedef(name)?)),
                _ => None,
            })
            .collect()
    }

    fn btf(&self) -> Result<&KernelBtf, String> {
        self.btf
            .get_or_init(|| {
                let btf = KernelBtf::load();
                crate::timings::step("kernel BTF mapped");
                btf
            })
            .as_ref()
            .map_err(Clone::clone)
    }
}

impl SystemEnvironment {
    /// The type `name` from the first probed binary whose debug info
    /// defines it (binaries without debug info are passed over).
    fn debug_type_named(&self, name: &str) -> Option<KTypeId> {
        if let Some(&known) = self.debug_named.borrow().get(name) {
            return known;
        }
        let mut types = self.debug_types.borrow_mut();
        let found = self.probed.borrow().iter().find_map(|binary| {
            debug_info::named_type(binary, name, &mut types)
                .ok()
                .flatten()
        });
        self.debug_named
            .borrow_mut()
            .insert(name.to_string(), found);
        found
    }
}

impl Environment for SystemEnvironment {
    fn expand_tracepoints(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<(String, String)>, String> {
        tracefs::expand(category, name).map_err(|e| e.to_string())
    }

    fn tracepoint_fields(
        &self,
        category: &str,
        name: &str,
    ) -> Result<Vec<TracepointField>, String> {
        let format = tracefs::read_format(category, name).map_err(|e| e.to_string())?;
        let user = category == "syscalls";
        Ok(format
            .fields
            .iter()
            .filter_map(|f| field(f, user))
            .collect())
    }

    fn expand_binary(&self, binary: &str) -> Result<Vec<String>, String> {
        if let Some(pid) = self.pid
            && !binary.contains('/')
            && binary.contains(['*', '?', '['])
        {
            let files = binary_glob::mapped_by(pid, binary).map_err(|e| e.to_string())?;
            return Ok(files.iter().map(|f| f.display().to_string()).collect());
        }
        if !binary_glob::is_glob(binary) {
            return Ok(vec![binary.to_string()]);
        }
        let files = binary_glob::expand(binary).map_err(|e| e.to_string())?;
        Ok(files
            .into_iter()
            .filter_map(|f| f.to_str().map(str::to_string))
            .collect())
    }

    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String> {
        let path = library_search::resolve_binary(binary, self.pid).map_err(|e| e.to_string())?;
        let functions = elf::find_functions(&path, pattern).map_err(|e| e.to_string())?;
        if !self.probed.borrow().contains(&path) {
            self.probed.borrow_mut().push(path.clone());
        }
        let targets = functions
            .into_iter()
            .map(|f| FunctionTarget {
                name: f.name,
                address: f.address,
                file_offset: f.file_offset,
                size: f.size,
                demangled: f.demangled,
            })
            .collect();
        Ok((path, targets))
    }

    fn missing_function(&self, binary: &str, function: &str) -> Option<MissingFunction> {
        let path = library_search::resolve_binary(binary, self.pid).ok()?;
        let lacks = matches!(
            elf::find_functions(&path, function),
            Err(elf::ElfError::NoFunction { .. })
        );
        lacks.then(|| MissingFunction {
            defined_in: library_search::library_defining(&path, function, self.pid),
            binary: path,
            compile_as_written: self.compile_only,
        })
    }

    fn usdt(
        &self,
        binary: &str,
        provider: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String> {
        let path = library_search::resolve_binary(binary, self.pid).map_err(|e| e.to_string())?;
        let probes = usdt::find_usdt(&path, provider, name).map_err(|e| e.to_string())?;
        let targets = probes
            .into_iter()
            .map(|p| {
                let args = p.args.iter().map(usdt_arg).collect::<Result<Vec<_>, _>>()?;
                Ok(UsdtTarget {
                    provider: p.provider,
                    name: p.name,
                    file_offset: p.file_offset,
                    semaphore_offset: p.semaphore_offset,
                    args,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok((path, targets))
    }

    fn traced_binary(&self) -> Option<PathBuf> {
        match (&self.command, self.pid) {
            (Some(command), _) => library_search::resolve_binary(command, None).ok(),
            (None, Some(pid)) => Some(PathBuf::from(format!("/proc/{pid}/exe"))),
            (None, None) => None,
        }
    }

    fn kernel_functions(
        &self,
        module: Option<&str>,
        pattern: &str,
    ) -> Result<KernelFunctionMatches, String> {
        let list = self.kernel_function_list()?;
        let functions = list.matching(module, pattern)?;
        let exact = !pattern.contains(['*', '?', '[']) && module.is_none();
        if functions.is_empty() && self.compile_only && exact {
            let why = no_kernel_function(list, module, pattern);
            return Ok(KernelFunctionMatches {
                functions: vec![KernelFunction {
                    name: pattern.to_string(),
                    module: None,
                    size: 0,
                }],
                note: None,
                absent: Some(format!(
                    "{why}: compiled as written, attaching it would fail"
                )),
            });
        }
        if functions.is_empty() {
            return Err(no_kernel_function(list, module, pattern));
        }
        Ok(KernelFunctionMatches {
            functions,
            note: list.note.clone(),
            absent: None,
        })
    }

    fn btf_functions(&self, pattern: &str) -> Result<Vec<BtfFunction>, String> {
        let btf = self.btf()?;
        let glob =
            glob::Pattern::new(pattern).map_err(|e| format!("invalid pattern `{pattern}`: {e}"))?;
        let found = btf.functions(&glob);
        if found.is_empty() {
            let close = close_names_note(pattern, &btf.function_names());
            return Err(format!(
                "no kernel function matches `{pattern}` in /sys/kernel/btf/vmlinux{close}"
            ));
        }
        Ok(found)
    }

    fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String> {
        self.btf()?.tp_btf_args(name)
    }

    fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String> {
        if id.0 >= DEBUG_INFO_TYPES {
            let types = self.debug_types.borrow();
            return types
                .get(id)
                .cloned()
                .ok_or_else(|| format!("no debug-info type with id {:#x}", id.0));
        }
        self.btf()?.kernel_type(id)
    }

    /// Kernel BTF first, then the debug info of the binaries probed.
    fn kernel_type_named(&self, name: &str) -> Result<KTypeId, String> {
        let kernel = self.btf().and_then(|btf| btf.named(name));
        kernel.or_else(|why| self.debug_type_named(name).ok_or(why))
    }

    fn has_btf(&self) -> bool {
        KernelBtf::present()
    }

    fn kfunc_id(&self, name: &str) -> Option<u32> {
        self.btf().ok()?.function_id(name)
    }

    fn enum_constants(&self, name: &str) -> Result<Vec<EnumConstant>, String> {
        Ok(self.btf()?.enum_constants(name))
    }

    fn function_params(&self, binary: &Path, function: &str) -> Result<Vec<FunctionParam>, String> {
        let key = (binary.to_path_buf(), function.to_string());
        if let Some(known) = self.params.borrow().get(&key) {
            return known.clone();
        }
        let mut types = self.debug_types.borrow_mut();
        let params = debug_info::function_params(binary, function, &mut types);
        self.params.borrow_mut().insert(key, params.clone());
        params
    }

    fn kernel_symbol(&self, name: &str) -> Result<u64, String> {
        kallsyms::address(name)
    }

    fn object_symbol(&self, binary: &Path, name: &str) -> Result<ObjectSymbol, String> {
        elf::find_object(binary, name).map_err(|e| e.to_string())
    }

    fn code_address(&self, binary: &Path, file_offset: u64) -> Result<u64, String> {
        elf::code_address(binary, file_offset).map_err(|e| e.to_string())
    }

    fn cgroup_id(&self, path: &str) -> Result<u64, String> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        Ok(meta.ino())
    }
}

/// Why no kernel function matched: the module is unknown, or the closest names.
fn no_kernel_function(list: &KernelFunctions, module: Option<&str>, pattern: &str) -> String {
    if let Some(module) = module.filter(|m| !m.contains('*') && !list.has_module(m)) {
        return format!("no kernel module `{module}` is loaded (see /proc/modules)");
    }
    let source = match list.note {
        Some(_) => "/proc/kallsyms",
        None => "the kernel's traceable functions",
    };
    let close = close_names_note(pattern, &list.names());
    format!("no kernel function matches `{pattern}` in {source}{close}")
}

/// How a tracefs field is read; `None` for fields scripts cannot use
/// (arrays other than strings).
fn field(field: &tracefs::Field, user: bool) -> Option<TracepointField> {
    let is_char = field
        .c_type
        .trim_start_matches("const ")
        .starts_with("char")
        || field.c_type.contains("u8");
    let kind = if field.data_loc || field.rel_loc {
        FieldKind::DataLocString
    } else if let Some(len) = field.array_len {
        if !is_char {
            return None;
        }
        FieldKind::CharArray(len)
    } else if field.is_pointer {
        FieldKind::Pointer { user }
    } else if field.size <= 8 {
        FieldKind::Int {
            size: field.size as u8,
            signed: field.signed,
        }
    } else {
        return None;
    };
    Some(TracepointField {
        name: field.name.clone(),
        offset: field.offset,
        kind,
        c_type: field.c_type.clone(),
    })
}

fn usdt_arg(arg: &UsdtArg) -> Result<UsdtArgSpec, String> {
    let memory = |base_offset: Option<u16>, index: Option<UsdtIndex>, displacement: i64| {
        Ok(UsdtArgSpec::Memory {
            base_offset,
            index,
            displacement,
            size: arg.size,
            signed: arg.signed,
        })
    };
    match &arg.location {
        UsdtArgLocation::Register(reg) if !reg.high_byte => Ok(UsdtArgSpec::Register {
            pt_regs_offset: reg.pt_regs_offset,
            size: arg.size,
            signed: arg.signed,
        }),
        UsdtArgLocation::Immediate(value) => {
            Ok(UsdtArgSpec::constant(*value, arg.size, arg.signed))
        }
        UsdtArgLocation::Memory { base, offset } => {
            memory(Some(base.pt_regs_offset), None, *offset)
        }
        UsdtArgLocation::Indexed {
            base,
            index,
            scale,
            offset,
        } => {
            let index = UsdtIndex {
                pt_regs_offset: index.pt_regs_offset,
                scale: *scale,
            };
            memory(base.map(|b| b.pt_regs_offset), Some(index), *offset)
        }
        // A uprobe handler sees `ip` at the probe's address.
        UsdtArgLocation::PcRelative { pc_offset } => memory(Some(x86_64::RIP), None, *pc_offset),
        _ => Err(format!(
            "USDT argument `{}` uses an addressing form wprof cannot read",
            arg.spec
        )),
    }
}
