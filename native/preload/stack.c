/*
 * stack.c — call stacks (frame-pointer walking, or libgcc's / libunwind's
 * DWARF unwinders), and the process-wide table that gives each distinct
 * stack one small id.
 *
 * The walk checks every frame against the thread's stack bounds, so code
 * built without frame pointers (rbp used as a general register) ends the walk
 * early instead of faulting. The table is open addressing over 64-bit hashes
 * claimed by compare-and-swap: the slot index is the id, and the thread that
 * claims a slot writes the stack's definition into its own buffer, once.
 * Each thread caches the ids of its recent stacks in front of the table.
 *
 * The default walk is mtlab's own DWARF unwinder (cfi.c); the frame-pointer
 * walk serves `--unwind fp`, and libgcc's or libunwind's unwinder, loaded
 * with dlopen, `--unwind libgcc|libunwind`. A thread memoizes its last walk:
 * a repeat of the same frames is re-checked with independent loads (the hit
 * test is inline in internal.h) instead of walked. MTLAB_UNWIND_CHECK=1
 * compares every dwarf stack with libgcc's in the process (a test).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unwind.h>

#include "internal.h"

/* ---- DWARF unwinders, loaded on request ---- */

typedef _Unwind_Reason_Code (*backtrace_fn)(_Unwind_Trace_Fn, void *);
typedef uintptr_t (*getip_fn)(struct _Unwind_Context *);
typedef int (*unw_backtrace_fn)(void **, int);

static backtrace_fn gcc_backtrace;
static getip_fn gcc_getip;
static unw_backtrace_fn unw_backtrace;
static uintptr_t self_lo, self_hi; /* this library's text: frames to skip */

static int find_self(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    uintptr_t probe = (uintptr_t)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (probe >= lo && probe < hi) {
            self_lo = lo;
            self_hi = hi;
            return 1;
        }
    }
    return 0;
}

int mtlab_unwind_init(int unwind) {
    dl_iterate_phdr(find_self, (void *)(uintptr_t)&mtlab_unwind_init);
    if (unwind == MTLAB_UNWIND_FP) return 0;
    if (unwind == MTLAB_UNWIND_DWARF) mtlab_cfi_init();
    if (unwind == MTLAB_UNWIND_DWARF && !mtlab_cfg.unwind_check) return 0;
    if (unwind == MTLAB_UNWIND_LIBGCC || unwind == MTLAB_UNWIND_DWARF) {
        void *h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            gcc_backtrace = (backtrace_fn)dlsym(h, "_Unwind_Backtrace");
            gcc_getip = (getip_fn)dlsym(h, "_Unwind_GetIP");
        }
        return gcc_backtrace && gcc_getip ? 0 : -1;
    }
    void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h) unw_backtrace = (unw_backtrace_fn)dlsym(h, "unw_backtrace");
    return unw_backtrace ? 0 : -1;
}

struct gcc_walk {
    uintptr_t *pcs;
    int n, max;
};

static _Unwind_Reason_Code gcc_step(struct _Unwind_Context *ctx, void *arg) {
    struct gcc_walk *w = (struct gcc_walk *)arg;
    uintptr_t ip = gcc_getip(ctx);
    if (ip >= self_lo && ip < self_hi) return _URC_NO_REASON; /* mtlab's own frames */
    if (ip == 0 || w->n >= w->max) return _URC_END_OF_STACK;
    w->pcs[w->n++] = ip;
    return _URC_NO_REASON;
}

/* MTLAB_UNWIND_CHECK=1 with the dwarf unwinder: every stack is also taken
 * by libgcc and the two compared, event by event (STATS unwind_checked and
 * unwind_mismatched). A test of the unwinder, not a mode for users. */
static _Atomic uint64_t checked, mismatched;

static __attribute__((noinline)) void check_against_libgcc(const uintptr_t *pcs, int n, int max) {
    uintptr_t theirs[MTLAB_MAX_DEPTH];
    struct gcc_walk w = {theirs, 0, max};
    gcc_backtrace(gcc_step, &w);
    int same = w.n == n;
    for (int i = 0; same && i < n; i++) same = pcs[i] == theirs[i];
    atomic_fetch_add_explicit(&checked, 1, memory_order_relaxed);
    if (!same) atomic_fetch_add_explicit(&mismatched, 1, memory_order_relaxed);
}

