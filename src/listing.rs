//! `-l [PATTERN]` and `-lv`: the probes a pattern names, one per line as
//! scripts write them, sorted, and with `-v` each probe's arguments below
//! it (four spaces in). Input: the pattern (`type:target:name`, `*`
//! wildcards, type aliases allowed) and the machine ([`Environment`],
//! tracefs); output: the text and warnings.
//!
//! A pattern whose first part is a probe type lists that type; uprobes and
//! USDT probes need the binary as their target. Any other pattern (or none)
//! is matched against every probe listable without a target: tracepoints,
//! software and hardware events, and iterators; a pattern without `:`
//! matches anywhere in the name (`-l nanosleep`).

use std::collections::BTreeMap;

use glob::Pattern;

use crate::providers::for_each_binary;
use crate::runtime::targets::tracefs;
use crate::vocab::perf_events::{HARDWARE_EVENTS, NamedEvent, SOFTWARE_EVENTS};
use crate::vocab::{Environment, FunctionParam};

/// What `-l` prints.
#[derive(Debug, Default, PartialEq)]
pub struct Listing {
    pub text: String,
    pub warnings: Vec<String>,
}

/// Probe names with, for `-v`, their argument lines.
type Probes = BTreeMap<String, Vec<String>>;

/// The iterators and their context fields (`ctx->task`).
const ITERATORS: [(&str, &[&str]); 2] = [
    ("task", &["struct task_struct * task"]),
    (
        "task_file",
        &["struct task_struct * task", "int fd", "struct file * file"],
    ),
];

/// Lists the probes `pattern` matches; with `by_process` (`-p PID`) and no
/// pattern, the uprobes and USDT probes of the files the process maps.
pub fn list(
    pattern: Option<&str>,
    verbose: bool,
    by_process: bool,
    env: &dyn Environment,
) -> Result<Listing, String> {
    let pattern = pattern.unwrap_or(if by_process { "{uprobe,usdt}:*" } else { "*" });
    let words = split_pattern(pattern);
    check_first_word(&words[0])?;
    let mut parts: Vec<&str> = words.iter().map(String::as_str).collect();
    let mut listing = Listing::default();
    let probes = match canonical_type(parts[0]) {
        Some(ty) => {
            parts[0] = ty;
            list_type(ty, &parts[1..], verbose, env, &mut listing.warnings)?
        }
        // A binary (`*:./prog:*`) or the process's files: uprobes and USDT.
        None if parts.len() > 1
            && parts[0].contains(['*', '?', '[', '{'])
            && (parts[1].contains('/') || by_process) =>
        {
            list_binary_types(&parts, verbose, env, &mut listing.warnings)?
        }
        None => {
            let glob = if pattern.contains(':') {
                pattern.to_string()
            } else {
                let start = if pattern.starts_with('*') { "" } else { "*" };
                let end = if pattern.ends_with('*') { "" } else { "*" };
                format!("{start}{pattern}{end}")
            };
            let glob = compile(&glob)?;
            let mut all = tracepoints("*", "*", verbose)?;
            for ty in ["software", "hardware", "iter"] {
                all.extend(list_type(ty, &[], verbose, env, &mut listing.warnings)?);
            }
            all.into_iter()
                .filter(|(name, _)| glob.matches(name))
                .collect()
        }
    };
    for (name, fields) in probes {
        listing.text.push_str(&name);
        listing.text.push('\n');
        for field in fields.iter().filter(|_| verbose) {
            listing.text.push_str(&format!("    {field}\n"));
        }
    }
    Ok(listing)
}

/// The probe types of a binary, listed for a wildcarded type with a target
/// (`*:./prog:*`, `{uprobe,usdt}:*`), as bpftrace lists them.
const BINARY_TYPES: [&str; 2] = ["uprobe", "usdt"];

