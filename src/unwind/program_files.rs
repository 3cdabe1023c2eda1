//! The files a program maps as it starts: the program, its ELF interpreter
//! (`PT_INTERP`, the dynamic loader) and every library the loader loads
//! for it before its first instruction — the `DT_NEEDED` names of the
//! program and, recursively, of each library, found as glibc's loader finds
//! them (`unwind::loader_search`). Their unwind tables can then be built
//! before the program runs (`docs/unwinding.md`, "When tables load").
//! Input: a path. Output: the paths found; a name not found is left out (its
//! table loads when the process maps it).

use std::collections::{HashSet, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use object::elf::{DF_1_NODEFLIB, DT_FLAGS_1, DT_NEEDED, DT_RPATH, DT_RUNPATH, DT_SONAME};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader};
use object::{Endianness, ReadRef};

use super::loader_search::{LoaderSearch, SearchPath};

/// Most files one program's start-up brings (the loader has no bound; a
/// process maps at most 256 executable files the unwinder covers).
const MOST_FILES: usize = 256;

/// `program`, its interpreter and the libraries the loader loads for it,
/// the program first, then the interpreter, then the libraries in the
/// loader's (breadth-first) order. Empty when the program cannot be read
/// as a 64-bit ELF file.
pub fn startup_files(program: &Path) -> Vec<PathBuf> {
    let Some(root) = LoadedObject::read(program, None) else {
        return Vec::new();
    };
    let mut closure = Closure::new(root);
    closure.load_interpreter();
    closure.load_needed();
    closure.objects.into_iter().map(|o| o.path).collect()
}

/// What the loader reads of one object.
struct LoadedObject {
    path: PathBuf,
    /// Device and inode: one file is loaded once, whatever its path.
    file: (u64, u64),
    machine: object::elf::Machine,
    interpreter: Option<String>,
    soname: Option<String>,
    needed: Vec<String>,
    /// `DT_RPATH` (ignored when the object has a `DT_RUNPATH`) and
    /// `DT_RUNPATH`, their `$ORIGIN` expanded.
    rpath: SearchPath,
    has_runpath: bool,
    runpath: SearchPath,
    /// `DF_1_NODEFLIB`: its libraries are not looked up in the cache nor
    /// the standard directories.
    no_default_dirs: bool,
    /// The object whose `DT_NEEDED` brought it (index in the closure).
    loaded_by: Option<usize>,
}

impl LoadedObject {
    /// Reads `path` as a 64-bit ELF object; `None` when it is not one.
    fn read(path: &Path, loaded_by: Option<usize>) -> Option<LoadedObject> {
        let meta = std::fs::metadata(path).ok()?;
        let map = crate::unwind::manager::map_file(path).ok()?;
        let elf = ElfFile64::<Endianness>::parse(&*map).ok()?;
        let dynamic = DynamicNames::of(&elf);
        // `$ORIGIN` is the directory the object was found in (the
        // program's after its symbolic links, as the loader resolves
        // `/proc/self/exe`).
        let origin = match loaded_by {
            None => std::fs::canonicalize(path).ok()?.parent()?.to_path_buf(),
            Some(_) => path.parent()?.to_path_buf(),
        };
        let has_runpath = !dynamic.runpath.is_empty();
        Some(LoadedObject {
            path: path.to_path_buf(),
            file: (meta.dev(), meta.ino()),
            machine: elf.elf_header().e_machine(elf.endian()),
            interpreter: interpreter(&elf),
            soname: dynamic.soname,
            needed: dynamic.needed,
            rpath: match has_runpath {
                true => SearchPath::default(),
                false => SearchPath::expand(&dynamic.rpath, &origin),
            },
            has_runpath,
            runpath: SearchPath::expand(&dynamic.runpath, &origin),
            no_default_dirs: dynamic.flags_1 & DF_1_NODEFLIB.0 != 0,
            loaded_by,
        })
    }
}

