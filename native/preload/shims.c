/*
 * shims.c — the exported libc names: every function mtlab intercepts.
 *
 * Shape of a shim: check the recursion flags first and pass straight through
 * when set; time the real call with the TSC; then, under the guard, append
 * one event to the thread's buffer. errno is kept as the real call left it:
 * the append itself touches no errno, and the slow paths it may take
 * (a thread's first buffer, a flush) save and restore it themselves.
 * A shim never fails its caller: if anything of mtlab's is missing, the event
 * is dropped and counted, and the real result is returned.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

#define EXPORT __attribute__((visibility("default")))

/* Is the calling thread allowed to record right now? */
static inline __attribute__((always_inline)) int tracing(struct mtlab_tls *t) {
    int s = atomic_load_explicit(&mtlab_state, memory_order_relaxed);
    if (UNLIKELY(s == MTLAB_NOT_STARTED)) {
        s = mtlab_start_early();
        if (mtlab_ctl) return 0; /* sampling mode from now on (allocations were redone by started_sampling) */
    }
    if (UNLIKELY(t->guard || t->in_alloc) && !mtlab_guard_stale(t, (uintptr_t)__builtin_frame_address(0))) return 0;
    return LIKELY(s == MTLAB_TRACING);
}

/* What an allocation shim does with this call: 1 record it, 0 pass it
 * through, 2 call the exported function again (started_sampling). The
 * usual answer, from one load of the state; the rest out of line. */
__attribute__((noinline)) static int should_trace_slow(struct mtlab_tls *t);
static inline __attribute__((always_inline)) int should_trace(struct mtlab_tls *t) {
    if (LIKELY(atomic_load_explicit(&mtlab_state, memory_order_relaxed) == MTLAB_TRACING && !t->guard && !t->in_alloc))
        return 1;
    return should_trace_slow(t);
}

/* Did this call just start mtlab in sampling mode? It is then an allocation
 * by another library's constructor, made before mtlab's constructor ran;
 * the shim makes it again through the exported function, where it counts
 * toward the sampler's byte countdown like any later call. */
static inline __attribute__((always_inline)) int started_sampling(struct mtlab_tls *t) {
    if (LIKELY(atomic_load_explicit(&mtlab_state, memory_order_relaxed) != MTLAB_NOT_STARTED)) return 0;
    if (t->guard || t->in_alloc) return 0;
    mtlab_start_early();
    return mtlab_ctl != NULL;
}

__attribute__((noinline)) static int should_trace_slow(struct mtlab_tls *t) {
    if (started_sampling(t)) return 2;
    return tracing(t);
}

/* Starts an event: returns the write position or NULL (event dropped).
 * From here to commit() the buffer is marked busy for the exit flusher. */
static inline __attribute__((always_inline)) uint8_t *begin(struct mtlab_buf **bp, unsigned kind, unsigned flags, uint64_t tsc, uint64_t cycles,
                             const void *frame) {
    if (MTLAB_SKIP(MTLAB_SKIP_EVENT)) return NULL;
    struct mtlab_buf *b = LIKELY(mtlab_tls.buf != NULL) ? mtlab_tls.buf : mtlab_thread_buf();
    if (UNLIKELY(!b)) {
        atomic_fetch_add(&mtlab_counters.events_dropped, 1);
        return NULL;
    }
    /* Owner-only counter: a plain increment; the fence orders it before the data. */
    mtlab_owner_add(&b->busy, 1);
    atomic_thread_fence(memory_order_release);
    /* Written when full, or when its oldest event is ~100 ms old (flush_by:
     * one compare, on a line the append reads anyway): a thread that
     * allocates seldom no longer holds minutes of events that a kill would
     * take. */
    if (UNLIKELY(atomic_load_explicit(&b->len, memory_order_relaxed) > MTLAB_BUF_CAP - MTLAB_MAX_EVENT_BYTES) ||
        UNLIKELY(tsc > b->flush_by))
        mtlab_flush_buf(b);
    uint32_t stack = !MTLAB_SKIP(MTLAB_SKIP_STACK) && mtlab_cfg.stacks && frame ? mtlab_stack_code_at(b, frame)
                                                                                : mtlab_stack_code(0);
    *bp = b;
    return mtlab_begin_event_code(b, kind, flags, tsc, cycles, stack);
}

static inline void commit(struct mtlab_buf *b, uint8_t *p) {
    mtlab_commit_event(b, p);
    mtlab_owner_add(&b->gen, 1);
    mtlab_owner_add(&b->busy, -1);
    if (UNLIKELY(mtlab_tls.dead)) mtlab_release_dead_buf();
}

/* Sampling mode: count the bytes down, so that the common case is a tail
 * call whether sampling is on or off; only when the count runs out is the
 * real call made here and the slow path taken. While sampling is off the
 * count stands still, so where the first sample after `start` falls depends
 * only on the draws (a fixed --sample-seed repeats the run), not on how much
 * was allocated while off. */
#define SAMPLING_ALLOC(KIND, CALL, SIZE)                                                                      \
    do {                                                                                                      \
        if (__atomic_load_n(&mtlab_ctl_area.state, __ATOMIC_ACQUIRE) & MTLAB_CTL_ACTIVE) {                    \
            if (LIKELY((mtlab_tls.countdown -= (int64_t)(SIZE)) > 0)) return CALL;                            \
            void *r_ = CALL;                                                                                  \
            return mtlab_sample_alloc(KIND, r_, SIZE, NULL);                                                  \
        }                                                                                                     \
        if (mtlab_ctl) return CALL;                                                                           \
    } while (0)

/* Sampling mode: a free (or realloc) of a block that may be sampled. The
 * state is read at the page's fixed address (mtlab_ctl points there), so it
 * costs no pointer load first. */
static inline void sampling_release(void *p) {
    if (UNLIKELY((__atomic_load_n(&mtlab_ctl_area.state, __ATOMIC_RELAXED) & MTLAB_CTL_LIVE) && p &&
                 atomic_load_explicit(&mtlab_filter[mtlab_filter_hash((uint64_t)p)], memory_order_relaxed)))
        mtlab_sample_free(p);
}

/* glibc keeps the chunk size, with flag bits, in the word before the block. */
#define GLIBC_IS_MMAPPED 0x2
#define GLIBC_NON_MAIN_ARENA 0x4

static _Atomic uint64_t last_brk;

/* Where glibc's cached break is not found; sbrk(0) leaves errno alone, but
 * the caller's errno must survive whatever libc does. */
__attribute__((noinline)) static uint64_t brk_by_call(void) {
    int saved = errno;
    uint64_t now = (uint64_t)mtlab_real.sbrk(0);
    errno = saved;
    return now;
}

/* A BRK_SEEN event if the break is not where the trace last put it. */
static inline __attribute__((always_inline)) void note_break(uint64_t brk_now, struct mtlab_buf **bp, uint64_t tsc) {
    uint64_t seen = atomic_load_explicit(&last_brk, memory_order_relaxed);
    if (UNLIKELY(brk_now != seen) && atomic_compare_exchange_strong(&last_brk, &seen, brk_now)) {
        uint8_t *p = begin(bp, MTLAB_EV_BRK_SEEN, 0, tsc, 0, NULL);
        if (p) commit(*bp, mtlab_put_ptr(*bp, p, brk_now));
    }
}

/* Reported by arena.c: a thread arena's heap whose extent changed (size 0: unmapped). */
struct arena_emit_ctx {
    struct mtlab_buf **bp;
    uint64_t tsc;
};
static void emit_arena_heap(void *ctx, uint64_t base, uint64_t size) {
    struct arena_emit_ctx *c = ctx;
    uint8_t *p = begin(c->bp, MTLAB_EV_ARENA_HEAP, 0, c->tsc, 0, NULL);
    if (p) commit(*c->bp, mtlab_put_varint(mtlab_put_ptr(*c->bp, p, base), size));
}

/* A thread's first look also goes round every arena: its own may have
 * been made inside a call that put no block in it (a first free). */
__attribute__((noinline)) static void arena_changed(uint64_t ar, struct mtlab_buf **bp, uint64_t tsc) {
    struct arena_emit_ctx c = {bp, tsc};
    struct mtlab_tls *t = &mtlab_tls;
    mtlab_arena_sync(ar, emit_arena_heap, &c); /* an arena it cannot follow stays in the thread's cache: not asked again */
    if (UNLIKELY(!t->arenas_listed)) {
        t->arenas_listed = 1;
        mtlab_arena_sync_all(emit_arena_heap, &c);
    }
}

