//! Each site's figures split by the thread that allocated (`report
//! --threads`, and the thread attribute of the OTLP export): calls and
//! bytes by the allocating thread, and the blocks still live by the thread
//! that allocated them, wherever they were freed. Kept only when asked: it
//! holds each live block's thread by address, a second table beside the
//! shadow heap's, which the report does not otherwise pay for.

use rustc_hash::FxHashMap as HashMap;

use super::step::{Block, Step};
use crate::trace::Event;

/// One (site, thread)'s counters.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct ThreadCounts {
    pub calls: u64,
    pub bytes: u64,
    pub live_objects: u64,
    pub live_bytes: u64,
}

#[derive(Default)]
pub struct ThreadSplit {
    /// (site index, tid) → counters.
    acc: HashMap<(u32, u32), ThreadCounts>,
    /// Live block address → the thread that allocated it.
    owner: HashMap<u64, u32>,
}

impl ThreadSplit {
    /// Counts what `ev` did to the heap (`step`), as `Sites::on_event`.
    #[inline]
    pub fn on_event(&mut self, ev: &Event, step: &Step) {
        for b in [step.freed, step.replaced].into_iter().flatten() {
            self.released(b);
        }
        if let Some(b) = step.allocated {
            let c = self.acc.entry((b.site, ev.tid)).or_default();
            c.calls += 1;
            c.bytes += b.size;
            c.live_objects += 1;
            c.live_bytes += b.size;
            self.owner.insert(b.addr, ev.tid);
        }
    }

    fn released(&mut self, b: Block) {
        if let Some(tid) = self.owner.remove(&b.addr) {
            if let Some(c) = self.acc.get_mut(&(b.site, tid)) {
                c.live_objects = c.live_objects.saturating_sub(1);
                c.live_bytes = c.live_bytes.saturating_sub(b.size);
            }
        }
    }

    /// Every site's split: site index → [(tid, counters)], by tid.
    pub fn by_site(&self) -> HashMap<u32, Vec<(u32, ThreadCounts)>> {
        let mut out: HashMap<u32, Vec<(u32, ThreadCounts)>> = HashMap::default();
        for (&(s, t), &c) in &self.acc {
            out.entry(s).or_default().push((t, c));
        }
        for v in out.values_mut() {
            v.sort_by_key(|&(t, _)| t);
        }
        out
    }

    /// Each thread's counters over all sites, by tid.
    pub fn totals(&self) -> Vec<(u32, ThreadCounts)> {
        let mut by: HashMap<u32, ThreadCounts> = HashMap::default();
        for (&(_, t), c) in &self.acc {
            let x = by.entry(t).or_default();
            x.calls += c.calls;
            x.bytes += c.bytes;
            x.live_objects += c.live_objects;
            x.live_bytes += c.live_bytes;
        }
        let mut v: Vec<(u32, ThreadCounts)> = by.into_iter().collect();
        v.sort_by_key(|&(t, _)| t);
        v
    }
}
