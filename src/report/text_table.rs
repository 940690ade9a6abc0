//! Aligned text tables for people (the run summary, the crosscheck, bandwidth), built on
//! `comfy-table`: no borders, one space between columns, widths from the content, text
//! columns left-aligned and figures right-aligned.

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
