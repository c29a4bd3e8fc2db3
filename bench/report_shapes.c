/* Trace shapes for `mtlab report` speed beyond one allocator's random frees
 * (docs/benchmarks.md, `mtlab report` speed):
 *
 *   threads N T   T threads, each N steps over its own 20 000 slots: a slot's
 *                 block is freed if it has one, else one of 16-2 063 bytes is
 *                 allocated there (per-thread arenas, blocks crossing chunks)
 *   big N         N steps over 64 slots of 128 KiB-1.1 MiB blocks (run with
 *                 MALLOC_MMAP_THRESHOLD_=65536: each block its own mapping)
 *   stacks N      N blocks each allocated from a call path of its own (6-19
 *                 frames picked at random) and freed at once: a new stack
 *                 definition almost every event
 *
 *   cc -O2 -fno-omit-frame-pointer -pthread -o report_shapes bench/report_shapes.c
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long steps;

static uint64_t next_random(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void *churn(void *arg) {
    enum { SLOTS = 20000 };
    uint64_t x = 88172645463325252ull + (uintptr_t)arg * 7919;
    void **pool = calloc(SLOTS, sizeof *pool);
    if (!pool)
        return NULL;
    for (long i = 0; i < steps; i++) {
        size_t s = next_random(&x) % SLOTS;
        if (pool[s]) {
            free(pool[s]);
            pool[s] = NULL;
        } else {
            pool[s] = malloc(16 + next_random(&x) % 2048);
        }
    }
    for (size_t s = 0; s < SLOTS; s++)
        free(pool[s]);
    free(pool);
    return NULL;
}

static volatile uintptr_t sink;

__attribute__((noinline)) static void *leaf(size_t n) {
    void *p = malloc(n);
    sink += (uintptr_t)p;
    return p;
}

/* Two call sites per level: the path's bits choose, so paths differ in frames. */
__attribute__((noinline)) static void *walk(uint64_t path, int depth) {
    void *p = depth == 0 ? leaf(24 + (path & 63))
              : (path & 1) ? walk(path >> 1, depth - 1)
                           : walk(path >> 2, depth - 1);
    sink++;
    return p;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: report_shapes threads N T | big N | stacks N\n");
        return 2;
    }
    const char *mode = argv[1];
    steps = strtol(argv[2], NULL, 10);
    if (!strcmp(mode, "threads") && argc > 3) {
        int n = atoi(argv[3]);
        pthread_t t[64];
        if (n < 1 || n > 64)
            return 2;
        for (int i = 0; i < n; i++)
            pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)i);
        for (int i = 0; i < n; i++)
            pthread_join(t[i], NULL);
    } else if (!strcmp(mode, "big")) {
        uint64_t x = 1;
        void *keep[64] = {0};
        for (long i = 0; i < steps; i++) {
            size_t s = next_random(&x) % 64;
            free(keep[s]);
            keep[s] = malloc(128 * 1024 + next_random(&x) % (1 << 20));
        }
        for (int s = 0; s < 64; s++)
            free(keep[s]);
    } else if (!strcmp(mode, "stacks")) {
        uint64_t x = 3;
        for (long i = 0; i < steps; i++)
            free(walk(next_random(&x), 6 + (int)(next_random(&x) % 14)));
    } else {
        fprintf(stderr, "report_shapes: unknown shape %s\n", mode);
        return 2;
    }
    return 0;
}