/* After a call that may have grown, shrunk, made or unmapped a heap of
 * thread arena `ar`: two loads of the arena's own state (its first heap is
 * never unmapped), compared with what this thread saw last; only a change
 * goes on to arena.c. */
static inline __attribute__((always_inline)) void note_arena(uint64_t ar, struct mtlab_buf **bp, uint64_t tsc) {
    int layout = atomic_load_explicit(&mtlab_arena_layout, memory_order_relaxed);
    if (UNLIKELY(layout < 0)) return;
    struct mtlab_tls *t = &mtlab_tls;
    if (LIKELY(layout > 0)) {
        uint64_t mem = mtlab_arena_word(ar, MTLAB_ARENA_SYSTEM_MEM);
        uint64_t tail = mtlab_arena_word(ar, MTLAB_ARENA_TOP) & ~(MTLAB_GLIBC_HEAP_MAX - 1);
        if (LIKELY(ar == t->arena_ar && mem == t->arena_mem && tail == t->arena_tail)) return;
        t->arena_ar = ar;
        t->arena_mem = mem;
        t->arena_tail = tail;
    }
    arena_changed(ar, bp, tsc);
}

/* The thread arena that glibc block `p` (live: its heap is mapped) belongs
 * to, from its heap's heap_info; 0 for another allocator's block, the main
 * arena's, an mmapped chunk, or heaps not laid out at their usual alignment
 * (the hugetlb tunable). */
static inline uint64_t arena_of(const void *p) {
    if (MTLAB_SKIP(MTLAB_SKIP_HEAP)) return 0;
    if (!mtlab_cfg.is_glibc || !p || mtlab_cfg.no_arena_heaps) return 0;
    size_t word = ((const size_t *)p)[-1];
    if ((word & (GLIBC_NON_MAIN_ARENA | GLIBC_IS_MMAPPED)) != GLIBC_NON_MAIN_ARENA) return 0;
    return *(const uint64_t *)((uint64_t)p & ~(MTLAB_GLIBC_HEAP_MAX - 1)); /* heap_info.ar_ptr */
}

/* Extra events telling where an allocator's memory lives (glibc only). */
static inline __attribute__((always_inline)) unsigned heap_facts(void *ptr, struct mtlab_buf **bp, uint64_t tsc) {
    if (MTLAB_SKIP(MTLAB_SKIP_HEAP) || !mtlab_cfg.is_glibc || !ptr) return 0;
    note_break(mtlab_real.curbrk ? (uint64_t)*mtlab_real.curbrk : brk_by_call(), bp, tsc);
    size_t word = ((const size_t *)ptr)[-1];
    if (word & GLIBC_IS_MMAPPED) return MTLAB_EVF_CHUNK_MMAPPED;
    uint64_t ar = arena_of(ptr);
    if (ar) note_arena(ar, bp, tsc);
    return 0;
}

/* Every thread arena seen so far, after glibc may have changed them where
 * no call of the program shows it (a thread's exit, the end of the run). */
static void arenas_sync_all(uint64_t tsc) {
    if (!mtlab_cfg.is_glibc || mtlab_cfg.no_arena_heaps) return;
    struct mtlab_buf *b;
    struct arena_emit_ctx c = {&b, tsc};
    mtlab_arena_sync_all(emit_arena_heap, &c);
    mtlab_tls.arena_ar = 0;
}

/* glibc's usable size is in the chunk header: no call needed. */
static inline uint64_t usable_extra(void *ptr, size_t requested, unsigned flags) {
    if (MTLAB_SKIP(MTLAB_SKIP_HEAP) || !ptr) return 0;
    size_t u;
    if (mtlab_cfg.is_glibc) {
        size_t word = ((const size_t *)ptr)[-1];
        u = (word & ~(size_t)7) - ((flags & MTLAB_EVF_CHUNK_MMAPPED) ? 16 : 8);
    } else if (mtlab_real.malloc_usable_size) {
        u = mtlab_real.malloc_usable_size(ptr);
    } else {
        return 0;
    }
    return u >= requested ? u - requested : 0;
}

/* One allocation event; `a`,`b` are the size arguments (b unused: 0).
 * `result` comes from the real allocator, never from mtlab's bootstrap pool,
 * so its chunk header is the allocator's. */
static inline __attribute__((always_inline)) void record_alloc(unsigned kind, uint64_t t0, uint64_t t1, const void *frame, uint64_t old, uint64_t a,
                         uint64_t b2, uint64_t size, void *result, int ret) {
    struct mtlab_tls *t = &mtlab_tls;
    MTLAB_GUARD_ENTER_AFTER_ALLOC(t);
    struct mtlab_buf *b;
    unsigned flags = heap_facts(result, &b, t1);
    /* Read before begin(): its stores would make the compiler read the header again. */
    uint64_t extra = usable_extra(result, size, flags);
    if (!result && ((kind != MTLAB_EV_REALLOC && kind != MTLAB_EV_REALLOCARRAY) || size != 0)) flags |= MTLAB_EVF_FAILED;
    uint8_t *p = begin(&b, kind, flags, t1, t0 ? mtlab_timed_cycles(t0, t1) : 0, frame);
    if (p) {
        switch (kind) {
        case MTLAB_EV_REALLOC:
            p = mtlab_put_ptr(b, p, old);
            p = mtlab_put_varint(p, a);
            break;
        case MTLAB_EV_REALLOCARRAY:
            p = mtlab_put_ptr(b, p, old);
            p = mtlab_put_varint(p, a);
            p = mtlab_put_varint(p, b2);
            break;
        case MTLAB_EV_CALLOC:
        case MTLAB_EV_POSIX_MEMALIGN:
        case MTLAB_EV_ALIGNED_ALLOC:
        case MTLAB_EV_MEMALIGN:
            p = mtlab_put_varint(p, a);
            p = mtlab_put_varint(p, b2);
            break;
        case MTLAB_EV_NEW: /* a: the form, b2: the alignment */
            p = mtlab_put_varint(p, a);
            p = mtlab_put_varint(p, b2);
            p = mtlab_put_varint(p, size);
            break;
        default: /* malloc, valloc, pvalloc */
            p = mtlab_put_varint(p, a);
        }
        p = mtlab_put_ptr(b, p, (uint64_t)result);
        if (kind == MTLAB_EV_POSIX_MEMALIGN) p = mtlab_put_varint(p, (uint64_t)ret);
        p = mtlab_put_varint(p, extra);
        commit(b, p);
    }
    MTLAB_TIME_AFTER(t, t0, t1);
    t->guard--;
    mtlab_resume_interrupted(t);
}

/* A shim's time stamp (a bench build's counter: MTLAB_SKIP_TSC). */
static inline __attribute__((always_inline)) uint64_t stamp(struct mtlab_tls *t) {
    if (MTLAB_SKIP(MTLAB_SKIP_TSC)) return t->bench_clock += 64;
    return mtlab_tsc();
}

/* An allocation is stamped when its real call returns (t1); its start (t0)
 * is read only when the call is timed (mtlab_time_this), else t0 is 0. */
static inline __attribute__((always_inline)) uint64_t enter_alloc(struct mtlab_tls *t) {
    t->in_alloc++;
    MTLAB_NOTE_FRAME(t->alloc_sp, t->alloc_w);
    return mtlab_time_this(t) ? stamp(t) : 0;
}
#define ENTER_ALLOC(t) enter_alloc(t)
#define LEAVE_ALLOC(t, t1) ((t1) = stamp(t), (t)->in_alloc--)

/* A release is stamped when its real call begins (t0); its end (t1) is read
 * only when the call is timed, else t1 is 0. Whether it is timed is decided
 * before t0, in a branch of its own around the call: a branch on it between
 * the call's return and t1, rarely taken and so mispredicted when taken,
 * put its penalty into every timed release (cc1's sampled free p50 read
 * 52 cycles against 26 with every call timed). */
static inline __attribute__((always_inline)) int enter_release(struct mtlab_tls *t) {
    int timed = mtlab_time_this(t);
    t->in_alloc++;
    MTLAB_NOTE_FRAME(t->alloc_sp, t->alloc_w);
    return timed;
}
#define TIMED_RELEASE(t, t0, t1, CALL)                                                                        \
    do {                                                                                                      \
        if (UNLIKELY(enter_release(t))) {                                                                     \
            (t0) = stamp(t);                                                                                  \
            CALL;                                                                                             \
            (t1) = stamp(t);                                                                                  \
        } else {                                                                                              \
            (t0) = stamp(t);                                                                                  \
            CALL;                                                                                             \
            (t1) = 0;                                                                                         \
        }                                                                                                     \
        (t)->in_alloc--;                                                                                      \
    } while (0)