/// The objects loaded so far, as the loader keeps them.
struct Closure {
    objects: Vec<LoadedObject>,
    /// Names a `DT_NEEDED` entry matches without a search: those already
    /// looked up and the objects' `DT_SONAME`s.
    names: HashSet<String>,
    files: HashSet<(u64, u64)>,
    search: LoaderSearch,
}

impl Closure {
    fn new(program: LoadedObject) -> Closure {
        let mut closure = Closure {
            objects: Vec::new(),
            names: HashSet::new(),
            files: HashSet::new(),
            search: LoaderSearch::from_environment(),
        };
        closure.add(program);
        closure
    }

    /// The program's `PT_INTERP`: mapped by the kernel, matched by its
    /// `DT_SONAME` when a library names it.
    fn load_interpreter(&mut self) {
        let program = &self.objects[0];
        let Some(path) = program.interpreter.as_deref().map(PathBuf::from) else {
            return;
        };
        let machine = program.machine;
        if let Some(interpreter) = LoadedObject::read(&path, Some(0))
            && interpreter.machine == machine
        {
            self.add(interpreter);
        }
    }

    /// Each object's `DT_NEEDED` names in turn, breadth first: the order in
    /// which the loader searches them, so each name is found from the
    /// search path of the first object that needs it.
    fn load_needed(&mut self) {
        let mut queue: VecDeque<usize> = (0..self.objects.len()).collect();
        while let Some(index) = queue.pop_front() {
            for name in self.objects[index].needed.clone() {
                if self.objects.len() >= MOST_FILES || !self.names.insert(name.clone()) {
                    continue;
                }
                let Some(object) = self.find(&name, index) else {
                    continue;
                };
                if self.files.contains(&object.file) {
                    continue;
                }
                queue.push_back(self.objects.len());
                self.add(object);
            }
        }
    }

    fn add(&mut self, object: LoadedObject) {
        self.names.extend(object.soname.clone());
        self.names
            .insert(object.path.to_string_lossy().into_owned());
        self.files.insert(object.file);
        self.objects.push(object);
    }

    /// The library `name` needed by object `index`, as the loader finds
    /// it: a name with `/` is a path; else, unless the object has a
    /// `DT_RUNPATH`, the `DT_RPATH`s of the object and of the chain of
    /// objects that loaded it; `LD_LIBRARY_PATH`; the object's
    /// `DT_RUNPATH`; `/etc/ld.so.cache`; the standard directories. A file
    /// for another machine or class is passed over.
    fn find(&self, name: &str, index: usize) -> Option<LoadedObject> {
        let machine = self.objects[0].machine;
        let fits = |path: &Path| {
            LoadedObject::read(path, Some(index)).filter(|object| object.machine == machine)
        };
        if name.contains('/') {
            return fits(Path::new(name));
        }
        let requester = &self.objects[index];
        let mut dirs: Vec<&SearchPath> = Vec::new();
        if !requester.has_runpath {
            let mut at = Some(index);
            while let Some(object) = at.map(|i| &self.objects[i]) {
                dirs.push(&object.rpath);
                at = object.loaded_by;
            }
        }
        dirs.push(self.search.library_path());
        dirs.push(&requester.runpath);
        let in_dirs = (dirs.iter().flat_map(|list| list.dirs()))
            .map(|dir| dir.join(name))
            .find_map(|path| fits(&path));
        if in_dirs.is_some() || requester.no_default_dirs {
            return in_dirs;
        }
        (self.search.cached(name).into_iter())
            .chain(self.search.default_dirs().map(|dir| dir.join(name)))
            .find_map(|path| fits(&path))
    }
}

/// The `PT_INTERP` path.
fn interpreter<'data, R: ReadRef<'data>>(elf: &ElfFile64<'data, Endianness, R>) -> Option<String> {
    let (endian, data) = (elf.endian(), elf.data());
    (elf.elf_program_headers().iter())
        .find_map(|header| header.interpreter(endian, data).ok().flatten())
        .map(|path| String::from_utf8_lossy(path).into_owned())
}

