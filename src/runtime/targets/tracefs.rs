//! Runtime, tracepoint discovery: reads tracefs. Input: a tracepoint's category and
//! name (or globs of them); output: the matching tracepoints, a tracepoint's id and
//! its record layout ([`TracepointFormat`]) as the kernel's `format` file states it.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where tracefs is normally mounted.
const TRACEFS_MOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// Everything that can go wrong while reading tracefs.
#[derive(Debug, thiserror::Error)]
pub enum TracefsError {
    /// Neither mount point holds a tracefs.
    #[error(
        "tracefs is not mounted (looked for {} and {}); mount it with \
         `mount -t tracefs nodev /sys/kernel/tracing`",
        TRACEFS_MOUNTS[0],
        TRACEFS_MOUNTS[1]
    )]
    NotMounted,
    /// A tracefs is there but this user may not read it (mode 700 for root).
    #[error(
        "cannot read tracefs at {}: {source}; reading tracepoints needs root or read access \
         to tracefs",
        path.display()
    )]
    NoAccess {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The tracepoint's directory does not exist.
    #[error("tracepoint `{category}:{name}` does not exist ({} is missing)", path.display())]
    NoSuchTracepoint {
        category: String,
        name: String,
        path: PathBuf,
    },
    /// A file exists but could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file's contents do not have the expected shape.
    #[error("malformed {} (line {line}): {reason}", path.display())]
    Malformed {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// A category or name glob is not a valid pattern.
    #[error("invalid tracepoint pattern `{pattern}`: {reason}")]
    BadPattern { pattern: String, reason: String },
    /// A glob matched no tracepoint.
    #[error("tracepoint not found: {pattern} (searched {})", searched.display())]
    NoMatch { pattern: String, searched: PathBuf },
}

/// One field of a tracepoint record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field name, the `FIELD` of `args.FIELD`.
    pub name: String,
    /// The C type as written, without the field name and array suffix
    /// (`const char *`, `char`, `pid_t`, `char[]` for `__data_loc char[] filename`).
    pub c_type: String,
    /// Byte offset from the start of the record.
    pub offset: u32,
    /// Size in bytes; for a `__data_loc` field, the size of the 4-byte locator.
    pub size: u32,
    /// The kernel says the (element) type is signed.
    pub signed: bool,
    /// Element count of an inline array (`char comm[16]` → 16).
    pub array_len: Option<u32>,
    /// `__data_loc`: a u32 holding `len << 16 | offset from the record start`.
    pub data_loc: bool,
    /// `__rel_loc`: like `__data_loc`, but the offset counts from the end of the locator.
    pub rel_loc: bool,
    /// The type is a pointer (`const char *`): the value is a user or kernel address.
    pub is_pointer: bool,
}

/// The record layout of one tracepoint, from its `format` file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracepointFormat {
    /// The category (`sched` in `sched:sched_switch`).
    pub category: String,
    /// The event name (`sched_switch`).
    pub name: String,
    /// The `ID:` line, the id perf and BPF attach to.
    pub id: Option<u32>,
    /// Fields every event shares (`common_type`, `common_pid`, ...).
    pub common_fields: Vec<Field>,
    /// The event's own fields, the script's `args`.
    pub fields: Vec<Field>,
}

impl Field {
    /// The field as the format file declares it (`const char * filename`,
    /// `char comm[16]`, `__data_loc char[] name`), for `-lv`.
    pub fn declaration(&self) -> String {
        let prefix = match (self.data_loc, self.rel_loc) {
            (true, _) => "__data_loc ",
            (_, true) => "__rel_loc ",
            _ => "",
        };
        match self.array_len {
            Some(len) => format!("{prefix}{} {}[{len}]", self.c_type, self.name),
            None => format!("{prefix}{} {}", self.c_type, self.name),
        }
    }
}