static _Atomic uint64_t *table;
static uint64_t stack_hash(const uintptr_t *pcs, int n);

/* A walk answered from the ones seen before (mtlab_cfi_seen) has no pcs:
 * libgcc's stack is hashed as a walk's would be and compared with the hash
 * the table holds for the id. */
static __attribute__((noinline)) void check_seen_against_libgcc(uint32_t id) {
    uintptr_t theirs[MTLAB_MAX_DEPTH];
    struct gcc_walk w = {theirs, 0, mtlab_cfg.max_depth};
    gcc_backtrace(gcc_step, &w);
    int same = w.n > 0 && table && atomic_load_explicit(&table[id - 1], memory_order_relaxed) == (stack_hash(theirs, w.n) | 1);
    atomic_fetch_add_explicit(&checked, 1, memory_order_relaxed);
    if (!same) atomic_fetch_add_explicit(&mismatched, 1, memory_order_relaxed);
}

/* A memo hit of the DWARF walk stands for the last walk's stack: checked too,
 * or the memo's proof of a repeat would go untested. */
void mtlab_check_repeat(void) {
    if (mtlab_cfg.unwind != MTLAB_UNWIND_DWARF || !gcc_backtrace) return;
    uintptr_t pcs[MTLAB_MAX_DEPTH];
    int n = mtlab_cfi_last_pcs(pcs, mtlab_cfg.max_depth);
    if (n >= 0) check_against_libgcc(pcs, n, mtlab_cfg.max_depth);
}

char *mtlab_unwind_stats(char *p, const char *end) {
    if (!mtlab_cfg.unwind_check) return p;
    p = mtlab_append(p, end, "unwind_checked=");
    p = mtlab_append_u64(p, end, atomic_load(&checked));
    p = mtlab_append(p, end, "\nunwind_mismatched=");
    p = mtlab_append_u64(p, end, atomic_load(&mismatched));
    return mtlab_append(p, end, "\n");
}

/* Return addresses, innermost first, starting at the caller of the shim.
 * `frame` is the frame of the mtlab function that records the event (the
 * exported shims tail-call into it, so its return address is the program's);
 * leading frames inside mtlab are dropped in case a compiler kept one. */
static inline __attribute__((always_inline)) int capture(uintptr_t *pcs, int max, const void *frame,
                                                         struct mtlab_stack_memo *memo_out) {
    if (mtlab_cfg.unwind == MTLAB_UNWIND_LIBGCC) {
        struct gcc_walk w = {pcs, 0, max};
        gcc_backtrace(gcc_step, &w);
        return w.n;
    }
    if (mtlab_cfg.unwind == MTLAB_UNWIND_LIBUNWIND) {
        void *raw[MTLAB_MAX_DEPTH + 16];
        int got = unw_backtrace(raw, max + 16 < MTLAB_MAX_DEPTH + 16 ? max + 16 : MTLAB_MAX_DEPTH + 16);
        int n = 0;
        for (int i = 0; i < got && n < max; i++) {
            uintptr_t ip = (uintptr_t)raw[i];
            if (ip >= self_lo && ip < self_hi) continue;
            pcs[n++] = ip;
        }
        return n;
    }
    /* Frame pointers: every frame is checked against the thread's stack, so
     * code built without them ends the walk instead of faulting. */
    int n = 0;
    uint32_t levels = 0;
    uintptr_t fp = (uintptr_t)frame, lo, hi;
    int own;
    /* Only from a frame on a known stack (this thread's, or the mapping
     * found for a foreign one): then [frame, stack top) is all mapped. */
    if (!mtlab_frame_bounds(fp, &lo, &hi, &own) || fp < lo) return 0;
    hi -= 16;
    /* Invariant: frame <= fp <= hi and fp strictly grows, so every read lies
     * inside [frame, stack top): a garbage rbp ends the walk, never faults. */
    while (n < max && fp <= hi) {
        uintptr_t next = ((const uintptr_t *)fp)[0];
        uintptr_t ret = ((const uintptr_t *)fp)[1];
        if (memo_out && levels < MTLAB_MEMO_LEVELS) {
            memo_out->fp[levels] = fp;
            memo_out->words[2 * levels] = next;
            memo_out->words[2 * levels + 1] = ret;
        }
        levels++;
        if (ret < 4096) break;
        if (n > 0 || ret < self_lo || ret >= self_hi) pcs[n++] = ret; /* skip mtlab's frames */
        if (next <= fp) break;
        fp = next;
    }
    if (memo_out) {
        memo_out->levels = levels; /* > MEMO_LEVELS: too deep to memoize */
        mtlab_memo_pad(memo_out);
    }
    return n;
}