static inline void ensure_real(void) {
    if (UNLIKELY(!mtlab_real.malloc)) mtlab_resolve();
}

/* Full-trace paths live out of line so the exported fast paths stay small
 * (no callee-saved registers to spill before the sampling check). */
__attribute__((noinline)) static void *malloc_full(size_t n) {
    struct mtlab_tls *t = &mtlab_tls;
    if (UNLIKELY(!mtlab_real.malloc)) {
        if (t->guard) return mtlab_bootstrap_alloc(n);
        mtlab_resolve();
    }
    int what = should_trace(t);
    if (UNLIKELY(what == 2)) return malloc(n);
    if (!what || MTLAB_SKIP(MTLAB_SKIP_RECORD)) return mtlab_real.malloc(n);
    uint64_t t1, t0 = ENTER_ALLOC(t);
    void *r = mtlab_real.malloc(n);
    LEAVE_ALLOC(t, t1);
    record_alloc(MTLAB_EV_MALLOC, t0, t1, __builtin_frame_address(0), 0, n, 0, n, r, 0);
    return r;
}

#ifdef MTLAB_ATTACH
/* Called by the dynamic linker (resolve.c, mtlab_loader_lo): reached before
 * anything thread-local is touched, which may be what it is allocating. */
#define FROM_LOADER()                                                                                   \
    UNLIKELY(mtlab_loader_hi && (uintptr_t)__builtin_return_address(0) - mtlab_loader_lo <            \
                                    mtlab_loader_hi - mtlab_loader_lo)
#else
#define FROM_LOADER() 0
#endif

EXPORT void *malloc(size_t n) {
    if (FROM_LOADER()) return mtlab_real.malloc(n);
    /* Sampling mode first: mtlab_ctl is set only once the real functions are known. */
    SAMPLING_ALLOC(MTLAB_EV_MALLOC, mtlab_real.malloc(n), n);
    return malloc_full(n);
}

__attribute__((noinline)) static void *calloc_full(size_t nmemb, size_t size) {
    struct mtlab_tls *t = &mtlab_tls;
    if (UNLIKELY(!mtlab_real.calloc)) {
        if (t->guard) return mtlab_bootstrap_alloc(nmemb * size); /* pool memory is zeroed */
        mtlab_resolve();
    }
    int what = should_trace(t);
    if (UNLIKELY(what == 2)) return calloc(nmemb, size);
    if (!what) return mtlab_real.calloc(nmemb, size);
    uint64_t t1, t0 = ENTER_ALLOC(t);
    void *r = mtlab_real.calloc(nmemb, size);
    LEAVE_ALLOC(t, t1);
    size_t total;
    if (__builtin_mul_overflow(nmemb, size, &total)) total = (size_t)-1;
    record_alloc(MTLAB_EV_CALLOC, t0, t1, __builtin_frame_address(0), 0, nmemb, size, total, r, 0);
    return r;
}

EXPORT void *calloc(size_t nmemb, size_t size) {
    if (FROM_LOADER()) return mtlab_real.calloc(nmemb, size);
    SAMPLING_ALLOC(MTLAB_EV_CALLOC, mtlab_real.calloc(nmemb, size), nmemb * size);
    return calloc_full(nmemb, size);
}

/* One release event (free: form ~0u; an operator delete: its form), after
 * the real call began at t0 (and, when timed, ended at t1; else t1 is 0). A free is stamped at its start: the block
 * is gone as soon as free begins. glibc gives memory back to the system
 * inside free (the top of the brk heap, past M_TRIM_THRESHOLD), with its
 * internal brk that no shim sees: the break is read after each free — one
 * load of glibc's cached break, which the allocations read too — so that
 * the trace's mapped bytes follow it. */
static inline __attribute__((always_inline)) void record_release(unsigned kind, unsigned form, void *p, uint64_t t0,
                                                                 uint64_t t1, const void *frame, uint64_t ar) {
    struct mtlab_tls *t = &mtlab_tls;
    MTLAB_GUARD_ENTER_AFTER_ALLOC(t);
    struct mtlab_buf *b;
    uint8_t *w = begin(&b, kind, 0, t0, t1 ? mtlab_timed_cycles(t0, t1) : 0, mtlab_cfg.free_stacks ? frame : NULL);
    if (w) {
        if (kind == MTLAB_EV_DELETE) w = mtlab_put_varint(w, form);
        commit(b, mtlab_put_ptr(b, w, (uint64_t)p));
    }
    if (!MTLAB_SKIP(MTLAB_SKIP_HEAP) && mtlab_cfg.is_glibc && mtlab_real.curbrk && p) note_break((uint64_t)*mtlab_real.curbrk, &b, t1 ? t1 : t0);
    if (ar) note_arena(ar, &b, t1 ? t1 : t0);
    MTLAB_TIME_AFTER(t, t1, t0);
    t->guard--;
    mtlab_resume_interrupted(t);
}

/* free(NULL) is recorded too: a call the program made (ptr 0). */
__attribute__((noinline)) static void free_full(void *p) {
    struct mtlab_tls *t = &mtlab_tls;
    ensure_real();
    if (!tracing(t) || MTLAB_SKIP(MTLAB_SKIP_RECORD)) {
        mtlab_real.free(p);
        return;
    }
    uint64_t ar = arena_of(p); /* before the free, which may unmap the block's heap */
    uint64_t t0, t1;
    TIMED_RELEASE(t, t0, t1, mtlab_real.free(p));
    record_release(MTLAB_EV_FREE, ~0u, p, t0, t1, __builtin_frame_address(0), ar);
}

EXPORT void free(void *p) {
    if (FROM_LOADER()) {
        mtlab_real.free(p);
        return;
    }
    if (UNLIKELY(mtlab_in_bootstrap(p))) return;
    if (mtlab_ctl) {
        sampling_release(p);
        mtlab_real.free(p);
        return;
    }
    free_full(p);
}

static void *realloc_bootstrap(void *old, size_t n) {
    size_t oldn = ((const size_t *)old)[-2];
    void *r = mtlab_real.malloc ? mtlab_real.malloc(n) : mtlab_bootstrap_alloc(n);
    if (r) __builtin_memcpy(r, old, oldn < n ? oldn : n);
    return r;
}

EXPORT void *realloc(void *old, size_t n) {
    if (FROM_LOADER()) return mtlab_real.realloc(old, n);
    struct mtlab_tls *t = &mtlab_tls;
    if (UNLIKELY(mtlab_in_bootstrap(old))) return realloc_bootstrap(old, n);
    if (UNLIKELY(!mtlab_real.realloc)) {
        if (t->guard) return mtlab_bootstrap_alloc(n);
        mtlab_resolve();
    }
    if (UNLIKELY(started_sampling(t))) return realloc(old, n);
    if (mtlab_ctl) {
        sampling_release(old);
        SAMPLING_ALLOC(MTLAB_EV_REALLOC, mtlab_real.realloc(old, n), n);
    }
    if (!tracing(t)) return mtlab_real.realloc(old, n);
    uint64_t t1, t0 = ENTER_ALLOC(t);
    void *r = mtlab_real.realloc(old, n);
    LEAVE_ALLOC(t, t1);
    record_alloc(MTLAB_EV_REALLOC, t0, t1, __builtin_frame_address(0), (uint64_t)old, n, 0, n, r, 0);
    return r;
}

