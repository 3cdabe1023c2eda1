//! Symbolization at the end of a capture: [`RawFrame`]s → [`RawSymbol`]s.
//!
//! Frames are grouped by file (kernel frames form one group), each group's
//! lookup addresses are sorted and deduplicated, and each group costs one
//! blazesym call: stacks repeat heavily, so most frames share an address.

use std::collections::BTreeMap;
use std::path::Path;

use blazesym::helper::read_elf_build_id;
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Sym, Symbolized as BlazeSymbolized, Symbolizer};

use super::perf_map::{self, PerfMap};
use super::plt::PltStubs;
use super::{AddrKind, KernelSymbols, RawFrame, RawSymbol, demangle, vdso};

/// What to look up besides function names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolizeOptions {
    /// Source file and line from DWARF, when the binary has it.
    pub code_info: bool,
    /// Inlined calls at each address (needs `code_info`).
    pub inlined: bool,
    /// Demangle Rust and C++ names.
    pub demangle: bool,
}

impl Default for SymbolizeOptions {
    /// Everything on: a capture has a few thousand distinct frames, for which
    /// DWARF costs milliseconds (see the timing test in `tests.rs`).
    fn default() -> Self {
        Self {
            code_info: true,
            inlined: true,
            demangle: true,
        }
    }
}

/// The symbols, in frame order, and what went wrong along the way.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Symbolized {
    /// One per input frame.
    pub symbols: Vec<RawSymbol>,
    /// Counters for the capture summary.
    pub stats: SymbolizeStats,
}

/// Counters: misses are expected (binaries deleted, JIT code) and reported
/// once in the summary, not per frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SymbolizeStats {
    /// Distinct user files read.
    pub files: usize,
    /// Distinct user files gone or unreadable since normalization.
    pub missing_files: usize,
    /// Distinct user files whose build id changed since normalization.
    pub replaced_files: usize,
    /// Whether kernel symbols (`/proc/kallsyms`) could not be read.
    pub kernel_unavailable: bool,
    /// Frames with a function name.
    pub resolved: usize,
    /// Frames without one.
    pub unresolved: usize,
}

/// One frame waiting in a group: its index and where to look it up.
struct Pending {
    index: usize,
    lookup: u64,
    bias: u64,
}

type UserKey<'a> = (&'a str, Option<&'a [u8]>);

/// Symbolizes `frames` (each with its [`AddrKind`]), one symbol per frame,
/// kernel frames through `kernel`.
///
/// Never fails: anything that cannot be resolved gets `function: None` and is
/// counted in [`SymbolizeStats`].
pub fn symbolize(
    frames: &[(RawFrame, AddrKind)],
    options: &SymbolizeOptions,
    kernel_symbols: &KernelSymbols,
) -> Symbolized {
    let mut out = Symbolized {
        symbols: vec![RawSymbol::default(); frames.len()],
        stats: SymbolizeStats::default(),
    };
    let (kernel, users) = group(frames);

    if !kernel.is_empty() {
        let filled = fill_kernel(kernel_symbols, &kernel, &mut out.symbols);
        out.stats.kernel_unavailable = !filled;
    }
    for ((path, build_id), pending) in &users {
        out.stats.files += 1;
        if *path == vdso::MODULE {
            fill_vdso(*build_id, pending, &mut out.symbols);
            continue;
        }
        if perf_map::is_perf_map(path) {
            // JIT code: the frames' file offsets are their addresses.
            let map = PerfMap::read(Path::new(path));
            fill_names(pending, &mut out.symbols, |addr| map.lookup(addr));
            continue;
        }
        match check_file(path, *build_id) {
            FileCheck::Usable => {}
            FileCheck::Missing => {
                out.stats.missing_files += 1;
                continue;
            }
            FileCheck::Replaced => {
                out.stats.replaced_files += 1;
                continue;
            }
        }
        // `Elf::new` consults DWARF and debug links even without code info:
        // Debian-style stripped libraries only have names in their
        // `/usr/lib/debug` files.
        let source = Source::Elf(Elf::new(*path));
        if !fill(
            &file_symbolizer(options),
            &source,
            pending,
            options.demangle,
            &mut out.symbols,
        ) {
            // Readable but not an ELF file blazesym can use.
            out.stats.missing_files += 1;
            continue;
        }
        let stubs = PltStubs::of_file(Path::new(path));
        fill_names(pending, &mut out.symbols, |offset| stubs.name_at(offset));
    }
    let resolved = out.symbols.iter().filter(|s| s.function.is_some()).count();
    out.stats.resolved = resolved;
    out.stats.unresolved = frames.len() - resolved;
    out
}

/// A symbolizer for one file. A symbolizer keeps every file it read
/// mapped, with its parsed DWARF, for its lifetime; each file is looked up
/// once, so one per file frees them as it goes: the peak memory is the
/// largest file's, not the sum of all (a `-S` capture on a machine running
/// debug builds of large Rust programs reached 450 MB of RSS).
fn file_symbolizer(options: &SymbolizeOptions) -> Symbolizer {
    Symbolizer::builder()
        .enable_auto_reload(false)
        .enable_code_info(options.code_info)
        .enable_inlined_fns(options.inlined)
        .enable_demangling(false)
        .build()
}

