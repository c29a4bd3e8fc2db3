/*
 * workloads.c — the heap study's built-in workloads (`mtlab heap compare
 * --workload NAME`), each stressing what the allocator studies' suites
 * stressed. Deterministic: the same calls in the same order on every run
 * (an xorshift stream with a fixed seed), so allocators see the same work.
 *
 *   small      many small short-lived objects: 16-256 B, a window of 1000
 *              live, 4 M allocations (a parser or an interpreter's churn)
 *   xthread    producer/consumer: 2 producers allocate 64-1024 B messages, 2
 *              consumers free them (every free is another thread's block)
 *   threshold  storms of large blocks around glibc's mmap threshold
 *              (96-192 KiB, and 1-4 MiB), 64 live at once
 *   phases     phase changes with a tall peak: a build-up to ~64 MiB of
 *              32 B-8 KiB objects, free all but every 16th, a second
 *              smaller phase on top of the survivors (what kept glibc's
 *              mapped memory high in the source)
 *
 * Usage: workloads NAME [SCALE]  (SCALE multiplies the work, default 1)
 * Prints one JSON line: {"workload": NAME, "allocations": N, "seconds": S}.
 * Exit code 0; 2 on bad arguments; 3 if memory runs out.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* A size in [lo, hi], weighted towards the small end (log-uniform). */
static size_t size_in(uint64_t *s, size_t lo, size_t hi) {
    double u = (double)(next(s) >> 11) / 9007199254740992.0;
    double l = __builtin_log((double)lo), h = __builtin_log((double)hi + 1);
    size_t n = (size_t)__builtin_exp(l + u * (h - l));
    return n < lo ? lo : n > hi ? hi : n;
}

static void *must(void *p) {
    if (!p) exit(3);
    return p;
}

/* Writes the first bytes, so the block is really used. */
static void *fresh(size_t n) {
    char *p = must(malloc(n));
    memset(p, (int)(n & 0xff), n < 64 ? n : 64);
    return p;
}

/* Replaces a random one of `window` live blocks with a new one of size
 * draw(), n times; then frees them all. */
static void churn(void **live, size_t window, long n, size_t (*draw)(void)) {
    for (long i = 0; i < n; i++) {
        size_t k = next(&rng) % window;
        free(live[k]);
        live[k] = fresh(draw());
    }
    for (size_t k = 0; k < window; k++) free(live[k]);
}

static size_t small_size(void) { return size_in(&rng, 16, 256); }

static long small(long scale) {
    static void *live[1000];
    long n = 4000000 * scale;
    churn(live, 1000, n, small_size);
    return n;
}

/* ---- xthread: a bounded queue per producer/consumer pair ---- */
enum { QCAP = 4096 };
struct queue {
    pthread_mutex_t lock;
    pthread_cond_t more, room;
    void *slot[QCAP];
    size_t head, tail;
    int done;
};

struct pair {
    struct queue q;
    long messages;
    uint64_t seed;
};

static void *producer(void *arg) {
    struct pair *p = arg;
    for (long i = 0; i < p->messages; i++) {
        void *m = fresh(size_in(&p->seed, 64, 1024));
        pthread_mutex_lock(&p->q.lock);
        while (p->q.tail - p->q.head == QCAP) pthread_cond_wait(&p->q.room, &p->q.lock);
        p->q.slot[p->q.tail++ % QCAP] = m;
        pthread_cond_signal(&p->q.more);
        pthread_mutex_unlock(&p->q.lock);
    }
    pthread_mutex_lock(&p->q.lock);
    p->q.done = 1;
    pthread_cond_signal(&p->q.more);
    pthread_mutex_unlock(&p->q.lock);
    return NULL;
}

static void *consumer(void *arg) {
    struct pair *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->q.lock);
        while (p->q.head == p->q.tail && !p->q.done) pthread_cond_wait(&p->q.more, &p->q.lock);
        if (p->q.head == p->q.tail) {
            pthread_mutex_unlock(&p->q.lock);
            return NULL;
        }
        void *m = p->q.slot[p->q.head++ % QCAP];
        pthread_cond_signal(&p->q.room);
        pthread_mutex_unlock(&p->q.lock);
        free(m);
    }
}

static long xthread(long scale) {
    enum { PAIRS = 2 };
    static struct pair pairs[PAIRS];
    pthread_t t[2 * PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        struct pair *p = &pairs[i];
        pthread_mutex_init(&p->q.lock, NULL);
        pthread_cond_init(&p->q.more, NULL);
        pthread_cond_init(&p->q.room, NULL);
        p->messages = 500000 * scale;
        p->seed = 0x2545f4914f6cdd1dull * (uint64_t)(i + 1);
        if (pthread_create(&t[2 * i], NULL, producer, p) || pthread_create(&t[2 * i + 1], NULL, consumer, p)) exit(3);
    }
    for (int i = 0; i < 2 * PAIRS; i++) pthread_join(t[i], NULL);
    return PAIRS * 500000 * scale;
}

/* Nine in ten around the 128 KiB threshold, one in ten far above it. */
static size_t threshold_size(void) {
    return next(&rng) % 10 ? size_in(&rng, 96 << 10, 192 << 10) : size_in(&rng, 1 << 20, 4 << 20);
}

static long threshold(long scale) {
    static void *live[64];
    long n = 20000 * scale;
    churn(live, 64, n, threshold_size);
    return n;
}

static long phases(long scale) {
    long total = 0;
    size_t cap = 1 << 20, n = 0, target = (size_t)(64ull << 20) * (size_t)scale, bytes = 0;
    void **v = must(malloc(cap * sizeof *v));
    /* Phase 1: the tall peak. */
    while (bytes < target) {
        size_t sz = size_in(&rng, 32, 8192);
        if (n == cap) v = must(realloc(v, (cap *= 2) * sizeof *v));
        v[n++] = fresh(sz);
        bytes += sz;
        total++;
    }
    /* Phase 2: all but every 16th block go; the survivors pin the heap. */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % 16 == 0)
            v[kept++] = v[i];
        else
            free(v[i]);
    }
    n = kept;
    /* Phase 3: a smaller working phase of short-lived objects on top. */
    for (long i = 0; i < 1000000 * scale; i++) {
        void *p = fresh(size_in(&rng, 32, 2048));
        free(p);
        total++;
    }
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
    return total;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s small|xthread|threshold|phases [SCALE]\n", argv[0]);
        return 2;
    }
    long scale = argc == 3 ? atol(argv[2]) : 1;
    if (scale < 1 || scale > 1000) {
        fprintf(stderr, "%s: SCALE must be 1-1000\n", argv[0]);
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long n;
    if (strcmp(argv[1], "small") == 0) n = small(scale);
    else if (strcmp(argv[1], "xthread") == 0) n = xthread(scale);
    else if (strcmp(argv[1], "threshold") == 0) n = threshold(scale);
    else if (strcmp(argv[1], "phases") == 0) n = phases(scale);
    else {
        fprintf(stderr, "%s: unknown workload %s (small, xthread, threshold, phases)\n", argv[0], argv[1]);
        return 2;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("{\"workload\": \"%s\", \"allocations\": %ld, \"seconds\": %.6f}\n", argv[1], n,
           (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
