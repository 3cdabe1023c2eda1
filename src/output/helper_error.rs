//! Output stage, `-k`/`-kk` reports: a helper call failed at a script site.
//! Input: the site ([`HelperErrorSite`]), the helper's return code and the
//! script sources; output: bpftrace 0.17's warning (`FILE:LINE:COL-COL:
//! WARNING: Failed to HELPER: MESSAGE (CODE)`, the line, a `~` marker) or
//! its `{"type": "helper_error", …}` JSON line.

use crate::codegen::helpers;
use crate::frontend::diag::SourceMap;
use crate::output::text::strerror_text;
use crate::vocab::HelperErrorSite;

/// The warning's message: the helper and why it failed (a lookup that finds
/// nothing returns 0, printed as such).
fn failure(site: &HelperErrorSite, code: i64) -> String {
    let helper = helpers::name(site.helper);
    match code < 0 {
        true => format!(
            "Failed to {helper}: {} ({code})",
            strerror_text(code.unsigned_abs())
        ),
        false => format!("Failed to {helper}: {code}"),
    }
}

/// The text warning, with the site's line and a marker under the span when
/// the span is on one line (bpftrace shows tabs as four spaces).
pub fn text(site: &HelperErrorSite, code: i64, sources: &SourceMap) -> String {
    let message = failure(site, code);
    let (Some(start), Some(end)) = (
        sources.position(site.span.start),
        sources.position(site.span.end),
    ) else {
        return format!("WARNING: {message}\n");
    };
    if start.line != end.line {
        return format!(
            "{}:{}-{}: WARNING: {message}\n",
            start.name, start.line, end.line
        );
    }
    let mut text = format!(
        "{}:{}:{}-{}: WARNING: {message}\n",
        start.name, start.line, start.column, end.column
    );
    let widen = |c: char, mark: char| match c {
        '\t' => mark.to_string().repeat(4),
        _ => mark.to_string(),
    };
    text.extend(
        start
            .text
            .chars()
            .map(|c| widen(c, if c == '\t' { ' ' } else { c })),
    );
    text.push('\n');
    for (at, c) in start
        .text
        .char_indices()
        .take_while(|(at, _)| *at + 1 < end.column)
    {
        let mark = if at + 1 < start.column { ' ' } else { '~' };
        text.push_str(&widen(c, mark));
    }
    text.push('\n');
    text
}

/// The JSON line: helper, return code, and where (line and first column).
pub fn json(site: &HelperErrorSite, code: i64, sources: &SourceMap) -> String {
    let (line, column) = sources
        .position(site.span.start)
        .map_or((0, 0), |at| (at.line, at.column));
    format!(
        "{{\"type\": \"helper_error\", \"helper\": \"{}\", \"retcode\": {code}, \"line\": {line}, \"col\": {column}}}\n",
        helpers::name(site.helper)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codegen::helpers::{MAP_DELETE_ELEM, MAP_LOOKUP_ELEM, PROBE_READ_KERNEL};
    use crate::frontend::ast::Span;

    fn site(helper: u32, text: &str, what: &str) -> HelperErrorSite {
        let start = text.find(what).expect("in the script");
        HelperErrorSite {
            helper,
            span: Span::new(start, start + what.len()),
        }
    }

    /// The text form is bpftrace's: location, errno text and code, line, marker.
    #[test]
    fn text_names_the_site() {
        let script = "BEGIN {\n\t@[1] = 1; delete(@[2]); exit(); }\n";
        let sources = SourceMap::new([("k.bt", script)]);
        let site = site(MAP_DELETE_ELEM, script, "delete(@[2])");
        assert_eq!(
            text(&site, -2, &sources),
            "k.bt:2:12-24: WARNING: Failed to map_delete_elem: No such file or directory (-2)\n\
             \x20   @[1] = 1; delete(@[2]); exit(); }\n\
             \x20             ~~~~~~~~~~~~\n"
        );
    }

    /// A failed lookup prints its 0; JSON gives the line and first column.
    #[test]
    fn lookups_and_json() {
        let script = "BEGIN { $x = @[2]; }";
        let sources = SourceMap::new([("stdin", script)]);
        let lookup = site(MAP_LOOKUP_ELEM, script, "@[2]");
        assert!(
            text(&lookup, 0, &sources)
                .starts_with("stdin:1:14-18: WARNING: Failed to map_lookup_elem: 0\n")
        );
        let read = site(PROBE_READ_KERNEL, script, "$x");
        assert_eq!(
            json(&read, -14, &sources),
            "{\"type\": \"helper_error\", \"helper\": \"probe_read_kernel\", \"retcode\": -14, \"line\": 1, \"col\": 9}\n"
        );
    }
}
