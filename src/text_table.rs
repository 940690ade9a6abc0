//! Aligned text tables for people (the run and watch summaries, compare, the crosscheck,
//! bandwidth), built on `comfy-table`: no borders, one space between columns, widths from the
//! content, text columns left-aligned and figures right-aligned. Every command prints its
//! tables through here, the peaks table through `peaks_table`, so they all read alike.

use comfy_table::presets::NOTHING;
use comfy_table::{CellAlignment, Table};

/// How a column's cells are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// A table with these columns (header, alignment).
pub struct TextTable {
    table: Table,
}

impl TextTable {
    pub fn new(columns: &[(&str, Align)]) -> TextTable {
        let mut table = Table::new();
        table.load_preset(NOTHING);
        table.set_header(columns.iter().map(|(h, _)| *h));
        for (i, (_, align)) in columns.iter().enumerate() {
            if let Some(c) = table.column_mut(i) {
                c.set_padding((0, 1));
                c.set_cell_alignment(match align {
                    Align::Left => CellAlignment::Left,
                    Align::Right => CellAlignment::Right,
                });
            }
        }
        TextTable { table }
    }

    pub fn row<I, S>(&mut self, cells: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.table
            .add_row(cells.into_iter().map(Into::into).collect::<Vec<String>>());
    }

    /// The table's lines, each ending in a newline, without trailing spaces.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for line in self.table.to_string().lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A byte count for people, or `-` where there is none.
pub fn bytes_cell(v: Option<u64>) -> String {
    v.map_or("-".to_string(), |b| crate::units::Bytes(b).to_string())
}

/// One view's row of the peaks table.
pub struct PeakRow<'a> {
    pub view: &'a str,
    pub idle_bytes: Option<u64>,
    pub peak_bytes: Option<u64>,
    pub poll_1hz_bytes: Option<u64>,
    pub poll_10hz_bytes: Option<u64>,
}

/// The peaks table, as `run` and `watch` print it: per view, the idle reading, the true peak and
/// what a 1 Hz and a 10 Hz poller would have shown (`-`: no figure).
pub fn peaks_table<'a>(rows: impl IntoIterator<Item = PeakRow<'a>>) -> String {
    let mut t = TextTable::new(&[
        ("view", Align::Left),
        ("idle", Align::Right),
        ("true peak", Align::Right),
        ("1 Hz poll", Align::Right),
        ("10 Hz poll", Align::Right),
    ]);
    for r in rows {
        t.row([
            r.view.to_string(),
            bytes_cell(r.idle_bytes),
            bytes_cell(r.peak_bytes),
            bytes_cell(r.poll_1hz_bytes),
            bytes_cell(r.poll_10hz_bytes),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_fit_their_widest_cell_and_figures_align_right() {
        let mut t = TextTable::new(&[("view", Align::Left), ("peak", Align::Right)]);
        t.row(["device_used_bytes", "3.00 GiB"]);
        t.row(["own", "12 B"]);
        assert_eq!(
            t.render(),
            "view                  peak\ndevice_used_bytes 3.00 GiB\nown                   12 B\n"
        );
    }
}