EXPORT void *reallocarray(void *old, size_t nmemb, size_t size) {
    struct mtlab_tls *t = &mtlab_tls;
    ensure_real();
    if (UNLIKELY(started_sampling(t))) return reallocarray(old, nmemb, size);
    if (mtlab_ctl && mtlab_real.reallocarray) {
        sampling_release(old);
        SAMPLING_ALLOC(MTLAB_EV_REALLOCARRAY, mtlab_real.reallocarray(old, nmemb, size), nmemb * size);
    }
    if (!tracing(t) || !mtlab_real.reallocarray) {
        size_t total;
        if (!mtlab_real.reallocarray) {
            if (__builtin_mul_overflow(nmemb, size, &total)) {
                errno = ENOMEM;
                return NULL;
            }
            return realloc(old, total);
        }
        return mtlab_real.reallocarray(old, nmemb, size);
    }
    uint64_t t1, t0 = ENTER_ALLOC(t);
    void *r = mtlab_real.reallocarray(old, nmemb, size);
    LEAVE_ALLOC(t, t1);
    size_t total;
    if (__builtin_mul_overflow(nmemb, size, &total)) total = (size_t)-1;
    record_alloc(MTLAB_EV_REALLOCARRAY, t0, t1, __builtin_frame_address(0), (uint64_t)old, nmemb, size, total, r,
                 0);
    return r;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n) {
    struct mtlab_tls *t = &mtlab_tls;
    ensure_real();
    if (UNLIKELY(started_sampling(t))) return posix_memalign(out, align, n);
    if (mtlab_ctl) {
        int ret = mtlab_real.posix_memalign(out, align, n);
        if ((__atomic_load_n(&mtlab_ctl_area.state, __ATOMIC_RELAXED) & MTLAB_CTL_ACTIVE) && ret == 0 &&
            (t->countdown -= (int64_t)n) <= 0)
            mtlab_sample_alloc(MTLAB_EV_POSIX_MEMALIGN, *out, n, NULL);
        return ret;
    }
    if (!tracing(t)) return mtlab_real.posix_memalign(out, align, n);
    uint64_t t1, t0 = ENTER_ALLOC(t);
    int ret = mtlab_real.posix_memalign(out, align, n);
    LEAVE_ALLOC(t, t1);
    record_alloc(MTLAB_EV_POSIX_MEMALIGN, t0, t1, __builtin_frame_address(0), 0, align, n, n,
                 ret == 0 ? *out : NULL, ret);
    return ret;
}

#define ALIGNED_SHIM(name, KIND)                                                                              \
    EXPORT void *name(size_t align, size_t n) {                                                               \
        struct mtlab_tls *t = &mtlab_tls;                                                                     \
        ensure_real();                                                                                        \
        if (UNLIKELY(started_sampling(t))) return name(align, n);                                             \
        SAMPLING_ALLOC(KIND, mtlab_real.name(align, n), n);                                                   \
        if (!tracing(t)) return mtlab_real.name(align, n);                                                    \
        uint64_t t1, t0 = ENTER_ALLOC(t);                                                                     \
        void *r = mtlab_real.name(align, n);                                                                  \
        LEAVE_ALLOC(t, t1);                                                                                   \
        record_alloc(KIND, t0, t1, __builtin_frame_address(0), 0, align, n, n, r, 0);                         \
        return r;                                                                                             \
    }
ALIGNED_SHIM(aligned_alloc, MTLAB_EV_ALIGNED_ALLOC)
ALIGNED_SHIM(memalign, MTLAB_EV_MEMALIGN)

#define PAGE_SHIM(name, KIND)                                                                                 \
    EXPORT void *name(size_t n) {                                                                             \
        struct mtlab_tls *t = &mtlab_tls;                                                                     \
        ensure_real();                                                                                        \
        if (UNLIKELY(started_sampling(t))) return name(n);                                                    \
        SAMPLING_ALLOC(KIND, mtlab_real.name(n), n);                                                          \
        if (!tracing(t)) return mtlab_real.name(n);                                                           \
        uint64_t t1, t0 = ENTER_ALLOC(t);                                                                     \
        void *r = mtlab_real.name(n);                                                                         \
        LEAVE_ALLOC(t, t1);                                                                                   \
        record_alloc(KIND, t0, t1, __builtin_frame_address(0), 0, n, 0, n, r, 0);                             \
        return r;                                                                                             \
    }
PAGE_SHIM(valloc, MTLAB_EV_VALLOC)
PAGE_SHIM(pvalloc, MTLAB_EV_PVALLOC)

/* A call that changes nothing, counted all the same. */
EXPORT size_t malloc_usable_size(void *p) {
    struct mtlab_tls *t = &mtlab_tls;
    if (UNLIKELY(mtlab_in_bootstrap(p))) return ((const size_t *)p)[-2];
    ensure_real();
    if (UNLIKELY(!mtlab_real.malloc_usable_size)) return 0;
    if (mtlab_ctl || !tracing(t)) return mtlab_real.malloc_usable_size(p);
    uint64_t t0 = mtlab_time_this(t) ? mtlab_tsc() : 0;
    size_t r = mtlab_real.malloc_usable_size(p);
    uint64_t t1 = mtlab_tsc();
    MTLAB_GUARD_ENTER(t);
    struct mtlab_buf *b;
    uint8_t *w = begin(&b, MTLAB_EV_USABLE_SIZE, 0, t1, t0 ? mtlab_timed_cycles(t0, t1) : 0, mtlab_cfg.free_stacks ? __builtin_frame_address(0) : NULL);
    if (w) {
        w = mtlab_put_ptr(b, w, (uint64_t)p);
        commit(b, mtlab_put_varint(w, r));
    }
    MTLAB_TIME_AFTER(t, t0, t1);
    t->guard--;
    return r;
}

/* ---- C++ operator new and delete ----
 *
 * jemalloc, tcmalloc and mimalloc define the operators themselves, so a C++
 * program's allocations under them never reached malloc's shim. Each form
 * is traced as its own function (EV_NEW, EV_DELETE), under every heap
 * manager; the C++ runtime's own operators call malloc and free, which
 * then pass through as the allocator's inner calls (in_alloc), counted once.
 * A nothrow_t is passed by reference, an align_val_t as a size_t. */

/* Where no definition is found anywhere (a C program has no C++ runtime,
 * yet something bound to these names): served by the C functions. The
 * throwing forms cannot throw from here: they return NULL on failure. */
static void *cxx_new_fallback(unsigned form, size_t n, size_t align) {
    if (!(form & MTLAB_NEW_ALIGNED)) return mtlab_real.malloc(n ? n : 1);
    void *r = NULL;
    return mtlab_real.posix_memalign(&r, align < sizeof(void *) ? sizeof(void *) : align, n ? n : 1) == 0 ? r : NULL;
}

static inline void *cxx_new_fn(unsigned form) {
    void *f = atomic_load_explicit(&mtlab_cxx.new_fn[form], memory_order_acquire);
    return LIKELY(f != NULL) ? f : mtlab_cxx_resolve(0, form);
}

static inline void *cxx_delete_fn(unsigned form) {
    void *f = atomic_load_explicit(&mtlab_cxx.delete_fn[form], memory_order_acquire);
    return LIKELY(f != NULL) ? f : mtlab_cxx_resolve(1, form);
}

/* A throwing operator new in flight: if it throws (std::bad_alloc, or a
 * new_handler's exception), the unwinder runs new_unwound in the shim's
 * frame (the library is built with -fexceptions), which records the call
 * as failed and leaves the allocator call. */
struct new_call {
    struct mtlab_tls *t;
    uint64_t t0;
    size_t n, align;
    unsigned form;
    int in_flight;
    const void *frame;
};

static void new_unwound(struct new_call *c) {
    if (LIKELY(!c->in_flight)) return;
    uint64_t t1;
    LEAVE_ALLOC(c->t, t1);
    record_alloc(MTLAB_EV_NEW, c->t0, t1, c->frame, 0, c->form, c->align, c->n, NULL, 0);
}

