/*
 * arena.c — where glibc's thread arenas keep their heaps, and how big each
 * is, so that the trace's mapped bytes follow what glibc does to them out
 * of every shim's sight: heap_trim shrinks an arena's last heap, or unmaps
 * it whole, inside free; a thread's exit returns its cached blocks to the
 * arena (tcache_thread_shutdown) with glibc's internal free; malloc_trim.
 *
 * An arena (struct malloc_state) lives in its first heap, which glibc never
 * unmaps, so its `top` and `system_mem` can be read at any time with plain
 * loads. Every heap an arena owns is 64 MiB-aligned and starts with a
 * heap_info {ar_ptr, prev, size, ...}; heaps are made and deleted only at
 * the tail of the `prev` chain, the one that holds `top`. When the sum of
 * the arena's heap sizes (system_mem) or its tail heap changes, the chain
 * is walked again from the tail and every heap whose extent differs from
 * what the trace was last told is reported (ARENA_HEAP; size 0: unmapped).
 * Arenas that no traced block lives in (made for a thread whose first call
 * was a free) are found on glibc's ring of arenas.
 *
 * Later heaps may be unmapped by another thread at any moment, so they are
 * read with process_vm_readv, which fails instead of faulting; that system
 * call is made only when an arena changed, never per call. The layout of
 * malloc_state (glibc 2.27 and later) is checked on the first arena seen;
 * if it does not hold, nothing here runs and heaps keep their largest size.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <sys/syscall.h>
#include <sys/uio.h>

#include "internal.h"

#define HEAP_MAX MTLAB_GLIBC_HEAP_MAX
#define STATE_TOP MTLAB_ARENA_TOP
#define STATE_SYSTEM_MEM MTLAB_ARENA_SYSTEM_MEM
#define STATE_NEXT 2160 /* offsetof(struct malloc_state, next): the ring of all arenas */
#define MAX_ARENAS 1024
#define MAX_HEAPS 64 /* 4 GiB of heaps in one arena; a longer chain is left as it was */

struct heap_extent {
    uint64_t base, size;
};

struct arena_slot {
    _Atomic uint64_t ar;
    _Atomic int busy;
    /* What the trace was last told, under `busy`. */
    uint64_t system_mem, tail;
    unsigned n;
    struct heap_extent heaps[MAX_HEAPS];
};

/* Mapped at the first arena seen: a megabyte in the library's own data
 * would move every later mapping of the program, traced or not. */
static struct arena_slot *slots;
static _Atomic unsigned nslots;
static atomic_flag registering = ATOMIC_FLAG_INIT;
_Atomic int mtlab_arena_layout;

static int safe_read(uint64_t addr, void *out, size_t n) {
    struct iovec local = {out, n}, remote = {(void *)addr, n};
    long r = mtlab_sys6(SYS_process_vm_readv, mtlab_sys_getpid(), (long)&local, 1, (long)&remote, 1, 0);
    return r == (long)n;
}


/* Is `ar` an arena laid out as this file reads it? Its first heap names it,
 * has no predecessor and holds it; its top chunk lies in a heap that names
 * it too; its system_mem covers its first heap. */
static int plausible(uint64_t ar) {
    uint64_t first = ar & ~(HEAP_MAX - 1), info[3], state[2];
    if (!safe_read(first, info, sizeof info) || info[0] != ar || info[1] != 0 || ar - first > 128) return 0;
    if (!safe_read(ar + STATE_TOP, &state[0], 8) || !safe_read(ar + STATE_SYSTEM_MEM, &state[1], 8)) return 0;
    uint64_t tail_info;
    if (!state[0] || !safe_read(state[0] & ~(HEAP_MAX - 1), &tail_info, 8) || tail_info != ar) return 0;
    return state[1] >= info[2];
}

/* The slot of arena `ar`, registered on first sight; NULL when the table is
 * full or glibc's layout is not the expected one. */
static struct arena_slot *slot_of(uint64_t ar) {
    unsigned n = atomic_load_explicit(&nslots, memory_order_acquire);
    for (unsigned i = 0; i < n; i++)
        if (atomic_load_explicit(&slots[i].ar, memory_order_relaxed) == ar) return &slots[i];
    while (atomic_flag_test_and_set_explicit(&registering, memory_order_acquire)) {
    }
    struct arena_slot *s = NULL;
    n = atomic_load_explicit(&nslots, memory_order_relaxed);
    for (unsigned i = 0; i < n && !s; i++)
        if (atomic_load_explicit(&slots[i].ar, memory_order_relaxed) == ar) s = &slots[i];
    int ok = !s && n < MAX_ARENAS && plausible(ar);
    if (ok && !slots) slots = mtlab_sys_mmap(sizeof(struct arena_slot) * MAX_ARENAS);
    if (ok && slots) {
        s = &slots[n];
        atomic_store_explicit(&s->ar, ar, memory_order_relaxed);
        atomic_store_explicit(&nslots, n + 1, memory_order_release);
        int unchecked = 0;
        atomic_compare_exchange_strong(&mtlab_arena_layout, &unchecked, 1);
    } else if (!s && !n && atomic_load(&mtlab_arena_layout) == 0) {
        atomic_store(&mtlab_arena_layout, -1); /* the first arena does not read as expected */
    }
    atomic_flag_clear_explicit(&registering, memory_order_release);
    return s;
}

