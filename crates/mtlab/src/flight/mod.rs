//! The flight recorder (`mtlab record --keep-last DURATION`): the last
//! DURATION of the root process's raw events in a bounded ring, written out
//! as an ordinary trace (`ROOT.flight-N`, read by `report` and `heap
//! replay`) when a trigger fires: `mtlab ctl PID dump`, the program's death
//! by a signal, a new `high`/`oom`/`oom_kill` in its cgroup's memory.events,
//! memory pressure above `--pressure`.
//!
//! - `ring.rs`: the ring: records as written, chunks dropped by age or
//!   room, what a readable trace needs from before the window kept
//!   (header, MAPS, stack definitions, the exit records); the window
//!   written and finished as `record` finishes a trace.
//! - `feed.rs`: the ring fed from the raw root trace below the watermark.
//! - `triggers.rs`: cgroup memory.events and PSI: parsing and edges.
//! - `control.rs`: the request page behind `mtlab ctl PID dump`.
//! - `recorder.rs`: the thread in `record` that ties them together.

pub mod control;
pub mod feed;
pub mod recorder;
pub mod ring;
pub mod triggers;

pub use feed::Feed;
pub use recorder::{Outcome, Pusher, Recorder};
pub use ring::Ring;
pub use triggers::Pressure;

/// The ring's default bound in bytes (compressed events, stacks, maps):
/// a window longer than this holds at rate holds less, and says so.
pub const DEFAULT_MAX_BYTES: u64 = 512 << 20;

/// `record --keep-last` and its options.
#[derive(Debug, Clone)]
pub struct FlightConfig {
    pub keep_last_ns: u64,
    pub max_bytes: u64,
    pub pressure: Option<Pressure>,
    /// The program also samples (`--sample`): `ctl`'s commands other than
    /// `dump` are its sampler's, and wait for its page.
    pub sampled: bool,
}

/// A duration as people write one: `30s`, `500ms`, `2m`, `1h`, `1.5s`; a
/// bare number is seconds. In ns; positive.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let scale: f64 = match unit.trim() {
        "" | "s" | "sec" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        u => return Err(format!("{s:?}: unknown unit {u:?} (use ms, s, m or h, e.g. 30s)")),
    };
    let v: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration (e.g. 30s, 500ms, 2m)"))?;
    let ns = v * scale;
    if ns.is_nan() || ns < 1e6 {
        return Err(format!("{s:?}: the window must be positive, at least 1ms (e.g. 30s)"));
    }
    if ns > 1e9 * 86400.0 * 365.0 {
        return Err(format!("{s:?}: more than a year"));
    }
    Ok(ns as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;

    #[test]
    fn durations_parse_and_must_be_positive() {
        assert_eq!(parse_duration("30s"), Ok(30_000_000_000));
        assert_eq!(parse_duration("500ms"), Ok(500_000_000));
        assert_eq!(parse_duration("2m"), Ok(120_000_000_000));
        assert_eq!(parse_duration("1.5"), Ok(1_500_000_000));
        for bad in ["0", "0s", "-1s", "", "s", "10 parsecs", "1e3"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
