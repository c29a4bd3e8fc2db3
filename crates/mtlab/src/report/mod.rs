//! What `mtlab report` shows: views for the screen (`views`), raw tables for
//! CSV (`csv_out`) and the JSON shape of docs/metrics.md (`json`), handed to
//! the exporters as one document.

pub mod csv_out;
pub mod json;
pub mod views;

use crate::export::{Document, View};
use crate::heap::ProcessReport;

/// The report of a run for the exporters.
pub fn document(run: &RunReport) -> Document {
    let mut views = views::views(run);
    views.extend(run.processes.iter().filter_map(views::memory_plot).map(View::Plot));
    views.extend(csv_out::tables(run).into_iter().map(View::Table));
    Document { views, data: json::to_json(run) }
}

/// A run's reports: the root process first, then its traced descendants.
pub struct RunReport {
    pub processes: Vec<ProcessReport>,
    /// Frames shown per stack in the screen's site tables (0: as many as fit
    /// the terminal); sites whose shown frames are equal share a row.
    pub frames: usize,
}

pub use crate::units::human_bytes;
