//! Layout 8's coding of timed calls' cycles under sampled timing: per
//! function, sorted, within groups of a record's events.
//!
//! A timed call's cycles are noise around its function's typical cost: in
//! event order they took ~4 bits a value after compression, the largest
//! stream of a python3 trace (36–52 % of the file), and no figure mtlab
//! shows reads them per call — per function it shows the distribution, and
//! the time series a window's mean. So for each group of [`GROUP_EVENTS`]
//! items of a record, the CYCLES stream holds each function's timed cycles
//! sorted (a block per function; sorted runs compress to a fraction of a
//! bit a value), and the reader hands them back to that function's calls
//! in the group in a fixed scrambled order ([`spread`]): the multiset per
//! function and group is the true one (totals, means, deviations and
//! percentiles exact), and a call's value is one of its function's in the
//! same group, drawn without regard to its place in it — so a time-series
//! window shorter than a group shows the group's mean, not a slope.

/// Items (a thread's, within one record) a group spans.
pub(crate) const GROUP_EVENTS: u32 = 1 << 16;

/// A function's key within a group: the event kind, and for operator new
/// and delete their form (+1) above it.
fn key(kind: u8, form: Option<u64>) -> u32 {
    kind as u32 | form.map_or(0, |f| (f.min(0xff_ffff) as u32 + 1) << 8)
}

/// Whether a kind's function is named by a form in its first misc field.
pub(crate) fn has_form(kind: u8) -> bool {
    matches!(kind, super::format::EV_NEW | super::format::EV_DELETE)
}

/// The rank, among its function's `n` sorted values in a group, of the
/// value handed to the function's `i`-th call there: a multiplicative
/// permutation (the multiplier is a prime above any `n`), so that the
/// calls of any stretch of the group get values from all over the sorted
/// list.
#[inline(always)]
pub(crate) fn spread(i: u32, n: u32) -> usize {
    (i as u64 * 2_654_435_761 % n as u64) as usize
}

/// What the writer puts in the CYCLES stream for a group, in order.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// A function's block starts: its key and number of values.
    Key(u32, u32),
    /// Its next value, ascending.
    Value(u64),
    /// The group's blocks end.
    End,
}

/// The writer's group being gathered.
#[derive(Default)]
pub(crate) struct Gather {
    /// The group's timed calls: (function key, cycles).
    calls: Vec<(u32, u64)>,
    /// Items of the group so far.
    events: u32,
    /// The last call waits for its form (the misc field after its stack).
    form_pending: bool,
}

impl Gather {
    /// An item starts; a full group is handed to `put` first.
    #[inline(always)]
    pub(crate) fn event(&mut self, put: impl FnMut(Put)) {
        self.form_pending = false;
        self.events += 1;
        if self.events > GROUP_EVENTS {
            self.flush(put);
            self.events = 1;
        }
    }

    /// A timed call of kind `kind` took `cycles`.
    #[inline(always)]
    pub(crate) fn timed(&mut self, kind: u8, cycles: u64) {
        self.calls.push((key(kind, None), cycles));
        self.form_pending = has_form(kind);
    }

    /// A misc field of the current item: an operator new's or delete's
    /// first is its form, part of its function.
    #[inline(always)]
    pub(crate) fn misc(&mut self, v: u64) {
        if self.form_pending {
            self.form_pending = false;
            let last = self.calls.last_mut().expect("a call waits for its form");
            last.0 = key(last.0 as u8, Some(v));
        }
    }

    /// Hands the group's blocks to `put` (nothing for a group without a
    /// timed call: the reader reads a group's blocks at its first).
    pub(crate) fn flush(&mut self, mut put: impl FnMut(Put)) {
        if self.calls.is_empty() {
            return;
        }
        self.calls.sort_unstable();
        for block in self.calls.chunk_by(|a, b| a.0 == b.0) {
            put(Put::Key(block[0].0, block.len() as u32));
            block.iter().for_each(|&(_, v)| put(Put::Value(v)));
        }
        put(Put::End);
        self.calls.clear();
    }
}

/// The reader's group: each function's sorted values, and its calls so far.
#[derive(Default)]
pub(crate) struct Hand {
    events: u32,
    loaded: bool,
    blocks: Vec<(u32, Vec<u64>, u32)>,
}

impl Hand {
    /// An item starts (counted as the writer counts them).
    #[inline(always)]
    pub(crate) fn event(&mut self) {
        self.events += 1;
        if self.events > GROUP_EVENTS {
            self.events = 1;
            self.loaded = false;
        }
    }

    /// Whether the group's blocks are read yet.
    #[inline(always)]
    pub(crate) fn loaded(&self) -> bool {
        self.loaded
    }

