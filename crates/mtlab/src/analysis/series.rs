//! The time series aggregator: the heap every `every` calls (live and
//! mapped bytes, fragmentation, utilization, the space split) and the mean
//! cycles of the malloc calls in between.
//!
//! `every` starts at 1 and doubles whenever the series would hold more than
//! its most points, every other point then merged into the next (its malloc
//! window added to the next one's): the series never needs the number of
//! calls in advance, so a pass over a finished trace and one following a
//! running program (`record --live`) make the same points, and a program
//! that runs for days keeps between half and all of the most points.

use super::model::{SeriesPoint, SpaceSplit};
use super::step::Step;
use crate::heap::model::ShadowHeap;
use crate::trace::{Event, Func};

#[derive(Clone)]
pub struct Series {
    points: Vec<SeriesPoint>,
    every: u64,
    /// Most points kept (at least 1).
    max_points: usize,
    /// Each point's malloc window (cycles, calls), for merging.
    windows: Vec<(u64, u64)>,
    /// Calls left before the next point (a countdown: a division per event
    /// showed in profiles).
    to_point: u64,
    window_cycles: u64,
    window_mallocs: u64,
    /// A compact trace: events' cycles are not their own.
    compact: bool,
    /// Bytes of header the allocator keeps with each block (`SpaceSplit::header_bytes`).
    header_bytes: u64,
}

impl Series {
    /// At most `max_points` points (at least 1), a point every `every`
    /// calls, `every` a power of two.
    pub fn new(max_points: usize, compact: bool, header_bytes: u64) -> Series {
        Series {
            points: Vec::new(),
            every: 1,
            max_points: max_points.max(1),
            windows: Vec::new(),
            to_point: 1,
            window_cycles: 0,
            window_mallocs: 0,
            compact,
            header_bytes,
        }
    }

    /// Notes `ev`'s cycles when it is a timed malloc call (`step.call`).
    #[inline(always)]
    pub fn on_event(&mut self, ev: &Event, step: &Step) {
        if step.call.is_some_and(|c| c.func == Func::Malloc) {
            // Only timed calls (a sample of them by default) carry cycles.
            if let Some(c) = ev.timed_cycles() {
                self.window_cycles += c;
                self.window_mallocs += 1;
            }
        }
    }

    /// One more call counted, the `events`th: is a point due?
    #[inline(always)]
    pub fn tick(&mut self, events: u64) -> bool {
        self.to_point -= 1;
        if self.to_point == 0 {
            return self.due(events);
        }
        false
    }

    /// `events` is a multiple of `every`: with the series full, thins it
    /// first, and then a point is due only at a multiple of the new `every`.
    #[cold]
    fn due(&mut self, events: u64) -> bool {
        if self.points.len() >= self.max_points {
            self.thin();
        }
        self.to_point = self.every - events % self.every;
        events.is_multiple_of(self.every)
    }

    /// A point of `heap` as it is after `events` calls, at `ns` since the start.
    pub fn point(&mut self, heap: &mut ShadowHeap, events: u64, ns: Option<u64>) {
        let s = heap.snapshot();
        let split = SpaceSplit::of(&s, self.header_bytes);
        self.points.push(SeriesPoint {
            event: events,
            ns,
            live_bytes: s.live_bytes,
            mapped_bytes: s.mapped_bytes,
            fragmentation_total: s.fragmentation.total,
            fragmentation_mean: s.fragmentation.mean,
            utilization: s.utilization,
            malloc_mean_cycles: self.mean_cycles(self.window_cycles, self.window_mallocs),
            overhead_bytes: split.overhead_bytes,
            free_bytes: split.free_bytes,
        });
        self.windows.push((self.window_cycles, self.window_mallocs));
        self.window_cycles = 0;
        self.window_mallocs = 0;
    }

    fn mean_cycles(&self, cycles: u64, mallocs: u64) -> Option<f64> {
        (mallocs > 0 && !self.compact).then(|| cycles as f64 / mallocs as f64)
    }

