//! The oracle for unwind tables: `readelf --debug-dump=frames-interp`
//! (binutils) parsed into FDEs of rules, looked up like wprof's tables.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use wprof::unwind::rules::{Cfa, Rbp, Rule, Unsupported, rbp_units};
use wprof::unwind::table::UnwindTable;

/// What readelf says about one row, in wprof's terms where they coincide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expected {
    Exactly(Rule),
    /// A DWARF expression CFA: the PLT rule, or unsupported.
    ExpressionCfa {
        rbp: Rbp,
    },
}

/// One FDE: `[start, end)` and its rows.
#[derive(Debug)]
pub struct OracleFde {
    pub start: u64,
    pub end: u64,
    pub rows: Vec<(u64, Expected)>,
}

/// Runs readelf on `path` and parses every FDE of `.eh_frame` and `.debug_frame`.
#[track_caller]
pub fn readelf_fdes(path: &Path) -> Vec<OracleFde> {
    let out = Command::new("readelf")
        .arg("--debug-dump=frames-interp")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run readelf: {e}"));
    // readelf 2.40 exits 1 on libc after printing every frame (it found
    // no separate debug file), so judge by what it printed.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Contents of the"),
        "readelf printed no frames for {} ({}): {}",
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    parse(&text)
}

/// Parser state: CIE initial rows by (section, offset), the FDE being read.
#[derive(Default)]
struct Parser {
    section: String,
    cie_rows: HashMap<(String, String), Vec<(u64, Expected)>>,
    columns: Vec<String>,
    /// Where the rows being read go: a CIE key or an FDE.
    cie: Option<(String, String)>,
    fde: Option<(OracleFde, String)>,
    fdes: Vec<OracleFde>,
}

fn parse(text: &str) -> Vec<OracleFde> {
    let mut p = Parser::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Contents of the ") {
            p.finish_fde();
            p.section = rest.split_whitespace().next().unwrap_or("").to_string();
        } else if line.contains(" CIE") || line.contains(" FDE ") {
            p.start_entry(line);
        } else if line.trim_start().starts_with("LOC") {
            p.columns = line.split_whitespace().map(str::to_string).collect();
        } else if let Some(row) = parse_row(&p.columns, line) {
            p.push_row(row);
        }
    }
    p.finish_fde();
    p.fdes
}

impl Parser {
    fn start_entry(&mut self, line: &str) {
        self.finish_fde();
        self.columns.clear();
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.get(3) == Some(&"CIE") {
            let key = (self.section.clone(), words[0].to_string());
            self.cie_rows.insert(key.clone(), Vec::new());
            self.cie = Some(key);
            return;
        }
        self.cie = None;
        let field = |prefix: &str| words.iter().find_map(|w| w.strip_prefix(prefix));
        let (Some(cie), Some(pc)) = (field("cie="), field("pc=")) else {
            return;
        };
        let (start, end) = pc.split_once("..").expect("pc=START..END");
        let hex = |s: &str| u64::from_str_radix(s, 16).expect("hex address");
        let fde = OracleFde {
            start: hex(start),
            end: hex(end),
            rows: Vec::new(),
        };
        self.fde = Some((fde, cie.to_string()));
    }

    fn push_row(&mut self, row: (u64, Expected)) {
        if let Some((fde, _)) = &mut self.fde {
            fde.rows.push(row);
        } else if let Some(key) = &self.cie {
            self.cie_rows.entry(key.clone()).or_default().push(row);
        }
    }

    /// An FDE without rows of its own runs its CIE's initial row throughout.
    fn finish_fde(&mut self) {
        let Some((mut fde, cie)) = self.fde.take() else {
            return;
        };
        if fde.rows.is_empty() {
            let key = (self.section.clone(), cie);
            if let Some(&(_, rule)) = self.cie_rows.get(&key).and_then(|rows| rows.first()) {
                fde.rows.push((fde.start, rule));
            }
        }
        if fde.end > fde.start && !fde.rows.is_empty() {
            self.fdes.push(fde);
        }
    }
}

