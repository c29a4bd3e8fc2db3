//! Where the time a thread of the process is stopped goes, at attach and at
//! detach: mtlab's own steps (timed here) and the steps inside the library's
//! two entry points, which stamp `mtlab_attach_marks` (native/preload/attach.c:
//! CLOCK_MONOTONIC ns, 0 for a step not taken) for mtlab to read after the call.

use std::time::{Duration, Instant};

/// The entries of `mtlab_attach_marks`.
pub const MARKS: usize = 32;

/// Index → what was done by then; index 0 (16) is the entry of
/// `mtlab_attach_begin` (`mtlab_attach_end`).
const BEGIN: &[(usize, &str)] = &[
    (1, "real functions looked up"),
    (2, "settings read"),
    (3, "allocator identified"),
    (4, "heap, stack and brk found"),
    (5, "tables, fork and exit handlers"),
    (6, "trace file opened, maps written"),
    (7, "GOT slots scanned"),
    (8, "sampler started"),
    (9, "slots routed"),
];
const END: &[(usize, &str)] = &[
    (17, "slots restored"),
    (18, "trace finished"),
    (19, "sampler released"),
    (20, "writer released"),
    (21, "thread state released"),
];

/// One phase's steps, in order.
#[derive(Debug, Clone, Default)]
pub struct Steps(pub Vec<(&'static str, Duration)>);

impl Steps {
    /// Times mtlab's steps: each `lap` ends the step begun at the previous one.
    pub fn lap(&mut self, clock: &mut Instant, what: &'static str) {
        let now = Instant::now();
        self.0.push((what, now - *clock));
        *clock = now;
    }

    pub fn get(&self, what: &str) -> Duration {
        self.0.iter().filter(|(w, _)| *w == what).map(|(_, d)| *d).sum()
    }

    /// The steps inside `mtlab_attach_begin` (or `_end` with `end`), from its marks.
    pub fn from_marks(marks: &[u64], end: bool) -> Steps {
        let (first, names) = if end { (16, END) } else { (0, BEGIN) };
        let mut prev = marks.get(first).copied().unwrap_or(0);
        let mut out = Vec::new();
        if prev == 0 {
            return Steps(out);
        }
        for &(i, what) in names {
            let Some(&at) = marks.get(i).filter(|&&m| m != 0) else { continue };
            out.push((what, Duration::from_nanos(at.saturating_sub(prev))));
            prev = at;
        }
        Steps(out)
    }

    /// "what 1.2 ms; what 0.3 ms; …" (`;`: some names hold a comma)
    pub fn line(&self) -> String {
        self.0.iter().map(|(w, d)| format!("{w} {:.2} ms", d.as_secs_f64() * 1e3)).collect::<Vec<_>>().join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_become_the_steps_between_them_and_skipped_steps_are_left_out() {
        let mut m = [0u64; MARKS];
        m[0] = 1_000_000;
        m[1] = 1_500_000;
        m[6] = 4_500_000; // 2..5 not taken
        m[9] = 5_000_000;
        let s = Steps::from_marks(&m, false);
        assert_eq!(
            s.0,
            vec![
                ("real functions looked up", Duration::from_micros(500)),
                ("trace file opened, maps written", Duration::from_micros(3000)),
                ("slots routed", Duration::from_micros(500)),
            ]
        );
        assert_eq!(s.line(), "real functions looked up 0.50 ms; trace file opened, maps written 3.00 ms; slots routed 0.50 ms");
        assert!(Steps::from_marks(&m, true).0.is_empty(), "no end call made");
        m[16] = 10;
        m[18] = 30;
        assert_eq!(Steps::from_marks(&m, true).0, vec![("trace finished", Duration::from_nanos(20))]);
    }
}
