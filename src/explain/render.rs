//! `headroom explain` for people: each message's figures as printed and in bytes, the
//! arithmetic, the cause, what is ruled out or undecided, and the next checks.
//!
//! Everything taken from the input is escaped before it reaches the terminal: a log can hold
//! escape sequences, and echoing them raw would let a log rewrite the screen.

use std::fmt::Write as _;

use super::{CheckKind, Explanation, Iv, Report, Value};
use crate::oom_message::{Detail, Format, Quantity};

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

enum Field<'a> {
    Size(&'a Quantity),
    Bytes(u64),
    Text(String),
}

/// The figures of a message, in the order it prints them.
fn fields(detail: &Detail) -> Vec<(String, Field<'_>)> {
    fn size<'a>(name: &str, q: Option<&'a Quantity>, f: &mut Vec<(String, Field<'a>)>) {
        if let Some(q) = q {
            f.push((name.to_string(), Field::Size(q)));
        }
    }
    let mut f: Vec<(String, Field)> = Vec::new();
    match detail {
        Detail::PytorchCaching {
            requested,
            device_index,
            device_total,
            device_free,
            processes,
            this_process,
            allowed,
            allocated,
            private_pools,
            reserved_unallocated,
            ..
        } => {
            size("requested", Some(requested), &mut f);
            if let Some(i) = device_index {
                f.push(("device_index".into(), Field::Text(i.to_string())));
            }
            size("device_total", device_total.as_ref(), &mut f);
            size("device_free", device_free.as_ref(), &mut f);
            for p in processes {
                f.push((format!("process {}", p.pid), Field::Size(&p.used)));
            }
            size("this_process", this_process.as_ref(), &mut f);
            size("allowed", allowed.as_ref(), &mut f);
            size("allocated", allocated.as_ref(), &mut f);
            size("private_pools", private_pools.as_ref(), &mut f);
            size(
                "reserved_unallocated",
                reserved_unallocated.as_ref(),
                &mut f,
            );
        }
        Detail::PytorchCachingLegacy {
            requested,
            device_index,
            device_total,
            allocated,
            device_free,
            allowed,
            reserved,
            ..
        } => {
            size("requested", Some(requested), &mut f);
            f.push(("device_index".into(), Field::Text(device_index.to_string())));
            size("device_total", Some(device_total), &mut f);
            size("allocated", Some(allocated), &mut f);
            size("device_free", Some(device_free), &mut f);
            size("allowed", allowed.as_ref(), &mut f);
            size("reserved", Some(reserved), &mut f);
        }
        Detail::PytorchCudaMallocAsync {
            device_index,
            allocated,
            requested,
            device_total,
            device_free,
            limit,
        } => {
            f.push(("device_index".into(), Field::Text(device_index.to_string())));
            size("allocated", allocated.as_ref(), &mut f);
            size("requested", requested.as_ref(), &mut f);
            size("device_total", device_total.as_ref(), &mut f);
            size("device_free", device_free.as_ref(), &mut f);
            size("limit", limit.as_ref(), &mut f);
        }
        Detail::VllmStartupFreeMemory {
            device,
            device_free,
            device_total,
            gpu_memory_utilization,
            requested,
        } => {
            if let Some(d) = device {
                f.push(("device".into(), Field::Text(d.clone())));
            }
            size("device_free", Some(device_free), &mut f);
            size("device_total", Some(device_total), &mut f);
            f.push((
                "gpu_memory_utilization".into(),
                Field::Text(gpu_memory_utilization.clone()),
            ));
            size("requested", Some(requested), &mut f);
        }
        Detail::VllmNoKvCacheMemory {} => {}
        Detail::VllmKvCacheTooSmall {
            max_model_len,
            kv_cache_needed,
            kv_cache_available,
            estimated_max_model_len,
        } => {
            f.push((
                "max_model_len".into(),
                Field::Text(max_model_len.to_string()),
            ));
            size("kv_cache_needed", Some(kv_cache_needed), &mut f);
            size("kv_cache_available", Some(kv_cache_available), &mut f);
            if let Some(n) = estimated_max_model_len {
                f.push(("estimated_max_model_len".into(), Field::Text(n.to_string())));
            }
        }
        Detail::VllmMaxSeqLen {
            max_model_len,
            kv_cache_tokens,
        } => {
            f.push((
                "max_model_len".into(),
                Field::Text(max_model_len.to_string()),
            ));
            f.push((
                "kv_cache_tokens".into(),
                Field::Text(kv_cache_tokens.to_string()),
            ));
        }
        Detail::XlaResourceExhausted { requested, .. } => {
            size("requested", Some(requested), &mut f)
        }
        Detail::TfBfcAllocator {
            allocator,
            requested,
            rounded_bytes,
            op,
            stats,
            ..
        } => {
            f.push(("allocator".into(), Field::Text(allocator.clone())));
            size("requested", Some(requested), &mut f);
            if let Some(b) = rounded_bytes {
                f.push(("rounded".into(), Field::Bytes(*b)));
            }
            if let Some(op) = op {
                f.push(("op".into(), Field::Text(op.clone())));
            }
            if let Some(s) = stats {
                for (name, v) in [
                    ("pool limit", s.limit_bytes),
                    ("pool in use", s.in_use_bytes),
                    ("pool max in use", s.max_in_use_bytes),
                    ("largest free block", s.largest_free_block_bytes),
                ] {
                    if let Some(v) = v {
                        f.push((format!("{name} (line {})", s.line), Field::Bytes(v)));
                    }
                }
            }
        }
        Detail::TfOomTensor {
            shape,
            dtype,
            device,
            allocator,
            ..
        } => {
            f.push(("shape".into(), Field::Text(shape.clone())));
            for (name, v) in [
                ("dtype", dtype),
                ("device", device),
                ("allocator", allocator),
            ] {
                if let Some(v) = v {
                    f.push((name.into(), Field::Text(v.clone())));
                }
            }
        }
        Detail::NcclCalloc {
            device_index,
            requested_bytes,
        } => {
            if let Some(i) = device_index {
                f.push(("device_index".into(), Field::Text(i.to_string())));
            }
            f.push(("requested".into(), Field::Bytes(*requested_bytes)));
        }
        Detail::NcclCudaFailure {
            device_index,
            error_code,
        } => {
            if let Some(i) = device_index {
                f.push(("device_index".into(), Field::Text(i.to_string())));
            }
            if let Some(c) = error_code {
                f.push(("error_code".into(), Field::Text(c.to_string())));
            }
        }
        Detail::CublasAllocFailed { call } => {
            if let Some(c) = call {
                f.push(("call".into(), Field::Text(c.clone())));
            }
        }
        Detail::StreamExecutorAlloc { requested_bytes } => {
            f.push(("requested".into(), Field::Bytes(*requested_bytes)));
        }
        Detail::CudaDriver { error } => f.push(("error".into(), Field::Text(error.clone()))),
    }
    f
}

fn bytes_text(low: u64, high: u64) -> String {
    if low == high {
        format!("{low} B")
    } else {
        format!("{low}–{high} B")
    }
}

fn render_one(o: &mut String, e: &Explanation, index: usize, count: usize) {
    let m = &e.message;
    let raised = m
        .raised_as
        .as_deref()
        .map(|r| format!(" (raised as {})", escape(r)))
        .unwrap_or_default();
    let _ = writeln!(
        o,
        "message {index} of {count} · line {} · {}{raised}",
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
    for (i, e) in r.explanations.iter().enumerate() {
        if i > 0 {
            o.push('\n');
        }
        render_one(&mut o, e, i + 1, count);
    }
    if count == 0 {
        o.push_str("No out-of-memory message recognized.\n");
    }
    if !r.unrecognized.is_empty() {
        let _ = writeln!(
            o,
            "\n{} line(s) mention running out of memory in a format headroom does not know (not recognized, so not explained):",
            r.unrecognized.len()
        );
        for u in &r.unrecognized {
            let _ = writeln!(o, "  line {}: {}", u.line, escape(&u.text));
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
