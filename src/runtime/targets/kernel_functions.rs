//! Runtime, kernel attach targets: the kernel functions `kprobe:` specs and
//! `-l` name. Input: tracefs `available_filter_functions` (the functions
//! the kernel can trace) when it is readable, else `/proc/kallsyms` (every
//! text symbol, said so in a note), plus `/proc/kallsyms` for sizes. Output:
//! [`KernelFunctions`] answering globs over module and function names.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;

use crate::vocab::KernelFunction;

const KALLSYMS: &str = "/proc/kallsyms";
const FILTER_FUNCTIONS: &str = "available_filter_functions";

/// The kernel's functions, each with its module and size where known.
#[derive(Clone, Debug, Default)]
pub struct KernelFunctions {
    functions: Vec<KernelFunction>,
    /// Why the list is not the kernel's list of traceable functions.
    pub note: Option<String>,
}

impl KernelFunctions {
    /// Reads the traceable functions from tracefs, or the text symbols of
    /// `/proc/kallsyms` when tracefs does not let us.
    pub fn load(tracefs: Option<&Path>) -> Result<KernelFunctions, String> {
        let kallsyms =
            fs::read_to_string(KALLSYMS).map_err(|e| format!("cannot read {KALLSYMS}: {e}"))?;
        let symbols = parse_kallsyms(&kallsyms);
        let filter_path = tracefs.map(|root| root.join(FILTER_FUNCTIONS));
        let traceable = filter_path.as_deref().map(fs::read_to_string);
        Ok(match traceable {
            Some(Ok(text)) => KernelFunctions {
                functions: with_sizes(parse_filter_functions(&text), &symbols),
                note: None,
            },
            failed => {
                let why = match (failed, &filter_path) {
                    (Some(Err(e)), Some(path)) => {
                        format!("{} is not readable ({})", path.display(), reason(&e))
                    }
                    _ => "tracefs is not mounted".to_string(),
                };
                KernelFunctions {
                    functions: symbols.functions,
                    note: Some(format!(
                        "{why}: kernel functions come from {KALLSYMS}, which also lists \
                         functions the kernel cannot trace"
                    )),
                }
            }
        })
    }

    /// A list made of `functions`, for tests.
    #[cfg(test)]
    pub fn of(functions: Vec<KernelFunction>) -> KernelFunctions {
        KernelFunctions {
            functions,
            note: None,
        }
    }

    /// Functions whose name matches `pattern` and whose module matches
    /// `module` (`vmlinux` is the kernel itself; `None` is any), sorted by
    /// name, each once.
    pub fn matching(
        &self,
        module: Option<&str>,
        pattern: &str,
    ) -> Result<Vec<KernelFunction>, String> {
        let glob = |text: &str| {
            glob::Pattern::new(text).map_err(|e| format!("invalid pattern `{text}`: {e}"))
        };
        let (name_glob, module_glob) = (glob(pattern)?, module.map(glob).transpose()?);
        let mut found: Vec<KernelFunction> = (self.functions.iter())
            .filter(|f| name_glob.matches(&f.name))
            .filter(|f| {
                let module_name = f.module.as_deref().unwrap_or("vmlinux");
                module_glob.as_ref().is_none_or(|m| m.matches(module_name))
            })
            .cloned()
            .collect();
        found.sort_by(|a, b| (&a.name, &a.module).cmp(&(&b.name, &b.module)));
        found.dedup_by(|a, b| a.name == b.name && a.module == b.module);
        Ok(found)
    }

    /// Every function name, for suggestions.
    pub fn names(&self) -> Vec<String> {
        self.functions.iter().map(|f| f.name.clone()).collect()
    }

    /// Whether a module of this name has functions here.
    pub fn has_module(&self, module: &str) -> bool {
        module == "vmlinux"
            || self
                .functions
                .iter()
                .any(|f| f.module.as_deref() == Some(module))
    }
}

