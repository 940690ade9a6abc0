//! Text from a run (workload, phase and step names, error messages) made safe to show: no
//! control character reaches a terminal raw (an `ESC[2J` in a phase name would clear the
//! screen of whoever prints the report), and no name becomes HTML in a Markdown viewer.

use std::fmt::Write as _;

/// Control characters and bidirectional overrides written as `\u{1b}`; line breaks and tabs
/// kept only where `keep_lines` (whole documents), escaped otherwise (one name, one cell).
fn visible_into(out: &mut String, s: &str, keep_lines: bool) {
    for c in s.chars() {
        match c {
            '\n' | '\t' if keep_lines => out.push(c),
            c if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
}

/// A whole document for a terminal or a file: every control character but line breaks and
/// tabs escaped.
pub fn document(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    visible_into(&mut out, s, true);
    out
}

/// One line of text for a terminal (a folder name, a workload or phase name, a message):
/// every control character escaped, line breaks included.
pub fn line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    visible_into(&mut out, s, false);
    out
}

/// One piece of text inside Markdown: control characters escaped, and `&`, `<`, `>` written as
/// entities so a name such as `<script>` stays text in every renderer.
pub fn md(s: &str) -> String {
    let mut plain = String::with_capacity(s.len());
    visible_into(&mut plain, s, false);
    let mut out = String::with_capacity(plain.len());
    for c in plain.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_text() {
        assert_eq!(
            md("<script>a&b</script>"),
            "&lt;script&gt;a&amp;b&lt;/script&gt;"
        );
        assert_eq!(md("x\u{1b}[2Jy\nz"), "x\\u{1b}[2Jy\\u{a}z");
        assert_eq!(document("a\u{1b}[2J\nb\tc\u{7}"), "a\\u{1b}[2J\nb\tc\\u{7}");
        assert_eq!(md("GiB é −"), "GiB é −");
        assert_eq!(line("a\u{1b}[31mb\nc<d>"), "a\\u{1b}[31mb\\u{a}c<d>");
    }
}
