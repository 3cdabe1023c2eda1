//! Flame graph SVGs from folded stacks, drawn by the `inferno` crate.
//!
//! Input: [`Folded`] lines (one profile, or a before/after pair). Output: an
//! SVG whose title names the capture and whose tooltips carry the weight's
//! unit (inferno's `count_name`). inferno adds weights up in machine
//! integers: profiles whose totals would not fit (only a hostile capture's)
//! are scaled down by one factor first (`fit_totals`).
//!
//! Colors: inferno picks a frame's color from its palette unless the frame's
//! name is in the palette map, so every frame name is entered in the map with
//! a color chosen here ([`frame_color`]): a family per frame kind, a shade per
//! name from a hash of the name, hence the same input always gives the same
//! bytes. inferno itself only knows `_[k]`, `_[j]`, `_[i]` and `_[w]`, which
//! it strips from labels; the wall-clock annotations `_[c]` and `_[o]` stay
//! visible in labels and tooltips, so a reader can tell on- from off-CPU
//! frames even without color.
//!
//! | profile       | code frames       | `_[k]` kernel | `_[i]` inlined | `_[c]` | `_[o]` |
//! |---------------|-------------------|---------------|----------------|--------|--------|
//! | [`Coloring::Cpu`]     | red       | orange        | aqua           | red    | blue   |
//! | [`Coloring::OffCpu`]  | blue      | blue          | blue           | red    | blue   |
//! | [`Coloring::Wall`]    | grey      | grey          | grey           | red    | blue   |
//! | [`Coloring::Wakeup`]  | aqua      | aqua          | aqua           | red    | blue   |
//! | [`Coloring::Records`] | green     | orange        | aqua           | red    | blue   |
//!
//! The delimiter frame `-` is drawn grey by inferno itself. Differential
//! graphs ([`write_differential_svg`]) are colored by inferno from the change
//! of each frame: red grew, blue shrank.

use std::borrow::Cow;
use std::collections::HashSet;
use std::io::{self, Write};

use inferno::flamegraph::color::{BackgroundColor, Color, PaletteMap};
use inferno::flamegraph::{self as inferno_flamegraph};
use thiserror::Error;

use super::folded::{CpuState, DELIMITER, Folded, FoldedLine};

/// Which kind of profile a flame graph shows, for its colors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coloring {
    /// On-CPU samples.
    Cpu,
    /// Off-CPU (blocked) time.
    OffCpu,
    /// On- and off-CPU time together, frames tagged `_[c]`/`_[o]`.
    Wall,
    /// Wake-up latency.
    Wakeup,
    /// Weights of user records (allocation bytes, counts).
    Records,
}

/// What a flame graph shows besides the stacks.
#[derive(Clone, Debug, PartialEq)]
pub struct FlameGraphOptions {
    /// The title: name the capture and the profile, e.g. `wall clock — wprof.data`.
    pub title: String,
    /// A second line under the title (window, filters), if any.
    pub subtitle: Option<String>,
    /// The weight's unit in tooltips: `samples`, `ns`, `bytes`.
    pub count_name: String,
    pub coloring: Coloring,
    /// Width in pixels; `None` fits the browser window.
    pub width: Option<usize>,
}

