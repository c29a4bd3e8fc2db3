//! How far the trace being written is complete in time: the writer's
//! per-buffer progress in the watermark page (mtlab_trace.h), read before
//! the watermark, gives the time before which no event can still reach the
//! file (the horizon); the consumer analyses only up to it, so that the
//! threads' events are replayed in the order the whole trace gives them.
//! A buffer whose thread has gone quiet is copied out of the process
//! (`bufcopy.rs`): its events are then known up to the copy's last one.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{fence, Ordering};

use crate::platform::shared_page::SharedPage;
use crate::trace::format::{WATERMARK_OFF_PROGRESS, WATERMARK_OFF_PROGRESS_BUFS, WATERMARK_OFF_PROGRESS_USED, WATERMARK_PROGRESS_SLOTS};

/// The LAST word's flag: the buffer holds no event.
const EMPTY: u64 = 1 << 63;

/// One buffer's progress as the writer last published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Its index in the page.
    pub index: u32,
    /// Its sequence number when read: the owner republishes at each chunk.
    pub seq: u64,
    /// The buffer's address in the process (0: not known).
    pub buf: u64,
    pub tid: u32,
    /// The first time stamp of its oldest event that may not be below the
    /// watermark yet (0: none).
    pub pending: u64,
    /// The first time stamp of its latest written chunk.
    pub last_first: u64,
    /// It holds no event: once its latest chunk is read, none is pending.
    pub empty: bool,
}

/// The buffers' progress, read before the watermark.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    slots: Vec<Slot>,
    /// Some buffer has no slot (or one could not be read whole): no horizon is known.
    unknown: bool,
}

impl Progress {
    pub fn read(page: &SharedPage) -> Progress {
        let used = page.u64_at(WATERMARK_OFF_PROGRESS_USED).load(Ordering::Acquire);
        let mut p = Progress { slots: Vec::new(), unknown: used > WATERMARK_PROGRESS_SLOTS as u64 };
        for i in 0..used.min(WATERMARK_PROGRESS_SLOTS as u64) as u32 {
            match read_slot(page, i) {
                Some(s) => p.slots.push(s),
                // Its owner is writing it, and writes it about once a chunk:
                // retried at the next look.
                None => p.unknown = true,
            }
        }
        p
    }

    /// The slots read whole.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// The time before which every event is in the chunks read so far;
    /// `read` holds, per thread, the first time stamp of the latest chunk
    /// read. None when the progress does not say (too many buffers).
    /// `copied`: the threads whose buffer was copied after this was read,
    /// its slot still standing as read ([`Slot::copy_holds`]): each of
    /// their events is in the chunks read or the copy, but one stamped and
    /// not yet appended when the copy was taken, which the caller's margin
    /// before the look (`SETTLE`) waits for, as for any thread.
    pub fn horizon(&self, read: &HashMap<u32, u64>, copied: &HashSet<u32>) -> Option<u64> {
        if self.unknown {
            return None;
        }
        let mut h = u64::MAX;
        for s in &self.slots {
            if !s.done(read) && !copied.contains(&s.tid) {
                h = h.min(s.pending);
            }
        }
        Some(h)
    }

    /// The oldest pending event of a thread whose events are on their way
    /// to the file (u64::MAX: none): a chunk it wrote is not read yet (it
    /// lies above the watermark, which waits until no write is in flight),
    /// or its slot has moved since it was read (it wrote a chunk or started
    /// a buffer meanwhile). The horizon is never forced past such a thread
    /// (`HOLD_BYTES`): its events arrive without a copy, and passing them
    /// would replay them late. `now(index)` rereads a slot (None: being written).
    /// A thread that `goes_on(tid)` (waits for a CPU on a busy host, or
    /// inside its chunk's write for the file's lock: ext4 takes it for each
    /// write, and 8 writers queue behind one descheduled holder) writes its
    /// events itself soon: passing it replayed whole buffers late
    /// (`tests/live.rs`, 4 runs in 20 at load 5–8, thousands of events each).
    pub fn arriving_floor(&self, read: &HashMap<u32, u64>, now: impl Fn(u32) -> Option<Slot>, goes_on: impl Fn(u32) -> bool) -> u64 {
        let unread_chunk = |s: &Slot| s.last_first != 0 && read.get(&s.tid).is_none_or(|&f| f < s.last_first);
        self.slots
            .iter()
            .filter(|s| !s.done(read))
            .filter(|s| unread_chunk(s) || now(s.index).is_none_or(|n| n.seq != s.seq || unread_chunk(&n)) || goes_on(s.tid))
            .map(|s| s.pending)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The slots that hold the horizon back and have held it since before
    /// `before`: the buffers worth copying.
    pub fn quiet<'a>(&'a self, read: &'a HashMap<u32, u64>, before: u64) -> impl Iterator<Item = &'a Slot> {
        self.slots.iter().filter(move |s| !s.done(read) && s.pending < before && s.buf != 0)
    }
}

impl Slot {
    /// Every event of its buffer is in the chunks read.
    fn done(&self, read: &HashMap<u32, u64>) -> bool {
        self.pending == 0 || (self.empty && read.get(&self.tid).is_some_and(|&f| f >= self.last_first))
    }