/// `No such file or directory`, without the `(os error 2)` suffix.
fn reason(error: &io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The text symbols of `/proc/kallsyms`, and the size of every symbol:
/// the distance to the next higher address (0 when addresses are hidden).
struct Symbols {
    functions: Vec<KernelFunction>,
    sizes: HashMap<(String, Option<String>), u64>,
}

/// Parses `ADDRESS TYPE NAME [MODULE]` lines.
fn parse_kallsyms(text: &str) -> Symbols {
    let mut entries: Vec<(u64, bool, &str, Option<&str>)> = text
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let address = u64::from_str_radix(words.next()?, 16).ok()?;
            let kind = words.next()?;
            let name = words.next()?;
            let module = words
                .next()
                .map(|m| m.trim_matches(|c| c == '[' || c == ']'));
            let text = matches!(kind, "t" | "T" | "W" | "w");
            Some((address, text, name, module))
        })
        .collect();
    entries.sort_by_key(|e| e.0);
    let mut sizes = HashMap::new();
    let mut functions = Vec::new();
    for (index, &(address, text, name, module)) in entries.iter().enumerate() {
        // BPF programs and their trampolines are not kernel functions;
        // `__pfx_`/`__cfi_` symbols are the padding before each function.
        let skipped =
            module == Some("bpf") || name.starts_with("__pfx_") || name.starts_with("__cfi_");
        if !text || skipped {
            continue;
        }
        let next = entries[index + 1..]
            .iter()
            .map(|e| e.0)
            .find(|&a| a > address);
        let size = match (address, next) {
            (0, _) | (_, None) => 0,
            (_, Some(next)) => next - address,
        };
        let key = (name.to_string(), module.map(str::to_string));
        sizes.entry(key.clone()).or_insert(size);
        functions.push(KernelFunction {
            name: key.0,
            module: key.1,
            size,
        });
    }
    Symbols { functions, sizes }
}

/// `NAME` or `NAME [MODULE]` lines.
fn parse_filter_functions(text: &str) -> Vec<KernelFunction> {
    text.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next()?.to_string();
            let module = words
                .next()
                .map(|m| m.trim_matches(|c| c == '[' || c == ']').to_string());
            Some(KernelFunction {
                name,
                module,
                size: 0,
            })
        })
        .collect()
}

fn with_sizes(mut functions: Vec<KernelFunction>, symbols: &Symbols) -> Vec<KernelFunction> {
    for function in &mut functions {
        let key = (function.name.clone(), function.module.clone());
        function.size = symbols.sizes.get(&key).copied().unwrap_or(0);
    }
    functions
}

#[cfg(test)]
mod tests {
    use super::*;

    const KALLSYMS_TEXT: &str = "\
ffffffff81000010 t __pfx_vfs_read
ffffffff81000020 T vfs_read
ffffffff81000100 T vfs_readv
ffffffff81000180 D some_data
ffffffff81000200 t nft_helper\t[nf_tables]
ffffffffa0000000 t bpf_prog_1234_x\t[bpf]
";

    /// Text symbols become functions sized to the next symbol; padding,
    /// data and BPF programs are left out.
    #[test]
    fn parses_kallsyms() {
        let symbols = parse_kallsyms(KALLSYMS_TEXT);
        let names: Vec<(&str, Option<&str>, u64)> = (symbols.functions.iter())
            .map(|f| (f.name.as_str(), f.module.as_deref(), f.size))
            .collect();
        assert_eq!(
            names,
            [
                ("vfs_read", None, 0xe0),
                ("vfs_readv", None, 0x80),
                ("nft_helper", Some("nf_tables"), 0x1eff_fe00)
            ]
        );
    }

    /// Globs select by name and module; `vmlinux` is the kernel itself.
    #[test]
    fn matches_names_and_modules() {
        let symbols = parse_kallsyms(KALLSYMS_TEXT);
        let list = KernelFunctions::of(symbols.functions);
        let names = |module, pattern| -> Vec<String> {
            let found = list.matching(module, pattern).expect("valid glob");
            found.into_iter().map(|f| f.name).collect()
        };
        assert_eq!(names(None, "vfs_*"), ["vfs_read", "vfs_readv"]);
        assert_eq!(names(Some("vmlinux"), "*"), ["vfs_read", "vfs_readv"]);
        assert_eq!(names(Some("nf_*"), "*"), ["nft_helper"]);
        assert!(list.has_module("nf_tables") && !list.has_module("syscalls"));
        assert!(list.matching(None, "[").is_err());
    }

    /// Traceable functions take their sizes from kallsyms.
    #[test]
    fn filter_functions_take_sizes() {
        let symbols = parse_kallsyms(KALLSYMS_TEXT);
        let functions = with_sizes(
            parse_filter_functions("vfs_read\nnft_helper [nf_tables]\n"),
            &symbols,
        );
        assert_eq!(functions[0].size, 0xe0);
        assert_eq!(functions[1].module.as_deref(), Some("nf_tables"));
    }

    /// On this machine tracefs refuses the traceable list, so the list
    /// comes from kallsyms and says so; `vfs_read` is in it.
    #[test]
    fn loads_this_kernel() {
        let root = crate::runtime::targets::tracefs::tracefs_root().ok();
        let list = KernelFunctions::load(root.as_deref()).expect("kallsyms is readable");
        let vfs_read = list.matching(None, "vfs_read").expect("glob");
        assert_eq!(vfs_read.len(), 1, "{vfs_read:?}");
        assert!(vfs_read[0].size > 0, "root sees kallsyms addresses");
        if let Some(note) = &list.note {
            assert!(note.contains("/proc/kallsyms"), "{note}");
        }
    }
}