/// Why no flame graph was written.
#[derive(Debug, Error, miette::Diagnostic)]
pub enum FlameGraphError {
    #[error("no stacks to draw: the profile is empty")]
    #[diagnostic(help("check the window and the task filters, and that the capture has stacks"))]
    Empty,
    #[error("cannot write the flame graph")]
    Write(#[source] io::Error),
}

/// Writes the flame graph of `folded` as SVG.
pub fn write_svg(
    folded: &Folded,
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    if folded.is_empty() {
        return Err(FlameGraphError::Empty);
    }
    let [folded] = fit_totals([folded], MAX_TOTAL);
    let text: Vec<String> = folded
        .lines()
        .iter()
        .map(|line| format!("{} {}", line.stack, line.weight))
        .collect();
    let mut palette = palette_map(&folded, options.coloring);
    let mut inferno_options = inferno_options(options);
    inferno_options.palette_map = Some(&mut palette);
    inferno_options.bgcolors = Some(background(options.coloring));
    // Lines are sorted by `Folded` already.
    inferno_options.no_sort = true;
    inferno_flamegraph::from_lines(&mut inferno_options, text.iter().map(String::as_str), out)
        .map_err(FlameGraphError::Write)
}

/// `stack before after` lines of two profiles (inferno's `diff-folded`
/// format), sorted by stack. With `normalize`, the before weights are scaled
/// to the after total, so that the colors show shifts of proportion rather
/// than a change of the total.
pub fn differential_lines(before: &Folded, after: &Folded, normalize: bool) -> Vec<String> {
    merged_lines(before, after, normalize, MAX_TOTAL)
}

/// [`differential_lines`] of the profiles fitted to `max_total`.
fn merged_lines(before: &Folded, after: &Folded, normalize: bool, max_total: u64) -> Vec<String> {
    let [before, after] = fit_totals([before, after], max_total);
    let options = inferno::differential::Options {
        normalize,
        strip_hex: false,
    };
    let mut merged = Vec::new();
    inferno::differential::from_readers(
        options,
        before.to_text().as_bytes(),
        after.to_text().as_bytes(),
        &mut merged,
    )
    .expect("merging in-memory folded text cannot fail");
    let merged = String::from_utf8(merged).expect("folded text is UTF-8");
    let mut lines: Vec<String> = merged.lines().map(str::to_owned).collect();
    lines.sort_unstable();
    lines
}

/// Writes the differential flame graph of `after` against `before`: frame
/// widths are the after profile's, red frames grew and blue ones shrank.
pub fn write_differential_svg(
    before: &Folded,
    after: &Folded,
    normalize: bool,
    options: &FlameGraphOptions,
    out: impl Write,
) -> Result<(), FlameGraphError> {
    if before.is_empty() && after.is_empty() {
        return Err(FlameGraphError::Empty);
    }
    let lines = merged_lines(before, after, normalize, MAX_DIFFERENTIAL_TOTAL);
    let mut inferno_options = inferno_options(options);
    inferno_options.bgcolors = Some(BackgroundColor::Grey);
    inferno_options.no_sort = true;
    inferno_flamegraph::from_lines(&mut inferno_options, lines.iter().map(String::as_str), out)
        .map_err(FlameGraphError::Write)
}

/// The largest total of a profile's weights inferno can add up: in a u64
/// (flame graphs) or a usize (the differential merge).
const MAX_TOTAL: u64 = usize::MAX as u64;

/// The largest total of a profile in a differential flame graph: inferno
/// colors a frame by its change of weight times 150, in an isize; the margin
/// covers the rounding of normalized weights.
const MAX_DIFFERENTIAL_TOTAL: u64 = i64::MAX as u64 / 256;

/// `profiles` with every weight scaled down by one factor so that no
/// profile's total exceeds `max_total` (stacks whose weight drops below 1
/// left out), or as they are when none does (any real capture's): inferno
/// adds weights up in machine integers, which a hostile capture's weights
/// (each up to u64::MAX) overflow. One factor keeps the proportions within
/// and between the profiles.
fn fit_totals<const N: usize>(profiles: [&Folded; N], max_total: u64) -> [Cow<'_, Folded>; N] {
    let total = |folded: &Folded| -> u128 {
        let weights = folded.lines().iter().map(|line| u128::from(line.weight));
        weights.sum()
    };
    let largest = profiles.iter().map(|folded| total(folded)).max();
    let max_total = u128::from(max_total);
    profiles.map(|folded| match largest {
        Some(largest) if largest > max_total => {
            let scaled = folded.lines().iter().map(|line| FoldedLine {
                stack: line.stack.clone(),
                // At most `max_total`: a weight is at most the largest total.
                weight: (u128::from(line.weight) * max_total / largest) as u64,
            });
            let lines = scaled.filter(|line| line.weight > 0).collect();
            Cow::Owned(Folded::from_lines(lines))
        }
        _ => Cow::Borrowed(folded),
    })
}

fn inferno_options(options: &FlameGraphOptions) -> inferno_flamegraph::Options<'_> {
    let mut inferno_options = inferno_flamegraph::Options::default();
    inferno_options.title = options.title.clone();
    inferno_options.subtitle = options.subtitle.clone();
    inferno_options.count_name = options.count_name.clone();
    inferno_options.image_width = options.width;
    inferno_options
}

