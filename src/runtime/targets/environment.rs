//! The running machine as the checker sees it: tracepoint formats from
//! tracefs, functions and USDT probes from ELF files.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};

use super::{elf, kallsyms, tracefs, usdt};
use crate::runtime::targets::kernel_btf::KernelBtf;
use crate::runtime::targets::usdt::{UsdtArg, UsdtArgLocation};
use crate::vocab::kernel_types::{KTypeId, KernelType};
use crate::vocab::{
    BtfArg, Environment, FieldKind, FunctionTarget, ObjectSymbol, TracepointField, UsdtArgSpec,
    UsdtTarget,
};

/// Answers the checker's questions from this machine.
#[derive(Default)]
pub struct SystemEnvironment {
    /// `-p PID`: resolve libraries as mapped in this process.
    pub pid: Option<i32>,
    /// Kernel BTF, read the first time a script needs it.
    btf: OnceCell<Result<KernelBtf, String>>,
}

impl SystemEnvironment {
    pub fn new(pid: Option<i32>) -> Self {
        SystemEnvironment {
            pid,
            btf: OnceCell::new(),
        }
    }

    fn btf(&self) -> Result<&KernelBtf, String> {
        self.btf
            .get_or_init(KernelBtf::load)
            .as_ref()
            .map_err(Clone::clone)
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

    fn functions(
        &self,
        binary: &str,
        pattern: &str,
    ) -> Result<(PathBuf, Vec<FunctionTarget>), String> {
        let path = elf::resolve_binary(binary, self.pid).map_err(|e| e.to_string())?;
        let functions = elf::find_functions(&path, pattern).map_err(|e| e.to_string())?;
        let targets = functions
            .into_iter()
            .map(|f| FunctionTarget {
                name: f.name,
                file_offset: f.file_offset,
                size: f.size,
            })
            .collect();
        Ok((path, targets))
    }

    fn usdt(
        &self,
        binary: &str,
        provider: Option<&str>,
        name: &str,
    ) -> Result<(PathBuf, Vec<UsdtTarget>), String> {
        let path = elf::resolve_binary(binary, self.pid).map_err(|e| e.to_string())?;
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

    fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String> {
        self.btf()?.tp_btf_args(name)
    }

    fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String> {
        self.btf()?.kernel_type(id)
    }

    fn kernel_type_named(&self, name: &str) -> Result<KTypeId, String> {
        self.btf()?.named(name)
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
    })
}

fn usdt_arg(arg: &UsdtArg) -> Result<UsdtArgSpec, String> {
    match &arg.location {
        UsdtArgLocation::Register(reg) if !reg.high_byte => Ok(UsdtArgSpec::Register {
            pt_regs_offset: reg.pt_regs_offset,
            size: arg.size,
            signed: arg.signed,
        }),
        UsdtArgLocation::Immediate(value) => Ok(UsdtArgSpec::Constant(*value)),
        UsdtArgLocation::Memory { base, offset } => Ok(UsdtArgSpec::Memory {
            base_offset: base.pt_regs_offset,
            displacement: *offset,
            size: arg.size,
            signed: arg.signed,
        }),
        _ => Err(format!(
            "USDT argument `{}` uses an addressing form wprof cannot read",
            arg.spec
        )),
    }
}
