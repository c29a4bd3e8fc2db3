//! Rendering reports: one module per output format.

pub mod csv_out;
pub mod json;
pub mod table;

use crate::heap::ProcessReport;

/// A run's reports: the root process first, then its traced descendants.
pub struct RunReport {
    pub processes: Vec<ProcessReport>,
}

pub use crate::units::human_bytes;