/// Splits frames into kernel frames and user frames per file.
fn group(frames: &[(RawFrame, AddrKind)]) -> (Vec<Pending>, BTreeMap<UserKey<'_>, Vec<Pending>>) {
    let mut kernel = Vec::new();
    let mut users: BTreeMap<UserKey<'_>, Vec<Pending>> = BTreeMap::new();
    for (index, (frame, kind)) in frames.iter().enumerate() {
        let bias = kind.lookup_bias();
        let pending = |addr: u64| Pending {
            index,
            lookup: addr.saturating_sub(bias),
            bias,
        };
        match frame {
            RawFrame::Kernel { addr } => kernel.push(pending(*addr)),
            RawFrame::User {
                path,
                build_id,
                file_offset,
            } => users
                .entry((path.as_str(), build_id.as_deref()))
                .or_default()
                .push(pending(*file_offset)),
            RawFrame::UnknownUser { .. } => {}
        }
    }
    (kernel, users)
}

enum FileCheck {
    Usable,
    Missing,
    Replaced,
}

/// Whether `path` still holds the file that was normalized.
fn check_file(path: &str, build_id: Option<&[u8]>) -> FileCheck {
    let path = Path::new(path);
    if !path.is_file() {
        return FileCheck::Missing;
    }
    let Some(expected) = build_id else {
        return FileCheck::Usable;
    };
    match read_elf_build_id(&path) {
        Ok(Some(found)) if *found == *expected => FileCheck::Usable,
        Ok(_) => FileCheck::Replaced,
        Err(_) => FileCheck::Missing,
    }
}

/// The distinct lookup addresses of a group, sorted.
fn unique_lookups(pending: &[Pending]) -> Vec<u64> {
    let mut unique: Vec<u64> = pending.iter().map(|p| p.lookup).collect();
    unique.sort_unstable();
    unique.dedup();
    unique
}

/// Looks up the distinct addresses of one file in one call and writes each
/// frame's symbol; `false` when the file could not be read at all.
fn fill(
    symbolizer: &Symbolizer,
    source: &Source<'_>,
    pending: &[Pending],
    demangle: bool,
    symbols: &mut [RawSymbol],
) -> bool {
    let unique = unique_lookups(pending);
    let Ok(results) = symbolizer.symbolize(source, Input::FileOffset(&unique[..])) else {
        return false;
    };
    place(pending, &unique, symbols, |at, bias| match &results[at] {
        BlazeSymbolized::Sym(sym) => Some(convert(sym, bias, demangle)),
        BlazeSymbolized::Unknown(_) => None,
    });
    true
}

/// Names the frames `name_at` knows, with their offset into the name's
/// code: JIT functions of a perf map, PLT stubs (which a symbolizer names
/// after the symbol before the PLT, `_init`).
fn fill_names<'a>(
    pending: &[Pending],
    symbols: &mut [RawSymbol],
    name_at: impl Fn(u64) -> Option<(&'a str, u64)>,
) {
    for p in pending {
        if let Some((name, offset)) = name_at(p.lookup) {
            symbols[p.index] = RawSymbol {
                function: Some(name.to_owned()),
                offset: offset + p.bias,
                ..RawSymbol::default()
            };
        }
    }
}

/// [`fill`] for frames in the vDSO, from this kernel's image when it is
/// the one the frames were normalized against.
fn fill_vdso(build_id: Option<&[u8]>, pending: &[Pending], symbols: &mut [RawSymbol]) {
    if build_id.is_some() && build_id != vdso::build_id().as_deref() {
        return;
    }
    let unique = unique_lookups(pending);
    let results = vdso::symbolize(&unique);
    place(pending, &unique, symbols, |at, bias| {
        let (function, offset) = results[at].clone()?;
        Some(RawSymbol {
            function: Some(function),
            offset: offset + bias,
            ..RawSymbol::default()
        })
    });
}

/// [`fill`] for the kernel frames; `false` when the kernel's symbols could
/// not be read.
fn fill_kernel(kernel: &KernelSymbols, pending: &[Pending], symbols: &mut [RawSymbol]) -> bool {
    let unique = unique_lookups(pending);
    let Ok(results) = kernel.symbolize(&unique) else {
        return false;
    };
    place(pending, &unique, symbols, |at, bias| {
        let symbol = results[at].as_ref()?;
        Some(RawSymbol {
            function: Some(symbol.function.clone()),
            offset: symbol.offset + bias,
            ..RawSymbol::default()
        })
    });
    true
}

/// Writes each pending frame's symbol: `symbol(at, bias)` makes it from the
/// result of `unique[at]`, its lookup address.
fn place(
    pending: &[Pending],
    unique: &[u64],
    symbols: &mut [RawSymbol],
    symbol: impl Fn(usize, u64) -> Option<RawSymbol>,
) {
    for p in pending {
        let at = unique
            .binary_search(&p.lookup)
            .expect("every lookup address is in `unique`");
        if let Some(found) = symbol(at, p.bias) {
            symbols[p.index] = found;
        }
    }
}

fn convert(sym: &Sym<'_>, bias: u64, demangle: bool) -> RawSymbol {
    let name = |name: &str| match demangle {
        true => demangle::demangle(name),
        false => name.to_owned(),
    };
    // The instruction's own location is the innermost inlined call's; without
    // inlining, the function's.
    let code_info = match sym.inlined.last() {
        Some(inlined) => inlined.code_info.as_ref(),
        None => sym.code_info.as_deref(),
    };
    RawSymbol {
        function: Some(name(&sym.name)),
        offset: sym.offset as u64 + bias,
        file: code_info.map(code_file),
        line: code_info.and_then(|info| info.line),
        inlined: sym.inlined.iter().map(|f| name(&f.name)).collect(),
    }
}

fn code_file(info: &CodeInfo<'_>) -> String {
    info.to_path().to_string_lossy().into_owned()
}
