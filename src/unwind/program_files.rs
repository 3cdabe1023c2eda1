//! The files a program maps as it starts: the program, its ELF interpreter
//! (`PT_INTERP`, the dynamic loader) and the libraries it names
//! (`DT_NEEDED`), found as the loader finds them (`DT_RUNPATH`/`DT_RPATH`
//! with `$ORIGIN`, then `LD_LIBRARY_PATH`, `/etc/ld.so.cache` and the
//! standard directories). Their unwind tables can then be built before the
//! program runs (`docs/unwinding.md`, "When tables load"). Input: a path.
//! Output: the paths found; a name not found is left out (its table loads
//! when the process maps it).

use std::path::{Path, PathBuf};

use object::elf::{DT_NEEDED, DT_RPATH, DT_RUNPATH};
use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Endianness, ReadRef};

use crate::runtime::targets::library_search::resolve_binary;

/// `program`, its interpreter and the libraries it needs (direct ones
/// only: the C library's own needs are the interpreter). Empty when the
/// program cannot be read as a 64-bit ELF file.
pub fn startup_files(program: &Path) -> Vec<PathBuf> {
    let Ok(map) = crate::unwind::manager::map_file(program) else {
        return Vec::new();
    };
    let Ok(elf) = ElfFile64::<Endianness>::parse(&*map) else {
        return Vec::new();
    };
    let mut files = vec![program.to_path_buf()];
    files.extend(interpreter(&elf).map(PathBuf::from));
    let (needed, search) = dynamic_names(&elf);
    let origin = program.parent().unwrap_or(Path::new("/"));
    let dirs: Vec<PathBuf> = (search.iter())
        .flat_map(|list| list.split(':'))
        .filter(|dir| !dir.is_empty())
        .map(|dir| PathBuf::from(dir.replace("$ORIGIN", &origin.to_string_lossy())))
        .collect();
    for name in needed {
        let in_search = (dirs.iter())
            .map(|dir| dir.join(&name))
            .find(|path| path.is_file());
        files.extend(in_search.or_else(|| resolve_binary(&name, None).ok()));
    }
    files.dedup();
    files
}

/// The `PT_INTERP` path.
fn interpreter<'data, R: ReadRef<'data>>(elf: &ElfFile64<'data, Endianness, R>) -> Option<String> {
    let (endian, data) = (elf.endian(), elf.data());
    (elf.elf_program_headers().iter())
        .find_map(|header| header.interpreter(endian, data).ok().flatten())
        .map(|path| String::from_utf8_lossy(path).into_owned())
}

/// The `DT_NEEDED` names, and the `DT_RUNPATH`/`DT_RPATH` lists.
fn dynamic_names<'data, R: ReadRef<'data>>(
    elf: &ElfFile64<'data, Endianness, R>,
) -> (Vec<String>, Vec<String>) {
    let (mut needed, mut search) = (Vec::new(), Vec::new());
    let Ok(table) = (elf.elf_section_table()).dynamic_table(elf.endian(), elf.data()) else {
        return (needed, search);
    };
    for entry in &table {
        let Ok(text) = table.string(entry) else {
            continue;
        };
        let text = String::from_utf8_lossy(text).into_owned();
        match entry.tag {
            DT_NEEDED => needed.push(text),
            DT_RUNPATH | DT_RPATH => search.push(text),
            _ => {}
        }
    }
    (needed, search)
}

#[cfg(test)]
mod tests {
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
}
