//! `--csv DIR`: every table (shown or data-only) as NAME.csv, raw numbers:
//! percentages and ratios as plain numbers, bytes as integers, an estimate
//! as three columns (value, low, high).

use super::view::{Cell, Document, Show, Table, View};
use super::{ExportError, Exporter, Output};

pub struct CsvExporter;

fn is_estimate_column(t: &Table, i: usize) -> bool {
    t.rows.iter().any(|r| matches!(r.get(i), Some(Cell::Estimate { .. })))
}

fn raw(v: f64) -> String {
    if v.is_finite() {
        v.to_string()
    } else {
        String::new()
    }
}

pub fn table_csv(t: &Table) -> Result<Vec<u8>, ExportError> {
    let estimate: Vec<bool> = (0..t.columns.len()).map(|i| is_estimate_column(t, i)).collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = Vec::new();
    for (c, est) in t.columns.iter().zip(&estimate) {
        header.push(c.clone());
        if *est {
            header.push(format!("{c} low"));
            header.push(format!("{c} high"));
        }
    }
    w.write_record(&header).map_err(|e| ExportError::Encode(e.to_string()))?;
    for row in &t.rows {
        let mut rec = Vec::new();
        for (i, cell) in row.iter().enumerate() {
            match cell {
                Cell::Estimate { value, low, high, .. } => {
                    rec.push(raw(*value));
                    rec.push(low.map(raw).unwrap_or_default());
                    rec.push(high.map(raw).unwrap_or_default());
                    continue;
                }
                Cell::Empty => rec.push(String::new()),
                Cell::Text(s) => rec.push(s.clone()),
                Cell::Int(v) => rec.push(v.to_string()),
                Cell::Num(v, _) | Cell::Pct(v) | Cell::Ratio(v) => rec.push(raw(*v)),
                Cell::Bytes(b) => rec.push(b.to_string()),
            }
            if estimate.get(i).copied().unwrap_or(false) {
                rec.extend([String::new(), String::new()]);
            }
        }
        w.write_record(&rec).map_err(|e| ExportError::Encode(e.to_string()))?;
    }
    w.into_inner().map_err(|e| ExportError::Encode(e.to_string()))
}

impl Exporter for CsvExporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, ExportError> {
        let mut out = Vec::new();
        for v in &doc.views {
            if let View::Table(t) = v {
                if t.show == Show::ScreenOnly {
                    continue;
                }
                out.push(Output { file: Some(format!("{}.csv", t.name)), bytes: table_csv(t)? });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_numbers_and_estimates_in_three_columns() {
        let mut t = Table::new("s", "", &["name", "median", "change"], 1);
        t.push(vec![
            Cell::text("a"),
            Cell::Estimate { value: 2.0, low: Some(1.5), high: Some(2.5), decimals: 1 },
            Cell::Pct(-4.5),
        ]);
        t.push(vec![Cell::text("b"), Cell::Num(3.0, 0), Cell::Bytes(2048)]);
        let text = String::from_utf8(table_csv(&t).unwrap()).unwrap();
        assert_eq!(text, "name,median,median low,median high,change\na,2,1.5,2.5,-4.5\nb,3,,,2048\n");
    }
}
