//! A copy of the events a quiet thread still holds in its buffer, read
//! out of the traced process (`process_vm_readv`) so that the analysis can
//! pass them without waiting for the thread to write them.
//!
//! A thread that made a few calls and then blocks (a pool thread waiting
//! for work, a thread asleep between phases) would otherwise hold the
//! analysis horizon (`progress.rs`) at its oldest buffered event for as
//! long as it blocks, and with it every later byte of the raw file on disk.
//!
//! The protocol costs the program nothing: the owner already raises `busy`
//! around each append and flush and bumps `gen` after, with plain stores,
//! for the exit flusher (a seqlock). The copy is taken only when `busy` is
//! 0 and neither word moved while the events were read; the owner is never
//! waited for, signalled or written to. Its own later chunk, which starts
//! with the same bytes, is read with those bytes skipped (`consume.rs`).

use crate::platform::process::read_memory;
use crate::trace::format::*;

/// The events of one buffer as they were at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferCopy {
    pub tid: u32,
    pub n_events: u32,
    pub first_tsc: u64,
    /// The time stamp of its latest event: the thread's later events are
    /// not older (per-thread time never goes back).
    pub last_tsc: u64,
    /// The event bytes, as the owner's chunk of this buffer will start.
    pub events: Vec<u8>,
    /// The buffer's generation when copied: its owner bumps it after
    /// each append and flush (`generation`).
    pub gen: u32,
}

/// The largest event area a buffer has (64 KiB buffers).
const MAX_EVENTS: u64 = 64 << 10;

/// The buffer at `addr` in process `pid`: None while its owner appends
/// or flushes (or did meanwhile), or when it holds no event; an error
/// when the process's memory cannot be read (another user's or an
/// undumpable process, or it has ended).
pub fn copy(pid: u32, addr: u64) -> std::io::Result<Option<BufferCopy>> {
    let mut head = [0u8; BUF_OFF_EVENTS as usize];
    read_memory(pid, addr, &mut head)?;
    let u32_at = |b: &[u8], off: u64| u32::from_le_bytes(b[off as usize..off as usize + 4].try_into().unwrap());
    let u64_at = |b: &[u8], off: u64| u64::from_le_bytes(b[off as usize..off as usize + 8].try_into().unwrap());
    let (busy, gen) = (u32_at(&head, BUF_OFF_BUSY), u32_at(&head, BUF_OFF_GEN));
    let (len, n_events) = (u32_at(&head, BUF_OFF_LEN) as u64, u32_at(&head, BUF_OFF_N_EVENTS));
    if busy != 0 || len == 0 || n_events == 0 || len > MAX_EVENTS {
        return Ok(None);
    }
    let mut events = vec![0u8; len as usize];
    read_memory(pid, addr + BUF_OFF_EVENTS, &mut events)?;
    let mut after = [0u8; 8];
    read_memory(pid, addr + BUF_OFF_BUSY, &mut after)?;
    if u32_at(&after, 0) != 0 || u32_at(&after, 4) != gen {
        return Ok(None);
    }
    Ok(Some(BufferCopy {
        tid: u32_at(&head, BUF_OFF_TID),
        n_events,
        first_tsc: u64_at(&head, BUF_OFF_FIRST_TSC),
        last_tsc: u64_at(&head, BUF_OFF_PREV_TSC),
        events,
        gen,
    }))
}

/// The generation of the buffer at `addr` in process `pid` (None while
/// its owner appends or flushes): a copy taken at the same generation
/// holds what the buffer holds now.
pub fn generation(pid: u32, addr: u64) -> std::io::Result<Option<u32>> {
    let mut w = [0u8; 8];
    read_memory(pid, addr + BUF_OFF_BUSY, &mut w)?;
    let busy = u32::from_le_bytes(w[0..4].try_into().unwrap());
    Ok((busy == 0).then(|| u32::from_le_bytes(w[4..8].try_into().unwrap())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A buffer laid out as the preload's, in this process.
    #[repr(C, align(8))]
    struct Buf([u8; 256]);

    fn buf(busy: u32, len: u32, n: u32) -> Buf {
        let mut b = Buf([0; 256]);
        let put = |b: &mut Buf, off: u64, v: &[u8]| b.0[off as usize..off as usize + v.len()].copy_from_slice(v);
        put(&mut b, BUF_OFF_TID, &77u32.to_le_bytes());
        put(&mut b, BUF_OFF_N_EVENTS, &n.to_le_bytes());
        put(&mut b, BUF_OFF_FIRST_TSC, &1000u64.to_le_bytes());
        put(&mut b, BUF_OFF_PREV_TSC, &2000u64.to_le_bytes());
        put(&mut b, BUF_OFF_LEN, &len.to_le_bytes());
        put(&mut b, BUF_OFF_BUSY, &busy.to_le_bytes());
        put(&mut b, BUF_OFF_GEN, &5u32.to_le_bytes());
        for i in 0..len as u64 {
            b.0[(BUF_OFF_EVENTS + i) as usize] = i as u8 + 1;
        }
        b
    }

    #[test]
    fn a_quiet_buffer_is_copied_and_a_busy_or_empty_one_is_not() {
        let me = std::process::id();
        let quiet = buf(0, 10, 3);
        let c = copy(me, quiet.0.as_ptr() as u64).unwrap().expect("a quiet buffer with events");
        assert_eq!((c.tid, c.n_events, c.first_tsc, c.last_tsc), (77, 3, 1000, 2000));
        assert_eq!(c.events, (1..=10).collect::<Vec<u8>>());
        assert_eq!(generation(me, quiet.0.as_ptr() as u64).unwrap(), Some(5));
        assert_eq!(c.gen, 5);
        let busy = buf(1, 10, 3);
        assert_eq!(copy(me, busy.0.as_ptr() as u64).unwrap(), None, "its owner is appending");
        assert_eq!(generation(me, busy.0.as_ptr() as u64).unwrap(), None);
        let empty = buf(0, 0, 0);
        assert_eq!(copy(me, empty.0.as_ptr() as u64).unwrap(), None);
        assert!(copy(me, 8).is_err(), "an address the process does not map");
    }
}
