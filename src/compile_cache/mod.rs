//! Cache of compiled tracker programs, between the command line and the
//! loader: input, the trackers' sources and the compile options; output, on
//! a hit, the [`Compiled`] program that compiling them would give, so that a
//! capture with only the built-in trackers neither parses kernel BTF nor
//! compiles (docs/cache.md).
//!
//! The key holds everything compiling reads: the trackers' text, the
//! options, `-p`/`-c`, wprof's build id (code generation and built-in
//! sources), the kernel's build id (its BTF and tracepoints), the size of
//! its BTF and the possible CPUs (per-CPU map sizes). A user script is never
//! cached: it can read any file and any binary.

mod dir;
mod entry;
mod identity;

use std::hash::{Hash, Hasher};
use std::path::PathBuf;

use crate::codegen::program::Compiled;
use crate::driver::Source;
use crate::frontend::options::CompileOptions;
use crate::runtime::bpf::loader::TracepointIds;

pub use dir::{CacheDir, DirError};

/// Set (to anything but `0` or nothing), the cache is neither read nor written.
pub const NO_CACHE_VAR: &str = "WPROF_NO_CACHE";
/// Where the cache lives instead of the default directory.
pub const CACHE_DIR_VAR: &str = "WPROF_CACHE_DIR";

/// What compiling reads besides the sources.
#[derive(Clone, Copy)]
pub struct KeyInputs<'a> {
    pub sources: &'a [Source],
    pub options: &'a CompileOptions,
    pub pid: Option<i32>,
    pub command: Option<&'a str>,
}

/// The cache entry a compilation may be read from and written to.
#[derive(Debug)]
pub struct CompileCache {
    dir: CacheDir,
    key: String,
    name: String,
}

/// Whether the cache is turned off by [`NO_CACHE_VAR`].
pub fn bypassed() -> bool {
    std::env::var_os(NO_CACHE_VAR).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The default directory: `/var/cache/wprof` for root, else
/// `$XDG_CACHE_HOME/wprof` or `~/.cache/wprof`; [`CACHE_DIR_VAR`] overrides.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os(CACHE_DIR_VAR).filter(|d| !d.is_empty()) {
        return Some(dir.into());
    }
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return Some("/var/cache/wprof".into());
    }
    let xdg = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty());
    let base = xdg
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))?;
    Some(base.join("wprof"))
}

impl CompileCache {
    /// The entry for `inputs` in `dir`. `Ok(None)` when this machine gives
    /// no build id to key on; an unusable directory is an error to warn about.
    pub fn open(dir: &std::path::Path, inputs: &KeyInputs<'_>) -> Result<Option<Self>, DirError> {
        let Some(key) = key_text(inputs) else {
            return Ok(None);
        };
        let dir = CacheDir::open(dir)?;
        let mut hasher = std::hash::DefaultHasher::new();
        key.hash(&mut hasher);
        let name = format!("{:016x}.compiled", hasher.finish());
        Ok(Some(CompileCache { dir, key, name }))
    }

    /// The cached program and its tracepoints' BTF ids; `None` on a miss
    /// or an entry that fails its checks.
    pub fn lookup(&self) -> Option<(Compiled, TracepointIds)> {
        let bytes = self.dir.read(&self.name)?;
        entry::decode(&bytes, &self.key).ok()
    }

    /// Writes the entry; a failure only means the next run compiles again.
    pub fn store(&self, compiled: &Compiled, ids: &TracepointIds) {
        if let Ok(bytes) = entry::encode(&self.key, compiled, ids) {
            let _ = self.dir.write(&self.name, &bytes);
        }
    }

    /// The entry's path (for tests and messages).
    pub fn path(&self) -> PathBuf {
        self.dir.path().join(&self.name)
    }
}

/// The key's full text; `None` without the kernel's or wprof's build id.
fn key_text(inputs: &KeyInputs<'_>) -> Option<String> {
    let kernel = identity::kernel_build_id()?;
    let executable = identity::executable_build_id()?;
    let btf_size = std::fs::metadata("/sys/kernel/btf/vmlinux").map_or(0, |m| m.len());
    let cpus = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let mut key = format!(
        "format {}\nwprof {} build {executable}\nkernel {kernel} btf {btf_size} cpus {}\n\
         pid {:?} command {:?}\noptions {:?}\n",
        entry::FORMAT_VERSION,
        env!("CARGO_PKG_VERSION"),
        cpus.trim(),
        inputs.pid,
        inputs.command,
        inputs.options,
    );
    for source in inputs.sources {
        let header = format!(
            "source {} {:?} {}\n",
            source.name,
            source.origin,
            source.text.len()
        );
        key.push_str(&header);
        key.push_str(&source.text);
    }
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::model::RecordOrigin;

    fn source(text: &str) -> Source {
        Source {
            name: "probes/sched.wp".into(),
            text: text.into(),
            origin: RecordOrigin::Tracker,
        }
    }

    /// Inputs without -p or -c.
    fn plain<'a>(sources: &'a [Source], options: &'a CompileOptions) -> KeyInputs<'a> {
        KeyInputs {
            sources,
            options,
            pid: None,
            command: None,
        }
    }

    /// Sources, options, -p and -c each change the key.
    #[test]
    fn key_follows_every_input() {
        let options = CompileOptions::default();
        let sources = [source("tp_btf:sched_switch {}")];
        let base = plain(&sources, &options);
        let key = |inputs: &KeyInputs<'_>| key_text(inputs).expect("build ids");
        let other_sources = [source("tp_btf:sched_waking {}")];
        let mut stacks = options.clone();
        stacks.stacks.insert("offcpu".into());
        let variants = [
            KeyInputs {
                sources: &other_sources,
                ..base
            },
            KeyInputs {
                options: &stacks,
                ..base
            },
            KeyInputs {
                pid: Some(1),
                ..base
            },
            KeyInputs {
                command: Some("ls"),
                ..base
            },
        ];
        for variant in &variants {
            assert_ne!(key(variant), key(&base));
        }
        assert_eq!(key(&base), key(&base));
    }

    /// A store then a lookup in a fresh directory gives the program back;
    /// another key misses.
    #[test]
    fn stores_and_finds_by_key() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let options = CompileOptions::default();
        let sources = [source("a")];
        let inputs = plain(&sources, &options);
        let path = scratch.path().join("cache");
        let cache = CompileCache::open(&path, &inputs)
            .expect("dir")
            .expect("build ids");
        assert!(cache.lookup().is_none());
        let compiled = Compiled {
            texts: vec!["x".into()],
            ..Default::default()
        };
        cache.store(&compiled, &TracepointIds::new());
        assert_eq!(
            cache.lookup().map(|c| c.0.texts),
            Some(vec!["x".to_string()])
        );
        let other = [source("b")];
        let missing = CompileCache::open(
            &path,
            &KeyInputs {
                sources: &other,
                ..inputs
            },
        )
        .expect("dir")
        .expect("build ids");
        assert!(missing.lookup().is_none());
    }
}
