//! The studies: each says which configurations to run and how to measure one
//! repetition (through `study::runner`), and which views show a run. Every
//! run, fresh or read back from the store, is shown by [`document`].
//!
//! Adding a study: `docs/adding-a-study.md`.

pub mod affinity;
pub mod child;
pub mod heap;
pub mod profiler_cost;
pub mod threads;
pub mod tracer_cost;

use std::path::PathBuf;

use crate::export::{Document, View};
use crate::study::{summary, Run};

#[derive(Debug, thiserror::Error)]
pub enum StudyError {
    #[error("cannot run {what}: {source}")]
    Spawn { what: String, source: std::io::Error },
    #[error("{what} failed ({status}); its stderr:\n{stderr}")]
    Failed { what: String, status: String, stderr: String },
    #[error("{0}")]
    Output(String),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Unpack(#[from] crate::native::UnpackError),
    #[error("cannot use {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Runner(#[from] crate::study::runner::RunnerError),
}

/// The study's own views of a run; a study this build does not know gets
/// the generic summary only.
fn study_views(run: &Run) -> Vec<View> {
    match run.study.as_str() {
        tracer_cost::TRACER | tracer_cost::PROGRAM => tracer_cost::views(run),
        profiler_cost::STUDY => profiler_cost::views(run),
        threads::STUDY => threads::views(run),
        affinity::STUDY => affinity::views(run),
        heap::STUDY | heap::SWEEP | heap::REPLAY => heap::views::views(run),
        _ => vec![View::Table(summary::summary_table(run))],
    }
}

/// A run as people and programs see it: header, the study's views, notes,
/// and the summary and raw repetitions for CSV.
pub fn document(run: &Run) -> Document {
    let mut views = summary::header(run);
    views.extend(study_views(run));
    views.extend(summary::level_notes(run));
    views.extend(summary::outlier_notes(run));
    views.extend(run.notes.iter().map(|n| View::Note(format!("note: {n}"))));
    if !views.iter().any(|v| matches!(v, View::Table(t) if t.name == "summary")) {
        let mut s = summary::summary_table(run);
        s.show = crate::export::Show::DataOnly;
        views.push(View::Table(s));
    }
    views.push(View::Table(summary::measurements_table(run)));
    Document { views, data: summary::data(run) }
}
