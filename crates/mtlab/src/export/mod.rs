//! Exporters: one per output format behind one trait. Every study and
//! `mtlab report` build a [`Document`] (views for people, data for programs)
//! and hand it to these; nothing else formats results.
//!
//! - `view.rs`: tables of typed cells, plots, notes.
//! - `text.rs`: the terminal, fitted to its width; `json.rs`; `csv.rs`.
//! - `svg.rs`: line with error bars, grouped bars, heat map (plotters).
//! - `html.rs`: one self-contained page (`--html FILE`): a summary and
//!   contents, notes, sortable tables, plots (`html_plot.rs`: small
//!   multiples with hover values, heat maps with their colour scale) and
//!   interactive flame graphs (`flame.rs`'s tree, drawn by the page's script).

pub mod csv;
pub mod flame;
pub mod html;
mod html_plot;
pub mod json;
pub mod svg;
pub mod text;
pub mod view;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use crate::units::human_bytes;
pub use view::{Bar, Boundary, Cell, Document, Plot, PlotKind, Point, Scale, Series, Show, Table, View};

/// Something an exporter produced: for stdout (`file: None`) or a file name
/// inside the directory the user gave.
pub struct Output {
    pub file: Option<String>,
    pub bytes: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot encode the output: {0}")]
    Encode(String),
    #[error("cannot draw plot `{plot}`: {reason}")]
    Plot { plot: String, reason: String },
    #[error("cannot write {path}: {source} (choose another directory)")]
    Write { path: PathBuf, source: std::io::Error },
}

pub trait Exporter {
    fn render(&self, doc: &Document) -> Result<Vec<Output>, ExportError>;
}

/// Writes the exporter's files into `dir` (created if needed); returns their paths.
pub fn write_files(exporter: &dyn Exporter, doc: &Document, dir: &Path) -> Result<Vec<PathBuf>, ExportError> {
    std::fs::create_dir_all(dir).map_err(|source| ExportError::Write { path: dir.to_path_buf(), source })?;
    let mut written = Vec::new();
    for o in exporter.render(doc)? {
        let path = dir.join(o.file.as_deref().unwrap_or("output"));
        crate::platform::safe_fs::write_replacing(&path, &o.bytes, 0o666).map_err(|source| ExportError::Write { path: path.clone(), source })?;
        written.push(path);
    }
    Ok(written)
}

/// Prints the exporter's stdout output.
pub fn print(exporter: &dyn Exporter, doc: &Document) -> Result<(), ExportError> {
    for o in exporter.render(doc)?.into_iter().filter(|o| o.file.is_none()) {
        print_stdout(&o.bytes);
    }
    Ok(())
}

/// Writes to stdout; a closed pipe (`mtlab ... | head`) ends quietly, any
/// other failure is said on stderr.
pub fn print_stdout(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(bytes).and_then(|_| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            say!("mtlab: cannot write to stdout: {e}");
        }
    }
}
