//! Reads the call frame information of an ELF file (`.eh_frame`, then
//! `.debug_frame` for ranges `.eh_frame` does not cover) with gimli and turns
//! each FDE's rows into [`Rule`]s. Output: one [`FdeRows`] per FDE, unsorted.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, RegisterRule,
    UnwindContext, UnwindSection, UnwindTableRow, X86_64,
};
use object::{Object, ObjectSection};

use super::rules::{Cfa, Rbp, Rule, Unsupported, rbp_units};

type Reader<'a> = EndianSlice<'a, LittleEndian>;

/// The rows of one FDE, covering `[start, end)` (ELF virtual addresses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdeRows {
    pub start: u64,
    pub end: u64,
    /// `(address, rule)`, ascending, the first at `start`.
    pub rows: Vec<(u64, Rule)>,
}

/// What was read, and what had to be skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CfiRead {
    pub fdes: Vec<FdeRows>,
    /// FDEs gimli could not parse or evaluate (skipped).
    pub bad_fdes: usize,
    /// `.debug_frame` FDEs dropped because `.eh_frame` covers their range.
    pub shadowed_fdes: usize,
}

/// Why an ELF file's CFI cannot be read at all.
#[derive(Debug, thiserror::Error)]
pub enum CfiError {
    #[error("not an ELF file: {0}")]
    Elf(#[from] object::Error),
    #[error("{arch:?} is not x86-64: only x86-64 unwind tables are supported")]
    Architecture { arch: object::Architecture },
    #[error("no .eh_frame or .debug_frame section")]
    NoCfi,
    #[error("cannot walk the entries of {section}: {error}")]
    Section {
        section: &'static str,
        error: gimli::Error,
    },
}

/// Reads every FDE of `elf`.
pub fn read_cfi(elf: &[u8]) -> Result<CfiRead, CfiError> {
    let file = object::File::parse(elf)?;
    if file.architecture() != object::Architecture::X86_64 {
        return Err(CfiError::Architecture {
            arch: file.architecture(),
        });
    }
    let eh_frame = section_data(&file, ".eh_frame");
    let debug_frame = section_data(&file, ".debug_frame");
    if eh_frame.is_none() && debug_frame.is_none() {
        return Err(CfiError::NoCfi);
    }
    let bases = base_addresses(&file);
    let mut out = CfiRead::default();
    if let Some(data) = &eh_frame {
        let mut section = EhFrame::new(data, LittleEndian);
        section.set_address_size(8);
        read_section(&section, &bases, ".eh_frame", &mut out)?;
    }
    if let Some(data) = &debug_frame {
        let mut section = DebugFrame::new(data, LittleEndian);
        section.set_address_size(8);
        let mut from_debug = CfiRead::default();
        read_section(&section, &bases, ".debug_frame", &mut from_debug)?;
        out.bad_fdes += from_debug.bad_fdes;
        add_uncovered(&mut out, from_debug.fdes);
    }
    Ok(out)
}

fn section_data<'a>(file: &object::File<'a>, name: &str) -> Option<std::borrow::Cow<'a, [u8]>> {
    let section = file.section_by_name(name)?;
    section.uncompressed_data().ok().filter(|d| !d.is_empty())
}

/// Section addresses that pointer encodings in `.eh_frame` are relative to.
fn base_addresses(file: &object::File<'_>) -> BaseAddresses {
    let address = |name| file.section_by_name(name).map(|s| s.address());
    let mut bases = BaseAddresses::default();
    if let Some(a) = address(".eh_frame") {
        bases = bases.set_eh_frame(a);
    }
    if let Some(a) = address(".eh_frame_hdr") {
        bases = bases.set_eh_frame_hdr(a);
    }
    if let Some(a) = address(".text") {
        bases = bases.set_text(a);
    }
    if let Some(a) = address(".got") {
        bases = bases.set_got(a);
    }
    bases
}

fn read_section<'a, S: UnwindSection<Reader<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    name: &'static str,
    out: &mut CfiRead,
) -> Result<(), CfiError>
where
    Reader<'a>: gimli::Reader<Offset = usize>,
{
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    loop {
        let entry = entries.next().map_err(|error| CfiError::Section {
            section: name,
            error,
        })?;
        let Some(CieOrFde::Fde(partial)) = entry else {
            if entry.is_none() {
                return Ok(());
            }
            continue;
        };
        let fde = match partial.parse(S::cie_from_offset) {
            Ok(fde) => fde,
            Err(_) => {
                out.bad_fdes += 1;
                continue;
            }
        };
        match fde_rows(section, bases, &mut ctx, &fde) {
            Ok(Some(rows)) => out.fdes.push(rows),
            Ok(None) => {}
            Err(_) => out.bad_fdes += 1,
        }
    }
}