impl TracepointFormat {
    /// The event field called `name` (not the common fields).
    #[cfg(test)]
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Bytes up to the end of the last fixed field.
    #[cfg(test)]
    pub fn record_size(&self) -> u32 {
        self.common_fields
            .iter()
            .chain(&self.fields)
            .map(|f| f.offset.saturating_add(f.size))
            .max()
            .unwrap_or(0)
    }
}

/// The tracefs mount point: `/sys/kernel/tracing`, else `/sys/kernel/debug/tracing`.
pub fn tracefs_root() -> Result<PathBuf, TracefsError> {
    for root in TRACEFS_MOUNTS.iter().map(PathBuf::from) {
        match fs::metadata(root.join("events")) {
            Ok(meta) if meta.is_dir() => return Ok(root),
            Err(source) if source.kind() == io::ErrorKind::PermissionDenied => {
                return Err(TracefsError::NoAccess { path: root, source });
            }
            _ => {}
        }
    }
    Err(TracefsError::NotMounted)
}

/// Mount tracefs at `/sys/kernel/tracing` when no tracefs is mounted, as
/// tracing tools do on systems that do not mount it at boot.
pub fn ensure_mounted() -> Result<PathBuf, TracefsError> {
    if let Ok(root) = tracefs_root() {
        return Ok(root);
    }
    let target = std::ffi::CString::new(TRACEFS_MOUNTS[0]).expect("no NUL in a constant path");
    // SAFETY: mount(2) reads the NUL-terminated strings we pass and nothing else.
    unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        );
    }
    tracefs_root()
}

/// The directory of one tracepoint, checked to exist.
fn event_dir(category: &str, name: &str) -> Result<PathBuf, TracefsError> {
    let path = tracefs_root()?.join("events").join(category).join(name);
    // A name with `/` or `..` would escape the events directory.
    let plain = |s: &str| !s.is_empty() && !s.contains('/') && s != "." && s != "..";
    if plain(category) && plain(name) && path.is_dir() {
        Ok(path)
    } else {
        Err(TracefsError::NoSuchTracepoint {
            category: category.into(),
            name: name.into(),
            path,
        })
    }
}

fn read_text(path: &Path) -> Result<String, TracefsError> {
    fs::read_to_string(path).map_err(|source| TracefsError::Read {
        path: path.into(),
        source,
    })
}

/// The tracepoint's id (`events/<category>/<name>/id`).
#[cfg(test)]
pub fn tracepoint_id(category: &str, name: &str) -> Result<u32, TracefsError> {
    let path = event_dir(category, name)?.join("id");
    let text = read_text(&path)?;
    text.trim().parse().map_err(|_| TracefsError::Malformed {
        path,
        line: 1,
        reason: format!("expected a number, found `{}`", text.trim()),
    })
}

/// Reads and parses `events/<category>/<name>/format`.
pub fn read_format(category: &str, name: &str) -> Result<TracepointFormat, TracefsError> {
    let path = event_dir(category, name)?.join("format");
    let text = read_text(&path)?;
    parse_format(category, name, &text, &path)
}

/// Parses the text of a `format` file; `path` is only for error messages.
///
/// Lines other than `ID:` and `field:` lines are ignored. A blank line ends the
/// common fields; files without one fall back to the `common_` name prefix.
pub fn parse_format(
    category: &str,
    name: &str,
    text: &str,
    path: &Path,
) -> Result<TracepointFormat, TracefsError> {
    let mut format = TracepointFormat {
        category: category.into(),
        name: name.into(),
        id: None,
        common_fields: Vec::new(),
        fields: Vec::new(),
    };
    let mut saw_blank_after_common = false;
    for (index, line) in text.lines().enumerate() {
        let malformed = |reason: String| TracefsError::Malformed {
            path: path.into(),
            line: index + 1,
            reason,
        };
        let trimmed = line.trim();
        if trimmed.is_empty() {
            saw_blank_after_common |= !format.common_fields.is_empty();
        } else if let Some(id) = trimmed.strip_prefix("ID:") {
            format.id = Some(
                id.trim()
                    .parse()
                    .map_err(|_| malformed(format!("bad id `{}`", id.trim())))?,
            );
        } else if trimmed.starts_with("field:") {
            let field = parse_field_line(trimmed).map_err(malformed)?;
            let common = if saw_blank_after_common {
                false
            } else {
                field.name.starts_with("common_")
            };
            if common {
                format.common_fields.push(field);
            } else {
                format.fields.push(field);
            }
        }
    }
    Ok(format)
}