#define NEW_SHIM(sym, FORM, PARAMS, ARGS, ALIGN)                                                              \
    EXPORT void *sym PARAMS {                                                                                 \
        typedef void *(*fn_t) PARAMS;                                                                         \
        struct mtlab_tls *t = &mtlab_tls;                                                                     \
        ensure_real();                                                                                        \
        fn_t real = (fn_t)cxx_new_fn(FORM);                                                                   \
        if (UNLIKELY(!real)) return cxx_new_fallback(FORM, n, ALIGN);                                         \
        if (UNLIKELY(started_sampling(t))) return sym ARGS;                                                   \
        if (mtlab_ctl) {                                                                                      \
            /* The C++ runtime's operator calls malloc, which samples it. */                                  \
            if (atomic_load_explicit(&mtlab_cxx.new_via_malloc[FORM], memory_order_relaxed)) return real ARGS; \
            if (!(__atomic_load_n(&mtlab_ctl_area.state, __ATOMIC_ACQUIRE) & MTLAB_CTL_ACTIVE)) return real ARGS; \
            /* A heap manager's operator may call its exported aligned_alloc (jemalloc's aligned     \
             * forms do): nested, not sampled (mtlab_sample_alloc), and its bytes are this call's. */       \
            int64_t left_ = t->countdown;                                                                     \
            if (t->in_alloc++ == 0) MTLAB_NOTE_FRAME(t->alloc_sp, t->alloc_w);                                \
            void *r_ = real ARGS;                                                                             \
            t->in_alloc--;                                                                                    \
            if (LIKELY((t->countdown = left_ - (int64_t)n) > 0)) return r_;                                   \
            return mtlab_sample_alloc(MTLAB_EV_NEW | (FORM) << 5, r_, n, NULL);                               \
        }                                                                                                     \
        if (!tracing(t)) return real ARGS;                                                                    \
        struct new_call c __attribute__((cleanup(new_unwound))) = {                                           \
            .t = t, .n = n, .align = ALIGN, .form = FORM, .in_flight = 1, .frame = __builtin_frame_address(0)}; \
        uint64_t t1;                                                                                          \
        c.t0 = ENTER_ALLOC(t);                                                                                \
        void *r = real ARGS;                                                                                  \
        LEAVE_ALLOC(t, t1);                                                                                   \
        c.in_flight = 0;                                                                                      \
        record_alloc(MTLAB_EV_NEW, c.t0, t1, __builtin_frame_address(0), 0, FORM, ALIGN, n, r, 0);            \
        return r;                                                                                             \
    }

NEW_SHIM(_Znwm, 0, (size_t n), (n), 0)
NEW_SHIM(_Znam, MTLAB_NEW_ARRAY, (size_t n), (n), 0)
NEW_SHIM(_ZnwmRKSt9nothrow_t, MTLAB_NEW_NOTHROW, (size_t n, const void *nt), (n, nt), 0)
NEW_SHIM(_ZnamRKSt9nothrow_t, MTLAB_NEW_ARRAY | MTLAB_NEW_NOTHROW, (size_t n, const void *nt), (n, nt), 0)
NEW_SHIM(_ZnwmSt11align_val_t, MTLAB_NEW_ALIGNED, (size_t n, size_t al), (n, al), al)
NEW_SHIM(_ZnamSt11align_val_t, MTLAB_NEW_ARRAY | MTLAB_NEW_ALIGNED, (size_t n, size_t al), (n, al), al)
NEW_SHIM(_ZnwmSt11align_val_tRKSt9nothrow_t, MTLAB_NEW_ALIGNED | MTLAB_NEW_NOTHROW, (size_t n, size_t al, const void *nt),
         (n, al, nt), al)
NEW_SHIM(_ZnamSt11align_val_tRKSt9nothrow_t, MTLAB_NEW_ARRAY | MTLAB_NEW_ALIGNED | MTLAB_NEW_NOTHROW,
         (size_t n, size_t al, const void *nt), (n, al, nt), al)

#define DELETE_SHIM(sym, FORM, PARAMS, ARGS)                                                                  \
    EXPORT void sym PARAMS {                                                                                  \
        typedef void (*fn_t) PARAMS;                                                                          \
        struct mtlab_tls *t = &mtlab_tls;                                                                     \
        if (UNLIKELY(mtlab_in_bootstrap(p))) return;                                                          \
        ensure_real();                                                                                        \
        fn_t real = (fn_t)cxx_delete_fn(FORM);                                                                \
        if (UNLIKELY(!real)) {                                                                                \
            free(p);                                                                                          \
            return;                                                                                           \
        }                                                                                                     \
        if (mtlab_ctl) {                                                                                      \
            if (!atomic_load_explicit(&mtlab_cxx.delete_via_malloc[FORM], memory_order_relaxed))              \
                sampling_release(p);                                                                          \
            real ARGS;                                                                                        \
            return;                                                                                           \
        }                                                                                                     \
        if (!tracing(t)) {                                                                                    \
            real ARGS;                                                                                        \
            return;                                                                                           \
        }                                                                                                     \
        uint64_t ar = arena_of(p);                                                                            \
        uint64_t t0, t1;                                                                                      \
        TIMED_RELEASE(t, t0, t1, real ARGS);                                                                  \
        record_release(MTLAB_EV_DELETE, FORM, p, t0, t1, __builtin_frame_address(0), ar);                     \
    }

/* A throwing operator new that fails allocates its std::bad_alloc with
 * malloc while its own call is in flight, where the shims pass nested calls
 * through: the exception's free, after the catch, was of a block never
 * seen (and libstdc++'s nothrow new catches that exception inside its own
 * call: its free is nested too). An exception's allocation and release
 * belong to the program: both are traced as such, wherever they happen. */
static void *cxx_runtime_fn(void *_Atomic *slot, const char *name) {
    void *f = atomic_load_explicit(slot, memory_order_relaxed);
    if (LIKELY(f != NULL)) return f;
    struct mtlab_tls *t = &mtlab_tls;
    MTLAB_GUARD_ENTER(t);
    f = dlsym(RTLD_NEXT, name);
    t->guard--;
    if (f) atomic_store_explicit(slot, f, memory_order_relaxed);
    return f;
}

/* Runs CALL outside the allocator call in flight, if any, with that call's
 * frame notes kept for it. */
#define OUTSIDE_ALLOC(t, CALL)                                                                                \
    do {                                                                                                      \
        int in_alloc_ = (t)->in_alloc;                                                                        \
        uintptr_t sp_ = (t)->alloc_sp, w0_ = (t)->alloc_w[0], w1_ = (t)->alloc_w[1];                          \
        (t)->in_alloc = 0;                                                                                    \
        CALL;                                                                                                 \
        (t)->in_alloc = in_alloc_;                                                                            \
        (t)->alloc_sp = sp_;                                                                                  \
        (t)->alloc_w[0] = w0_;                                                                                \
        (t)->alloc_w[1] = w1_;                                                                                \
    } while (0)

EXPORT void *__cxa_allocate_exception(size_t n) {
    static void *_Atomic slot;
    void *(*f)(size_t) = (void *(*)(size_t))cxx_runtime_fn(&slot, "__cxa_allocate_exception");
    if (UNLIKELY(!f)) abort(); /* only a C++ runtime calls it, and it defines it */
    struct mtlab_tls *t = &mtlab_tls;
    if (!t->in_alloc || t->guard) return f(n);
    void *r;
    OUTSIDE_ALLOC(t, r = f(n));
    return r;
}

EXPORT void __cxa_free_exception(void *p) {
    static void *_Atomic slot;
    void (*f)(void *) = (void (*)(void *))cxx_runtime_fn(&slot, "__cxa_free_exception");
    if (UNLIKELY(!f)) abort();
    struct mtlab_tls *t = &mtlab_tls;
    if (!t->in_alloc || t->guard) {
        f(p);
        return;
    }
    OUTSIDE_ALLOC(t, f(p));
}

#define D_A MTLAB_NEW_ARRAY
#define D_N MTLAB_NEW_NOTHROW
#define D_AL MTLAB_NEW_ALIGNED
#define D_S MTLAB_DELETE_SIZED
DELETE_SHIM(_ZdlPv, 0, (void *p), (p))
DELETE_SHIM(_ZdaPv, D_A, (void *p), (p))
DELETE_SHIM(_ZdlPvRKSt9nothrow_t, D_N, (void *p, const void *nt), (p, nt))
DELETE_SHIM(_ZdaPvRKSt9nothrow_t, D_A | D_N, (void *p, const void *nt), (p, nt))
DELETE_SHIM(_ZdlPvSt11align_val_t, D_AL, (void *p, size_t al), (p, al))
DELETE_SHIM(_ZdaPvSt11align_val_t, D_A | D_AL, (void *p, size_t al), (p, al))
DELETE_SHIM(_ZdlPvSt11align_val_tRKSt9nothrow_t, D_AL | D_N, (void *p, size_t al, const void *nt), (p, al, nt))
DELETE_SHIM(_ZdaPvSt11align_val_tRKSt9nothrow_t, D_A | D_AL | D_N, (void *p, size_t al, const void *nt), (p, al, nt))
DELETE_SHIM(_ZdlPvm, D_S, (void *p, size_t n), (p, n))
DELETE_SHIM(_ZdaPvm, D_A | D_S, (void *p, size_t n), (p, n))
DELETE_SHIM(_ZdlPvmSt11align_val_t, D_S | D_AL, (void *p, size_t n, size_t al), (p, n, al))
DELETE_SHIM(_ZdaPvmSt11align_val_t, D_A | D_S | D_AL, (void *p, size_t n, size_t al), (p, n, al))

