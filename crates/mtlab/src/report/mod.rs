//! What `mtlab report` shows: the process index (`index`), views for the
//! screen (`views`), raw tables for CSV (`csv_out`) and the JSON shape of
//! docs/metrics.md (`json`), handed to the exporters as one document; which
//! processes are reported (`select`), the traces read (`load`) and the
//! profile exports of the chosen processes (`exports`).
//!
//! Only the parts its outputs read are made (`Parts`: screen views, the raw CSV
//! tables, the JSON value): a tree of hundreds of processes paid more for an
//! unread JSON value than for its analysis.
//!
//! - `load.rs`: the root trace and the child traces beside it — opened without
//!   their memory maps, which only the processes analysed in detail (or whose
//!   profile is exported) read again —, each analysed in detail or for the
//!   index only as `select` plans before decoding and checks after; unreadable
//!   and deleted child traces named.
//! - `index.rs`: the process index: one row per traced process, cut on screen
//!   to the busiest.
//! - `select.rs`: `--pid`/`--comm`/`--all-processes`, the default for a tree of
//!   more than 20 processes — the root and the busiest in detail, the rest in
//!   the index only, analysed without symbols by `analysis::analyze_for_index`
//!   — and which processes the profile exports take.
//! - `exports.rs`: the profile of that pick, made in each process's analysis
//!   pass, merged with `--merge`.
//! - `views.rs`: screen tables and notes per process; `csv_out.rs`: the raw
//!   tables (functions, heap, time series, sites and callers of a full trace;
//!   the estimates of a sampled one); `json.rs`: the shape of docs/metrics.md.

pub mod csv_out;
pub mod diff;
pub mod exports;
pub mod gaps;
pub mod index;
pub mod json;
pub mod live;
pub mod load;
pub mod select;
pub mod summary;
pub mod views;

use crate::export::{Document, View};
use crate::analysis::ProcessReport;

/// The report of a run for the exporters: every part.
pub fn document(run: &RunReport) -> Document {
    document_of(run, Parts::ALL)
}

/// The warnings of a run: its missing and untraced processes' and every
/// detailed process's (`report --strict` fails on any).
pub fn warning_count(run: &RunReport) -> usize {
    run.missing.len() + usize::from(run.untraced.is_some()) + run.processes.iter().map(|p| p.warnings.len()).sum::<usize>()
}

/// The run's index and its missing and untraced processes, when there is
/// more than one process to tell of.
fn run_views(run: &RunReport) -> Vec<View> {
    let mut views = Vec::new();
    if run.index.len() > 1 || !run.missing.is_empty() || run.untraced.is_some() {
        views.extend(index::views(&run.index));
        views.extend(run.missing.iter().map(|m| View::Note(format!("warning: {}", m.message()))));
        views.extend(run.untraced.iter().map(|u| View::Note(format!("warning: {}", u.message()))));
        views.push(View::Note(String::new()));
    }
    views
}

/// The report's views for an HTML page: each process's memory plot in its
/// own section, no character sparkline.
pub fn page_views(run: &RunReport) -> Vec<View> {
    let mut views = run_views(run);
    views.extend(views::views_for(run, true));
    views.extend(index::index_only_note(&run.index).map(View::Note));
    views
}

/// Which parts of a report's document an output reads. The terminal reads
/// the screen views, `--json` only the data, `--csv` the tables: on a tree
/// of hundreds of processes, building the parts nobody reads (a JSON value
/// of every process for the terminal) cost more than analysing the traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// Notes, screen tables and plots (text, HTML, SVG, and CSV's shown tables).
    pub screen: bool,
    /// The raw data-only tables (`--csv`).
    pub tables: bool,
    /// The JSON value (`--json`).
    pub data: bool,
}

impl Parts {
    pub const ALL: Parts = Parts { screen: true, tables: true, data: true };

    /// The parts the report's outputs need: the screen's (JSON's instead
    /// with `json`) and, with `csv`, every table.
    pub fn for_outputs(json: bool, csv: bool) -> Parts {
        Parts { screen: !json || csv, tables: csv, data: json }
    }
}

/// The parts `parts` of the report of a run; the others are left empty.
pub fn document_of(run: &RunReport, parts: Parts) -> Document {
    let mut views = Vec::new();
    if parts.screen {
        views.extend(run_views(run));
        views.extend(views::views(run));
        views.extend(run.processes.iter().filter_map(views::memory_plot).map(View::Plot));
        // Again at the end, where a terminal leaves the reader.
        if let Some(note) = index::index_only_note(&run.index) {
            views.push(View::Note(note));
        }
    }
    if parts.tables {
        views.extend(csv_out::tables(run).into_iter().map(View::Table));
        if run.index.len() > 1 {
            views.push(View::Table(index::table(&run.index)));
        }
    }
    let data = if parts.data { json::to_json(run) } else { serde_json::Value::Null };
    Document { views, data }
}

/// A run's reports.
pub struct RunReport {
    /// The processes reported in detail, in the index's order (root first,
    /// then its traced descendants; `--pid`/`--comm` choose others, and a
    /// run of more than `select::DETAILED` has only the root and the busiest).
    pub processes: Vec<ProcessReport>,
    /// Every traced process of the run, reported in detail or not.
    pub index: Vec<index::IndexRow>,
    /// Child traces that could not be read, or that are gone.
    pub missing: Vec<load::MissingTrace>,
    /// Processes that got no trace file at all, when the root trace says so.
    pub untraced: Option<load::Untraced>,
    /// Frames shown per stack in the screen's site tables (0: as many as fit
    /// the terminal); sites whose shown frames are equal share a row.
    pub frames: usize,
    /// How the root pid ended, when its last image is not in this report
    /// (`--no-children` after an exec): the root trace's RUNINFO says so.
    pub execd_root_ended: Option<String>,
    /// The whole profiles (file, profile) of the processes the exports take
    /// that are not reported in detail (a detailed one keeps its own in
    /// `ProcessReport::profile_data`).
    pub profiles: Vec<(String, crate::profile::ProfileData)>,
    /// Read from a live profile (`record --live`): which snapshot, and the lag.
    pub live: Option<live::LiveStatus>,
}

impl RunReport {
    /// Is this process the run's root (the first trace)?
    pub fn is_root(&self, p: &ProcessReport) -> bool {
        self.index.first().is_some_and(|r| r.file == p.file)
    }

    /// How this process (this image of its pid) ended, as the index says.
    pub fn ending(&self, p: &ProcessReport) -> Option<index::Ending> {
        self.index.iter().find(|r| r.file == p.file).map(|r| r.ending)
    }
}

pub use crate::units::human_bytes;
