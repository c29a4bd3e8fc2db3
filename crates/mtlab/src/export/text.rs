//! The terminal: notes as lines, tables fitted to the terminal's width,
//! plots named (they are written with `--svg`).

use std::fmt::Write;
use std::io::IsTerminal;

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, ContentArrangement};

use super::view::{Cell, Document, Show, Table, View};
use super::{Exporter, Output};

pub struct TextExporter;

/// A number with its decimals, thousands not separated (values are copied into scripts).
fn fixed(v: f64, decimals: u8) -> String {
    format!("{v:.*}", decimals as usize)
}

/// How a cell reads on screen.
pub fn cell_text(c: &Cell) -> String {
    match c {
        Cell::Empty => String::new(),
        Cell::Text(s) => s.clone(),
        Cell::Int(i) => i.to_string(),
        Cell::Num(v, d) => fixed(*v, *d),
        Cell::Pct(v) => format!("{v:+.1} %"),
        Cell::Ratio(v) => format!("{v:.2}×"),
        Cell::Bytes(b) => super::human_bytes(*b),
        Cell::Estimate { value, low, high, decimals } => match (low, high) {
            (Some(l), Some(h)) => format!("{} [{}, {}]", fixed(*value, *decimals), fixed(*l, *decimals), fixed(*h, *decimals)),
            _ => fixed(*value, *decimals),
        },
    }
}

/// The terminal's width in columns (`COLUMNS`, else what the terminal
/// says), if it is one a table can be fitted to: a terminal that reports 0
/// columns (some serial consoles and containers) once gave tables of
/// one-character columns, 1 339 lines long.
pub fn terminal_columns() -> Option<usize> {
    const NARROWEST: usize = 40;
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<usize>().ok())
        .filter(|&c| c >= NARROWEST)
        .or_else(|| comfy_table::Table::new().width().map(usize::from).filter(|&c| c >= NARROWEST))
}

/// A table as comfy-table draws it, fitted to the terminal when there is one.
pub fn render_table(t: &Table) -> String {
    let mut ct = comfy_table::Table::new();
    ct.load_style(UTF8_FULL_CONDENSED).set_header(t.columns.clone());
    if let Some(width) = terminal_columns().filter(|_| std::io::stdout().is_terminal()) {
        ct.set_content_arrangement(ContentArrangement::Dynamic).set_width(width as u16);
    }
    for row in &t.rows {
        ct.add_row(row.iter().map(cell_text).collect::<Vec<_>>());
    }
    for i in (t.numeric_from..ct.column_count()).filter(|i| !t.text_columns.contains(i)) {
        if let Some(c) = ct.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    ct.to_string()
}

pub fn render(views: &[View]) -> String {
    let mut out = String::new();
    for v in views {
        match v {
            View::Note(s) => {
                out.push_str(s);
                out.push('\n');
            }
            View::Table(t) if t.show != Show::DataOnly => {
                if !t.title.is_empty() {
                    writeln!(out, "{}", t.title).ok();
                }
                writeln!(out, "{}\n", render_table(t)).ok();
            }
            View::Table(_) | View::Plot(_) => {}
        }
    }
    out
}

impl Exporter for TextExporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, super::ExportError> {
        Ok(vec![Output { file: None, bytes: render(&doc.views).into_bytes() }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_read_as_people_write_them() {
        assert_eq!(cell_text(&Cell::Pct(4.25)), "+4.2 %");
        assert_eq!(cell_text(&Cell::Pct(-3.0)), "-3.0 %");
        assert_eq!(cell_text(&Cell::Ratio(2.734)), "2.73×");
        assert_eq!(cell_text(&Cell::Bytes(1536)), "1.5 KiB");
        assert_eq!(cell_text(&Cell::Num(12.345, 1)), "12.3");
        let e = Cell::Estimate { value: 1.5, low: Some(1.25), high: Some(1.75), decimals: 2 };
        assert_eq!(cell_text(&e), "1.50 [1.25, 1.75]");
    }

    #[test]
    fn data_only_tables_and_plots_stay_off_the_screen() {
        let mut t = Table::new("a", "shown", &["x", "y"], 1);
        t.push(vec![Cell::text("row"), Cell::Int(3)]);
        let hidden = Table::new("b", "hidden", &["x"], 1).data_only();
        let text = render(&[View::Note("hello".into()), View::Table(t), View::Table(hidden)]);
        assert!(text.starts_with("hello\nshown\n"), "{text}");
        assert!(text.contains("row") && !text.contains("hidden"), "{text}");
    }
}