/* The arena's heaps from its tail back to its first, read safely; 0 if the
 * chain could not be read whole (changing under us, or too long). */
static unsigned walk(uint64_t ar, uint64_t tail, struct heap_extent *out) {
    unsigned n = 0;
    for (uint64_t h = tail; h && n < MAX_HEAPS; n++) {
        uint64_t info[3];
        if (!safe_read(h, info, sizeof info) || info[0] != ar) return 0;
        out[n] = (struct heap_extent){h, info[2]};
        h = info[1];
        if (!h) return n + 1;
    }
    return 0;
}

static const struct heap_extent *find(const struct heap_extent *v, unsigned n, uint64_t base) {
    for (unsigned i = 0; i < n; i++)
        if (v[i].base == base) return &v[i];
    return NULL;
}

/* Under the slot's `busy`: tells `emit` what changed since the last time. */
static void refresh(struct arena_slot *s, uint64_t ar, mtlab_arena_emit emit, void *ctx) {
    uint64_t system_mem = mtlab_arena_word(ar, STATE_SYSTEM_MEM);
    uint64_t tail = mtlab_arena_word(ar, STATE_TOP) & ~(HEAP_MAX - 1);
    if (system_mem == s->system_mem && tail == s->tail) return;
    struct heap_extent now[MAX_HEAPS];
    unsigned n = walk(ar, tail, now);
    if (!n) return; /* tried again at the next change */
    for (unsigned i = 0; i < s->n; i++)
        if (!find(now, n, s->heaps[i].base)) emit(ctx, s->heaps[i].base, 0);
    for (unsigned i = n; i-- > 0;) { /* first heap first, as glibc made them */
        const struct heap_extent *was = find(s->heaps, s->n, now[i].base);
        if (!was || was->size != now[i].size) emit(ctx, now[i].base, now[i].size);
    }
    for (unsigned i = 0; i < n; i++) s->heaps[i] = now[i];
    s->n = n;
    s->system_mem = system_mem;
    s->tail = tail;
}

void mtlab_arena_sync(uint64_t ar, mtlab_arena_emit emit, void *ctx) {
    if (atomic_load_explicit(&mtlab_arena_layout, memory_order_relaxed) < 0) return;
    struct arena_slot *s = slot_of(ar);
    if (!s) return;
    /* A thread that finds the slot busy leaves its change to the holder,
     * which looks again after letting go: at most a few rounds. */
    for (int round = 0; round < 4; round++) {
        if (atomic_exchange_explicit(&s->busy, 1, memory_order_acquire)) return;
        refresh(s, ar, emit, ctx);
        uint64_t seen_mem = s->system_mem, seen_tail = s->tail;
        atomic_store_explicit(&s->busy, 0, memory_order_seq_cst);
        if (mtlab_arena_word(ar, STATE_SYSTEM_MEM) == seen_mem &&
            (mtlab_arena_word(ar, STATE_TOP) & ~(HEAP_MAX - 1)) == seen_tail)
            break;
    }
}

/* Arenas no traced call has shown: glibc makes a thread's arena on its
 * first call, even a free (for its tcache), and mtlab may never see a
 * block of it. All arenas are on one ring (main_arena's `next`), never
 * freed: it is followed from an arena already known. */
static _Atomic uint64_t main_arena; /* on the ring but in no heap: not followed */

static void discover(void) {
    if (!atomic_load_explicit(&nslots, memory_order_acquire)) return;
    uint64_t start = atomic_load_explicit(&slots[0].ar, memory_order_relaxed), a = start;
    for (unsigned i = 0; i < MAX_ARENAS + 1; i++) {
        a = mtlab_arena_word(a, STATE_NEXT); /* arenas are never freed; main_arena is in libc's data */
        if (!a || a == start) return;
        if (a != atomic_load_explicit(&main_arena, memory_order_relaxed) && !slot_of(a))
            atomic_store_explicit(&main_arena, a, memory_order_relaxed);
    }
}

void mtlab_arena_sync_all(mtlab_arena_emit emit, void *ctx) {
    if (atomic_load_explicit(&mtlab_arena_layout, memory_order_relaxed) <= 0) return;
    discover();
    unsigned n = atomic_load_explicit(&nslots, memory_order_acquire);
    for (unsigned i = 0; i < n; i++) mtlab_arena_sync(atomic_load_explicit(&slots[i].ar, memory_order_relaxed), emit, ctx);
}

void mtlab_arena_fork_child(void) {
    /* The child's trace starts empty: it has been told of no heap yet. */
    unsigned n = atomic_load(&nslots);
    for (unsigned i = 0; i < n; i++) {
        slots[i].busy = 0;
        slots[i].n = 0;
        slots[i].system_mem = slots[i].tail = 0;
    }
    atomic_flag_clear(&registering);
}