/// The rows of one FDE; `None` for an empty range.
fn fde_rows<'a, S: UnwindSection<Reader<'a>>>(
    section: &S,
    bases: &BaseAddresses,
    ctx: &mut UnwindContext<usize>,
    fde: &gimli::FrameDescriptionEntry<Reader<'a>>,
) -> gimli::Result<Option<FdeRows>>
where
    Reader<'a>: gimli::Reader<Offset = usize>,
{
    let (start, end) = (fde.initial_address(), fde.end_address());
    if end <= start {
        return Ok(None);
    }
    let mut table = fde.rows(section, bases, ctx)?;
    let mut rows = Vec::new();
    while let Some(row) = table.next_row()? {
        if row.start_address() < row.end_address() {
            rows.push((row.start_address(), rule_of(section, row)));
        }
    }
    Ok((!rows.is_empty()).then_some(FdeRows { start, end, rows }))
}

/// The BPF-evaluable rule of one row.
fn rule_of<'a, S: UnwindSection<Reader<'a>>>(section: &S, row: &UnwindTableRow<usize>) -> Rule
where
    Reader<'a>: gimli::Reader<Offset = usize>,
{
    match row.register(X86_64::RA) {
        Some(RegisterRule::Undefined) => return Rule::Outermost,
        Some(RegisterRule::Offset(-8)) => {}
        _ => return Rule::Unsupported(Unsupported::ReturnAddress),
    }
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(offset) = u16::try_from(*offset) else {
                return Rule::Unsupported(Unsupported::CfaOffset);
            };
            match *register {
                X86_64::RSP => Cfa::Rsp(offset),
                X86_64::RBP => Cfa::Rbp(offset),
                _ => return Rule::Unsupported(Unsupported::CfaRegister),
            }
        }
        CfaRule::Expression(expr) => match expr.get(section).ok().and_then(plt_threshold) {
            Some(threshold) => Cfa::Plt { threshold },
            None => return Rule::Unsupported(Unsupported::CfaExpression),
        },
    };
    let rbp = match row.register(X86_64::RBP) {
        None | Some(RegisterRule::SameValue) => Rbp::Unchanged,
        Some(RegisterRule::Offset(n)) => {
            match i16::try_from(n).ok().filter(|&n| rbp_units(n).is_some()) {
                Some(n) => Rbp::AtCfa(n),
                None => Rbp::Lost,
            }
        }
        Some(_) => Rbp::Lost,
    };
    Rule::Frame { cfa, rbp }
}

/// The threshold `T` of the PLT expression
/// `DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litT;
/// DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus` (GNU ld's `.plt` CFI).
fn plt_threshold(expr: gimli::Expression<Reader<'_>>) -> Option<u8> {
    const LIT0: u8 = 0x30;
    match expr.0.slice() {
        [
            0x77,
            0x08,
            0x80,
            0x00,
            0x3f,
            0x1a,
            lit,
            0x2a,
            0x33,
            0x24,
            0x22,
        ] if (LIT0..LIT0 + 32).contains(lit) => Some(lit - LIT0),
        _ => None,
    }
}

/// Adds the `.debug_frame` FDEs whose range no `.eh_frame` FDE overlaps.
fn add_uncovered(out: &mut CfiRead, extra: Vec<FdeRows>) {
    let mut covered: Vec<(u64, u64)> = out.fdes.iter().map(|f| (f.start, f.end)).collect();
    covered.sort_unstable();
    for fde in extra {
        let next = covered.partition_point(|&(start, _)| start < fde.end);
        let overlaps = next > 0
            && covered[..next]
                .iter()
                .rev()
                .any(|&(_, end)| end > fde.start);
        if overlaps {
            out.shadowed_fdes += 1;
        } else {
            out.fdes.push(fde);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fde(start: u64, end: u64) -> FdeRows {
        FdeRows {
            start,
            end,
            rows: vec![(start, Rule::NoInfo)],
        }
    }

    /// The PLT expression is recognised with its threshold; others are not.
    #[test]
    fn recognises_plt_expression() {
        const PLT: [u8; 11] = [
            0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
        ];
        let expr = |b: &'static [u8]| gimli::Expression(EndianSlice::new(b, LittleEndian));
        assert_eq!(plt_threshold(expr(&PLT)), Some(11));
        const OTHER: [u8; 11] = [
            0x77, 0x10, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
        ];
        assert_eq!(plt_threshold(expr(&OTHER)), None);
        assert_eq!(plt_threshold(expr(&[0x77, 0x08])), None);
    }

    /// `.debug_frame` FDEs only fill ranges `.eh_frame` leaves uncovered.
    #[test]
    fn debug_frame_fills_gaps_only() {
        let mut out = CfiRead {
            fdes: vec![fde(0x100, 0x200), fde(0x300, 0x400)],
            ..CfiRead::default()
        };
        add_uncovered(
            &mut out,
            vec![fde(0x180, 0x220), fde(0x200, 0x300), fde(0x3ff, 0x500)],
        );
        let ranges: Vec<_> = out.fdes.iter().map(|f| (f.start, f.end)).collect();
        assert_eq!(ranges, [(0x100, 0x200), (0x300, 0x400), (0x200, 0x300)]);
        assert_eq!(out.shadowed_fdes, 2);
    }

    /// A file that is not ELF is a clear error.
    #[test]
    fn rejects_non_elf() {
        let err = read_cfi(b"not an elf file").unwrap_err();
        assert!(err.to_string().starts_with("not an ELF file"), "{err}");
    }
}
