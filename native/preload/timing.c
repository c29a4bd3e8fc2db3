/*
 * timing.c — which calls of a full trace have their real call timed.
 *
 * Reading the cycle counter around every call was a third of what tracing
 * added to a malloc/free pair. A full trace times a random sample instead:
 * each call is timed with probability 1/time_gap, independently of every
 * other call, so the timed calls are an unbiased sample of each function's
 * calls whatever the program's pattern of calls (a fixed period would alias
 * with a loop that alternates two call sites). Per thread, the number of
 * calls to the next timed one is drawn from the geometric distribution,
 * which is what independent coin flips give, with one draw per timed call.
 * Every call is still recorded, with its time stamp; only its cycles field
 * is 0 ("not timed") when it was not timed.
 *
 * The rewrite replays these draws bit for bit (crates/mtlab/src/trace/
 * draws.rs) to store only the calls that depart from them: change the
 * generator, the seed or gap() only together with it (the test
 * the_preload_librarys_timing_draws_are_replayed fails otherwise).
 */
#include <math.h>

#include "internal.h"

/* Calls up to and including the next timed one: geometric on 1, 2, ... with
 * mean time_gap (P(k) = p (1 - p)^(k - 1), p = 1 / time_gap). */
static int64_t gap(struct mtlab_tls *t) {
    double u = ((double)(mtlab_xorshift(&t->time_rng) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double k = floor(log(u) / log1p(-1.0 / (double)mtlab_cfg.time_gap)) + 1.0;
    return k < 1.0 ? 1 : k > 4e18 ? (int64_t)4e18 : (int64_t)k;
}

/* A thread's first call is not timed: its generator is seeded once the
 * call's event is written, from that event's time stamp (and the thread id),
 * both in the trace, so that the rewrite can replay every draw and store
 * only where a call's timing departs from the replay (docs/trace-format.md,
 * *Replayed timing draws*). A thread's first allocation is often its
 * slowest: never timing it loses that one call's cycles, not the sample's
 * balance, since every later call is timed with probability 1/time_gap. */
int mtlab_time_draw(struct mtlab_tls *t) {
#ifdef MTLAB_ATTACH
    /* Seeded now from the counter, the first gap counted from this call
     * (see MTLAB_TIME_AFTER). */
    t->time_rng = mtlab_time_seed(mtlab_tsc(), mtlab_gettid());
    t->time_left = gap(t);
    if (--t->time_left > 0) return 0;
    t->time_left = MTLAB_TIME_REDRAW;
    return 1;
#else
    t->time_left = MTLAB_TIME_REDRAW;
    return 0;
#endif
}

/* A timed call, or the thread's first, is over and its event written at
 * `stamp`: the gap to the next timed call. Calls traced meanwhile (a signal
 * handler's) only counted the placeholder down. */
void mtlab_time_redraw(struct mtlab_tls *t, uint64_t stamp) {
    if (t->time_rng == 0) t->time_rng = mtlab_time_seed(stamp, mtlab_gettid());
    t->time_left = gap(t);
}
