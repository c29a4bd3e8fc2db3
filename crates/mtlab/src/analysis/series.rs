//! The time series aggregator: the heap every `every` calls (live and
//! mapped bytes, fragmentation, utilization, the space split) and the mean
//! cycles of the malloc calls in between.

use super::model::{SeriesPoint, SpaceSplit};
use super::step::Step;
use crate::heap::model::ShadowHeap;
use crate::trace::{Event, Func};

pub struct Series {
    points: Vec<SeriesPoint>,
    every: u64,
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
    /// A point every `every` calls (at least 1).
    pub fn new(every: u64, compact: bool, header_bytes: u64) -> Series {
        let every = every.max(1);
        Series { points: Vec::new(), every, to_point: every, window_cycles: 0, window_mallocs: 0, compact, header_bytes }
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

    /// One more call counted: is a point due?
    #[inline(always)]
    pub fn tick(&mut self) -> bool {
        self.to_point -= 1;
        if self.to_point == 0 {
            self.to_point = self.every;
            return true;
        }
        false
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
            malloc_mean_cycles: (self.window_mallocs > 0 && !self.compact)
                .then(|| self.window_cycles as f64 / self.window_mallocs as f64),
            overhead_bytes: split.overhead_bytes,
            free_bytes: split.free_bytes,
        });
        self.window_cycles = 0;
        self.window_mallocs = 0;
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
        let mut s = Series::new(2, false, 8);
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
            if s.tick() {
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
}