const uintptr_t mtlab_memo_zero[2] __attribute__((aligned(16))) = {0, 0};

/* Rounds the memo's levels up to a whole number of the check's steps: the
 * added levels read mtlab_memo_zero and expect its zeros (a memo too deep to
 * be used is left as it is). */
void mtlab_memo_pad(struct mtlab_stack_memo *m) {
    _Static_assert(MTLAB_MEMO_LEVELS % MTLAB_MEMO_STEP == 0, "whole steps");
    uint32_t i = m->levels;
    if (i > MTLAB_MEMO_LEVELS) return;
    for (; i % MTLAB_MEMO_STEP; i++) {
        m->fp[i] = (uintptr_t)mtlab_memo_zero;
        m->words[2 * i] = m->words[2 * i + 1] = 0;
    }
    m->levels = i;
}

#define RECENT_BYTES (MTLAB_RECENT_STACKS * sizeof(struct mtlab_recent_stack))
#define TABLE_BITS 20
#define ID_BITS 21 /* ids are 1..TABLE_SLOTS */
#define TABLE_SLOTS (1u << TABLE_BITS)
_Static_assert(TABLE_SLOTS < (1u << 21), "stack ids fit mtlab_stack_code's 3 bytes");
#define MAX_PROBE 64

void mtlab_stack_table_init(void) {
    table = (_Atomic uint64_t *)mtlab_sys_mmap(TABLE_SLOTS * sizeof(uint64_t));
}

/* After fork the child's ids start afresh: its trace defines its own stacks. */
void mtlab_stack_table_reset(void) {
    if (table) madvise((void *)table, TABLE_SLOTS * sizeof(uint64_t), MADV_DONTNEED);
    mtlab_tls.memo.id = 0; /* the forking thread is the child's only one */
    mtlab_cfi_seen_reset();
    if (mtlab_tls.recent) madvise(mtlab_tls.recent, RECENT_BYTES, MADV_DONTNEED);
}

static void write_def(struct mtlab_buf *b, uint32_t id, const uintptr_t *pcs, int n) {
    uint8_t *p = b->data + MTLAB_BUF_HEAD + atomic_load_explicit(&b->len, memory_order_relaxed);
    *p++ = MTLAB_EV_STACK_DEF;
    p = mtlab_put_varint(p, id);
    p = mtlab_put_varint(p, (uint64_t)n);
    uint64_t prev = 0;
    for (int i = 0; i < n; i++) {
        p = mtlab_put_svarint(p, (int64_t)(pcs[i] - prev));
        prev = pcs[i];
    }
    uint32_t len = (uint32_t)(p - (b->data + MTLAB_BUF_HEAD));
    atomic_store_explicit(&b->len, len, memory_order_release);
}

static uint32_t table_id(struct mtlab_buf *b, uint64_t h, const uintptr_t *pcs, int n);

void mtlab_stack_thread_exit(void) {
    if (mtlab_tls.recent) mtlab_sys_munmap(mtlab_tls.recent, RECENT_BYTES);
    mtlab_tls.recent = NULL;
}