    /// Whether a copy of its buffer, taken after this slot was read,
    /// covers every event of its thread not in the chunks read, up to the
    /// copy's last: the slot is still as it was (the owner has not written
    /// a chunk or started a buffer since), the copy is of its thread, and
    /// the latest chunk it wrote before the buffer was read.
    pub fn copy_holds(&self, now: Option<Slot>, copy_tid: u32, read: &HashMap<u32, u64>) -> bool {
        now.is_some_and(|n| n.seq == self.seq)
            && !self.empty
            && copy_tid == self.tid
            && (self.last_first == 0 || read.get(&self.tid).is_some_and(|&f| f >= self.last_first))
    }
}

/// Slot `index` as it stands now (None: being written).
pub fn reread(page: &SharedPage, index: u32) -> Option<Slot> {
    read_slot(page, index)
}

/// A slot read whole (a seqlock with one writer), or None while it is written.
fn read_slot(page: &SharedPage, index: u32) -> Option<Slot> {
    let off = WATERMARK_OFF_PROGRESS + 32 * index;
    let seq = page.u64_at(off);
    for _ in 0..100 {
        let s1 = seq.load(Ordering::Acquire);
        if s1 % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let tid = page.u64_at(off + 8).load(Ordering::Relaxed);
        let pending = page.u64_at(off + 16).load(Ordering::Relaxed);
        let last = page.u64_at(off + 24).load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        // Written before the slot's first publication, never changed.
        let buf = page.u64_at(WATERMARK_OFF_PROGRESS_BUFS + 8 * index).load(Ordering::Relaxed);
        if seq.load(Ordering::Relaxed) == s1 {
            return Some(Slot { index, seq: s1, buf, tid: tid as u32, pending, last_first: last & !EMPTY, empty: last & EMPTY != 0 });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tid: u32, pending: u64, last_first: u64, empty: bool) -> Slot {
        Slot { index: tid, seq: 2, buf: 4096, tid, pending, last_first, empty }
    }

    #[test]
    fn horizon_is_the_oldest_pending_event_of_a_buffer_not_read_whole() {
        let p = Progress {
            slots: vec![
                slot(1, 0, 500, true),     // nothing pending
                slot(2, 300, 300, true),   // written, read: done
                slot(3, 200, 200, true),   // written, not read yet
                slot(4, 250, 100, false), // events in its buffer
            ],
            unknown: false,
        };
        let none = HashSet::new();
        let read: HashMap<u32, u64> = [(2, 300), (3, 150)].into_iter().collect();
        assert_eq!(p.horizon(&read, &none), Some(200));
        let read: HashMap<u32, u64> = [(2, 300), (3, 200)].into_iter().collect();
        assert_eq!(p.horizon(&read, &none), Some(250));
        assert_eq!(Progress { slots: vec![], unknown: false }.horizon(&read, &none), Some(u64::MAX));
        assert_eq!(Progress { slots: vec![], unknown: true }.horizon(&read, &none), None);
        // Thread 4's buffer copied: it no longer holds the horizon.
        let copied: HashSet<u32> = [4].into_iter().collect();
        assert_eq!(p.horizon(&read, &copied), Some(u64::MAX));
        assert_eq!(p.quiet(&read, 300).map(|s| s.tid).collect::<Vec<_>>(), [4], "only the buffer holding events, held since before 300");
        assert_eq!(p.quiet(&read, 250).count(), 0);
    }

    #[test]
    fn the_horizon_is_not_forced_past_a_thread_whose_events_are_arriving() {
        let p = Progress {
            slots: vec![
                slot(1, 100, 90, false),  // its chunk at 90 read, events in its buffer: stuck
                slot(2, 200, 300, false), // wrote a chunk at 300, not read yet (above the watermark)
                slot(3, 150, 140, false), // read, but republished since the look
            ],
            unknown: false,
        };
        let read: HashMap<u32, u64> = [(1, 90), (2, 250), (3, 140)].into_iter().collect();
        let same = |i: u32| p.slots.iter().find(|s| s.index == i).copied();
        let asleep = |_| false;
        assert_eq!(p.arriving_floor(&read, same, asleep), 200, "thread 2's chunk at 300 is written: its events from 200 arrive");
        let moved = |i: u32| same(i).map(|s| if s.tid == 3 { Slot { seq: s.seq + 2, ..s } } else { s });
        assert_eq!(p.arriving_floor(&read, moved, asleep), 150, "thread 3 wrote a chunk since the look");
        let being_written = |i: u32| if i == 1 { None } else { same(i) };
        assert_eq!(p.arriving_floor(&read, being_written, asleep), 100, "a slot being written: its owner is writing");
        let all_read: HashMap<u32, u64> = [(1, 90), (2, 300), (3, 140)].into_iter().collect();
        assert_eq!(p.arriving_floor(&all_read, same, asleep), u64::MAX, "only buffered events, nothing moving: the horizon may pass them");
        assert_eq!(p.arriving_floor(&all_read, same, |tid| tid == 3), 150, "thread 3 waits for a CPU or in its write: it writes them itself");
    }

    #[test]
    fn a_copy_holds_only_for_the_slot_as_it_was_read() {
        let s = slot(4, 250, 100, false);
        let read: HashMap<u32, u64> = [(4, 100)].into_iter().collect();
        assert!(s.copy_holds(Some(s), 4, &read));
        assert!(!s.copy_holds(Some(Slot { seq: 4, ..s }), 4, &read), "republished: the owner wrote a chunk meanwhile");
        assert!(!s.copy_holds(None, 4, &read), "being written");
        assert!(!s.copy_holds(Some(s), 5, &read), "the buffer has another owner");
        let behind: HashMap<u32, u64> = [(4, 50)].into_iter().collect();
        assert!(!s.copy_holds(Some(s), 4, &behind), "its latest chunk (first 100) is not read yet");
        let e = slot(4, 250, 100, true);
        assert!(!e.copy_holds(Some(e), 4, &read), "an empty buffer has nothing to copy");
    }
}
