//! `headroom diff` for people: text for a terminal, a Markdown table for a pull request.

use std::fmt::Write as _;

use crate::report::md_table::{self, Left, Right, cell};
use crate::text_table::{Align, TextTable};
use crate::units::{Bytes, SignedBytes};

use super::{Delta, Diff, HeldRow, SideInfo};

fn opt(v: Option<u64>, count: bool) -> String {
    match v {
        None => "-".into(),
        Some(v) if count => v.to_string(),
        Some(v) => Bytes(v).to_string(),
    }
}

fn delta(d: &Delta) -> String {
    let count = !d.name.ends_with("_bytes");
    match d.delta {
        None => "-".into(),
        Some(x) if count => format!("{x:+}"),
        Some(x) => format!("{} ({x:+} B)", SignedBytes(x as i128)),
    }
}

fn side_line(o: &mut String, tag: &str, s: &SideInfo) {
    let _ = writeln!(
        o,
        "{tag}: {} ({}{}){}",
        s.source,
        s.kind,
        s.device_index
            .map_or(String::new(), |d| format!(", device {d}")),
        s.peak_entry.map_or(String::new(), |e| format!(
            ", allocated peak at trace entry {e}"
        ))
    );
}

/// The text report.
pub fn text(d: &Diff) -> String {
    let mut o = String::new();
    side_line(&mut o, "A", &d.a);
    side_line(&mut o, "B", &d.b);
    let mut figures = TextTable::new(&[
        ("figure", Align::Left),
        ("A", Align::Right),
        ("B", Align::Right),
        ("B − A", Align::Left),
    ]);
    for f in &d.figures {
        let count = !f.name.ends_with("_bytes");
        figures.row([f.name.clone(), opt(f.a, count), opt(f.b, count), delta(f)]);
    }
    let _ = writeln!(o);
    o.push_str(&figures.render());
    if !d.by_category.is_empty() {
        let _ = writeln!(o, "\nat the peak, by category");
        o.push_str(&held_table("category", &d.by_category, false));
    }
    if !d.lines.is_empty() {
        let _ = writeln!(o, "\nsource lines whose memory at the peak changed most");
        o.push_str(&held_table("source line", &d.lines, true));
        if d.lines_not_listed > 0 {
            let _ = writeln!(o, "  … and {} more lines", d.lines_not_listed);
        }
    }
    if let Some(n) = &d.largest_new_allocation {
        let _ = writeln!(
            o,
            "\nlargest new allocation: {} ({} B) at {} [{}]",
            Bytes(n.requested_bytes),
            n.requested_bytes,
            if n.origin_path.is_empty() {
                &n.origin
            } else {
                &n.origin_path
            },
            n.category.name()
        );
    }
    if !d.settings.is_empty() {
        let _ = writeln!(o, "\nallocator settings that differ");
        for s in &d.settings {
            let _ = writeln!(
                o,
                "  {}: {} → {}",
                s.name,
                setting(s.a.as_deref()),
                setting(s.b.as_deref())
            );
        }
    }
    for (tag, s) in [("A", &d.a), ("B", &d.b)] {
        for n in &s.notes {
            let _ = writeln!(o, "note ({tag}): {n}");
        }
    }
    o
}

/// A setting's value for people: empty text said so.
fn setting(v: Option<&str>) -> String {
    match v {
        None => "(not recorded)".into(),
        Some("") => "(empty)".into(),
        Some(v) => v.into(),
    }
}

/// Memory held at the peak per category or source line, A against B.
fn held_table(what: &str, rows: &[HeldRow], line: bool) -> String {
    let mut columns = vec![
        (what, Align::Left),
        ("A", Align::Right),
        ("B", Align::Right),
        ("B − A", Align::Left),
    ];
    if line {
        columns.push(("category", Align::Left));
    }
    let mut t = TextTable::new(&columns);
    for r in rows {
        let mut cells = vec![
            r.name.clone(),
            Bytes(r.a_bytes).to_string(),
            Bytes(r.b_bytes).to_string(),
            format!(
                "{} ({:+} B)",
                SignedBytes(r.delta_bytes as i128),
                r.delta_bytes
            ),
        ];
        if line {
            cells.push(r.category.to_string());
        }
        t.row(cells);
    }
    t.render()
}

/// The Markdown tables, for a pull-request comment.
pub fn markdown(d: &Diff) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "**A** {} · **B** {}\n",
        cell(&d.a.source),
        cell(&d.b.source)
    );
    let _ = writeln!(
        o,
        "{}",
        md_table::header(&[("", Left), ("A", Right), ("B", Right), ("B − A", Right)])
    );
    for f in &d.figures {
        let count = !f.name.ends_with("_bytes");
        let _ = writeln!(
            o,
            "{}",
            md_table::row(&[
                format!("`{}`", f.name),
                opt(f.a, count),
                opt(f.b, count),
                delta(f)
            ])
        );
    }
    for (title, rows, is_line) in [
        ("By category, at the peak", &d.by_category, false),
        ("Source lines that changed most", &d.lines, true),
    ] {
        if rows.is_empty() {
            continue;
        }
        let mut columns = vec![(if is_line { "line" } else { "category" }, Left)];
        if is_line {
            columns.push(("category", Left));
        }
        columns.extend([
            ("A", Right),
            ("B", Right),
            ("B − A", Right),
            ("bytes", Right),
        ]);
        let _ = writeln!(o, "\n{title}:\n\n{}", md_table::header(&columns));
        for r in rows {
            let mut cells = vec![cell(&r.name)];
            if is_line {
                cells.push(r.category.clone());
            }
            cells.extend([
                Bytes(r.a_bytes).to_string(),
                Bytes(r.b_bytes).to_string(),
                SignedBytes(r.delta_bytes as i128).to_string(),
                format!("{:+}", r.delta_bytes),
            ]);
            let _ = writeln!(o, "{}", md_table::row(&cells));
        }
    }
    if let Some(n) = &d.largest_new_allocation {
        let _ = writeln!(
            o,
            "\nLargest new allocation: {} at `{}` ({}).",
            Bytes(n.requested_bytes),
            cell(&n.origin),
            n.category.name()
        );
    }
    for s in &d.settings {
        let _ = writeln!(
            o,
            "\nSetting `{}`: {} → {}",
            cell(&s.name),
            cell(&setting(s.a.as_deref())),
            cell(&setting(s.b.as_deref()))
        );
    }
    o
}
