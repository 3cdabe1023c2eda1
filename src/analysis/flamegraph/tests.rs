use super::*;
use crate::analysis::folded::FoldedLine;

fn folded(lines: &[(&str, u64)]) -> Folded {
    Folded::from_lines(
        lines
            .iter()
            .map(|&(stack, weight)| FoldedLine {
                stack: stack.to_owned(),
                weight,
            })
            .collect(),
    )
}

fn options(coloring: Coloring) -> FlameGraphOptions {
    FlameGraphOptions {
        title: "wall clock — test.data".to_owned(),
        subtitle: Some("window 0–1 s".to_owned()),
        count_name: "ns".to_owned(),
        coloring,
        width: Some(1200),
    }
}

fn svg(folded: &Folded, options: &FlameGraphOptions) -> String {
    let mut out = Vec::new();
    write_svg(folded, options, &mut out).expect("the profile is not empty");
    String::from_utf8(out).expect("SVG is UTF-8")
}

/// A drawn frame: its tooltip and its fill.
#[derive(Debug)]
struct DrawnFrame {
    title: String,
    fill: (u8, u8, u8),
}

/// The frames of an inferno SVG: each is a `<title>` followed by a `<rect>`.
fn frames(svg: &str) -> Vec<DrawnFrame> {
    let mut frames = Vec::new();
    let mut rest = svg;
    while let Some(start) = rest.find("<title>") {
        rest = &rest[start + "<title>".len()..];
        let end = rest.find("</title>").expect("titles are closed");
        let title = rest[..end].to_owned();
        rest = &rest[end..];
        let Some(fill_at) = rest.find("fill=\"rgb(") else {
            break;
        };
        let fill = &rest[fill_at + "fill=\"rgb(".len()..];
        let fill = &fill[..fill.find(')').expect("rgb() is closed")];
        let channels: Vec<u8> = fill
            .split(',')
            .map(|c| c.trim().parse().expect("a channel"))
            .collect();
        frames.push(DrawnFrame {
            title,
            fill: (channels[0], channels[1], channels[2]),
        });
    }
    frames
}

fn frame<'a>(frames: &'a [DrawnFrame], name: &str) -> &'a DrawnFrame {
    frames
        .iter()
        .find(|f| f.title.starts_with(&format!("{name} (")))
        .unwrap_or_else(|| panic!("no frame {name} in {frames:?}"))
}

/// A wall-clock graph draws on-CPU frames red and off-CPU frames blue, with
/// the weights and unit in tooltips and the capture in the title.
#[test]
fn wall_clock_colors_on_and_off_cpu_apart() {
    let profile = folded(&[
        ("spin;main_[c];spin_here_[c]", 300_000_000),
        ("spin;main_[o];-;do_nanosleep_[o]", 700_000_000),
    ]);
    let svg = svg(&profile, &options(Coloring::Wall));
    assert!(svg.contains("wall clock — test.data"), "title");
    assert!(svg.contains("window 0–1 s"), "subtitle");
    let frames = frames(&svg);
    let on = frame(&frames, "spin_here_[c]");
    assert_eq!(on.title, "spin_here_[c] (300,000,000 ns, 30.00%)");
    let off = frame(&frames, "do_nanosleep_[o]");
    assert_eq!(off.title, "do_nanosleep_[o] (700,000,000 ns, 70.00%)");
    for red in [on, frame(&frames, "main_[c]")] {
        assert!(red.fill.0 > red.fill.2 + 50, "on-CPU is red: {red:?}");
    }
    for blue in [off, frame(&frames, "main_[o]")] {
        assert!(blue.fill.2 > blue.fill.0 + 50, "off-CPU is blue: {blue:?}");
    }
}

/// An on-CPU graph tells kernel (orange) from user (red) frames; inferno
/// strips the `_[k]` annotation from labels and tooltips.
#[test]
fn cpu_graph_tells_kernel_from_user() {
    let profile = folded(&[("t;main;work;-;sys_write_[k]", 3), ("t;main;work", 7)]);
    let svg = svg(&profile, &options(Coloring::Cpu));
    let frames = frames(&svg);
    let kernel = frame(&frames, "sys_write");
    let user = frame(&frames, "work");
    assert_ne!(kernel.fill, user.fill);
    assert!(kernel.fill.1 >= 110, "orange has green: {kernel:?}");
    assert!(user.fill.1 <= 140 && user.fill.0 >= 200, "red: {user:?}");
    assert!(!svg.contains("sys_write_[k]"), "annotation stripped");
}

