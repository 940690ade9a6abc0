//! `headroom explain` for people: each message's figures as printed and in bytes, the
//! arithmetic, the cause, what is ruled out or undecided, and the next checks.
//!
//! Everything taken from the input is escaped before it reaches the terminal: a log can hold
//! escape sequences, and echoing them raw would let a log rewrite the screen.

use std::fmt::Write as _;

use super::{CheckKind, Explanation, Iv, Repeat, Report, Value};
use crate::oom_message::Format;

/// Control characters (and bidirectional overrides) as visible escapes; `\n` as `\n`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control()
                || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The message as one escaped line, cut to `max` characters.
fn excerpt(s: &str, max: usize) -> String {
    let one_line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut: String = one_line.chars().take(max).collect();
    let more = if cut.len() < one_line.len() {
        "…"
    } else {
        ""
    };
    format!("{}{more}", escape(&cut))
}

mod fields;

use fields::{Field, fields};

fn bytes_text(low: u64, high: u64) -> String {
    if low == high {
        format!("{low} B")
    } else {
        format!("{low}–{high} B")
    }
}

/// How often a repeated message was printed, for its heading.
fn times(r: &Repeat) -> String {
    format!(
        "printed {} times, lines {}–{}",
        r.count, r.first_line, r.last_line
    )
}

fn render_one(
    o: &mut String,
    e: &Explanation,
    index: usize,
    count: Option<usize>,
    repeat: Option<&Repeat>,
) {
    let m = &e.message;
    let raised = m
        .raised_as
        .as_deref()
        .map(|r| format!(" (raised as {})", escape(r)))
        .unwrap_or_default();
    let of = count.map(|n| format!(" of {n}")).unwrap_or_default();
    let repeated = repeat
        .map(|r| format!(" · {}", times(r)))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "message {index}{of} · line {} · {}{raised}{repeated}",
        m.span.line,
        m.format().name()
    );
    let _ = writeln!(o, "  \"{}\"", excerpt(&m.text, 160));
    let rows = fields(&m.detail);
    if !rows.is_empty() {
        let _ = writeln!(o, "\n  {:<24}{:>14}   bytes", "figure", "as printed");
        for (name, field) in rows {
            let (shown, exact) = match field {
                Field::Size(q) => (escape(&q.printed), bytes_text(q.bytes.low, q.bytes.high)),
                Field::Bytes(b) => (b.to_string(), bytes_text(b, b)),
                Field::Text(t) => (escape(&t), String::new()),
            };
            let line = format!("    {:<24}{:>14}   {exact}", escape(&name), shown);
            let _ = writeln!(o, "{}", line.trim_end());
        }
    }
    if !e.arithmetic.is_empty() {
        let _ = writeln!(o, "\n  arithmetic");
        for s in &e.arithmetic {
            let value = match s.value {
                Value::Bytes { low, high } => Iv {
                    low: i128::from(low),
                    high: i128::from(high),
                }
                .to_string(),
                Value::Fraction { low, high } => super::interval::percent((low, high)),
                Value::Count { value } => value.to_string(),
            };
            let _ = writeln!(o, "    {:<34}{value:>18}   = {}", s.name, s.formula);
        }
    }
    let _ = writeln!(o);
    match e.cause {
        Some(c) => {
            let _ = writeln!(o, "  cause: {c}");
        }
        None => {
            let _ = writeln!(o, "  cause: undecided");
        }
    }
    let _ = writeln!(o, "    {}", e.summary);
    if !e.secondary_causes.is_empty() {
        let _ = writeln!(
            o,
            "  also: {}",
            crate::cause::join(&e.secondary_causes, ", ")
        );
    }
    let mut list = |title: &str, items: Vec<String>| {
        if !items.is_empty() {
            let _ = writeln!(o, "  {title}");
            for i in items {
                let _ = writeln!(o, "    - {i}");
            }
        }
    };
    list("ruled out", e.ruled_out.clone());
    list(
        "undecided",
        e.undecided
            .iter()
            .map(|u| {
                format!(
                    "{} ({}): {}",
                    u.question,
                    crate::cause::join(&u.candidates, " or "),
                    u.why
                )
            })
            .collect(),
    );
    list("findings", e.findings.clone());
    if !e.next_checks.is_empty() {
        let _ = writeln!(o, "  next checks");
        for c in &e.next_checks {
            let prompt = match c.kind {
                CheckKind::Shell => "$",
                CheckKind::Python => ">>>",
            };
            let _ = writeln!(o, "    {prompt} {}\n        {}", c.command, c.why);
        }
    }
}

/// The whole report as text.
pub fn render_text(r: &Report) -> String {
    let mut o = String::new();
    let count = r.explanations.len();
    // Repeats are in order of the message they repeat.
    let mut repeats = r.repeats.iter().peekable();
    for (i, e) in r.explanations.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        let repeat = repeats.next_if(|x| x.message == i + 1);
        render_one(&mut o, e, i + 1, Some(count), repeat);
    }
    o.push_str(&render_tail(r, count));
    o
}

/// One explanation on its own, for a streamed report (`count` unknown while streaming).
pub fn render_message(e: &Explanation, index: usize, count: Option<usize>) -> String {
    let mut o = String::new();
    render_one(&mut o, e, index, count, None);
    o
}

/// What follows the explanations: the repeated messages when the explanations were printed
/// before their repeats were counted (a streamed report holds none of them), the unrecognized
/// lines, and the known formats when nothing was recognized. `count` is the number of distinct
/// messages explained.
pub fn render_tail(r: &Report, count: usize) -> String {
    let mut o = String::new();
    if count == 0 {
        o.push_str("No out-of-memory message recognized.\n");
    }
    if r.explanations.is_empty() && !r.repeats.is_empty() {
        let _ = writeln!(o, "\nrepeated messages (each explained once, above):");
        for x in &r.repeats {
            let _ = writeln!(o, "  message {}: {}", x.message, times(x));
        }
    }
    if !r.unrecognized.is_empty() {
        let _ = writeln!(
            o,
            "\n{} line(s) mention running out of memory in a format headroom does not know (not recognized, so not explained):",
            r.unrecognized.len() as u64
                + r.unrecognized_repeats
                    .iter()
                    .map(|x| x.count - 1)
                    .sum::<u64>()
                + r.unrecognized_left_out
        );
        let mut repeats = r.unrecognized_repeats.iter().peekable();
        for (i, u) in r.unrecognized.iter().enumerate() {
            let repeat = repeats.next_if(|x| x.message == i + 1);
            let repeated = repeat
                .map(|x| format!(" ({})", times(x)))
                .unwrap_or_default();
            let _ = writeln!(o, "  line {}: {}{repeated}", u.line, escape(&u.text));
        }
        if r.unrecognized_left_out > 0 {
            let _ = writeln!(o, "  … and {} more", r.unrecognized_left_out);
        }
    }
    if count == 0 {
        let _ = writeln!(o, "\nKnown formats:");
        for f in Format::ALL {
            let _ = writeln!(o, "  {:<28}{}", f.name(), f.example());
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_the_terminal_raw() {
        assert_eq!(escape("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(escape("x\ny\u{202e}"), "x\\ny\\u{202e}");
        assert_eq!(escape("GiB é"), "GiB é");
        assert_eq!(excerpt("a  b\n c", 10), "a b c");
        assert_eq!(excerpt("abcdef", 3), "abc…");
    }
}
