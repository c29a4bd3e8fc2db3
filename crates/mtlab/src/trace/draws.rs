//! The preload library's timing draws, replayed (column layout 5).
//!
//! A full trace times each call with probability 1/N (`record --time 1/N`):
//! per thread, the preload library draws the number of calls to the next
//! timed one from the geometric distribution, with a xorshift64* generator
//! seeded from the time stamp of the thread's first traced call and its
//! thread id (`native/preload/timing.c`). Those draws are random, so their
//! gaps cost their entropy (6.5 bits a timed call at N = 32) however they are
//! coded. Both values of the seed are in the raw trace, so the rewrite
//! replays the draws, predicts which calls were timed and writes only where
//! a call departs from the prediction; it also writes the generator's state
//! at each record's start, which the reader replays from.
//!
//! The prediction only ever saves bytes: a call that departs from it (an
//! event the writer dropped, a signal handler's call nested in a timed one,
//! a logarithm whose last bit differs from the C library's) is stored, and
//! the replay goes on from the call's real timing. Reader and writer run this
//! same code, with a logarithm in pure Rust (`libm`), so they agree on every
//! machine.

use super::format::*;

/// What an event is to the draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// An allocator call: it counts the thread's gap down (`mtlab_time_this`).
    Drawn,
    /// A mapping call (mmap, munmap, mremap, brk, sbrk): always timed.
    Timed,
    /// What no call of the program made (BRK_SEEN, ARENA_HEAP) and sampled
    /// traces' events: never timed.
    Untimed,
}

/// Whether an event of kind `kind` counted the preload library's gap down.
pub(crate) fn is_drawn(kind: u8) -> bool {
    class(kind) == Class::Drawn
}

fn class(kind: u8) -> Class {
    match kind {
        EV_MALLOC | EV_CALLOC | EV_REALLOC | EV_REALLOCARRAY | EV_POSIX_MEMALIGN | EV_ALIGNED_ALLOC | EV_MEMALIGN
        | EV_VALLOC | EV_PVALLOC | EV_FREE | EV_NEW | EV_DELETE | EV_USABLE_SIZE => Class::Drawn,
        EV_MMAP | EV_MMAP64 | EV_MUNMAP | EV_MREMAP | EV_BRK | EV_SBRK => Class::Timed,
        _ => Class::Untimed,
    }
}

/// The generator's seed for a thread whose first traced call's event is
/// stamped `stamp` (`mtlab_time_seed`).
pub(crate) fn seed(stamp: u64, tid: u32) -> u64 {
    let mut z = stamp ^ (tid as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) | 1
}

/// Calls up to and including the next timed one, as `timing.c`'s `gap`.
fn gap(rng: &mut u64, n: u64) -> i64 {
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    let r = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let u = ((r >> 11) as f64 + 0.5) * (1.0 / 9_007_199_254_740_992.0);
    let k = (libm::log(u) / libm::log1p(-1.0 / n as f64)).floor() + 1.0;
    if k < 1.0 {
        1
    } else if k > 4e18 {
        4_000_000_000_000_000_000
    } else {
        k as i64
    }
}

/// The replay of one thread's draws, as a record starts it and as it stands
/// after each event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Draws {
    /// Nothing to replay (the thread's generator is not known here, or it is
    /// not yet seeded and this record holds no allocator call): allocator
    /// calls are predicted untimed.
    Unknown,
    /// Every call is timed (`--time every`, or a trace written before
    /// sampled timing).
    Every,
    /// One call in `n` on average: the generator's state, and the calls up
    /// to the next draw (`left`); `seeding` when that draw is the thread's
    /// first call, which is not timed and seeds the generator (`rng` is then
    /// the seed).
    Replay { n: u64, rng: u64, left: i64, seeding: bool },
}

/// Where a writer's thread stands before its next record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Thread {
    /// Known from here on.
    At(Draws),
    /// Its first call not yet seen: the generator will be seeded there,
    /// from that event's stamp and `tid`, and draws one call in `n`.
    Unseeded { n: u64, tid: u32 },
}

impl Draws {
    /// Before an event of kind `kind` is coded: whether it is predicted
    /// timed. Must be followed by `settle` with its real timing.
    #[inline(always)]
    pub(crate) fn predict(&mut self, kind: u8) -> (bool, bool) {
        match class(kind) {
            Class::Timed => (true, false),
            Class::Untimed => (false, false),
            Class::Drawn => match self {
                Draws::Unknown => (false, false),
                Draws::Every => (true, false),
                Draws::Replay { left, seeding, .. } => {
                    *left -= 1;
                    let due = *left <= 0;
                    (due && !*seeding, due)
                }
            },
        }
    }

