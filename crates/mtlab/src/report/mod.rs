//! What `mtlab report` shows: the process index (`index`), views for the
//! screen (`views`), raw tables for CSV (`csv_out`) and the JSON shape of
//! docs/metrics.md (`json`), handed to the exporters as one document; which
//! processes are reported (`select`), the traces read (`load`) and the
//! profile exports of the chosen processes (`exports`).

pub mod csv_out;
pub mod exports;
pub mod index;
pub mod json;
pub mod load;
pub mod select;
pub mod views;

use crate::export::{Document, View};
use crate::heap::ProcessReport;

/// The report of a run for the exporters.
pub fn document(run: &RunReport) -> Document {
    let mut views = Vec::new();
    if run.index.len() > 1 || !run.missing.is_empty() {
        views.extend(index::views(&run.index));
        views.extend(run.missing.iter().map(|m| View::Note(format!("warning: {}", m.message()))));
        views.push(View::Note(String::new()));
    }
    views.extend(views::views(run));
    views.extend(run.processes.iter().filter_map(views::memory_plot).map(View::Plot));
    views.extend(csv_out::tables(run).into_iter().map(View::Table));
    if run.index.len() > 1 {
        views.push(View::Table(index::table(&run.index)));
    }
    Document { views, data: json::to_json(run) }
}

/// A run's reports.
pub struct RunReport {
    /// The processes reported in detail, in the index's order (root first,
    /// then its traced descendants, unless `--pid`/`--comm` chose others).
    pub processes: Vec<ProcessReport>,
    /// Every traced process of the run, reported in detail or not.
    pub index: Vec<index::IndexRow>,
    /// Child traces that could not be read, or that are gone.
    pub missing: Vec<load::MissingTrace>,
    /// Frames shown per stack in the screen's site tables (0: as many as fit
    /// the terminal); sites whose shown frames are equal share a row.
    pub frames: usize,
}

impl RunReport {
    /// Every process of `processes` reported.
    pub fn new(processes: Vec<ProcessReport>, missing: Vec<load::MissingTrace>) -> RunReport {
        RunReport { index: index::rows(&processes), processes, missing, frames: 0 }
    }

    /// Keeps the processes `sel` chooses (the index keeps them all), or
    /// says which pids and names matched nothing and what there is.
    pub fn select(&mut self, sel: &select::Selection, file: &str) -> Result<(), select::SelectError> {
        sel.apply(&mut self.index, file)?;
        let keep: Vec<bool> = self.index.iter().map(|r| r.reported).collect();
        let mut i = 0;
        self.processes.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        Ok(())
    }

    /// Is this process the run's root (the first trace)?
    pub fn is_root(&self, p: &ProcessReport) -> bool {
        self.index.first().is_some_and(|r| r.file == p.file)
    }
}

pub use crate::units::human_bytes;
