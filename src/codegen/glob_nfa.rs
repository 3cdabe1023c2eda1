//! Task-name globs (`*`, `?`) → bit-parallel NFAs (Shift-And with star
//! self-loops) that BPF code runs over a 16-byte `comm`.
//!
//! Each literal or `?` of a glob is one state bit; globs are packed into
//! 64-bit lanes. Per character `c`, with `D` the set of states reached:
//!
//! `D' = (((D << 1) & !first) | start) & table[c] | (D & loops)`
//!
//! where `first` marks each glob's first state, `start` is `first` at the
//! first character and afterwards only the first states of globs that begin
//! with `*`, and `loops` marks states followed by a `*` (which may consume
//! any character). A glob matches when its last state is in `D` at the end.

/// The most characters a `comm` holds (without its NUL).
pub const COMM_CHARS: usize = 15;
/// Bytes of one lane's character table (256 u64 masks).
pub const LANE_TABLE_BYTES: u32 = 256 * 8;

/// The NFAs of the include (`-n`) and exclude (`-N`) name globs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GlobSet {
    pub lanes: Vec<Lane>,
    /// A glob of only `*` is given: every name matches.
    pub always_include: bool,
    pub always_exclude: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Lane {
    pub table: Vec<u64>,
    pub first: u64,
    pub first_star: u64,
    pub loops: u64,
    pub accept_include: u64,
    pub accept_exclude: u64,
    /// State bits used so far.
    states: u32,
}

impl Lane {
    fn new() -> Lane {
        Lane {
            table: vec![0; 256],
            first: 0,
            first_star: 0,
            loops: 0,
            accept_include: 0,
            accept_exclude: 0,
            states: 0,
        }
    }
}

/// One glob split into states: each a character (`None` for `?`) and
/// whether a `*` follows it.
struct Parsed {
    leading_star: bool,
    states: Vec<(Option<u8>, bool)>,
}

fn parse(glob: &str) -> Parsed {
    let mut parsed = Parsed {
        leading_star: false,
        states: Vec::new(),
    };
    for byte in glob.bytes() {
        match (byte, parsed.states.last_mut()) {
            (b'*', None) => parsed.leading_star = true,
            (b'*', Some(last)) => last.1 = true,
            (b'?', _) => parsed.states.push((None, false)),
            (c, _) => parsed.states.push((Some(c), false)),
        }
    }
    parsed
}

impl GlobSet {
    pub fn build(include: &[String], exclude: &[String]) -> GlobSet {
        let mut set = GlobSet::default();
        let globs = include
            .iter()
            .map(|g| (g, true))
            .chain(exclude.iter().map(|g| (g, false)));
        for (glob, including) in globs {
            let parsed = parse(glob);
            if parsed.states.is_empty() {
                // `*` matches every name; an empty glob matches none.
                if parsed.leading_star {
                    *(if including {
                        &mut set.always_include
                    } else {
                        &mut set.always_exclude
                    }) = true;
                }
                continue;
            }
            if parsed.states.len() > COMM_CHARS {
                continue;
            }
            set.add(&parsed, including);
        }
        set
    }

    fn add(&mut self, glob: &Parsed, including: bool) {
        let fits = self
            .lanes
            .last()
            .is_some_and(|lane| lane.states as usize + glob.states.len() <= 64);
        if !fits {
            self.lanes.push(Lane::new());
        }
        let lane = self.lanes.last_mut().expect("a lane was just ensured");
        let base = lane.states;
        lane.states += glob.states.len() as u32;
        for (i, (char, star)) in glob.states.iter().enumerate() {
            let bit = 1u64 << (base + i as u32);
            match char {
                Some(c) => lane.table[usize::from(*c)] |= bit,
                // `?` is any character but the terminating NUL.
                None => lane.table.iter_mut().skip(1).for_each(|m| *m |= bit),
            }
            if *star {
                lane.loops |= bit;
            }
        }
        let first = 1u64 << base;
        lane.first |= first;
        if glob.leading_star {
            lane.first_star |= first;
        }
        let last = 1u64 << (base + glob.states.len() as u32 - 1);
        if including {
            lane.accept_include |= last;
        } else {
            lane.accept_exclude |= last;
        }
    }

    /// The character tables of every lane, in lane order, as the map value.
    pub fn table_bytes(&self) -> Vec<u8> {
        self.lanes
            .iter()
            .flat_map(|lane| lane.table.iter().flat_map(|m| m.to_ne_bytes()))
            .collect()
    }

    /// (matches an include glob, matches an exclude glob), as the BPF code
    /// computes it: the reference for tests.
    #[cfg(test)]
    fn matches(&self, name: &str) -> (bool, bool) {
        let (mut include, mut exclude) = (self.always_include, self.always_exclude);
        for lane in &self.lanes {
            let mut d = 0u64;
            for (i, c) in name.bytes().take(COMM_CHARS + 1).enumerate() {
                let start = if i == 0 { lane.first } else { lane.first_star };
                d = (((d << 1) & !lane.first) | start) & lane.table[usize::from(c)]
                    | (d & lane.loops);
            }
            include |= d & lane.accept_include != 0;
            exclude |= d & lane.accept_exclude != 0;
        }
        (include, exclude)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    /// The NFAs agree with the `glob` crate on names and patterns alike.
    #[test]
    fn agrees_with_glob_crate() {
        let patterns = [
            "kworker*", "*sh", "s?eep*", "a*b*c", "*", "sleep", "?", "*x*", "ab*", "*a?",
        ];
        let names = [
            "kworker/0:1",
            "bash",
            "sleeper",
            "sleep",
            "abc",
            "aXbYc",
            "ab",
            "x",
            "a",
            "zzz",
            "ba",
            "kworke",
            "swapper/0",
            "axc",
            "cat",
        ];
        for pattern in patterns {
            let set = GlobSet::build(&globs(&[pattern]), &[]);
            let reference = glob::Pattern::new(pattern).expect("valid glob");
            for name in names {
                assert_eq!(
                    set.matches(name).0,
                    reference.matches(name),
                    "`{pattern}` on `{name}`"
                );
            }
        }
    }

    /// Several globs share a lane; include and exclude globs stay apart.
    #[test]
    fn include_and_exclude_share_lanes() {
        let set = GlobSet::build(&globs(&["sleep*", "cat"]), &globs(&["*er"]));
        assert_eq!(set.lanes.len(), 1);
        assert_eq!(set.matches("sleeper"), (true, true));
        assert_eq!(set.matches("cat"), (true, false));
        assert_eq!(set.matches("bother"), (false, true));
        let many: Vec<String> = (0..6).map(|i| format!("name{i}abcdefghi")).collect();
        let set = GlobSet::build(&many, &[]);
        assert_eq!(set.lanes.len(), 2);
        assert_eq!(set.matches("name5abcdefghi"), (true, false));
        assert_eq!(set.table_bytes().len(), 2 * LANE_TABLE_BYTES as usize);
    }
}