/// The probes of every type in [`BINARY_TYPES`] that `parts[0]` matches;
/// a type with nothing to list is passed over unless none lists anything.
fn list_binary_types(
    parts: &[&str],
    verbose: bool,
    env: &dyn Environment,
    warnings: &mut Vec<String>,
) -> Result<Probes, String> {
    let types = expand_braces(parts[0]);
    let globs = types
        .iter()
        .map(|t| compile(t))
        .collect::<Result<Vec<_>, _>>()?;
    let mut all = Probes::new();
    let mut first_error = None;
    for ty in BINARY_TYPES {
        if !globs.iter().any(|glob| glob.matches(ty)) {
            continue;
        }
        match list_type(ty, &parts[1..], verbose, env, warnings) {
            Ok(probes) => all.extend(probes),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    match (all.is_empty(), first_error) {
        (true, Some(error)) => Err(error),
        _ => Ok(all),
    }
}

/// `{a,b}` alternatives of a word (the glob crate has none): `{uprobe,usdt}`
/// is `uprobe` and `usdt`; a word without braces is itself.
fn expand_braces(word: &str) -> Vec<String> {
    let Some((head, rest)) = word.split_once('{') else {
        return vec![word.to_string()];
    };
    let Some((choices, tail)) = rest.split_once('}') else {
        return vec![word.to_string()];
    };
    choices
        .split(',')
        .map(|choice| format!("{head}{choice}{tail}"))
        .collect()
}

/// The parts of a pattern between `:`s; a quoted part (`"ns::f(int)"`, a C++
/// name) keeps its colons and loses its quotes.
fn split_pattern(pattern: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut quoted = false;
    for c in pattern.chars() {
        match c {
            '"' => quoted = !quoted,
            ':' if !quoted => parts.push(String::new()),
            c => parts.last_mut().expect("starts with one part").push(c),
        }
    }
    parts
}

/// The first word of a pattern is a probe type or a name to search for:
/// word characters and globs, as bpftrace's lexer reads it (`-l '\n'` is an
/// error, not an empty listing).
fn check_first_word(word: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "_-.*?[]!{},".contains(c);
    match word.chars().find(|&c| !allowed(c)) {
        Some(c) => Err(format!(
            "invalid character {c:?} in the -l pattern's probe type or search word `{word}`"
        )),
        None => Ok(()),
    }
}

/// The probe type a word names (aliases included), as the providers spell it.
fn canonical_type(word: &str) -> Option<&'static str> {
    crate::providers::PROVIDERS
        .iter()
        .flat_map(|provider| provider.types())
        .find(|ty| ty.name == word || ty.aliases.contains(&word))
        .map(|ty| ty.name)
}

fn compile(glob: &str) -> Result<Pattern, String> {
    Pattern::new(glob).map_err(|e| format!("`{glob}` is not a valid pattern: {e}"))
}

/// The part `index` of a pattern, `*` where it is left out.
fn part<'a>(parts: &[&'a str], index: usize) -> &'a str {
    parts
        .get(index)
        .copied()
        .filter(|p| !p.is_empty())
        .unwrap_or("*")
}

/// The probes of type `ty` matching `parts` (the pattern after the type).
fn list_type(
    ty: &str,
    parts: &[&str],
    verbose: bool,
    env: &dyn Environment,
    warnings: &mut Vec<String>,
) -> Result<Probes, String> {
    match ty {
        "tracepoint" => tracepoints(part(parts, 0), part(parts, 1), verbose),
        "software" => events(ty, SOFTWARE_EVENTS, part(parts, 0)),
        "hardware" => events(ty, HARDWARE_EVENTS, part(parts, 0)),
        "iter" => {
            let glob = compile(part(parts, 0))?;
            Ok(ITERATORS
                .iter()
                .filter(|(name, _)| glob.matches(name))
                .map(|(name, fields)| {
                    let fields = fields.iter().map(|f| f.to_string()).collect();
                    (format!("iter:{name}"), fields)
                })
                .collect())
        }
        "uprobe" | "uretprobe" => {
            let binary = parts.first().filter(|b| !b.is_empty()).ok_or_else(|| {
                format!("listing {ty} probes needs a binary: -l '{ty}:/bin/bash:*'")
            })?;
            let probes = for_each_binary(env, binary, |binary| {
                let (path, functions) = env.functions(binary, part(parts, 1))?;
                Ok(functions
                    .into_iter()
                    .map(|f| {
                        // As bpftrace: parameters of entry probes, from DWARF when the binary has it.
                        let params = match (verbose, ty) {
                            (true, "uprobe") => {
                                env.function_params(&path, &f.name).unwrap_or_default()
                            }
                            _ => Vec::new(),
                        };
                        let params = params.iter().map(FunctionParam::listing).collect();
                        (format!("{ty}:{}:{}", path.display(), f.name), params)
                    })
                    .collect())
            })?;
            Ok(probes.into_iter().collect())
        }
        "usdt" => usdt(parts, env),
        "kprobe" | "kretprobe" => {
            let (module, name) = match parts {
                [module, name, ..] => (Some(*module), *name),
                [name] => (None, *name),
                [] => (None, "*"),
            };
            let matches = env.kernel_functions(module, part(&[name], 0))?;
            warnings.extend(matches.note);
            Ok(matches
                .functions
                .into_iter()
                .map(|f| (format!("{ty}:{}", f.name), Vec::new()))
                .collect())
        }
        "fentry" | "fexit" => Ok(env
            .btf_functions(part(parts, 0))?
            .into_iter()
            .map(|f| {
                let args = f.args.into_iter().map(|a| a.name).collect();
                (format!("{ty}:{}", f.name), args)
            })
            .collect()),
        _ => Err(format!(
            "`{ty}` probes are not listed: they take a period or an address, not a name"
        )),
    }
}