    /// Doubles `every`: the points at odd multiples of the old one go, their
    /// malloc windows added to the next point's.
    fn thin(&mut self) {
        self.every *= 2;
        let (mut cycles, mut mallocs) = (0, 0);
        let mut kept = 0;
        for i in 0..self.points.len() {
            cycles += self.windows[i].0;
            mallocs += self.windows[i].1;
            if self.points[i].event.is_multiple_of(self.every) {
                let mut p = self.points[i].clone();
                p.malloc_mean_cycles = self.mean_cycles(cycles, mallocs);
                self.points[kept] = p;
                self.windows[kept] = (cycles, mallocs);
                kept += 1;
                (cycles, mallocs) = (0, 0);
            }
        }
        self.points.truncate(kept);
        self.windows.truncate(kept);
        // The calls since the last point kept belong to the next one's window.
        self.window_cycles += cycles;
        self.window_mallocs += mallocs;
    }

    /// Whether the last call counted made no point (the series then ends
    /// with one of the heap at the end).
    pub fn wants_last(&self, events: u64) -> bool {
        !events.is_multiple_of(self.every) || self.points.is_empty()
    }

    pub fn points(&self) -> &[SeriesPoint] {
        &self.points
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::step::Call;
    use crate::trace::EventKind;

    #[test]
    fn a_point_every_n_calls_with_the_mean_malloc_cycles_between() {
        let mut s = Series::new(200, false, 8);
        s.every = 2;
        s.to_point = 2;
        let mut heap = ShadowHeap::new(0);
        let malloc = |cycles| Event {
            tid: 1,
            tsc: 0,
            cycles,
            stack: 0,
            flags: 0,
            kind: EventKind::Alloc { func: Func::Malloc, size: 8, align: 0, ptr: 0, usable: 0 },
        };
        let free = Event { kind: EventKind::Free { func: Func::Free, ptr: 0 }, ..malloc(1000) };
        let mut events = 0;
        let step = |ev: &Event| {
            let func = if matches!(ev.kind, EventKind::Free { .. }) { Func::Free } else { Func::Malloc };
            Step { call: Some(Call { func, size: None, failed: false }), counted: true, ..Step::default() }
        };
        for ev in [malloc(10), malloc(30), free.clone(), malloc(50), free] {
            s.on_event(&ev, &step(&ev));
            events += 1;
            if s.tick(events) {
                s.point(&mut heap, events, Some(events * 100));
            }
        }
        let p = s.points();
        assert_eq!(p.iter().map(|p| (p.event, p.ns)).collect::<Vec<_>>(), [(2, Some(200)), (4, Some(400))]);
        assert_eq!(p[0].malloc_mean_cycles, Some(20.0));
        assert_eq!(p[1].malloc_mean_cycles, Some(50.0), "frees are no malloc calls");
        assert!(s.wants_last(5));
        assert!(!s.wants_last(4));
        // A compact trace's cycles are not its calls' own: none shown.
        let mut c = Series::new(1, true, 0);
        c.on_event(&malloc(10), &step(&malloc(10)));
        c.point(&mut heap, 1, None);
        assert_eq!(c.points()[0].malloc_mean_cycles, None);
    }

    #[test]
    fn a_full_series_doubles_its_step_and_merges_malloc_windows() {
        let mut s = Series::new(4, false, 0);
        let mut heap = ShadowHeap::new(0);
        let step = Step { call: Some(Call { func: Func::Malloc, size: None, failed: false }), counted: true, ..Step::default() };
        for events in 1..=20u64 {
            // Call n takes n cycles.
            let ev = Event { tid: 1, tsc: 0, cycles: events, stack: 0, flags: 0, kind: EventKind::Free { func: Func::Free, ptr: 0 } };
            s.on_event(&ev, &step);
            if s.tick(events) {
                s.point(&mut heap, events, None);
            }
        }
        // 1,2,3,4 → full at 5: every 2 → 2,4; 6,8 → full at 10: every 4 → 4,8; 12,16; 20 → every 8: 8,16.
        let p = s.points();
        assert_eq!(p.iter().map(|p| p.event).collect::<Vec<_>>(), [8, 16]);
        // Point 16's window is calls 9..=16: mean 12.5; the calls after it wait for the next point.
        assert_eq!(p[0].malloc_mean_cycles, Some(4.5));
        assert_eq!(p[1].malloc_mean_cycles, Some(12.5));
        assert!(s.wants_last(20));
        s.point(&mut heap, 20, None);
        assert_eq!(s.points()[2].malloc_mean_cycles, Some(18.5));
    }
}