fn background(coloring: Coloring) -> BackgroundColor {
    match coloring {
        Coloring::Cpu => BackgroundColor::Yellow,
        Coloring::OffCpu | Coloring::Wakeup => BackgroundColor::Blue,
        Coloring::Wall => BackgroundColor::Grey,
        Coloring::Records => BackgroundColor::Green,
    }
}

/// Every frame name of `folded` with its color.
fn palette_map(folded: &Folded, coloring: Coloring) -> PaletteMap {
    let names: HashSet<&str> = folded
        .lines()
        .iter()
        .flat_map(|line| line.stack.split(';'))
        .filter(|name| *name != DELIMITER)
        .collect();
    let mut map = PaletteMap::default();
    // inferno's root frame, colored like the code frames.
    map.insert(ROOT, frame_color(ROOT, coloring));
    for name in names {
        map.insert(name, frame_color(name, coloring));
    }
    map
}

/// The function name inferno gives the frame it draws under all stacks
/// (labelled `all`).
const ROOT: &str = "";

/// A color family: each channel ranges from `low` to `high`.
struct Family {
    low: [u8; 3],
    high: [u8; 3],
}

const RED: Family = Family {
    low: [200, 50, 30],
    high: [255, 140, 90],
};
const ORANGE: Family = Family {
    low: [215, 110, 0],
    high: [255, 170, 40],
};
const AQUA: Family = Family {
    low: [50, 160, 160],
    high: [110, 215, 215],
};
const BLUE: Family = Family {
    low: [70, 90, 190],
    high: [130, 150, 250],
};
const GREEN: Family = Family {
    low: [50, 170, 50],
    high: [120, 230, 110],
};
const GREY: Family = Family {
    low: [160, 160, 160],
    high: [205, 205, 205],
};

/// The color of one frame (see the table in the module docs).
pub fn frame_color(name: &str, coloring: Coloring) -> Color {
    let family = if name.ends_with(CpuState::OnCpu.annotation()) {
        &RED
    } else if name.ends_with(CpuState::OffCpu.annotation()) {
        &BLUE
    } else {
        let kernel = name.ends_with("_[k]");
        let inlined = name.ends_with("_[i]");
        match coloring {
            Coloring::Cpu if kernel => &ORANGE,
            Coloring::Cpu | Coloring::Records if inlined => &AQUA,
            Coloring::Cpu => &RED,
            Coloring::Records if kernel => &ORANGE,
            Coloring::Records => &GREEN,
            Coloring::OffCpu => &BLUE,
            Coloring::Wakeup => &AQUA,
            Coloring::Wall => &GREY,
        }
    };
    shade(family, name)
}

/// A shade of `family` picked by an FNV-1a hash of `name`: stable across
/// runs and machines, and similar names need not look alike.
fn shade(family: &Family, name: &str) -> Color {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let channel = |i: usize| {
        let fraction = ((hash >> (i * 16)) & 0xffff) as u32;
        let (low, high) = (u32::from(family.low[i]), u32::from(family.high[i]));
        (low + (high - low) * fraction / 0xffff) as u8
    };
    Color {
        r: channel(0),
        g: channel(1),
        b: channel(2),
    }
}

#[cfg(test)]
mod tests;
