//! What a study or report shows, without saying how: tables of typed cells,
//! plots of numbers, notes. Exporters turn views into text, CSV or SVG, so the
//! modules that build views contain no formatting.

use serde::Serialize;

/// One value in a table. Exporters choose the text; CSV keeps raw numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum Cell {
    Empty,
    Text(String),
    Int(i64),
    /// A number with this many decimals on screen.
    Num(f64, u8),
    /// A signed change in percent (`+4.2 %`).
    Pct(f64),
    /// A ratio (`2.73×`).
    Ratio(f64),
    Bytes(u64),
    /// A value with its confidence interval; `decimals` as in `Num`.
    Estimate { value: f64, low: Option<f64>, high: Option<f64>, decimals: u8 },
}

impl Cell {
    pub fn text(s: impl Into<String>) -> Cell {
        Cell::Text(s.into())
    }
    /// A number, or empty when absent or not finite.
    pub fn num(v: Option<f64>, decimals: u8) -> Cell {
        match v {
            Some(v) if v.is_finite() => Cell::Num(v, decimals),
            _ => Cell::Empty,
        }
    }
    pub fn pct(v: Option<f64>) -> Cell {
        match v {
            Some(v) if v.is_finite() => Cell::Pct(v),
            _ => Cell::Empty,
        }
    }
}

/// Where a table appears.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Show {
    /// On screen and in CSV.
    Everywhere,
    /// Only in CSV (long tables of raw values).
    DataOnly,
    /// Only on screen (its data goes to CSV in another, raw table).
    ScreenOnly,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table {
    /// File stem for CSV (`summary` → summary.csv).
    pub name: String,
    pub title: String,
    pub columns: Vec<String>,
    /// Columns from this index on are numbers (right-aligned) ...
    pub numeric_from: usize,
    /// ... except these, which are text.
    pub text_columns: Vec<usize>,
    pub rows: Vec<Vec<Cell>>,
    pub show: Show,
}

impl Table {
    pub fn new(name: &str, title: impl Into<String>, columns: &[&str], numeric_from: usize) -> Table {
        Table {
            name: name.into(),
            title: title.into(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            numeric_from,
            text_columns: Vec::new(),
            rows: Vec::new(),
            show: Show::Everywhere,
        }
    }
    pub fn data_only(mut self) -> Table {
        self.show = Show::DataOnly;
        self
    }
    pub fn screen_only(mut self) -> Table {
        self.show = Show::ScreenOnly;
        self
    }
    /// Column `i` is text even past `numeric_from`.
    pub fn text_column(mut self, i: usize) -> Table {
        self.text_columns.push(i);
        self
    }
    pub fn push(&mut self, row: Vec<Cell>) {
        self.rows.push(row);
    }
}

/// How an axis maps values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Scale {
    Linear,
    /// Powers of two, labelled as byte sizes (64KiB, 1MiB).
    Log2Bytes,
    Log2,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// Interval of y, drawn as an error bar.
    pub low: Option<f64>,
    pub high: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Series {
    pub name: String,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bar {
    pub value: f64,
    pub low: Option<f64>,
    pub high: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum PlotKind {
    /// One line per series against a numeric x.
    Line { x_scale: Scale, series: Vec<Series> },
    /// For each group (x tick), one bar per series; `None` where a series has no value.
    GroupedBars { groups: Vec<String>, series: Vec<(String, Vec<Option<Bar>>)> },
    /// `values[row][column]`; `None` where nothing was measured.
    Heatmap {
        rows: Vec<String>,
        columns: Vec<String>,
        values: Vec<Vec<Option<f64>>>,
        higher_is_better: bool,
        /// Lines drawn below these rows and right of these columns.
        row_boundaries: Vec<Boundary>,
        column_boundaries: Vec<Boundary>,
    },
}

/// A line between two rows or columns of a heat map, e.g. where the
/// package or the shared cache of the CPUs changes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Boundary {
    /// The line follows row (or column) `after`.
    pub after: usize,
    /// A strong line (a package boundary) or a light one (a cache boundary).
    pub strong: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plot {
    /// File stem for SVG.
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: PlotKind,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum View {
    /// A line of text (a finding, a recommendation, a caveat).
    Note(String),
    Table(Table),
    Plot(Plot),
}

/// Everything one command shows: views for people, `data` for programs
/// (what `--json` prints, unchanged).
#[derive(Debug, Clone)]
pub struct Document {
    pub views: Vec<View>,
    pub data: serde_json::Value,
}
