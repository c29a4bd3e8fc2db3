//! Rendering reports: one module per output format.

pub mod csv_out;
pub mod json;
pub mod table;

use crate::heap::ProcessReport;

/// A run's reports: the root process first, then its traced descendants.
pub struct RunReport {
    pub processes: Vec<ProcessReport>,
}

/// Bytes as a short human string (KiB, MiB, ...).
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn human_bytes_units() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(1536), "1.5 KiB");
        assert_eq!(super::human_bytes(3 << 20), "3.0 MiB");
    }
}