    /// After an event whose `predict` said `due` (a draw was expected
    /// there): a draw is made when it was due or the call was in fact timed,
    /// as the preload library draws after each timed call.
    #[inline(always)]
    pub(crate) fn settle(&mut self, due: bool, timed: bool, kind: u8) {
        if let Draws::Replay { n, rng, left, seeding } = self {
            if (due || timed) && class(kind) == Class::Drawn {
                *seeding = false;
                *left = gap(rng, *n);
            }
        }
    }

    /// The record header's bytes (layout 5): `varint mode` (0 unknown,
    /// 1 every call, 2 replayed), then for 2 `varint n`, `u64 rng`,
    /// `varint left × 2 + seeding`.
    pub(crate) fn put(&self, out: &mut Vec<u8>) {
        use super::varint::put_varint;
        match *self {
            Draws::Unknown => put_varint(out, 0),
            Draws::Every => put_varint(out, 1),
            Draws::Replay { n, rng, left, seeding } => {
                put_varint(out, 2);
                put_varint(out, n);
                out.extend_from_slice(&rng.to_le_bytes());
                put_varint(out, (left.max(1) as u64) << 1 | seeding as u64);
            }
        }
    }

    /// Reads what `put` wrote, at `at` in `buf`.
    pub(crate) fn get(buf: &[u8], at: &mut usize) -> Result<Draws, &'static str> {
        use super::varint::varint;
        let v = |at: &mut usize| varint(buf, at).map_err(|_| "a record's timing draws are cut short");
        Ok(match v(at)? {
            0 => Draws::Unknown,
            1 => Draws::Every,
            2 => {
                let n = v(at)?;
                let rng = buf.get(*at..*at + 8).ok_or("a record's timing draws are cut short")?;
                let rng = u64::from_le_bytes(rng.try_into().expect("8 bytes"));
                *at += 8;
                let l = v(at)?;
                let left = i64::try_from(l >> 1).map_err(|_| "a record's timing draws are out of range")?;
                if n < 2 || rng == 0 || left < 1 {
                    return Err("a record's timing draws are out of range");
                }
                Draws::Replay { n, rng, left, seeding: l & 1 == 1 }
            }
            _ => return Err("a record's timing draws name no mode"),
        })
    }
}

impl Thread {
    /// A thread not seen before, in a trace whose header says
    /// `time_sample` = `n` (0: absent, every call timed).
    pub(crate) fn first(n: u64, tid: u32) -> Thread {
        if n <= 1 {
            Thread::At(Draws::Every)
        } else {
            Thread::Unseeded { n, tid }
        }
    }

    /// The draws a record starts with, given the stamp of its first
    /// allocator call, if it has one.
    pub(crate) fn start(self, first_drawn_stamp: Option<u64>) -> Draws {
        match (self, first_drawn_stamp) {
            (Thread::At(d), _) => d,
            (Thread::Unseeded { n, tid }, Some(stamp)) => Draws::Replay { n, rng: seed(stamp, tid), left: 1, seeding: true },
            (Thread::Unseeded { .. }, None) => Draws::Unknown,
        }
    }

    /// Whether the record's first allocator call's stamp is wanted.
    pub(crate) fn wants_stamp(&self) -> bool {
        matches!(self, Thread::Unseeded { .. })
    }

    /// After a record that started with `start`'s draws and ended at `end`,
    /// in which `departed` of the `timed` allocator calls' timings departed
    /// from the replay. A replay out of step (a thread whose first calls
    /// are not in this trace: a flight recorder's window, a thread id used
    /// again) departs twice per timed call, where storing the gaps costs
    /// one: such a thread's next records replay nothing.
    pub(crate) fn after(self, started: Draws, end: Draws, departed: u64, timed: u64) -> Thread {
        match (self, started) {
            (Thread::Unseeded { .. }, Draws::Unknown) => self,
            _ if matches!(started, Draws::Replay { .. }) && departed > 8 && departed * 2 > timed => Thread::At(Draws::Unknown),
            _ => Thread::At(end),
        }
    }
}

/// The writer's replay of one record's draws, call by call: where they
/// stand, and what `Thread::after` needs at the record's end.
pub(crate) struct Replay {
    pub(crate) started: Draws,
    draws: Draws,
    departed: u64,
    timed_drawn: u64,
}

impl Replay {
    pub(crate) fn new(started: Draws) -> Replay {
        Replay { started, draws: started, departed: 0, timed_drawn: 0 }
    }