/* ---- the mmap family: recorded from the program and from allocators ---- */

/* mmap calls made inside an allocator call are recorded (flagged) too. */
static inline int tracing_map(struct mtlab_tls *t) {
    int s = atomic_load_explicit(&mtlab_state, memory_order_relaxed);
    if (UNLIKELY(s == MTLAB_NOT_STARTED)) s = mtlab_start_early();
    return LIKELY(!t->guard && !mtlab_ctl && s == MTLAB_TRACING);
}

static void *map_call(int use64, void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (use64 && mtlab_real.mmap64) return mtlab_real.mmap64(addr, len, prot, flags, fd, off);
    if (mtlab_real.mmap) return mtlab_real.mmap(addr, len, prot, flags, fd, off);
    long r = syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    return (void *)r;
}

static void *mmap_shim(unsigned kind, void *addr, size_t len, int prot, int flags, int fd, off_t off,
                       const void *frame) {
    struct mtlab_tls *t = &mtlab_tls;
    if (!tracing_map(t)) return map_call(kind == MTLAB_EV_MMAP64, addr, len, prot, flags, fd, off);
    unsigned evf = t->in_alloc ? MTLAB_EVF_IN_ALLOCATOR : 0;
    uint64_t t0 = mtlab_tsc();
    void *r = map_call(kind == MTLAB_EV_MMAP64, addr, len, prot, flags, fd, off);
    uint64_t t1 = mtlab_tsc();
    int saved = errno;
    if (r == MAP_FAILED) evf |= MTLAB_EVF_FAILED;
    MTLAB_GUARD_ENTER(t);
    struct mtlab_buf *b;
    uint8_t *p = begin(&b, kind, evf, t1, mtlab_timed_cycles(t0, t1), frame);
    if (p) {
        p = mtlab_put_ptr(b, p, (uint64_t)addr);
        p = mtlab_put_varint(p, len);
        p = mtlab_put_varint(p, (uint64_t)(unsigned)prot);
        p = mtlab_put_varint(p, (uint64_t)(unsigned)flags);
        p = mtlab_put_svarint(p, fd);
        p = mtlab_put_varint(p, (uint64_t)off);
        commit(b, mtlab_put_ptr(b, p, (uint64_t)r));
    }
    t->guard--;
    errno = saved;
    return r;
}

EXPORT void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap_shim(MTLAB_EV_MMAP, addr, len, prot, flags, fd, off, __builtin_frame_address(0));
}

EXPORT void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return mmap_shim(MTLAB_EV_MMAP64, addr, len, prot, flags, fd, off, __builtin_frame_address(0));
}

EXPORT int munmap(void *addr, size_t len) {
    struct mtlab_tls *t = &mtlab_tls;
    atomic_fetch_add_explicit(&mtlab_unmap_gen, 1, memory_order_relaxed);
    ensure_real();
    if (!tracing_map(t)) return mtlab_real.munmap(addr, len);
    unsigned evf = t->in_alloc ? MTLAB_EVF_IN_ALLOCATOR : 0;
    uint64_t t0 = mtlab_tsc();
    int r = mtlab_real.munmap(addr, len);
    uint64_t t1 = mtlab_tsc();
    int saved = errno;
    if (r != 0) evf |= MTLAB_EVF_FAILED;
    MTLAB_GUARD_ENTER(t);
    struct mtlab_buf *b;
    uint8_t *p = begin(&b, MTLAB_EV_MUNMAP, evf, t0, mtlab_timed_cycles(t0, t1), __builtin_frame_address(0));
    if (p) {
        p = mtlab_put_ptr(b, p, (uint64_t)addr);
        p = mtlab_put_varint(p, len);
        commit(b, mtlab_put_svarint(p, r));
    }
    t->guard--;
    errno = saved;
    return r;
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    struct mtlab_tls *t = &mtlab_tls;
    void *new_addr = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
    atomic_fetch_add_explicit(&mtlab_unmap_gen, 1, memory_order_relaxed);
    ensure_real();
    if (!tracing_map(t)) return mtlab_real.mremap(old, old_len, new_len, flags, new_addr);
    unsigned evf = t->in_alloc ? MTLAB_EVF_IN_ALLOCATOR : 0;
    uint64_t t0 = mtlab_tsc();
    void *r = mtlab_real.mremap(old, old_len, new_len, flags, new_addr);
    uint64_t t1 = mtlab_tsc();
    int saved = errno;
    if (r == MAP_FAILED) evf |= MTLAB_EVF_FAILED;
    MTLAB_GUARD_ENTER(t);
    struct mtlab_buf *b;
    uint8_t *p = begin(&b, MTLAB_EV_MREMAP, evf, t1, mtlab_timed_cycles(t0, t1), __builtin_frame_address(0));
    if (p) {
        p = mtlab_put_ptr(b, p, (uint64_t)old);
        p = mtlab_put_varint(p, old_len);
        p = mtlab_put_varint(p, new_len);
        p = mtlab_put_varint(p, (uint64_t)(unsigned)flags);
        commit(b, mtlab_put_ptr(b, p, (uint64_t)r));
    }
    t->guard--;
    errno = saved;
    return r;
}

EXPORT int brk(void *addr) {
    struct mtlab_tls *t = &mtlab_tls;
    ensure_real();
    if (!tracing_map(t)) return mtlab_real.brk(addr);
    unsigned evf = t->in_alloc ? MTLAB_EVF_IN_ALLOCATOR : 0;
    uint64_t t0 = mtlab_tsc();
    int r = mtlab_real.brk(addr);
    uint64_t t1 = mtlab_tsc();
    int saved = errno;
    if (r != 0) evf |= MTLAB_EVF_FAILED;
    MTLAB_GUARD_ENTER(t);
    uint64_t after = (uint64_t)mtlab_real.sbrk(0);
    atomic_store(&last_brk, after);
    struct mtlab_buf *b;
    uint8_t *p = begin(&b, MTLAB_EV_BRK, evf, t1, mtlab_timed_cycles(t0, t1), __builtin_frame_address(0));
    if (p) {
        p = mtlab_put_ptr(b, p, (uint64_t)addr);
        p = mtlab_put_svarint(p, r);
        commit(b, mtlab_put_ptr(b, p, after));
    }
    t->guard--;
    errno = saved;
    return r;
}

EXPORT void *sbrk(intptr_t inc) {
    struct mtlab_tls *t = &mtlab_tls;
    ensure_real();
    if (!tracing_map(t)) return mtlab_real.sbrk(inc);
    unsigned evf = t->in_alloc ? MTLAB_EVF_IN_ALLOCATOR : 0;
    uint64_t t0 = mtlab_tsc();
    void *r = mtlab_real.sbrk(inc);
    uint64_t t1 = mtlab_tsc();
    int saved = errno;
    if (r == (void *)-1) evf |= MTLAB_EVF_FAILED;
    MTLAB_GUARD_ENTER(t);
    /* sbrk(0) too is a call the program made: recorded, its result the break. */
    uint64_t after = inc == 0 && r != (void *)-1 ? (uint64_t)r : (uint64_t)mtlab_real.sbrk(0);
    atomic_store(&last_brk, after);
    struct mtlab_buf *b;
    uint8_t *p = begin(&b, MTLAB_EV_SBRK, evf, t1, mtlab_timed_cycles(t0, t1), __builtin_frame_address(0));
    if (p) {
        p = mtlab_put_svarint(p, inc);
        p = mtlab_put_ptr(b, p, (uint64_t)r);
        commit(b, mtlab_put_ptr(b, p, after));
    }
    t->guard--;
    errno = saved;
    return r;
}

/* The thread's buffer written out now; before an exec, the other threads'
 * too (the exec ends them) and the writer readied. */
static void flush_before_exec_or_abort(int exec) {
    struct mtlab_tls *t = &mtlab_tls;
    ensure_real();
    /* A vfork child shares the parent's memory (gcc's driver starts cc1 so):
     * touching mtlab's state from it would open files and flush buffers on
     * the parent's behalf. Only a process of its own flushes. */
    if (mtlab_sys_getpid() != mtlab_pid) return;
    if (!t->guard && atomic_load(&mtlab_state) == 1) {
        int saved = errno;
        MTLAB_GUARD_ENTER(t);
        mtlab_flush_own();
        if (exec && atomic_load(&mtlab_threads_beyond_first)) mtlab_flush_others_before_exec();
        if (exec) mtlab_writer_before_exec();
        t->guard--;
        errno = saved;
    }
}

