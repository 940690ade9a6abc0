//! The recorded reports in the shapes pastes take on their way to an issue: each message that
//! headroom reads clean is given a log prefix, a terminal's hard wrap, a container log's JSON
//! line, colour codes, a web page's non-breaking spaces, … and must still give every recorded
//! figure inside its interval and the same cause. A reader that knows a format only as its
//! corpus printed it fails here.

use crate::oom_reports::{Report, judge, load};

/// One shape a paste takes, applied to a whole message.
struct Shape {
    name: &'static str,
    apply: fn(&str) -> String,
}

fn each_line(text: &str, f: impl Fn(&str) -> String) -> String {
    text.lines().map(f).collect::<Vec<_>>().join("\n")
}

/// Breaks every line longer than `width` at the last space before it (a mail client, a
/// narrow terminal's copy); a word longer than the width is broken inside.
fn wrap_at_spaces(text: &str, width: usize) -> String {
    each_line(text, |line| {
        let mut out = String::new();
        let mut rest = line;
        while rest.chars().count() > width {
            let cut = rest
                .char_indices()
                .nth(width)
                .map_or(rest.len(), |(i, _)| i);
            let at = rest[..cut].rfind(' ').filter(|&i| i > 0).unwrap_or(cut);
            out.push_str(&rest[..at]);
            out.push('\n');
            rest = rest[at..].trim_start_matches(' ');
        }
        out.push_str(rest);
        out
    })
}

/// Breaks every line at exactly `width` characters, inside words and numbers (a terminal's
/// copy of soft-wrapped output).
fn wrap_hard(text: &str, width: usize) -> String {
    each_line(text, |line| {
        let chars: Vec<char> = line.chars().collect();
        chars
            .chunks(width)
            .map(|c| c.iter().collect::<String>())
            .collect::<Vec<_>>()
            .join("\n")
    })
}

fn json_escape(line: &str) -> String {
    let mut s = String::new();
    for c in line.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 => s.push_str(&format!("\\u{:04x}", c as u32)),
            c => s.push(c),
        }
    }
    s
}

const SHAPES: &[Shape] = &[
    Shape {
        name: "python logging prefix",
        apply: |t| {
            each_line(t, |l| {
                format!("2025-03-04 05:06:07,890 - trainer - ERROR - {l}")
            })
        },
    },
    Shape {
        name: "torchrun rank prefix",
        apply: |t| each_line(t, |l| format!("[rank3]: {l}")),
    },
    Shape {
        name: "glog prefix",
        apply: |t| {
            each_line(t, |l| {
                format!("E0304 05:06:07.890123  4242 main.cc:88] {l}")
            })
        },
    },
    Shape {
        name: "Ray worker prefix",
        apply: |t| {
            each_line(t, |l| {
                format!("(RayWorkerWrapper pid=4242, ip=10.0.0.7) {l}")
            })
        },
    },
    Shape {
        name: "srun --label prefix",
        apply: |t| each_line(t, |l| format!("3: {l}")),
    },
    Shape {
        name: "syslog prefix",
        apply: |t| each_line(t, |l| format!("Mar  4 05:06:07 HOST python3[4242]: {l}")),
    },
    Shape {
        name: "ISO timestamp in brackets",
        apply: |t| each_line(t, |l| format!("[2025-03-04T05:06:07.890Z] {l}")),
    },
    Shape {
        name: "container log JSON lines",
        apply: |t| {
            each_line(t, |l| {
                format!(
                    "{{\"log\":\"{}\\n\",\"stream\":\"stderr\",\"time\":\"2025-03-04T05:06:07.890123456Z\"}}",
                    json_escape(l)
                )
            })
        },
    },
    Shape {
        name: "CRLF line ends",
        apply: |t| t.replace('\n', "\r\n"),
    },
    Shape {
        name: "ANSI colour per line",
        apply: |t| each_line(t, |l| format!("\u{1b}[31m{l}\u{1b}[0m")),
    },
    Shape {
        name: "Markdown quote",
        apply: |t| each_line(t, |l| format!("> {l}")),
    },
    Shape {
        name: "indented by a tab",
        apply: |t| each_line(t, |l| format!("\t{l}")),
    },
    Shape {
        name: "wrapped at spaces, 72 columns",
        apply: |t| wrap_at_spaces(t, 72),
    },
    Shape {
        name: "wrapped mid-word, 100 columns",
        apply: |t| wrap_hard(t, 100),
    },
    Shape {
        name: "lines run together",
        apply: |t| t.lines().map(str::trim).collect::<Vec<_>>().join(" "),
    },
    Shape {
        name: "non-breaking spaces",
        apply: |t| t.replace(' ', "\u{a0}"),
    },
    Shape {
        name: "said twice, a retry between",
        apply: |t| format!("{t}\nretrying with a smaller batch (1 of 3)\n{t}"),
    },
];

/// Per shape: reports kept (read clean before the shape), reports still read clean with the
/// same cause, and the first few that were not.
#[test]
fn the_recorded_reports_are_read_in_every_paste_shape() {
    let mut base: Vec<(Report, String)> = Vec::new();
    for part in ["fitted", "held-out"] {
        for r in load(part) {
            let (why, cause) = judge(&r, &r.message);
            if why.is_empty() {
                base.push((r, cause));
            }
        }
    }
    assert!(base.len() >= 300, "{} reports read clean", base.len());
    let mut worst = 100.0f64;
    let mut lines = Vec::new();
    for shape in SHAPES {
        let mut kept = 0;
        let mut misses = Vec::new();
        for (r, cause) in &base {
            let shaped = (shape.apply)(&r.message);
            let (why, got) = judge(r, &shaped);
            if why.is_empty() && &got == cause {
                kept += 1;
            } else {
                let mut w = why.join("; ");
                if &got != cause {
                    w.push_str(&format!(" cause {got}, was {cause}"));
                }
                misses.push(format!("{}: {}", r.id, w.trim()));
            }
        }
        let pct = 100.0 * kept as f64 / base.len() as f64;
        worst = worst.min(pct);
        lines.push(format!(
            "{}: {kept} of {} ({pct:.1}%)",
            shape.name,
            base.len()
        ));
        for m in misses.iter().take(4) {
            lines.push(format!("  {m}"));
        }
    }
    println!("{}", lines.join("\n"));
    assert!(worst >= FLOOR_PERCENT, "{}", lines.join("\n"));
}

/// The least share of the reports any one shape keeps (today 99.2 %, a wrap at spaces at 72
/// columns: three sizes printed on the lines around a message are not found once those lines
/// are wrapped; four lost reports of 390 fall below the floor).
const FLOOR_PERCENT: f64 = 99.0;