    /// An allocator call of `kind` (masked), `timed` or not: whether the
    /// replay predicted that (else its timing departs).
    #[inline(always)]
    pub(crate) fn call(&mut self, kind: u8, timed: bool) -> bool {
        let (predicted, due) = self.draws.predict(kind);
        self.draws.settle(due, timed, kind);
        self.timed_drawn += (timed && is_drawn(kind)) as u64;
        let kept = predicted == timed;
        self.departed += (!kept) as u64;
        kept
    }

    /// The thread's draws after the record (`Thread::after`).
    pub(crate) fn end(self, thread: Thread) -> Thread {
        thread.after(self.started, self.draws, self.departed, self.timed_drawn)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The preload library's choice of timed calls, as `timing.c` and
    /// `mtlab_time_this` make it, for `calls` allocator calls of a thread
    /// whose first call is stamped `stamp`.
    pub(crate) fn preload_timed(calls: usize, n: u64, stamp: u64, tid: u32) -> Vec<bool> {
        let (mut rng, mut left, mut out) = (0u64, 0i64, Vec::with_capacity(calls));
        const REDRAW: i64 = 1 << 62;
        for _ in 0..calls {
            left -= 1;
            let timed = if left > 0 {
                false
            } else if rng == 0 {
                left = REDRAW;
                false
            } else {
                left = REDRAW;
                true
            };
            out.push(timed);
            if left > REDRAW / 2 {
                if rng == 0 {
                    rng = seed(stamp, tid);
                }
                left = gap(&mut rng, n);
            }
        }
        out
    }

    #[test]
    fn the_replay_predicts_every_draw_and_survives_a_departure() {
        let (n, stamp, tid) = (32, 0x1234_5678_9abc, 4242);
        let mut timed = preload_timed(100_000, n, stamp, tid);
        let share = timed.iter().filter(|&&t| t).count() as f64 / timed.len() as f64;
        assert!((share - 1.0 / 32.0).abs() < 0.003, "one call in 32 timed: {share}");
        assert!(!timed[0], "a thread's first call is never timed");
        // One departure: a call the preload library timed that the replay
        // cannot know of (say, a signal handler's draw).
        let flip = timed.iter().position(|&t| t).unwrap() + 5;
        timed[flip] = !timed[flip];
        let mut d = Thread::first(n, tid).start(Some(stamp));
        let mut wrong = Vec::new();
        for (i, &t) in timed.iter().enumerate() {
            let (p, due) = d.predict(EV_MALLOC);
            if p != t {
                wrong.push(i);
            }
            d.settle(due, t, EV_MALLOC);
        }
        // Every call before the departure is predicted; from there the
        // replay has drawn where the preload did not, and is out of step.
        assert_eq!(wrong[0], flip, "the replay predicts every call before the departure");
        // Without the departure, none.
        let timed = preload_timed(100_000, n, stamp, tid);
        let mut d = Thread::first(n, tid).start(Some(stamp));
        for &t in &timed {
            let (p, due) = d.predict(EV_FREE);
            assert_eq!(p, t);
            d.settle(due, t, EV_FREE);
        }
    }

    #[test]
    fn a_replay_out_of_step_is_given_up() {
        let d = Draws::Replay { n: 32, rng: 7, left: 3, seeding: false };
        let t = Thread::At(d);
        assert_eq!(t.after(d, d, 2, 100), Thread::At(d), "a few departures: replayed on");
        assert_eq!(t.after(d, d, 100, 100), Thread::At(Draws::Unknown));
        let u = Thread::first(32, 9);
        assert_eq!(u.after(Draws::Unknown, Draws::Unknown, 0, 0), u, "not yet seeded");
    }

    #[test]
    fn draws_are_written_and_read_back() {
        for d in [Draws::Unknown, Draws::Every, Draws::Replay { n: 32, rng: 0xdead_beef, left: 17, seeding: true }] {
            let mut b = Vec::new();
            d.put(&mut b);
            let mut at = 0;
            assert_eq!(Draws::get(&b, &mut at), Ok(d));
            assert_eq!(at, b.len());
        }
        let mut at = 0;
        assert!(Draws::get(&[2, 32, 0, 0, 0, 0, 0, 0, 0, 0, 2], &mut at).is_err(), "a zero state is refused");
    }

    #[test]
    fn mappings_are_timed_and_the_rest_never() {
        let mut d = Draws::Unknown;
        assert_eq!(d.predict(EV_MMAP), (true, false));
        assert_eq!(d.predict(EV_BRK_SEEN), (false, false));
        assert_eq!(d.predict(EV_MALLOC), (false, false));
        assert_eq!(Draws::Every.predict(EV_FREE), (true, false));
    }
}