/* exec replaces the image: write out what this thread has first. glibc's
 * exec* functions call execve internally (not through the PLT), so each
 * entry point needs its own shim. */
static void flush_before_exec(void) {
    flush_before_exec_or_abort(1);
}

/* abort() raises SIGABRT, which runs no exit handler: what the calling
 * thread has buffered is written first — a short program that aborts (or a
 * C++ one whose uncaught exception reaches std::terminate) lost all of its
 * events. Tracing goes on (a handler may catch SIGABRT); other threads'
 * buffers and the END record stay as a killed process leaves them. glibc's
 * own aborts (assert, heap corruption) call it inside libc, not here:
 * `on_sigabrt` below catches those. */
EXPORT __attribute__((noreturn)) void abort(void) {
    flush_before_exec_or_abort(0);
    if (mtlab_real.abort) mtlab_real.abort();
    signal(SIGABRT, SIG_DFL); /* as abort does when a handler returns */
    raise(SIGABRT);
    for (;;) syscall(SYS_exit_group, 127);
}

/* glibc's own aborts — a failed assert, heap corruption found by free or
 * malloc ("double free detected") — raise SIGABRT inside libc, past the abort
 * shim: the events just before a double free, the ones a user of a heap
 * tracer came for, stayed in the thread's buffer. This handler writes them,
 * then acts as the default action does: the process dies of the signal (the
 * handler restores the default and raises it again; SIGABRT is blocked while
 * the handler runs, so it is delivered on return). Installed only while the
 * disposition is the default; a program that sets its own replaces it. */
static void on_sigabrt(int sig) {
    int saved = errno;
    flush_before_exec_or_abort(0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
    errno = saved;
}

void mtlab_catch_abort(void) {
    struct sigaction old;
    if (sigaction(SIGABRT, NULL, &old) != 0 || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigabrt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGABRT, &sa, NULL);
}

/* _exit and _Exit run no exit handler: the trace is finished first. */
EXPORT __attribute__((noreturn)) void _exit(int status) {
    mtlab_finish_now();
    for (;;) syscall(SYS_exit_group, status);
}

EXPORT __attribute__((noreturn)) void _Exit(int status) {
    mtlab_finish_now();
    for (;;) syscall(SYS_exit_group, status);
}

/* glibc's _Fork forks without running fork handlers (a program calls it to
 * avoid them); mtlab's own still run, or parent and child would write one
 * file at the same offsets. */
EXPORT pid_t _Fork(void) {
    static pid_t (*real)(void);
    if (!real) real = (pid_t (*)(void))dlsym(RTLD_NEXT, "_Fork");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    mtlab_fork_prepare();
    pid_t r = real();
    int saved = errno;
    if (r == 0) mtlab_fork_child();
    else mtlab_fork_parent();
    errno = saved;
    return r;
}

/* A traced process that execs with its own LD_PRELOAD (`env
 * LD_PRELOAD=libjemalloc.so.2 prog`, a wrapper choosing the allocator) would
 * start an image without this library: the image named on the command line
 * went untraced and nothing said so. While children are followed (MTLAB_OUT
 * still in the new environment) the entry record put first is put first
 * again, the program's own entries after it, as record does for an
 * LD_PRELOAD set before it runs. A program that also drops MTLAB_OUT still
 * gets an untraced child. */
static char keep_entry[4096];

void mtlab_exec_keep_init(const char *ld_preload) {
    if (!ld_preload) return;
    /* The entry naming this library (record's; the musl build is found
     * through the same `$PLATFORM` path); entries are separated by ':' or ' '. */
    const char *p = ld_preload;
    while (*p) {
        size_t n = strcspn(p, ": ");
        if (n >= 20 && n < sizeof keep_entry && memcmp(p + n - 20, "/libmtlab_preload.so", 20) == 0) {
            memcpy(keep_entry, p, n);
            keep_entry[n] = 0;
            return;
        }
        p += n;
        if (*p) p++;
    }
}

static int has_entry(const char *list, const char *entry, size_t n) {
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ": ");
        if (k == n && memcmp(p, entry, n) == 0) return 1;
        p += k;
        if (*p) p++;
    }
    return 0;
}

/* How many entries envp has when the exec would drop this library (0 when
 * it would not), and the length of the LD_PRELOAD string it needs then. */
static size_t keep_needed(char *const envp[], size_t *len) {
    size_t n = strlen(keep_entry);
    if (!n || !envp || !mtlab_cfg.follow) return 0;
    const char *lp = NULL;
    int traced = 0;
    size_t count = 0;
    for (; envp[count]; count++) {
        if (strncmp(envp[count], "LD_PRELOAD=", 11) == 0) lp = envp[count] + 11;
        else if (strncmp(envp[count], "MTLAB_OUT=", 10) == 0 && envp[count][10]) traced = 1;
    }
    if (!traced || (lp && has_entry(lp, keep_entry, n))) return 0;
    *len = 11 + n + 1 + (lp ? strlen(lp) : 0) + 1;
    /* The copy lives on the caller's stack, which may be a small thread
     * stack: an environment of more than 64 KiB of pointers and preload
     * list (far beyond any seen) execs as the program asked, untraced. */
    if (*len + (count + 2) * sizeof(char *) > (64u << 10)) return 0;
    return count + 1;
}

/* envp again with `LD_PRELOAD=entry:theirs` in place of theirs (or added),
 * built in the caller's arrays: no allocation on the way to exec. */
static char *const *keep_fill(char *const envp[], char **out, char *str) {
    size_t n = strlen(keep_entry);
    const char *lp = NULL;
    size_t i = 0, at = (size_t)-1;
    for (; envp[i]; i++) {
        out[i] = envp[i];
        if (strncmp(envp[i], "LD_PRELOAD=", 11) == 0) {
            lp = envp[i] + 11;
            at = i;
        }
    }
    memcpy(str, "LD_PRELOAD=", 11);
    memcpy(str + 11, keep_entry, n);
    size_t o = 11 + n;
    if (lp && *lp) {
        str[o++] = ':';
        size_t k = strlen(lp);
        memcpy(str + o, lp, k);
        o += k;
    }
    str[o] = 0;
    if (at == (size_t)-1) at = i++;
    out[at] = str;
    out[i] = NULL;
    return out;
}

/* The arrays live in the exec shim's own frame, which exec leaves. */
#define KEEP_PRELOAD(envp)                                                                                   \
    size_t keep_len_ = 0, keep_n_ = keep_needed(envp, &keep_len_);                                           \
    char *keep_env_[keep_n_ ? keep_n_ + 1 : 1];                                                              \
    char keep_str_[keep_n_ ? keep_len_ : 1];                                                                 \
    char *const *keep_envp_ = keep_n_ ? keep_fill(envp, keep_env_, keep_str_) : (envp)

/* If exec fails, this image goes on, and so does its tracing. */
EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
    flush_before_exec();
    KEEP_PRELOAD(envp);
    return mtlab_real.execve(path, argv, keep_envp_);
}

EXPORT int execv(const char *path, char *const argv[]) {
    flush_before_exec();
    KEEP_PRELOAD(environ);
    return mtlab_real.execve(path, argv, keep_envp_);
}

EXPORT int execvp(const char *file, char *const argv[]) {
    flush_before_exec();
    KEEP_PRELOAD(environ);
    if (keep_n_) return mtlab_real.execvpe(file, argv, keep_envp_);
    return mtlab_real.execvp(file, argv);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
    flush_before_exec();
    KEEP_PRELOAD(envp);
    return mtlab_real.execvpe(file, argv, keep_envp_);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
    flush_before_exec();
    KEEP_PRELOAD(envp);
    return mtlab_real.fexecve(fd, argv, keep_envp_);
}

/* posix_spawn runs exec inside libc (a vfork-like child), past the exec
 * shims: a program that spawns with an LD_PRELOAD of its own in `envp`
 * (Rust's `Command::env("LD_PRELOAD", …)` spawns this way) started an
 * untraced child. The child shares this frame until it has exec'd, so the
 * arrays KEEP_PRELOAD builds here outlive their use. Nothing is flushed:
 * this image goes on. Not in the attach build, as for pthread_join. */