/// `tracepoint:CATEGORY:NAME` with the fields of the format file (not the
/// `common_` ones) for `-v`.
fn tracepoints(category: &str, name: &str, verbose: bool) -> Result<Probes, String> {
    let found = tracefs::expand(category, name).map_err(|e| e.to_string())?;
    found
        .into_iter()
        .map(|(category, name)| {
            let fields = if verbose {
                let format = tracefs::read_format(&category, &name).map_err(|e| e.to_string())?;
                format
                    .fields
                    .iter()
                    .map(tracefs::Field::declaration)
                    .collect()
            } else {
                Vec::new()
            };
            Ok((format!("tracepoint:{category}:{name}"), fields))
        })
        .collect()
}

/// `software:NAME:` lines of one event table (aliases match too).
fn events(ty: &str, table: &[NamedEvent], name: &str) -> Result<Probes, String> {
    let glob = compile(name)?;
    Ok(table
        .iter()
        .filter(|event| glob.matches(event.name) || event.aliases.iter().any(|a| glob.matches(a)))
        .map(|event| (format!("{ty}:{}:", event.name), Vec::new()))
        .collect())
}

/// `usdt:BINARY:PROVIDER:NAME` (or `usdt:BINARY:NAME`, any provider).
fn usdt(parts: &[&str], env: &dyn Environment) -> Result<Probes, String> {
    let Some(binary) = parts.first().filter(|b| !b.is_empty()) else {
        return Err("listing usdt probes needs a binary: -l 'usdt:/path/to/binary:*'".into());
    };
    let (provider, name) = match parts.len() {
        0 | 1 => (None, "*"),
        2 => (None, part(parts, 1)),
        _ => (Some(part(parts, 1)), part(parts, 2)),
    };
    let probes = for_each_binary(env, binary, |binary| {
        let (path, probes) = env.usdt(binary, provider, name)?;
        Ok(probes
            .into_iter()
            .map(|p| {
                let name = format!("usdt:{}:{}:{}", path.display(), p.provider, p.name);
                (name, Vec::new())
            })
            .collect())
    })?;
    Ok(probes.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::fake_machine::FakeMachine;

    fn listed(pattern: &str, verbose: bool) -> String {
        list(Some(pattern), verbose, false, &FakeMachine)
            .unwrap()
            .text
    }

    /// Colons inside quotes belong to the part (C++ names); the quotes go.
    #[test]
    fn quoted_parts_keep_colons() {
        assert_eq!(
            split_pattern("uprobe:/bin/x:\"ns::f(int)\""),
            ["uprobe", "/bin/x", "ns::f(int)"]
        );
        assert_eq!(split_pattern("usdt:/bin/x::p"), ["usdt", "/bin/x", "", "p"]);
    }

    /// A probe type or search word with a character no probe name has is
    /// refused, naming the character.
    #[test]
    fn invalid_characters_in_the_first_word() {
        let error = list(Some("\\n"), false, false, &FakeMachine).unwrap_err();
        assert_eq!(
            error,
            "invalid character '\\\\' in the -l pattern's probe type or search word `\\n`"
        );
        assert!(list(Some("it:task"), false, false, &FakeMachine).is_ok());
    }

    /// A wildcarded type with a target lists the binary probe types it
    /// matches; braces give alternatives.
    #[test]
    fn wildcarded_types_of_a_binary() {
        assert_eq!(expand_braces("{uprobe,usdt}"), ["uprobe", "usdt"]);
        assert_eq!(expand_braces("u*"), ["u*"]);
        let all = listed("*:/bin/x:*", false);
        assert!(all.contains("uprobe:/bin/x:"), "{all}");
        assert!(all.contains("usdt:/bin/x:"), "{all}");
        let usdt = listed("us*:/bin/x:*", false);
        assert!(!usdt.contains("uprobe:"), "{usdt}");
    }

    /// Aliases name their probe type; other words do not.
    #[test]
    fn probe_type_words() {
        assert_eq!(canonical_type("u"), Some("uprobe"));
        assert_eq!(canonical_type("it"), Some("iter"));
        assert_eq!(canonical_type("*"), None);
    }

    /// Software events list with bpftrace's trailing colon, matched by name or alias.
    #[test]
    fn perf_events() {
        assert_eq!(listed("software:cs", false), "software:context-switches:\n");
        let all = listed("hardware:*", false);
        assert!(all.contains("hardware:cpu-cycles:\n"), "{all}");
        assert_eq!(listed("s:page-fa*", false), "software:page-faults:\n");
    }

    /// Iterators list their context fields under -v only.
    #[test]
    fn iterators() {
        assert_eq!(listed("iter:*", false), "iter:task\niter:task_file\n");
        assert_eq!(
            listed("iter:task", true),
            "iter:task\n    struct task_struct * task\n"
        );
    }

    /// uprobes and usdt need a binary; period probes are not listed.
    #[test]
    fn refusals() {
        let machine = FakeMachine;
        let error = list(Some("uprobe"), false, false, &machine).unwrap_err();
        assert!(error.contains("needs a binary"), "{error}");
        let error = list(Some("interval:*"), false, false, &machine).unwrap_err();
        assert!(error.contains("not listed"), "{error}");
    }
}
