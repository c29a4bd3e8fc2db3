//! The studies: each says which configurations to run and how to measure one
//! repetition (through `study::runner`), and which views show a run. Every
//! run, fresh or read back from the store, is shown by [`document`].
//!
//! Adding a study: `docs/adding-a-study.md`.
//!
//! - `tracer_cost.rs`: `bench tracer`, `bench program`; `profiler_cost.rs`:
//!   `bench malloc`.
//! - `threads/`: `mtlab threads`: `mod.rs` the cells and trials, `views.rs` its
//!   tables, plots, perf comparisons and findings, `libc.rs` glibc or a libc's
//!   compiler wrapper, `preempt.rs` switching the preemption model and putting
//!   it back.
//! - `affinity/`: `mtlab affinity`: `mod.rs` the matrix's cells and trials,
//!   `net.rs` the study's network namespace and veth pair and the RPS mask,
//!   `irq.rs` a NIC's receive interrupts and address (`--steer irq`),
//!   `apply.rs` making a placement stay (`--apply`), `journal.rs` every changed
//!   setting written down first and put back on exit, failure, signal (through
//!   `platform::interrupt`) or — after SIGKILL — by the next run, `flow.rs` the
//!   built-in flow (a sendfile sender thread, a receiver process: mtlab's
//!   hidden `__affinity-receiver` command) and the remote sender and receiver
//!   of `--steer irq`, `iperf.rs` iperf3 as the generator, `counters.rs` per-
//!   CPU perf and /proc counters, `preflight.rs` what on the host could spoil
//!   the matrix, `views.rs` matrix, classes, recommendation, heat maps.
//! - `heap/`: `mtlab heap compare`, `sweep` and `replay`: `mod.rs` the variants
//!   (an allocator and its environment), their configurations and trials,
//!   `tunables.rs` tunables by name, how each is set and whether the allocator
//!   took a value, `replay.rs` a trace's heap calls as the replay program's ops
//!   file (`heap replay`), `allocators.rs` heap managers by name (linker cache)
//!   or path, and whether a trace shows one was used, `views.rs` the side-by-
//!   side, per-function, space-split and validation tables, the best setting,
//!   and the plots.
//! - `child.rs`: one measured child process: output, wall time, peak RSS,
//!   stopped if mtlab is interrupted; a run's work directory, removed on
//!   interrupt too; pinning a child to CPUs.
//! - `mod.rs`: maps a run's study to its views.

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