/// Off-CPU graphs are blue throughout, the delimiter grey.
#[test]
fn off_cpu_graph_is_blue() {
    let profile = folded(&[("t;main;-;schedule_[k]", 5)]);
    let frames = frames(&svg(&profile, &options(Coloring::OffCpu)));
    for name in ["all", "t", "main", "schedule"] {
        let f = frame(&frames, name);
        assert!(f.fill.2 > f.fill.0, "{f:?}");
    }
    let delimiter = frame(&frames, "-");
    assert_eq!(delimiter.fill.0, delimiter.fill.2, "grey: {delimiter:?}");
}

/// The same input gives the same bytes.
#[test]
fn output_is_deterministic() {
    let profile = folded(&[("a;b;c", 1), ("a;b;d", 2), ("a;e_[k]", 3)]);
    let options = options(Coloring::Cpu);
    let (first, second) = (svg(&profile, &options), svg(&profile, &options));
    assert!(first == second, "two renders differ");
}

/// Frame names with XML specials stay well-formed.
#[test]
fn escapes_xml() {
    let profile = folded(&[("t;Vec<u8>::push&<'a>", 1)]);
    let svg = svg(&profile, &options(Coloring::Cpu));
    assert!(
        svg.contains("Vec&lt;u8&gt;::push&amp;&lt;&apos;a&gt;")
            || svg.contains("Vec&lt;u8&gt;::push&amp;&lt;'a&gt;")
    );
}

/// An empty profile is an error, not an empty picture.
#[test]
fn empty_profile_is_an_error() {
    let err = write_svg(&Folded::default(), &options(Coloring::Cpu), Vec::new())
        .expect_err("nothing to draw");
    assert!(matches!(err, FlameGraphError::Empty));
}

/// Differential lines carry both weights per stack, sorted; normalizing
/// scales the before weights to the after total.
#[test]
fn differential_lines_pair_weights() {
    let before = folded(&[("a;b", 10), ("a;c", 10)]);
    let after = folded(&[("a;b", 30), ("a;d", 10)]);
    assert_eq!(
        differential_lines(&before, &after, false),
        ["a;b 10 30", "a;c 10 0", "a;d 0 10"]
    );
    assert_eq!(
        differential_lines(&before, &after, true),
        ["a;b 20 30", "a;c 20 0", "a;d 0 10"]
    );
}

/// In a differential graph a frame that grew is red and one that shrank blue.
#[test]
fn differential_graph_colors_growth_red() {
    let before = folded(&[("main;grows", 10), ("main;shrinks", 40)]);
    let after = folded(&[("main;grows", 40), ("main;shrinks", 10)]);
    let mut out = Vec::new();
    write_differential_svg(&before, &after, false, &options(Coloring::Cpu), &mut out)
        .expect("non-empty");
    let svg = String::from_utf8(out).expect("UTF-8");
    let frames = frames(&svg);
    let grows = frame(&frames, "grows");
    let shrinks = frame(&frames, "shrinks");
    assert!(grows.fill.0 > grows.fill.2, "{grows:?}");
    assert!(shrinks.fill.2 > shrinks.fill.0, "{shrinks:?}");
    assert!(grows.title.contains("+60.00%"), "{}", grows.title);
}

/// Weights whose sums inferno's integers cannot hold (only a hostile
/// capture's) are scaled down by one factor first: graphs keep their
/// proportions, differential ones their colors.
#[test]
fn weights_too_large_for_inferno_keep_proportions() {
    let huge = folded(&[
        ("main;a", u64::MAX),
        ("main;b", u64::MAX),
        ("main;c", u64::MAX / 2),
    ]);
    let drawn = frames(&svg(&huge, &options(Coloring::Cpu)));
    for (name, share) in [("a", "40.00%"), ("b", "40.00%"), ("c", "20.00%")] {
        let title = &frame(&drawn, name).title;
        assert!(title.ends_with(&format!(" ns, {share})")), "{title}");
    }
    let half = u64::MAX / 2;
    let before = folded(&[("a", u64::MAX), ("b", u64::MAX)]);
    assert_eq!(
        differential_lines(&before, &folded(&[("a", u64::MAX)]), false),
        [format!("a {half} {half}"), format!("b {half} 0")]
    );
    // Far below u64::MAX, but inferno colors by differences times 150.
    let before = folded(&[("main;grows", 1 << 30), ("main;shrinks", 1 << 60)]);
    let after = folded(&[("main;grows", 1 << 40), ("main;shrinks", 1 << 39)]);
    let mut out = Vec::new();
    write_differential_svg(&before, &after, false, &options(Coloring::Cpu), &mut out)
        .expect("drawn");
    let frames = frames(&String::from_utf8(out).expect("UTF-8"));
    let (grows, shrinks) = (frame(&frames, "grows"), frame(&frames, "shrinks"));
    assert!(grows.fill.0 > grows.fill.2, "{grows:?}");
    assert!(shrinks.fill.2 > shrinks.fill.0, "{shrinks:?}");
}
