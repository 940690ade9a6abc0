//! Markdown tables, written one way for every report (`report.md`, a watch's and an import's
//! parts, `compare`, `node.md`, `merge`, a plan's claims): the header with each column's
//! alignment, rows, and cells escaped through `report::escape`.

use crate::report::escape::md;

/// How a column's cells line up: text to the left, figures to the right.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

pub use Align::{Left, Right};

/// A table's header and its alignment line (`| a | b |` and `| --- | ---: |`), without the
/// final line break. A column without a name is written `| |`.
pub fn header(columns: &[(&str, Align)]) -> String {
    let mut names = String::from("|");
    let mut rule = String::from("|");
    for (name, align) in columns {
        if name.is_empty() {
            names.push_str(" |");
        } else {
            names.push(' ');
            names.push_str(name);
            names.push_str(" |");
        }
        rule.push_str(match align {
            Left => " --- |",
            Right => " ---: |",
        });
    }
    format!("{names}\n{rule}")
}

/// One row of already written cells (`| a | b |`), without the final line break.
pub fn row<S: AsRef<str>>(cells: &[S]) -> String {
    let mut out = String::from("|");
    for c in cells {
        out.push(' ');
        out.push_str(c.as_ref());
        out.push_str(" |");
    }
    out
}

/// A table cell from text of a run: escaped (`escape::md`), pipes escaped, line breaks
/// flattened.
pub fn cell(s: &str) -> String {
    md(&s.replace(['\n', '\r'], " ")).replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_names_each_column_and_its_alignment() {
        assert_eq!(
            header(&[("view", Left), ("", Left), ("bytes", Right)]),
            "| view | | bytes |\n| --- | --- | ---: |"
        );
    }

    #[test]
    fn a_row_is_its_cells_between_pipes() {
        assert_eq!(row(&["a", "", "3"]), "| a |  | 3 |");
        assert_eq!(row(&[format!("{}", 7)]), "| 7 |");
    }

    #[test]
    fn a_cell_keeps_markup_and_lines_out() {
        assert_eq!(cell("a|b\n<c>"), "a\\|b &lt;c&gt;");
    }
}