/// Parses `field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:N;`.
fn parse_field_line(line: &str) -> Result<Field, String> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once(':') else {
            return Err(format!("expected `key:value`, found `{part}`"));
        };
        let number = || {
            value
                .trim()
                .parse::<u32>()
                .map_err(|_| format!("bad {key} `{value}`"))
        };
        match key.trim() {
            "field" => decl = Some(value.trim()),
            "offset" => offset = Some(number()?),
            "size" => size = Some(number()?),
            "signed" => signed = number()? != 0,
            _ => {} // Newer kernels may add keys; they do not change the layout.
        }
    }
    let decl = decl.ok_or("missing `field:`")?;
    let offset = offset.ok_or_else(|| format!("field `{decl}` has no offset"))?;
    let size = size.ok_or_else(|| format!("field `{decl}` has no size"))?;
    let mut field = parse_declaration(decl, size)?;
    field.offset = offset;
    field.signed = signed;
    Ok(field)
}

/// Splits a C declaration such as `const char * filename`, `char comm[16]` or
/// `__data_loc char[] filename` into name, type and array length.
fn parse_declaration(decl: &str, size: u32) -> Result<Field, String> {
    let (data_loc, rel_loc, rest) = if let Some(rest) = decl.strip_prefix("__data_loc ") {
        (true, false, rest.trim())
    } else if let Some(rest) = decl.strip_prefix("__rel_loc ") {
        (false, true, rest.trim())
    } else {
        (false, false, decl)
    };
    let (rest, array) = match rest.strip_suffix(']').and_then(|r| r.rsplit_once('[')) {
        Some((before, len)) => (before.trim_end(), Some(len.trim())),
        None => (rest, None),
    };
    let name_start = rest
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let (c_type, name) = (rest[..name_start].trim(), &rest[name_start..]);
    if name.is_empty() || c_type.is_empty() {
        return Err(format!("cannot split `{decl}` into a type and a name"));
    }
    let array_len = array.map(|len| array_length(len, c_type, size));
    Ok(Field {
        name: name.into(),
        c_type: c_type.into(),
        offset: 0,
        size,
        signed: false,
        array_len: array_len.flatten(),
        data_loc,
        rel_loc,
        is_pointer: c_type.ends_with('*'),
    })
}

/// The element count of `[len]`; a symbolic length (`[TASK_COMM_LEN]`) is
/// recovered from the size for one-byte element types only.
fn array_length(len: &str, c_type: &str, size: u32) -> Option<u32> {
    if len.is_empty() {
        return Some(0);
    }
    if let Ok(n) = len.parse() {
        return Some(n);
    }
    let one_byte = [
        "char",
        "unsigned char",
        "signed char",
        "u8",
        "s8",
        "__u8",
        "__s8",
    ];
    one_byte.contains(&c_type).then_some(size)
}

/// Every tracepoint whose category and name match the globs, sorted and
/// deduplicated, from `available_events` (or the `events` directory).
pub fn expand(category_glob: &str, name_glob: &str) -> Result<Vec<(String, String)>, TracefsError> {
    let pattern_text = format!("{category_glob}:{name_glob}");
    let compile = |glob: &str| {
        glob::Pattern::new(glob).map_err(|e| TracefsError::BadPattern {
            pattern: pattern_text.clone(),
            reason: e.to_string(),
        })
    };
    let (category_pattern, name_pattern) = (compile(category_glob)?, compile(name_glob)?);
    let root = tracefs_root()?;
    if let Some(one) = literal_tracepoint(&root, category_glob, name_glob) {
        return Ok(vec![one]);
    }
    let (all, searched) = list_tracepoints(&root)?;
    let mut matches: Vec<(String, String)> = all
        .into_iter()
        .filter(|(c, n)| category_pattern.matches(c) && name_pattern.matches(n))
        .collect();
    matches.sort();
    matches.dedup();
    if matches.is_empty() {
        return Err(TracefsError::NoMatch {
            pattern: pattern_text,
            searched,
        });
    }
    Ok(matches)
}

