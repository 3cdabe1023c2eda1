//! The vDSO: the kernel's small shared object mapped into every process
//! (`[vdso]` in `/proc/PID/maps`, `clock_gettime` and friends). It has no
//! file, but it is the same image in every 64-bit process of this kernel,
//! so wprof reads its own copy: the table manager builds its unwind table
//! from it, and the symbolizer names its frames (`__vdso_clock_gettime`).
//! A frame in the vDSO is stored as a user frame of the module [`MODULE`]
//! at its offset in the image.

use std::sync::OnceLock;

use object::{Object, ObjectSegment, ObjectSymbol};

/// The module name of vDSO frames, as `/proc/PID/maps` names the mapping.
pub const MODULE: &str = "[vdso]";

/// The vDSO image of this kernel, read once from this process's own
/// mapping; `None` when the process has none (or it cannot be found).
pub fn image() -> Option<&'static [u8]> {
    static IMAGE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    IMAGE.get_or_init(read_own_image).as_deref()
}

/// The image's GNU build id.
pub fn build_id() -> Option<Vec<u8>> {
    let file = object::File::parse(image()?).ok()?;
    file.build_id().ok().flatten().map(<[u8]>::to_vec)
}

fn read_own_image() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|line| line.ends_with(MODULE))?;
    let (start, end) = line.split_whitespace().next()?.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    // SAFETY: getauxval has no preconditions.
    let base = unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) };
    if base != start || end <= start {
        return None;
    }
    // SAFETY: the vDSO is mapped readable at [start, end) for the life of
    // the process (checked against /proc/self/maps above) and never written.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, (end - start) as usize) };
    Some(bytes.to_vec())
}

/// The function at each offset of the image and the offset's distance from
/// its start, `None` where no symbol covers it. Of aliases at one address
/// (`clock_gettime`, `__vdso_clock_gettime`), the `__vdso_` name wins.
pub fn symbolize(offsets: &[u64]) -> Vec<Option<(String, u64)>> {
    let Some(symbols) = image().and_then(|image| symbols(image).ok()) else {
        return vec![None; offsets.len()];
    };
    let Some(file) = image().and_then(|image| object::File::parse(image).ok()) else {
        return vec![None; offsets.len()];
    };
    offsets
        .iter()
        .map(|&offset| {
            let address = address_of(&file, offset)?;
            let at = symbols
                .partition_point(|s| s.address <= address)
                .checked_sub(1)?;
            let symbol = &symbols[at];
            (address < symbol.address + symbol.size.max(1))
                .then(|| (symbol.name.clone(), address - symbol.address))
        })
        .collect()
}

/// A function of the image.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Function {
    name: String,
    address: u64,
    size: u64,
}

/// The image's functions by address, one name per address.
fn symbols(image: &[u8]) -> Result<Vec<Function>, object::Error> {
    let file = object::File::parse(image)?;
    let mut functions: Vec<Function> = file
        .dynamic_symbols()
        .chain(file.symbols())
        .filter(|s| s.kind() == object::SymbolKind::Text && s.address() != 0)
        .filter_map(|s| {
            Some(Function {
                name: s.name().ok()?.to_string(),
                address: s.address(),
                size: s.size(),
            })
        })
        .collect();
    functions.sort_by(|a, b| {
        let prefer = |f: &Function| !f.name.starts_with("__vdso_");
        (a.address, prefer(a)).cmp(&(b.address, prefer(b)))
    });
    functions.dedup_by_key(|f| f.address);
    Ok(functions)
}

/// The virtual address of a file offset of the image.
fn address_of(file: &object::File<'_>, offset: u64) -> Option<u64> {
    file.segments().find_map(|segment| {
        let (start, size) = segment.file_range();
        (start..start + size)
            .contains(&offset)
            .then(|| offset - start + segment.address())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process has a vDSO with a build id and `clock_gettime`, named
    /// `__vdso_clock_gettime`, found at offsets inside it.
    #[test]
    fn names_own_vdso_functions() {
        let image = image().expect("x86-64 Linux processes have a vDSO");
        assert_eq!(&image[..4], b"\x7fELF");
        assert!(build_id().is_some_and(|id| !id.is_empty()));
        let functions = symbols(image).expect("an ELF image");
        let clock = functions
            .iter()
            .find(|f| f.name.ends_with("clock_gettime"))
            .expect("clock_gettime");
        assert_eq!(clock.name, "__vdso_clock_gettime");
        let file = object::File::parse(image).expect("ELF");
        let offset = file
            .segments()
            .find_map(|s| {
                let (start, size) = s.file_range();
                let address = s.address();
                (address..address + size)
                    .contains(&clock.address)
                    .then(|| clock.address - address + start)
            })
            .expect("in a segment");
        let found = symbolize(&[offset + 3, u64::MAX]);
        assert_eq!(found[0], Some(("__vdso_clock_gettime".to_string(), 3)));
        assert_eq!(found[1], None);
    }
}
