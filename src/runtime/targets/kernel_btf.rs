//! Kernel BTF (`/sys/kernel/btf/vmlinux`, read with libbpf-rs) → the
//! checker's [`KernelType`]s, `tp_btf` argument lists and the typed
//! functions `fentry:`/`fexit:` probe.

use libbpf_rs::btf::types::{
    Array, Composite, Enum, Enum64, Func, FuncProto, Int, IntEncoding, MemberAttr,
};
use libbpf_rs::btf::{Btf, BtfKind, BtfType, HasSize, ReferencesType, TypeId};
use libbpf_rs::{AsRawLibbpf, libbpf_sys};

use std::cell::{OnceCell, RefCell};
use std::collections::HashMap;

use crate::vocab::kernel_types::{
    EnumConstant, KTypeId, KernelKind, KernelMember, KernelType, close_names_note,
};
use crate::vocab::{BtfArg, BtfFunction};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
/// The typedef the kernel declares for each BTF tracepoint.
const TRACE_PREFIX: &str = "btf_trace_";
/// The function with named parameters the kernel emits for each tracepoint.
const STUB_PREFIX: &str = "__probestub_";

/// The running kernel's BTF.
pub struct KernelBtf {
    btf: Btf<'static>,
    /// Every enumerator by name, made the first time one is looked up.
    enumerators: OnceCell<HashMap<String, Vec<EnumConstant>>>,
    /// Types converted so far: the checker asks for the same few (a
    /// `task_struct` has hundreds of members) many times per script.
    converted: RefCell<HashMap<KTypeId, Result<KernelType, String>>>,
    /// Types found by name so far: each search walks all of BTF.
    by_name: RefCell<HashMap<String, Result<KTypeId, String>>>,
    /// BTF tracepoints by name, indexed on first use.
    tracepoints: OnceCell<HashMap<String, TracepointTypes>>,
}

/// The types that describe one BTF tracepoint's arguments.
#[derive(Default)]
struct TracepointTypes {
    /// `__probestub_NAME`, a function with named parameters.
    stub: Option<TypeId>,
    /// `btf_trace_NAME`, a typedef of a pointer to the prototype.
    typedef: Option<TypeId>,
}

impl KernelBtf {
    /// Whether the kernel exposes its BTF (without reading it).
    pub fn present() -> bool {
        std::path::Path::new(VMLINUX).is_file()
    }

    /// Reads it the way libbpf does (memory-mapped, which spares copying
    /// its megabytes), falling back to the other places libbpf knows.
    pub fn load() -> Result<KernelBtf, String> {
        Btf::from_vmlinux()
            .map(|btf| KernelBtf {
                btf,
                enumerators: OnceCell::new(),
                converted: RefCell::default(),
                by_name: RefCell::default(),
                tracepoints: OnceCell::new(),
            })
            .map_err(|e| format!("cannot read {VMLINUX}: {e}"))
    }

