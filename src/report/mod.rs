//! What a run hands back: `summary.json`, the summary table on the terminal, and the reports
//! derived from a finished run's files (plots, trace, Markdown, JUnit), plus comparing and
//! merging result folders.

/// A value's name as its JSON spells it (`stopped_at_floor`, `oom`): the one spelling of a
/// status, result or cause in text too, never a `Debug` name.
pub fn word<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

pub mod artifacts;
pub mod compare;
pub mod complete;
pub mod deadline;
pub mod device_total;
pub mod escape;
mod event_rows;
pub mod graphs;
pub mod imported;
pub mod junit;
pub mod markdown;
pub mod md_table;
pub mod plot;
pub mod progress;
pub mod rundata;
pub mod summary;
mod summary_fields;
pub mod table;
pub mod timeline_downsample;
pub mod trace;
pub mod watch;
pub mod watch_markdown;

/// Text escaped for XML content and attribute values.
pub fn xml_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // Characters XML 1.0 cannot carry at all.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}