/* Each frame multiplied by its depth's odd constant, folded, then summed:
 * independent multiplies, so the hash costs little more than the loads. The
 * fold (high bits into low) keeps the sum from being linear: a plain sum of
 * position-weighted addresses gave equal hashes to stacks that differ only
 * in which of a few return addresses sits at which depth (recursion through
 * several functions), and the table takes an equal hash for the same stack. */
static uint64_t stack_hash(const uintptr_t *pcs, int n) {
    uint64_t h = 0x243f6a8885a308d3ull ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        uint64_t x = (uint64_t)pcs[i] * (0x9e3779b97f4a7c15ull + 2 * (uint64_t)i);
        h += x ^ (x >> 29);
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

/* Walks the stack from `frame` and returns its id; `memo_out` (frame-pointer
 * walks only, else NULL) receives what the walk read. *seen: set when the
 * DWARF walk answered with a walk seen before (the thread's last walk, and
 * so the memo, unchanged). */
static uint32_t stack_id_walk(struct mtlab_buf *b, const void *frame, struct mtlab_stack_memo *memo_out, int *seen) {
    uintptr_t pcs[MTLAB_MAX_DEPTH];
    if (memo_out) memo_out->levels = 0;
    /* The DWARF unwinders are libraries: libunwind sets errno (EAGAIN) when
     * it first sets up its memory checks. The shims leave errno to their
     * slow paths, and this is one. */
    int n;
    if (mtlab_cfg.unwind == MTLAB_UNWIND_FP) { /* frame pointers: plain loads */
        n = capture(pcs, mtlab_cfg.max_depth, frame, memo_out);
    } else if (mtlab_cfg.unwind == MTLAB_UNWIND_DWARF) {
        struct mtlab_stack_memo *m = &mtlab_tls.memo;
        int known = m->id && m->gen == atomic_load_explicit(&mtlab_cfi_gen, memory_order_relaxed);
        int saved = errno, repeat = known; /* in: a repeat needs no pcs, its id is known */
        uint32_t seen_id;
        n = mtlab_cfi_walk(pcs, mtlab_cfg.max_depth, frame, &repeat, &seen_id, self_lo, self_hi);
        errno = saved;
        if (seen_id) {
            if (UNLIKELY(mtlab_cfg.unwind_check) && gcc_backtrace) check_seen_against_libgcc(seen_id);
            *seen = 1;
            return seen_id;
        }
        if (n < 0) { /* not built for this architecture: frame pointers */
            n = capture(pcs, mtlab_cfg.max_depth, frame, NULL);
        } else if (repeat && known) { /* the thread's last stack again: its id */
            if (UNLIKELY(mtlab_cfg.unwind_check)) mtlab_check_repeat();
            /* A stack met twice in a row is likely met again: where its walk
             * read only side-by-side pairs of words (code with frame
             * pointers), the memo's inline check proves the next repeats
             * with a quarter of the work (the walk is a function of its
             * start and the words it read). Filled here, not after every
             * walk: most walks of a program without frame pointers differ
             * from the one before and would pay for nothing. */
            int pairs = mtlab_cfi_last_pairs(m->fp, m->words, MTLAB_MEMO_LEVELS);
            m->levels = pairs > 0 ? (uint32_t)pairs : 0;
            m->fp[0] = pairs > 0 ? m->fp[0] : 0;
            mtlab_memo_pad(m);
            return m->id;
        } else if (UNLIKELY(mtlab_cfg.unwind_check) && gcc_backtrace) {
            check_against_libgcc(pcs, n, mtlab_cfg.max_depth);
        }
    } else {
        int saved = errno;
        /* libgcc and libunwind find their own way; a foreign stack is counted all the same. */
        uintptr_t lo, hi;
        int own;
        (void)mtlab_frame_bounds((uintptr_t)frame, &lo, &hi, &own);
        n = capture(pcs, mtlab_cfg.max_depth, frame, memo_out);
        errno = saved;
    }
    uint64_t h = stack_hash(pcs, n);
    if (n == 0 || !table) return 0;
    h |= 1; /* 0 marks an empty slot */
    /* The fork child's ids start afresh: mtlab_stack_table_reset empties this too. */
    struct mtlab_recent_stack *recent = mtlab_tls.recent;
    if (UNLIKELY(!recent) && !mtlab_tls.dead) { /* past its exit destructor a thread goes without */
        recent = mtlab_tls.recent = (struct mtlab_recent_stack *)mtlab_sys_mmap(RECENT_BYTES);
    }
    if (!recent) return table_id(b, h, pcs, n);
    /* Index from the low bits, tag from the high ones: 58 of the hash's 64
     * bits are compared (the shared table keys stacks by their hash too). */
    struct mtlab_recent_stack *r = &recent[(h >> 1) & (MTLAB_RECENT_STACKS - 1)];
    uint64_t tag = h & ~((1ull << ID_BITS) - 1);
    if ((r->tag_id & ~((1ull << ID_BITS) - 1)) == tag && (r->tag_id & ((1ull << ID_BITS) - 1))) {
        return (uint32_t)(r->tag_id & ((1ull << ID_BITS) - 1));
    }
    uint32_t id = table_id(b, h, pcs, n);
    if (id) r->tag_id = tag | id;
    return id;
}

/* The id of the stack `pcs` of hash `h` in the shared table, defined in `b`
 * by the thread that claims its slot. */
static uint32_t table_id(struct mtlab_buf *b, uint64_t h, const uintptr_t *pcs, int n) {
    uint32_t idx = (uint32_t)h & (TABLE_SLOTS - 1);
    for (int probe = 0; probe < MAX_PROBE; probe++, idx = (idx + 1) & (TABLE_SLOTS - 1)) {
        uint64_t cur = atomic_load_explicit(&table[idx], memory_order_relaxed);
        if (cur == h) return idx + 1;
        if (cur == 0) {
            uint64_t expected = 0;
            if (atomic_compare_exchange_strong(&table[idx], &expected, h)) {
                /* Make room for the definition plus the event that follows. */
                size_t need = 2 + 10 + (size_t)n * 10 + MTLAB_MAX_EVENT_BYTES;
                if (atomic_load_explicit(&b->len, memory_order_relaxed) + need > MTLAB_BUF_CAP) mtlab_flush_buf(b);
                write_def(b, idx + 1, pcs, n);
                return idx + 1;
            }
            if (expected == h) return idx + 1;
        }
    }
    atomic_fetch_add(&mtlab_counters.stacks_overflowed, 1);
    return 0;
}

/* `frame` is the shim's frame address; its return address is the caller. */
uint32_t mtlab_stack_id(struct mtlab_buf *b, const void *frame) {
    struct mtlab_stack_memo *m = &mtlab_tls.memo;
    int fp = mtlab_cfg.unwind == MTLAB_UNWIND_FP;
    uint32_t gen = atomic_load_explicit(&mtlab_cfi_gen, memory_order_relaxed);
    int seen = 0;
    uint32_t id = stack_id_walk(b, frame, fp ? m : NULL, &seen);
    if (seen) return id; /* the last walk, which the memo describes, is unchanged */
    /* A walk on a foreign stack (mtlab_frame_bounds) is not kept: that
     * stack may be gone by the next call. */
    uintptr_t f = (uintptr_t)frame;
    int own = f >= mtlab_tls.stack_lo && f < mtlab_tls.stack_hi;
    if (fp) {
        m->gen = gen;
        m->id = m->levels <= MTLAB_MEMO_LEVELS && own ? id : 0;
        m->code = mtlab_stack_code(m->id);
        return id;
    }
    /* The DWARF walk keeps its own record of the last walk (cfi.c) and says
     * when it is repeated (stack_id_walk then fills the memo's words where
     * it can); after any other walk, or a dlclose, the memo's words are not
     * this stack's. */
    mtlab_cfi_seen(id); /* a walk just made (not a repeat): kept for its next time */
    if (id != m->id || m->gen != gen || !own) m->fp[0] = 0; /* never a hit of the inline check */
    m->gen = gen;
    m->id = own ? id : 0;
    m->code = mtlab_stack_code(id);
    return id;
}