    fn by_id(&self, id: KTypeId) -> Result<BtfType<'_>, String> {
        self.btf
            .type_by_id::<BtfType<'_>>(TypeId::from(id.0))
            .ok_or_else(|| format!("no type with id {}", id.0))
    }

    /// The parameters of tracepoint `name` after its leading `void *`:
    /// from `__probestub_NAME` (Linux 6.4+), whose parameters have names,
    /// else from the `btf_trace_NAME` typedef (unnamed: `arg0`, `arg1`...).
    pub fn tp_btf_args(&self, name: &str) -> Result<Vec<BtfArg>, String> {
        let found = self.tracepoints().get(name);
        let stub = found
            .and_then(|t| t.stub)
            .and_then(|id| self.btf.type_by_id::<BtfType<'_>>(id))
            .and_then(|t| t.next_type());
        let typedef = || {
            found
                .and_then(|t| t.typedef)
                .and_then(|id| self.btf.type_by_id::<BtfType<'_>>(id))
                .map(|t| t.skip_mods_and_typedefs())
                .filter(|t| t.kind() == BtfKind::Ptr)
                .and_then(|t| t.next_type())
        };
        let Some(proto) = stub
            .or_else(typedef)
            .and_then(|t| FuncProto::try_from(t).ok())
        else {
            let close = close_names_note(name, &self.tracepoint_names());
            return Err(format!(
                "no BTF tracepoint `{name}` (no `{TRACE_PREFIX}{name}` in kernel BTF){close}"
            ));
        };
        // The first parameter is the tracepoint's `void *__data`.
        Ok((1..proto.len())
            .filter_map(|i| proto.get(i))
            .enumerate()
            .map(|(i, param)| BtfArg {
                name: match os_name(param.name) {
                    unnamed if unnamed.is_empty() => format!("arg{i}"),
                    named => named,
                },
                ty: KTypeId(param.ty.into()),
            })
            .collect())
    }

    /// The kernel functions whose names match `pattern`, with their typed
    /// parameters and return type, sorted by name.
    pub fn functions(&self, pattern: &glob::Pattern) -> Vec<BtfFunction> {
        let mut found: Vec<BtfFunction> = self
            .functions_raw()
            .filter_map(|func| {
                let name = func.name()?.to_str()?;
                if !pattern.matches(name) {
                    return None;
                }
                let proto = FuncProto::try_from(func.referenced_type()).ok()?;
                let args = (0..proto.len())
                    .filter_map(|i| proto.get(i))
                    .enumerate()
                    .map(|(i, param)| BtfArg {
                        name: match os_name(param.name) {
                            unnamed if unnamed.is_empty() => format!("arg{i}"),
                            named => named,
                        },
                        ty: KTypeId(param.ty.into()),
                    })
                    .collect();
                Some(BtfFunction {
                    name: name.to_string(),
                    args,
                    ret: KTypeId(proto.referenced_type_id().into()),
                })
            })
            .collect();
        found.sort_by(|a, b| a.name.cmp(&b.name));
        found.dedup_by(|a, b| a.name == b.name);
        found
    }

    /// The names of every kernel function in BTF.
    pub fn function_names(&self) -> Vec<String> {
        self.functions_raw()
            .filter_map(|func| Some(func.name()?.to_str()?.to_string()))
            .collect()
    }

    fn tracepoint_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .tracepoints()
            .iter()
            .filter(|(_, t)| t.typedef.is_some())
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        names
    }

    /// Every BTF tracepoint by name, found in one pass over BTF (a search
    /// by name walks all of it, and a capture resolves a dozen). The pass
    /// reads kinds and names from libbpf's table: only the functions and
    /// typedefs that carry a tracepoint prefix are converted.
    fn tracepoints(&self) -> &HashMap<String, TracepointTypes> {
        self.tracepoints.get_or_init(|| {
            let mut index: HashMap<String, TracepointTypes> = HashMap::new();
            for (id, kind, name_off) in self.raw_types() {
                let (prefix, is_stub) = match kind {
                    libbpf_sys::BTF_KIND_FUNC => (STUB_PREFIX, true),
                    libbpf_sys::BTF_KIND_TYPEDEF => (TRACE_PREFIX, false),
                    _ => continue,
                };
                let name = self.raw_name(name_off).strip_prefix(prefix.as_bytes());
                let Some(name) = name.and_then(|n| std::str::from_utf8(n).ok()) else {
                    continue;
                };
                let entry = index.entry(name.to_string()).or_default();
                let id = TypeId::from(id);
                match is_stub {
                    true => entry.stub.get_or_insert(id),
                    false => entry.typedef.get_or_insert(id),
                };
            }
            index
        })
    }

    /// Each type's id, kind (`BTF_KIND_*`) and name offset, straight from
    /// libbpf's table: libbpf-rs's typed view measures every type's name,
    /// which is most of a pass over the kernel's ~100k types.
    fn raw_types(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        let btf = self.btf.as_libbpf_object().as_ptr();
        (1..self.btf.len() as u32).filter_map(move |id| {
            // SAFETY: `btf` is alive as long as `self`; libbpf checks `id`
            // against its type count and returns null past it.
            let ty = unsafe { libbpf_sys::btf__type_by_id(btf, id).as_ref() }?;
            Some((id, (ty.info >> 24) & 0x1f, ty.name_off))
        })
    }

    /// The types of `kind` (`BTF_KIND_*`), found without wrapping the others.
    fn of_kind(&self, kind: u32) -> impl Iterator<Item = BtfType<'_>> + '_ {
        let ids = self.raw_types().filter(move |&(_, k, _)| k == kind);
        ids.filter_map(|(id, ..)| self.btf.type_by_id(TypeId::from(id)))
    }

    /// Every `BTF_KIND_FUNC`.
    fn functions_raw(&self) -> impl Iterator<Item = Func<'_>> + '_ {
        let funcs = self.of_kind(libbpf_sys::BTF_KIND_FUNC);
        funcs.filter_map(|t| Func::try_from(t).ok())
    }

    /// The name at `offset` in the string section (empty when out of range).
    fn raw_name(&self, offset: u32) -> &[u8] {
        let btf = self.btf.as_libbpf_object().as_ptr();
        // SAFETY: libbpf returns null or a NUL-terminated string inside the
        // BTF data, which lives as long as `self`.
        let name = unsafe { libbpf_sys::btf__name_by_offset(btf, offset) };
        match name.is_null() {
            true => &[],
            // SAFETY: non-null, NUL-terminated (above).
            false => unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes(),
        }
    }

    pub fn kernel_type(&self, id: KTypeId) -> Result<KernelType, String> {
        remembered(&self.converted, id, || {
            let ty = self.by_id(id)?.skip_mods_and_typedefs();
            Ok(KernelType {
                name: type_name(ty),
                kind: kind(ty),
            })
        })
    }

    /// Every enumerator called `name`, with its enum.
    pub fn enum_constants(&self, name: &str) -> Vec<EnumConstant> {
        let index = self.enumerators.get_or_init(|| self.index_enumerators());
        index.get(name).cloned().unwrap_or_default()
    }

    fn index_enumerators(&self) -> HashMap<String, Vec<EnumConstant>> {
        let mut index: HashMap<String, Vec<EnumConstant>> = HashMap::new();
        let mut add = |enum_name: &str, member: Option<&std::ffi::OsStr>, value: i64| {
            let Some(name) = member.and_then(|n| n.to_str()) else {
                return;
            };
            let constant = EnumConstant {
                enum_name: enum_name.to_string(),
                value,
            };
            let entry = index.entry(name.to_string()).or_default();
            if !entry.contains(&constant) {
                entry.push(constant);
            }
        };
        for e in self
            .of_kind(libbpf_sys::BTF_KIND_ENUM)
            .filter_map(|t| Enum::try_from(t).ok())
        {
            let enum_name = type_name(*e);
            for member in e.iter() {
                add(&enum_name, member.name, member.value);
            }
        }
        let enums64 = self.of_kind(libbpf_sys::BTF_KIND_ENUM64);
        for e in enums64.filter_map(|t| Enum64::try_from(t).ok()) {
            let enum_name = type_name(*e);
            for member in e.iter() {
                add(&enum_name, member.name, member.value as i64);
            }
        }
        index
    }

    /// The id of `btf_trace_NAME`, the typedef a `tp_btf` program on
    /// tracepoint `name` is loaded against.
    pub fn tracepoint_typedef(&self, name: &str) -> Option<u32> {
        let typedef = self.tracepoints().get(name)?.typedef?;
        Some(typedef.into())
    }

    /// The id of function `name` (`BTF_KIND_FUNC`), if the kernel has it.
    pub fn function_id(&self, name: &str) -> Option<u32> {
        let found = (self.btf).type_by_name::<Func<'_>>(name);
        found.map(|func| func.type_id().into())
    }

    /// `struct NAME`, `union NAME`, `enum NAME` or a plain type name.
    pub fn named(&self, name: &str) -> Result<KTypeId, String> {
        remembered(&self.by_name, name.to_string(), || self.search(name))
    }

    fn search(&self, name: &str) -> Result<KTypeId, String> {
        let (wanted, bare) = match name.split_once(' ') {
            Some(("struct", bare)) => (BtfKind::Struct, bare),
            Some(("union", bare)) => (BtfKind::Union, bare),
            Some(("enum", bare)) => (BtfKind::Enum, bare),
            _ => (BtfKind::Int, name),
        };
        let found = self.btf.type_by_name::<BtfType<'_>>(bare);
        match found {
            Some(ty) if ty.kind() == wanted || wanted == BtfKind::Int => {
                Ok(KTypeId(ty.type_id().into()))
            }
            _ => Err(format!("no type `{name}` in kernel BTF")),
        }
    }
}