/// The tracepoint a plain name (no wildcard, no path) names, when its `format` is
/// there: one lookup instead of listing every tracepoint (~2,000 lines of
/// `available_events`, a fifth of a plain script's start). `None` sends a
/// missing one to the listing, whose error suggests close names.
fn literal_tracepoint(root: &Path, category: &str, name: &str) -> Option<(String, String)> {
    let plain = |text: &str| {
        !text.is_empty() && (text.bytes()).all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if !plain(category) || !plain(name) {
        return None;
    }
    let format = root.join("events").join(category).join(name).join("format");
    format
        .is_file()
        .then(|| (category.to_string(), name.to_string()))
}

/// All tracepoints, and the file or directory they were listed from.
fn list_tracepoints(root: &Path) -> Result<(Vec<(String, String)>, PathBuf), TracefsError> {
    let available = root.join("available_events");
    if let Ok(text) = fs::read_to_string(&available) {
        let all = text
            .lines()
            .filter_map(|line| line.trim().split_once(':'))
            .map(|(c, n)| (c.to_string(), n.to_string()))
            .collect();
        return Ok((all, available));
    }
    let events = root.join("events");
    let read_dir = |path: &Path| {
        fs::read_dir(path).map_err(|source| TracefsError::Read {
            path: path.into(),
            source,
        })
    };
    let mut all = Vec::new();
    for category in read_dir(&events)?.flatten() {
        let category_path = category.path();
        let Ok(names) = fs::read_dir(&category_path) else {
            continue; // Plain files such as `enable` and `header_page`.
        };
        for name in names.flatten() {
            if name.path().join("format").is_file() {
                all.push((
                    category.file_name().to_string_lossy().into_owned(),
                    name.file_name().to_string_lossy().into_owned(),
                ));
            }
        }
    }
    Ok((all, events))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sys_enter_openat` has an `int dfd` and a `const char *` filename pointer.
    #[test]
    fn reads_sys_enter_openat_format() {
        let format = read_format("syscalls", "sys_enter_openat").expect("tracefs format");
        assert_eq!(
            format.id,
            Some(tracepoint_id("syscalls", "sys_enter_openat").unwrap())
        );
        let names: Vec<_> = format
            .common_fields
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(
            names,
            [
                "common_type",
                "common_flags",
                "common_preempt_count",
                "common_pid"
            ]
        );
        let filename = format.field("filename").expect("filename field");
        assert_eq!(filename.c_type, "const char *");
        assert!(filename.is_pointer && !filename.data_loc);
        assert_eq!((filename.offset, filename.size), (24, 8));
        let dfd = format.field("dfd").expect("dfd field");
        assert_eq!(
            (dfd.c_type.as_str(), dfd.offset, dfd.is_pointer),
            ("int", 16, false)
        );
        assert_eq!(format.fields[0].name, "__syscall_nr");
    }

    /// `sched_switch` has inline `char[16]` arrays and signed fields.
    #[test]
    fn reads_sched_switch_format() {
        let format = read_format("sched", "sched_switch").expect("tracefs format");
        let comm = format.field("prev_comm").expect("prev_comm");
        assert_eq!(
            (comm.c_type.as_str(), comm.array_len, comm.size),
            ("char", Some(16), 16)
        );
        let pid = format.field("prev_pid").expect("prev_pid");
        assert_eq!(
            (pid.c_type.as_str(), pid.size, pid.signed),
            ("pid_t", 4, true)
        );
        let state = format.field("prev_state").expect("prev_state");
        assert_eq!(
            (state.c_type.as_str(), state.size, state.signed),
            ("long", 8, true)
        );
        assert!(format.field("next_comm").is_some() && format.field("next_prio").is_some());
        assert!(format.record_size() >= 64);
    }

    /// `sched_process_exec` has a `__data_loc char[] filename`.
    #[test]
    fn reads_data_loc_field() {
        let format = read_format("sched", "sched_process_exec").expect("tracefs format");
        let filename = format.field("filename").expect("filename");
        assert!(filename.data_loc && !filename.is_pointer);
        assert_eq!((filename.c_type.as_str(), filename.size), ("char[]", 4));
        assert_eq!(filename.array_len, None);
    }

    /// A missing tracepoint is an error naming it and the path looked at.
    #[test]
    fn missing_tracepoint_is_named() {
        let err = read_format("sched", "no_such_event")
            .unwrap_err()
            .to_string();
        assert!(err.contains("sched:no_such_event"), "{err}");
        assert!(read_format("..", "sched").is_err());
    }

    /// `syscalls:sys_enter_open*` expands sorted, including `open` and `openat`.
    #[test]
    fn expands_syscall_glob() {
        let found = expand("syscalls", "sys_enter_open*").expect("matches");
        let names: Vec<_> = found.iter().map(|(_, n)| n.as_str()).collect();
        assert!(names.contains(&"sys_enter_openat") && names.contains(&"sys_enter_open"));
        assert!(
            found
                .iter()
                .all(|(c, n)| c == "syscalls" && n.starts_with("sys_enter_open"))
        );
        assert!(found.windows(2).all(|w| w[0] < w[1]), "sorted and unique");
    }

    /// A name without wildcards finds the same one tracepoint as the listing.
    #[test]
    fn literal_name_is_found_without_the_listing() {
        let root = tracefs_root().expect("tracefs");
        let one = literal_tracepoint(&root, "sched", "sched_switch");
        assert_eq!(one, Some(("sched".into(), "sched_switch".into())));
        let (all, _) = list_tracepoints(&root).expect("listing");
        assert!(all.contains(&("sched".into(), "sched_switch".into())));
        assert_eq!(literal_tracepoint(&root, "sched", "sched_swich"), None);
        assert_eq!(literal_tracepoint(&root, "sched", "sched_*"), None);
        assert_eq!(literal_tracepoint(&root, "..", "sched/sched_switch"), None);
    }

    /// A glob that matches nothing is an error naming the pattern.
    #[test]
    fn empty_expansion_names_pattern() {
        let err = expand("syscalls", "sys_enter_nope*")
            .unwrap_err()
            .to_string();
        assert!(err.contains("syscalls:sys_enter_nope*"), "{err}");
        assert!(expand("sched", "[").is_err());
    }

    /// Odd lines are skipped or reported, never a panic.
    #[test]
    fn malformed_format_lines_are_errors() {
        let path = Path::new("format");
        let ok = "name: x\nID: 7\nformat:\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
                  \tfield:u8 data[];\toffset:8;\tsize:0;\tsigned:0;\tfuture:1;\n\
                  \tfield:char comm[TASK_COMM_LEN];\toffset:8;\tsize:16;\tsigned:0;\nprint fmt: \"\"\n";
        let format = parse_format("c", "x", ok, path).expect("well formed");
        assert_eq!(format.id, Some(7));
        assert_eq!(format.fields[0].array_len, Some(0));
        assert_eq!(format.fields[1].array_len, Some(16));
        for bad in [
            "field:int x;\toffset:zz;\tsize:4;",
            "field:int x;\tsize:4;",
            "field:;\toffset:0;\tsize:4;",
            "field:int x;\toffset:0;\tsize:4;\tjunk",
            "ID: abc",
            "field:int é;\toffset:0;\tsize:4;",
        ] {
            let err = parse_format("c", "x", bad, path).unwrap_err().to_string();
            assert!(err.contains("format (line 1)"), "{err}");
        }
    }
}
