//! User addresses of printed values (`usym()`, `ustack`) → frames. Each
//! process's mappings are read when it is first seen and kept (through
//! `symbols::StackNormalizer`), so addresses of processes that exited before
//! they are printed still name their functions; the files are symbolized by
//! file offset with blazesym, PLT stubs as `func@plt` (as perf names them,
//! not as the symbol before the PLT, `_init`).

use std::collections::HashMap;
use std::path::Path;

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use crate::output::text::Frame;
use crate::symbols::{NormalizedAddr, PltStubs, StackNormalizer};

/// User symbols, remembered per process and per file.
pub struct UserSymbols {
    /// The process of each thread seen (stacks name their thread).
    threads: HashMap<u32, u32>,
    normalizer: StackNormalizer,
    symbolizer: Symbolizer,
    /// Symbols by file and offset.
    known: HashMap<(String, u64), Option<(String, u64)>>,
    /// The PLT stubs of each file looked up.
    stubs: HashMap<String, PltStubs>,
    /// Whether addresses are resolved to symbols at all.
    resolve: bool,
}

impl Default for UserSymbols {
    fn default() -> Self {
        UserSymbols {
            threads: HashMap::new(),
            normalizer: StackNormalizer::new(),
            // bpftrace prints function names only, C++ names demangled
            // unless BPFTRACE_NO_CPP_DEMANGLE is set (`symbols::demangle`:
            // blazesym's own demangling reads C names like `c` as types).
            symbolizer: Symbolizer::builder()
                .enable_auto_reload(false)
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .enable_demangling(false)
                .build(),
            known: HashMap::new(),
            stubs: HashMap::new(),
            // BPFTRACE_NO_USER_SYMBOLS=1 prints addresses, as bpftrace does.
            resolve: !crate::bpftrace_env::user_symbols_off(),
        }
    }
}

impl UserSymbols {
    /// Keeps the mappings of `tgid`, whose thread `tid` was seen.
    pub fn remember(&mut self, tid: u32, tgid: u32) {
        if self.threads.insert(tid, tgid).is_none() {
            // Normalizing any address reads and caches the mappings.
            self.normalizer.normalize_user(tgid, &[0]);
        }
    }

    /// The frames of `addrs` in thread or process `pid`.
    pub fn frames(&mut self, pid: u32, addrs: &[u64]) -> Vec<Frame> {
        let tgid = match self.threads.get(&pid) {
            Some(&tgid) => tgid,
            None => process_of(pid).unwrap_or(pid),
        };
        let normalized = self.normalizer.normalize_user(tgid, addrs);
        addrs
            .iter()
            .zip(normalized)
            .map(|(&addr, normalized)| match normalized {
                NormalizedAddr::Normalized {
                    path, file_offset, ..
                } => Frame {
                    addr,
                    symbol: match self.resolve {
                        true => self.symbol(&path, file_offset),
                        false => None,
                    },
                    module: Some(path),
                },
                NormalizedAddr::Unknown { .. } => Frame {
                    addr,
                    symbol: None,
                    module: None,
                },
            })
            .collect()
    }

    fn symbol(&mut self, path: &str, offset: u64) -> Option<(String, u64)> {
        let key = (path.to_string(), offset);
        if let Some(known) = self.known.get(&key) {
            return known.clone();
        }
        // The file's own symbols first: where several names share an address,
        // they hold the exported one bpftrace prints (`clock_nanosleep`, not
        // the debug file's `__GI___clock_nanosleep`); debug files fill in the rest.
        let own = Elf {
            debug_syms: false,
            ..Elf::new(path)
        };
        let stubs = (self.stubs.entry(path.to_string()))
            .or_insert_with(|| PltStubs::of_file(Path::new(path)));
        let stub = stubs
            .name_at(offset)
            .map(|(name, at)| (name.to_owned(), at));
        let found = stub
            .or_else(|| self.lookup(&Source::Elf(own), offset))
            .or_else(|| self.lookup(&Source::Elf(Elf::new(path)), offset));
        self.known.insert(key, found.clone());
        found
    }

    fn lookup(&self, source: &Source, offset: u64) -> Option<(String, u64)> {
        match self
            .symbolizer
            .symbolize_single(source, Input::FileOffset(offset))
            .ok()?
        {
            Symbolized::Sym(sym) => Some((printed_name(&sym.name), sym.offset as u64)),
            Symbolized::Unknown(_) => None,
        }
    }
}

/// A function's name as bpftrace prints it: mangled C++ (and Rust) names
/// demangled unless `BPFTRACE_NO_CPP_DEMANGLE` is set.
fn printed_name(name: &str) -> String {
    match crate::symbols::cpp_demangling() {
        true => crate::symbols::demangle(name),
        false => name.to_owned(),
    }
}

/// The process (tgid) of thread `tid`, while it lives.
fn process_of(tid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("Tgid:"))?;
    line.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own functions resolve from the running process, and keep
    /// resolving from the cache (the mappings read when it was first seen).
    #[test]
    fn resolves_own_functions() {
        let addr = process_of as fn(u32) -> Option<u32> as usize as u64;
        let me = std::process::id();
        let mut users = UserSymbols::default();
        users.remember(me, me);
        let frames = users.frames(me, &[addr, 8]);
        let (name, offset) = frames[0].symbol.clone().expect("own function symbolized");
        assert!(name.contains("process_of"), "{name}");
        assert_eq!(offset, 0);
        assert!(
            frames[0]
                .module
                .as_deref()
                .is_some_and(|m| m.starts_with('/'))
        );
        assert_eq!(frames[1].symbol, None);
    }

    /// An address in a PLT stub of this test binary is `func@plt` with its
    /// offset into the stub, not the symbol before the PLT.
    #[test]
    fn plt_stub_is_named_by_its_function() {
        let exe = std::fs::read_link("/proc/self/exe").expect("the test binary");
        let path = exe.to_str().expect("a UTF-8 path");
        let stubs = PltStubs::of_file(&exe);
        let image = std::fs::read(&exe).expect("read the test binary");
        let file = object::File::parse(&*image).expect("ELF");
        let plt = object::Object::section_by_name(&file, ".plt").expect("a .plt section");
        let (start, size) = object::ObjectSection::file_range(&plt).expect("in the file");
        let offset = (start..start + size)
            .find(|&at| stubs.name_at(at).is_some_and(|(_, into)| into == 4))
            .expect("a named stub");
        let mut users = UserSymbols::default();
        let (name, into) = users.symbol(path, offset).expect("symbolized");
        assert!(name.ends_with("@plt"), "{name}");
        assert_eq!(into, 4);
    }

    /// A thread's process is read from `/proc`.
    #[test]
    fn finds_the_process_of_a_thread() {
        let me = std::process::id();
        let tid = std::thread::spawn(|| unsafe { libc::gettid() } as u32)
            .join()
            .expect("thread ran");
        assert_eq!(process_of(me), Some(me));
        // The thread is gone once joined: no answer rather than a wrong one.
        assert!(process_of(tid).is_none_or(|p| p == me));
    }
}
