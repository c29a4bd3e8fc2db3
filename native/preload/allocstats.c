/*
 * allocstats.c — the heap manager's own view of its heap, read when tracing
 * starts and at exit for the STATS record, so that reports can set mtlab's
 * figures beside it (counting only what changed while traced):
 * glibc's mallinfo2, jemalloc's stats.allocated and stats.mapped + stats.retained (mallctl),
 * tcmalloc's generic.current_allocated_bytes and heap size (MallocExtension),
 * mimalloc's committed bytes (mi_process_info; it keeps no count of
 * allocated bytes in release builds).
 *
 * Runs under the guard (the allocator's own allocations pass through) from
 * the constructor, the exit path and, after `mtlab ctl dump`, the sampler's
 * next sample (a shim whose real call has returned, so this thread holds no
 * lock of the heap manager); never from a signal handler.
 * Functions are found with dlsym at that moment: nothing is linked against
 * any allocator.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <string.h>

#include "internal.h"

/* One reading of the heap manager's figures; UINT64_MAX: not kept by it. */
struct reading {
    const char *source;
    uint64_t in_use, mapped, mmapped, free;
};

static struct reading glibc_read(void) {
    struct reading r = {NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
#ifdef MTLAB_MUSL
    /* musl's mallocng keeps no figures it would give out: no mallinfo2. */
    return r;
#else
    struct mallinfo2 (*mi2)(void) = (struct mallinfo2 (*)(void))dlsym(RTLD_DEFAULT, "mallinfo2");
    if (!mi2) return r; /* glibc before 2.33 */
    struct mallinfo2 m = mi2();
    r.source = "mallinfo2";
    /* In use: chunks the arenas hold for the program (uordblks: their full
     * sizes, headers included, and chunks parked in thread caches) plus
     * mmapped chunks (hblkhd). Mapped: the arenas' memory plus those. */
    r.in_use = m.uordblks + m.hblkhd;
    r.mapped = m.arena + m.hblkhd;
    r.mmapped = m.hblkhd;
    r.free = m.fordblks;
    return r;
#endif
}

static struct reading jemalloc_read(void) {
    struct reading r = {NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    int (*ctl)(const char *, void *, size_t *, void *, size_t) =
        (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
    if (!ctl) return r;
    uint64_t epoch = 1;
    size_t esz = sizeof epoch;
    ctl("epoch", &epoch, &esz, &epoch, sizeof epoch); /* refresh the cached statistics */
    size_t allocated = 0, mapped = 0, sz = sizeof(size_t);
    if (ctl("stats.allocated", &allocated, &sz, NULL, 0) != 0) return r;
    sz = sizeof(size_t);
    if (ctl("stats.mapped", &mapped, &sz, NULL, 0) != 0) return r;
    /* Address space, as mtlab counts it: what jemalloc keeps mapped but
     * purged ("retained") is still mapped. */
    size_t retained = 0;
    sz = sizeof(size_t);
    if (ctl("stats.retained", &retained, &sz, NULL, 0) != 0) retained = 0;
    r.source = "jemalloc mallctl";
    r.in_use = allocated;
    r.mapped = mapped + retained;
    return r;
}

static struct reading tcmalloc_read(void) {
    struct reading r = {NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    int (*prop)(const char *, size_t *) = (int (*)(const char *, size_t *))dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
    if (!prop) return r;
    size_t allocated = 0, heap = 0;
    if (!prop("generic.current_allocated_bytes", &allocated) || !prop("generic.heap_size", &heap)) return r;
    r.source = "tcmalloc MallocExtension";
    r.in_use = allocated;
    r.mapped = heap; /* address space, released (unmapped) pages included, as mtlab counts it */
    return r;
}

static struct reading mimalloc_read(void) {
    struct reading r = {NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    void (*info)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *) =
        (void (*)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *))dlsym(RTLD_DEFAULT, "mi_process_info");
    if (!info) return r;
    size_t elapsed, user, sys, rss, peak_rss, commit = 0, peak_commit, faults;
    info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
    r.source = "mimalloc mi_process_info";
    r.mapped = commit;
    return r;
}

static struct reading read_now(void) {
    const char *a = mtlab_cfg.allocator;
    if (strcmp(a, "glibc") == 0) return glibc_read();
    if (strcmp(a, "jemalloc") == 0) return jemalloc_read();
    if (strcmp(a, "tcmalloc") == 0) return tcmalloc_read();
    if (strcmp(a, "mimalloc") == 0) return mimalloc_read();
    struct reading none = {NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
    return none;
}

/* Taken when tracing starts: what the heap manager held before mtlab could
 * see anything (the loader's and libc's start-up allocations). */
static struct reading at_start = {NULL, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};

void mtlab_allocator_stats_start(void) { at_start = read_now(); }

static char *kv(char *p, const char *end, const char *key, uint64_t v) {
    if (v == UINT64_MAX) return p;
    p = mtlab_append(p, end, key);
    p = mtlab_append(p, end, "=");
    p = mtlab_append_u64(p, end, v);
    return mtlab_append(p, end, "\n");
}

char *mtlab_allocator_stats(char *p, const char *end) {
    struct reading r = read_now();
    if (!r.source) return p;
    p = mtlab_append(p, end, "allocator_stats=");
    p = mtlab_append(p, end, r.source);
    p = mtlab_append(p, end, "\n");
    p = kv(p, end, "allocator_in_use_bytes", r.in_use);
    p = kv(p, end, "allocator_mapped_bytes", r.mapped);
    p = kv(p, end, "allocator_mmapped_bytes", r.mmapped);
    p = kv(p, end, "allocator_free_bytes", r.free);
    p = kv(p, end, "allocator_in_use_at_start_bytes", at_start.in_use);
    return kv(p, end, "allocator_mapped_at_start_bytes", at_start.mapped);
}

/* After `mtlab ctl dump` number `dump`: one ALLOCSTATS record with the time
 * of reading. Without a reading (an allocator mtlab cannot ask) the record
 * still says so, by having no allocator_stats key. */
void mtlab_allocator_reading(uint64_t dump) {
    char text[768] = {0}; /* (rare: zeroing costs nothing that matters) */
    char *end = text + sizeof text - 1;
    char *p = kv(text, end, "tsc", mtlab_tsc());
    p = kv(p, end, "dump", dump);
    p = mtlab_allocator_stats(p, end);
    mtlab_write_record(MTLAB_REC_ALLOCSTATS, text, (uint32_t)(p - text));
}