/// `cache[key]`, made by `make` the first time.
fn remembered<K: std::hash::Hash + Eq, V: Clone>(
    cache: &RefCell<HashMap<K, V>>,
    key: K,
    make: impl FnOnce() -> V,
) -> V {
    if let Some(known) = cache.borrow().get(&key) {
        return known.clone();
    }
    let made = make();
    cache.borrow_mut().insert(key, made.clone());
    made
}

fn os_name(name: Option<&std::ffi::OsStr>) -> String {
    name.map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The type as C spells it.
fn type_name(ty: BtfType<'_>) -> String {
    let ty = ty.skip_mods_and_typedefs();
    let name = os_name(ty.name());
    match ty.kind() {
        BtfKind::Struct => format!("struct {name}"),
        BtfKind::Union => format!("union {name}"),
        BtfKind::Enum | BtfKind::Enum64 if name.is_empty() => String::new(),
        BtfKind::Enum | BtfKind::Enum64 => format!("enum {name}"),
        BtfKind::Ptr => match ty.next_type() {
            Some(target) => format!("{} *", type_name(target)),
            None => "void *".into(),
        },
        BtfKind::Array => match Array::try_from(ty) {
            Ok(array) => format!(
                "{}[{}]",
                type_name(array.contained_type()),
                array.capacity()
            ),
            Err(_) => name,
        },
        BtfKind::Void => "void".into(),
        _ => name,
    }
}

fn kind(ty: BtfType<'_>) -> KernelKind {
    match ty.kind() {
        BtfKind::Void => KernelKind::Void,
        BtfKind::Int => match Int::try_from(ty) {
            Ok(int) if matches!(int.encoding, IntEncoding::Bool) => KernelKind::Bool,
            Ok(int) => KernelKind::Int {
                size: int.size() as u8,
                signed: matches!(int.encoding, IntEncoding::Signed),
            },
            Err(_) => KernelKind::Other,
        },
        BtfKind::Enum => match Enum::try_from(ty) {
            Ok(e) => KernelKind::Enum {
                size: e.size() as u8,
                signed: e.is_signed(),
            },
            Err(_) => KernelKind::Other,
        },
        BtfKind::Enum64 => match Enum64::try_from(ty) {
            Ok(e) => KernelKind::Enum {
                size: e.size() as u8,
                signed: e.is_signed(),
            },
            Err(_) => KernelKind::Other,
        },
        BtfKind::Ptr => {
            let target = ty.next_type().map_or(0, |t| u32::from(t.type_id()));
            KernelKind::Pointer(KTypeId(target))
        }
        BtfKind::Array => match Array::try_from(ty) {
            Ok(array) => KernelKind::Array {
                elem: KTypeId(array.ty().into()),
                len: array.capacity() as u32,
            },
            Err(_) => KernelKind::Other,
        },
        BtfKind::Float => match libbpf_rs::btf::types::Float::try_from(ty) {
            Ok(float) => KernelKind::Float {
                size: float.size() as u8,
            },
            Err(_) => KernelKind::Other,
        },
        BtfKind::Struct | BtfKind::Union => match Composite::try_from(ty) {
            Ok(composite) => KernelKind::Struct {
                union: !composite.is_struct,
                size: composite.size() as u32,
                members: (0..composite.len())
                    .filter_map(|i| composite.get(i))
                    .map(member)
                    .collect::<Vec<_>>()
                    .into(),
            },
            Err(_) => KernelKind::Other,
        },
        _ => KernelKind::Other,
    }
}

fn member(m: libbpf_rs::btf::types::CompositeMember<'_>) -> KernelMember {
    let (offset_bits, bitfield_bits) = match m.attr {
        MemberAttr::Normal { offset } => (offset, None),
        MemberAttr::BitField { size, offset } => (offset, Some(size)),
    };
    KernelMember {
        name: os_name(m.name),
        ty: KTypeId(m.ty.into()),
        offset_bits,
        bitfield_bits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// sched_switch's arguments and task_struct's members come from the running kernel.
    #[test]
    fn reads_sched_switch_and_task_struct() {
        let btf = KernelBtf::load().expect("kernel BTF");
        let args = btf.tp_btf_args("sched_switch").expect("sched_switch");
        let names: Vec<&str> = args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["preempt", "prev", "next", "prev_state"]);
        let prev = btf.kernel_type(args[1].ty).expect("prev");
        assert_eq!(prev.name, "struct task_struct *");
        assert_eq!(
            btf.kernel_type(args[0].ty).expect("preempt").kind,
            KernelKind::Bool
        );
        let task = btf.named("struct task_struct").expect("task_struct");
        let KernelKind::Struct { members, .. } = btf.kernel_type(task).expect("task").kind else {
            panic!("task_struct is a struct");
        };
        assert!(members.iter().any(|m| m.name == "comm"));
        let wakeup = btf.tp_btf_args("sched_wakeup").expect("sched_wakeup");
        assert_eq!(wakeup[0].name, "p");
        let err = btf.tp_btf_args("sched_swich").expect_err("misspelt");
        assert!(err.contains("sched_switch"), "{err}");
    }

    /// Kernel functions are found by name, and only functions.
    #[test]
    fn finds_kernel_functions_by_name() {
        let btf = KernelBtf::load().expect("kernel BTF");
        let id = btf.function_id("bpf_rdonly_cast").expect("the kfunc");
        let func = btf.btf.type_by_id::<BtfType<'_>>(TypeId::from(id));
        assert_eq!(func.map(|f| f.kind()), Some(BtfKind::Func));
        assert_eq!(btf.function_id("task_struct"), None, "a struct");
        assert_eq!(btf.function_id("no_such_function_here"), None);
    }

    /// vfs_read's parameters and return type come from its BTF prototype.
    #[test]
    fn reads_vfs_read() {
        let btf = KernelBtf::load().expect("kernel BTF");
        let found = btf.functions(&glob::Pattern::new("vfs_read").expect("glob"));
        let [vfs_read] = found.as_slice() else {
            panic!("one vfs_read: {found:?}");
        };
        let names: Vec<&str> = vfs_read.args.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["file", "buf", "count", "pos"]);
        let file = btf.kernel_type(vfs_read.args[0].ty).expect("file");
        assert_eq!(file.name, "struct file *");
        let ret = btf.kernel_type(vfs_read.ret).expect("ssize_t");
        assert_eq!(
            ret.kind,
            KernelKind::Int {
                size: 8,
                signed: true
            }
        );
        let many = btf.functions(&glob::Pattern::new("vfs_*").expect("glob"));
        assert!(many.len() > 10 && many.windows(2).all(|w| w[0].name < w[1].name));
    }

    /// `remembered` makes a value once per key and hands out copies after.
    #[test]
    fn remembers_what_it_made() {
        let cache = RefCell::new(HashMap::new());
        let made = std::cell::Cell::new(0);
        let make = |value: &'static str| {
            made.set(made.get() + 1);
            value
        };
        assert_eq!(remembered(&cache, 1, || make("one")), "one");
        assert_eq!(remembered(&cache, 1, || make("other")), "one");
        assert_eq!(remembered(&cache, 2, || make("two")), "two");
        assert_eq!(made.get(), 2);
    }
}