    /// Reads the group's blocks: `next()` gives the CYCLES stream's next
    /// varint (a key or a count), `value(first)` a block's next value.
    pub(crate) fn load<E>(
        &mut self,
        mut next: impl FnMut() -> Result<u64, E>,
        mut value: impl FnMut(bool) -> Result<u64, E>,
        bad: impl Fn(&'static str) -> E,
    ) -> Result<(), E> {
        self.blocks.clear();
        loop {
            let k = next()?;
            if k == 0 {
                break;
            }
            let k = u32::try_from(k).map_err(|_| bad("a cycles block's function is out of range"))?;
            let n = next()?;
            if n == 0 || n > GROUP_EVENTS as u64 || self.blocks.last().is_some_and(|b| b.0 >= k) {
                return Err(bad("a cycles block is out of order or of a wrong size"));
            }
            let vals = (0..n).map(|j| value(j == 0)).collect::<Result<Vec<_>, E>>()?;
            self.blocks.push((k, vals, 0));
        }
        self.loaded = true;
        Ok(())
    }

    /// The cycles of the next timed call of kind `kind` (of form `form`).
    #[inline(always)]
    pub(crate) fn take(&mut self, kind: u8, form: Option<u64>) -> Option<u64> {
        let k = key(kind, form);
        let b = self.blocks.iter_mut().find(|b| b.0 == k)?;
        let n = b.1.len() as u32;
        if b.2 >= n {
            return None;
        }
        let v = b.1[spread(b.2, n)];
        b.2 += 1;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::format::{EV_FREE, EV_MALLOC, EV_NEW};

    /// Writes `calls` (kind, cycles, form) as one group, reads them back.
    fn round_trip(calls: &[(u8, u64, Option<u64>)]) -> (Vec<Put>, Vec<u64>) {
        let mut puts = Vec::new();
        let mut g = Gather::default();
        for &(kind, cycles, form) in calls {
            g.event(|p| puts.push(p));
            g.timed(kind, cycles);
            if let Some(f) = form {
                g.misc(f);
            }
        }
        g.flush(|p| puts.push(p));
        let stream: Vec<u64> = puts
            .iter()
            .flat_map(|p| match *p {
                Put::Key(k, n) => vec![k as u64, n as u64],
                Put::Value(v) => vec![v],
                Put::End => vec![0],
            })
            .collect();
        let mut at = 0;
        let mut h = Hand::default();
        let mut out = Vec::new();
        for &(kind, _, form) in calls {
            h.event();
            if !h.loaded() {
                let s = std::cell::Cell::new(at);
                let get = || {
                    let v = stream[s.get()];
                    s.set(s.get() + 1);
                    Ok::<u64, &str>(v)
                };
                h.load(get, |_| get(), |e| e).unwrap();
                at = s.get();
            }
            out.push(h.take(kind, form).expect("a value for each call"));
        }
        (puts, out)
    }

    fn sorted(mut v: Vec<u64>) -> Vec<u64> {
        v.sort_unstable();
        v
    }

    #[test]
    fn each_function_gets_its_own_values_back() {
        let calls = [(EV_MALLOC, 90, None), (EV_FREE, 40, None), (EV_MALLOC, 30, None), (EV_FREE, 20, None), (EV_MALLOC, 60, None)];
        let (puts, out) = round_trip(&calls);
        assert_eq!(puts[0], Put::Key(EV_MALLOC as u32, 3));
        assert_eq!(puts[1..4], [Put::Value(30), Put::Value(60), Put::Value(90)], "sorted");
        assert_eq!(sorted(vec![out[0], out[2], out[4]]), [30, 60, 90]);
        assert_eq!(sorted(vec![out[1], out[3]]), [20, 40]);
    }

    #[test]
    fn operator_new_forms_are_functions_of_their_own() {
        let calls = [(EV_NEW, 50, Some(1)), (EV_NEW, 10, Some(0)), (EV_NEW, 20, Some(1)), (EV_NEW, 70, Some(0))];
        let (_, out) = round_trip(&calls);
        assert_eq!(sorted(vec![out[1], out[3]]), [10, 70]);
        assert_eq!(sorted(vec![out[0], out[2]]), [20, 50]);
    }

    #[test]
    fn a_stretch_of_calls_gets_values_from_all_over_the_group() {
        // Values rising through the group: handed back in rank order, the
        // first half's mean would be a quarter of the last half's.
        let n = 10_000u64;
        let calls: Vec<_> = (0..n).map(|i| (EV_MALLOC, i, None)).collect();
        let (_, out) = round_trip(&calls);
        let mean = |s: &[u64]| s.iter().sum::<u64>() as f64 / s.len() as f64;
        let (first, last) = (mean(&out[..n as usize / 2]), mean(&out[n as usize / 2..]));
        assert!((first / last - 1.0).abs() < 0.02, "{first} against {last}");
        assert_eq!(sorted(out), (0..n).collect::<Vec<_>>());
    }

    #[test]
    fn spread_is_a_permutation() {
        for n in [1u32, 2, 3, 7, 64, 1000, GROUP_EVENTS] {
            let mut seen = vec![false; n as usize];
            (0..n).for_each(|i| seen[spread(i, n)] = true);
            assert!(seen.iter().all(|&s| s), "n = {n}");
        }
    }

    #[test]
    fn groups_end_after_their_items() {
        // A group of calls of 2 cycles, then one of 1: never exchanged.
        let n = GROUP_EVENTS as usize;
        let mut calls = vec![(EV_MALLOC, 2, None); n];
        calls.extend(vec![(EV_MALLOC, 1, None); n]);
        let (_, out) = round_trip(&calls);
        assert!(out[..n].iter().all(|&v| v == 2) && out[n..].iter().all(|&v| v == 1));
    }
}