/// What an object's dynamic section says about loading.
#[derive(Default)]
struct DynamicNames {
    soname: Option<String>,
    needed: Vec<String>,
    rpath: Vec<String>,
    runpath: Vec<String>,
    flags_1: u64,
}

impl DynamicNames {
    fn of<'data, R: ReadRef<'data>>(elf: &ElfFile64<'data, Endianness, R>) -> DynamicNames {
        let mut names = DynamicNames::default();
        let Ok(table) = (elf.elf_section_table()).dynamic_table(elf.endian(), elf.data()) else {
            return names;
        };
        for entry in &table {
            if entry.tag == DT_FLAGS_1 {
                names.flags_1 = entry.val;
                continue;
            }
            let Ok(text) = table.string(entry) else {
                continue;
            };
            let text = String::from_utf8_lossy(text).into_owned();
            match entry.tag {
                DT_NEEDED => names.needed.push(text),
                DT_SONAME => names.soname = Some(text),
                DT_RPATH => names.rpath.push(text),
                DT_RUNPATH => names.runpath.push(text),
                _ => {}
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// `/bin/sh` (dynamically linked on Debian) brings its loader and the C
    /// library, each an existing file, the program first.
    #[test]
    fn finds_interpreter_and_needed_libraries() {
        let files = startup_files(Path::new("/bin/sh"));
        assert_eq!(
            files.first().map(PathBuf::as_path),
            Some(Path::new("/bin/sh"))
        );
        let names: Vec<String> = (files.iter())
            .filter_map(|f| f.file_name())
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().any(|n| n.starts_with("ld-linux")), "{names:?}");
        assert!(names.iter().any(|n| n.starts_with("libc.so")), "{names:?}");
        assert!(files.iter().all(|f| f.is_file()), "{files:?}");
    }

    /// A file that is not ELF has no start-up files.
    #[test]
    fn not_elf_has_none() {
        assert!(startup_files(Path::new("/proc/self/status")).is_empty());
        assert!(startup_files(Path::new("/no/such/program")).is_empty());
    }

    /// The files `ldd` lists for a program (the loader itself, run in its
    /// list mode), as device and inode: the files, whatever the path.
    fn ldd_files(program: &Path) -> Option<HashSet<(u64, u64)>> {
        let out = Command::new("ldd").arg(program).output().ok()?;
        if !out.status.success() {
            return None; // Not a dynamic executable.
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let paths = text.lines().filter_map(|line| {
            // `name => /path (0x…)`, or `/path (0x…)` for the loader.
            let path = line.split_once("=> ").map_or(line, |(_, p)| p).trim();
            let path = path.split(" (").next()?;
            path.starts_with('/').then(|| PathBuf::from(path))
        });
        let files = paths.map(|p| {
            let meta = std::fs::metadata(&p).expect("ldd lists existing files");
            (meta.dev(), meta.ino())
        });
        Some(files.chain(file_id(program)).collect())
    }

    fn file_id(path: &Path) -> Option<(u64, u64)> {
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }

    /// For programs of this machine with indirect libraries, the same
    /// files as `ldd` (the loader): `perf` (28 files), `python3`, `ssh`,
    /// `gdb`, `curl`, `bpftrace`, `git`, whichever are installed.
    #[test]
    fn matches_ldd_on_installed_programs() {
        if Command::new("ldd").arg("--version").output().is_err() {
            eprintln!("SKIPPED: no ldd to compare with");
            return;
        }
        let programs = ["perf", "python3", "ssh", "gdb", "curl", "bpftrace", "git"];
        let mut compared = 0;
        for name in programs {
            let program = Path::new("/usr/bin").join(name);
            let Some(expected) = ldd_files(&program) else {
                continue;
            };
            let files = startup_files(&program);
            let found: HashSet<(u64, u64)> = files.iter().filter_map(|p| file_id(p)).collect();
            assert_eq!(found.len(), files.len(), "{files:?}: each file once");
            let missing: Vec<_> = expected.difference(&found).collect();
            let extra: Vec<_> = found.difference(&expected).collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{}: missing {missing:?}, extra {extra:?} (found {files:?})",
                program.display()
            );
            compared += 1;
        }
        assert!(compared > 0, "none of {programs:?} is installed");
    }

    /// `DT_RUNPATH` with `$ORIGIN`, `DT_RPATH` inherited by the libraries a
    /// library loads, and a `DT_RUNPATH` that is not: a program built here
    /// whose libraries live in directories only those name, compared with
    /// `ldd`.
    #[test]
    fn follows_runpath_and_inherited_rpath() {
        let Some(built) = build_rpath_chain() else {
            eprintln!("SKIPPED: no C compiler");
            return;
        };
        let files = startup_files(&built.rpath_program);
        let ids: HashSet<_> = files.iter().filter_map(|p| file_id(p)).collect();
        assert_eq!(Some(ids), ldd_files(&built.rpath_program), "{files:?}");
        for library in ["libmid.so", "libleaf.so"] {
            assert!(
                files.iter().any(|f| f.ends_with(library)),
                "{library}: {files:?}"
            );
        }
        // Through a `DT_RUNPATH` (not inherited), the leaf is not found.
        let files = startup_files(&built.runpath_program);
        assert!(files.iter().any(|f| f.ends_with("libmid.so")), "{files:?}");
        assert!(
            !files.iter().any(|f| f.ends_with("libleaf.so")),
            "{files:?}"
        );
    }

    struct RpathChain {
        _dir: tempfile::TempDir,
        rpath_program: PathBuf,
        runpath_program: PathBuf,
    }

    /// `prog` → `mid/libmid.so` → `leaf/libleaf.so`: the program names
    /// both directories (`$ORIGIN/mid:$ORIGIN/leaf`), `libmid` none, so
    /// `libleaf` is found through the program's `DT_RPATH` (inherited) but
    /// not its `DT_RUNPATH`.
    fn build_rpath_chain() -> Option<RpathChain> {
        let dir = tempfile::tempdir().ok()?;
        let at = |p: &str| dir.path().join(p);
        std::fs::create_dir_all(at("mid")).ok()?;
        std::fs::create_dir_all(at("leaf")).ok()?;
        std::fs::write(at("leaf.c"), "int leaf(void) { return 1; }\n").ok()?;
        std::fs::write(
            at("mid.c"),
            "int leaf(void);\nint mid(void) { return leaf(); }\n",
        )
        .ok()?;
        std::fs::write(
            at("prog.c"),
            "int mid(void);\nint main(void) { return mid(); }\n",
        )
        .ok()?;
        let cc = |args: &[&str]| {
            let status = Command::new("cc")
                .current_dir(dir.path())
                .args(args)
                .status();
            status.is_ok_and(|s| s.success())
        };
        let built = cc(&["-shared", "-fPIC", "-o", "leaf/libleaf.so", "leaf.c"])
            && cc(&[
                "-shared",
                "-fPIC",
                "-o",
                "mid/libmid.so",
                "mid.c",
                "-Lleaf",
                "-lleaf",
            ]);
        let program = |name: &str, tags: &str| {
            cc(&[
                "-o",
                name,
                "prog.c",
                "-Lmid",
                "-lmid",
                "-Wl,-rpath-link,leaf",
                &format!("-Wl,{tags},-rpath,$ORIGIN/mid:$ORIGIN/leaf"),
            ])
        };
        let programs =
            program("rpath", "--disable-new-dtags") && program("runpath", "--enable-new-dtags");
        let (rpath_program, runpath_program) = (at("rpath"), at("runpath"));
        (built && programs).then(|| RpathChain {
            rpath_program,
            runpath_program,
            _dir: dir,
        })
    }
}