#ifndef MTLAB_ATTACH
EXPORT int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *actions,
                       const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (UNLIKELY(!mtlab_real.posix_spawn)) mtlab_resolve();
    if (UNLIKELY(!mtlab_real.posix_spawn)) return ENOSYS; /* a libc without it: as its absence would say */
    KEEP_PRELOAD(envp);
    return mtlab_real.posix_spawn(pid, path, actions, attr, argv, keep_envp_);
}

EXPORT int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *actions,
                        const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (UNLIKELY(!mtlab_real.posix_spawnp)) mtlab_resolve();
    if (UNLIKELY(!mtlab_real.posix_spawnp)) return ENOSYS; /* a libc without it: as its absence would say */
    KEEP_PRELOAD(envp);
    return mtlab_real.posix_spawnp(pid, file, actions, attr, argv, keep_envp_);
}
#endif

/* Only with a fixed --sample-seed does mtlab step in (sampler.c: thread
 * lineage); otherwise the call goes straight through. */
EXPORT int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    if (UNLIKELY(!mtlab_real.pthread_create)) mtlab_resolve();
    /* Before the thread exists, so that every event it stamps comes after. */
    atomic_store(&mtlab_threads_beyond_first, 1);
    if (mtlab_ctl && mtlab_cfg.sample_seed && !mtlab_tls.guard) return mtlab_sampler_spawn(th, attr, start, arg);
    int r = mtlab_real.pthread_create(th, attr, start, arg);
    /* `record --live` analyses only up to the oldest event still in a
     * buffer: a thread that starts others and then waits for them (a main
     * thread joining its workers) would hold it back to the start. */
    if (mtlab_horizon_wanted()) flush_before_exec_or_abort(0);
    return r;
}

/* A joined thread has run glibc's tcache_thread_shutdown, whose internal
 * frees may have shrunk or unmapped its arena's heaps: the arenas are
 * looked at again (loads of each arena's state; more only if one changed).
 * Not in the attach build: a program that binds pthread_join while
 * attached would bind it here, and the library could not be unloaded. */
#ifndef MTLAB_ATTACH
EXPORT int pthread_join(pthread_t th, void **ret) {
    if (UNLIKELY(!mtlab_real.pthread_join)) mtlab_resolve();
    int r = mtlab_real.pthread_join(th, ret);
    struct mtlab_tls *t = &mtlab_tls;
    if (r == 0 && mtlab_cfg.is_glibc && tracing(t)) {
        int saved = errno;
        MTLAB_GUARD_ENTER(t);
        arenas_sync_all(mtlab_tsc());
        t->guard--;
        mtlab_resume_interrupted(t);
        errno = saved;
    }
    return r;
}
#endif

void mtlab_arenas_final(void) { arenas_sync_all(mtlab_tsc()); }

/* A closed object's code and call-frame information may be unmapped: the
 * DWARF unwinder forgets what it learned about the loaded objects (cfi.c).
 * dlopen needs no shim (the unwinder notices new objects itself), which is
 * as well: glibc's dlopen looks at its caller for the search path. */
EXPORT int dlclose(void *handle) {
    if (UNLIKELY(!mtlab_real.dlclose)) mtlab_resolve();
    /* The object's code may be about to go: a MAPS record now keeps its
     * frames in the report (as code, with names). */
    struct mtlab_tls *t = &mtlab_tls;
    if (tracing(t)) {
        int saved = errno;
        MTLAB_GUARD_ENTER(t);
        mtlab_write_maps();
        t->guard--;
        mtlab_resume_interrupted(t);
        errno = saved;
    }
    int r = mtlab_real.dlclose(handle);
    atomic_fetch_add(&mtlab_cfi_gen, 1);
    return r;
}

/* The execl family: argv gathered on the stack, as glibc does. */
#define GATHER_ARGS(arg, ap, argv, extra)                                                                    \
    va_list ap;                                                                                              \
    size_t argc = 1;                                                                                         \
    va_start(ap, arg);                                                                                       \
    while (va_arg(ap, char *)) argc++;                                                                       \
    va_end(ap);                                                                                              \
    char *argv[argc + 1];                                                                                    \
    argv[0] = (char *)arg;                                                                                   \
    va_start(ap, arg);                                                                                       \
    for (size_t i = 1; i <= argc; i++) argv[i] = va_arg(ap, char *);                                         \
    extra;                                                                                                   \
    va_end(ap)

EXPORT int execl(const char *path, const char *arg, ...) {
    GATHER_ARGS(arg, ap, argv, (void)0);
    flush_before_exec();
    KEEP_PRELOAD(environ);
    return mtlab_real.execve(path, argv, keep_envp_);
}

EXPORT int execlp(const char *file, const char *arg, ...) {
    GATHER_ARGS(arg, ap, argv, (void)0);
    flush_before_exec();
    KEEP_PRELOAD(environ);
    if (keep_n_) return mtlab_real.execvpe(file, argv, keep_envp_);
    return mtlab_real.execvp(file, argv);
}

EXPORT int execle(const char *path, const char *arg, ...) {
    char *const *envp;
    GATHER_ARGS(arg, ap, argv, envp = va_arg(ap, char *const *));
    flush_before_exec();
    KEEP_PRELOAD(envp);
    return mtlab_real.execve(path, argv, keep_envp_);
}

void mtlab_init_brk(uint64_t b) { atomic_store(&last_brk, b); }

/* The shims' own addresses, for GOT routing (got.c). Taken through hidden
 * aliases: `&malloc` here would go through this library's GOT and give the
 * first definition in the global scope, which need not be ours. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#pragma GCC diagnostic ignored "-Wmissing-attributes" /* the aliases need not repeat nothrow, malloc, ... */
#endif
#define SHIM_ALIAS(name) extern __typeof__(name) mtlab_shim_##name __attribute__((alias(#name), visibility("hidden")));
SHIM_ALIAS(malloc)
SHIM_ALIAS(calloc)
SHIM_ALIAS(posix_memalign)
SHIM_ALIAS(aligned_alloc)
SHIM_ALIAS(memalign)
SHIM_ALIAS(valloc)
SHIM_ALIAS(pvalloc)
SHIM_ALIAS(free)
SHIM_ALIAS(realloc)
SHIM_ALIAS(reallocarray)
SHIM_ALIAS(mmap)
SHIM_ALIAS(mmap64)
SHIM_ALIAS(munmap)
SHIM_ALIAS(mremap)
SHIM_ALIAS(brk)
SHIM_ALIAS(sbrk)

void mtlab_shim_addresses(void *out[MTLAB_GOT_N]) {
    out[MTLAB_GOT_MALLOC] = (void *)mtlab_shim_malloc;
    out[MTLAB_GOT_CALLOC] = (void *)mtlab_shim_calloc;
    out[MTLAB_GOT_POSIX_MEMALIGN] = (void *)mtlab_shim_posix_memalign;
    out[MTLAB_GOT_ALIGNED_ALLOC] = (void *)mtlab_shim_aligned_alloc;
    out[MTLAB_GOT_MEMALIGN] = (void *)mtlab_shim_memalign;
    out[MTLAB_GOT_VALLOC] = (void *)mtlab_shim_valloc;
    out[MTLAB_GOT_PVALLOC] = (void *)mtlab_shim_pvalloc;
    out[MTLAB_GOT_FREE] = (void *)mtlab_shim_free;
    out[MTLAB_GOT_REALLOC] = (void *)mtlab_shim_realloc;
    out[MTLAB_GOT_REALLOCARRAY] = (void *)mtlab_shim_reallocarray;
    out[MTLAB_GOT_MMAP] = (void *)mtlab_shim_mmap;
    out[MTLAB_GOT_MMAP64] = (void *)mtlab_shim_mmap64;
    out[MTLAB_GOT_MUNMAP] = (void *)mtlab_shim_munmap;
    out[MTLAB_GOT_MREMAP] = (void *)mtlab_shim_mremap;
    out[MTLAB_GOT_BRK] = (void *)mtlab_shim_brk;
    out[MTLAB_GOT_SBRK] = (void *)mtlab_shim_sbrk;
#ifdef MTLAB_ATTACH
    out[MTLAB_GOT_DLOPEN] = (void *)mtlab_attach_dlopen;
#else
    out[MTLAB_GOT_DLOPEN] = NULL; /* preloaded, the loader routes new modules' calls to the shims itself */
#endif
}