/// A `LOC CFA reg... ra` line under a column header.
fn parse_row(columns: &[String], line: &str) -> Option<(u64, Expected)> {
    // A register rule prints as two words, `r5 (rdi)`: keep them as one.
    let mut words: Vec<&str> = Vec::new();
    for word in line.split_whitespace() {
        if !word.starts_with('(') || words.is_empty() {
            words.push(word);
        }
    }
    if columns.len() < 2 || words.len() != columns.len() || words[0].len() != 16 {
        return None;
    }
    let loc = u64::from_str_radix(words[0], 16).ok()?;
    let column = |name: &str| columns.iter().position(|c| c == name).map(|i| words[i]);
    Some((loc, expected(words[1], column("rbp"), column("ra"))))
}

fn expected(cfa: &str, rbp: Option<&str>, ra: Option<&str>) -> Expected {
    match ra {
        Some("c-8") => {}
        Some("u") => return Expected::Exactly(Rule::Outermost),
        _ => return Expected::Exactly(Rule::Unsupported(Unsupported::ReturnAddress)),
    }
    let rbp = match rbp {
        None | Some("u") => Rbp::Unchanged,
        Some(text) => match text.strip_prefix('c').and_then(|n| n.parse::<i16>().ok()) {
            Some(n) if rbp_units(n).is_some() => Rbp::AtCfa(n),
            _ => Rbp::Lost,
        },
    };
    if cfa == "exp" {
        return Expected::ExpressionCfa { rbp };
    }
    let (register, offset) = cfa.split_once('+').unwrap_or((cfa, "bad"));
    let Ok(offset) = offset.parse::<u16>() else {
        return Expected::Exactly(Rule::Unsupported(Unsupported::CfaOffset));
    };
    let cfa = match register {
        "rsp" => Cfa::Rsp(offset),
        "rbp" => Cfa::Rbp(offset),
        _ => return Expected::Exactly(Rule::Unsupported(Unsupported::CfaRegister)),
    };
    Expected::Exactly(Rule::Frame { cfa, rbp })
}

/// The oracle's rule at `pc`: the FDE with the greatest start at or below
/// `pc` that still covers it, its last row at or below `pc`.
pub fn oracle_lookup(fdes: &[OracleFde], pc: u64) -> Option<Expected> {
    let fde = fdes
        .iter()
        .filter(|f| f.start <= pc && pc < f.end)
        .max_by_key(|f| f.start)?;
    fde.rows
        .iter()
        .rev()
        .find(|(loc, _)| *loc <= pc)
        .map(|r| r.1)
}

/// Whether wprof's rule is what readelf describes.
pub fn agrees(ours: Rule, oracle: Option<Expected>) -> bool {
    match oracle {
        None => ours == Rule::NoInfo,
        Some(Expected::Exactly(rule)) => ours == rule,
        Some(Expected::ExpressionCfa { rbp }) => match ours {
            Rule::Frame {
                cfa: Cfa::Plt { .. },
                rbp: ours,
            } => ours == rbp,
            Rule::Unsupported(Unsupported::CfaExpression) => true,
            _ => false,
        },
    }
}

/// Disagreements between the table and readelf, checked at every row start
/// of both (so the rule of every address range is compared), as text.
pub fn disagreements(table: &UnwindTable, fdes: &mut [OracleFde]) -> Vec<String> {
    fdes.sort_by_key(|f| f.start);
    let oracle_points = fdes.iter().flat_map(|f| {
        let rows = f.rows.iter().map(|r| r.0).filter(move |&loc| loc < f.end);
        rows.chain(std::iter::once(f.end))
    });
    let our_points = table.rows.iter().map(|r| u64::from(r.pc));
    let mut points: Vec<u64> = oracle_points.chain(our_points).collect();
    points.sort_unstable();
    points.dedup();
    points
        .into_iter()
        .filter_map(|pc| {
            let (ours, oracle) = (table.lookup(pc), oracle_lookup(fdes, pc));
            (!agrees(ours, oracle)).then(|| format!("{pc:#x}: ours {ours:?}, readelf {oracle:?}"))
        })
        .collect()
}
