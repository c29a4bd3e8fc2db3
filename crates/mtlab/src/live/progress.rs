//! How far the trace being written is complete in time: the writer's
//! per-buffer progress in the watermark page (mtlab_trace.h), read before
//! the watermark, gives the time before which no event can still reach the
//! file (the horizon); the consumer analyses only up to it, so that the
//! threads' events are replayed in the order the whole trace gives them.

use std::collections::HashMap;
use std::sync::atomic::{fence, Ordering};

use crate::platform::shared_page::SharedPage;
use crate::trace::format::{WATERMARK_OFF_PROGRESS, WATERMARK_OFF_PROGRESS_USED, WATERMARK_PROGRESS_SLOTS};

/// The LAST word's flag: the buffer holds no event.
const EMPTY: u64 = 1 << 63;

/// One buffer's progress as the writer last published it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
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
            match read_slot(page, WATERMARK_OFF_PROGRESS + 32 * i) {
                Some(s) => p.slots.push(s),
                // Its owner is writing it, and writes it about once a chunk:
                // retried at the next look.
                None => p.unknown = true,
            }
        }
        p
    }

    /// The time before which every event is in the chunks read so far;
    /// `read` holds, per thread, the first time stamp of the latest chunk
    /// read. None when the progress does not say (too many buffers).
    pub fn horizon(&self, read: &HashMap<u32, u64>) -> Option<u64> {
        if self.unknown {
            return None;
        }
        let mut h = u64::MAX;
        for s in &self.slots {
            let done = s.pending == 0 || (s.empty && read.get(&s.tid).is_some_and(|&f| f >= s.last_first));
            if !done {
                h = h.min(s.pending);
            }
        }
        Some(h)
    }
}

/// A slot read whole (a seqlock with one writer), or None while it is written.
fn read_slot(page: &SharedPage, off: u32) -> Option<Slot> {
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
        if seq.load(Ordering::Relaxed) == s1 {
            return Some(Slot { tid: tid as u32, pending, last_first: last & !EMPTY, empty: last & EMPTY != 0 });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(tid: u32, pending: u64, last_first: u64, empty: bool) -> Slot {
        Slot { tid, pending, last_first, empty }
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
        let read: HashMap<u32, u64> = [(2, 300), (3, 150)].into_iter().collect();
        assert_eq!(p.horizon(&read), Some(200));
        let read: HashMap<u32, u64> = [(2, 300), (3, 200)].into_iter().collect();
        assert_eq!(p.horizon(&read), Some(250));
        assert_eq!(Progress { slots: vec![], unknown: false }.horizon(&read), Some(u64::MAX));
        assert_eq!(Progress { slots: vec![], unknown: true }.horizon(&read), None);
    }
}
