/*
 * s_thread_seeds.c — threads whose own allocations are deterministic but
 * whose start order is a race, for `--sample-seed` reproducibility
 * (crates/mtlab/tests/sampler.rs).
 *
 * The main thread creates 3 workers; worker 0 creates 2 more (5 in all).
 * They meet at a barrier, then worker k makes 20000 allocations at its own
 * site (site_k), sizes from an LCG seeded by k (16..4111 bytes), freeing
 * each at once. Which worker allocates first changes from run to run; what
 * each worker allocates does not.
 * Exit code 0; 3 if a thread cannot start. No stdio.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
#define WORKERS 5

static pthread_barrier_t start;
static void *volatile sink;

NOINLINE static void *site_0(size_t n) { return malloc(n); }
NOINLINE static void *site_1(size_t n) { return malloc(n); }
NOINLINE static void *site_2(size_t n) { return malloc(n); }
NOINLINE static void *site_3(size_t n) { return malloc(n); }
NOINLINE static void *site_4(size_t n) { return malloc(n); }
static void *(*const sites[WORKERS])(size_t) = {site_0, site_1, site_2, site_3, site_4};

static void *worker(void *arg);

static pthread_t spawn(long k) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, (void *)k) != 0) exit(3);
    return t;
}

static void *worker(void *arg) {
    long k = (long)arg;
    pthread_t inner[2];
    if (k == 0) {
        inner[0] = spawn(3);
        inner[1] = spawn(4);
    }
    pthread_barrier_wait(&start);
    uint32_t x = 2463534242u + (uint32_t)k * 7919u;
    for (int i = 0; i < 20000; i++) {
        x = x * 1664525u + 1013904223u;
        void *p = sites[k](16 + (x >> 20));
        sink = p;
        free(p);
    }
    if (k == 0) {
        pthread_join(inner[0], NULL);
        pthread_join(inner[1], NULL);
    }
    return NULL;
}

int main(void) {
    pthread_barrier_init(&start, NULL, WORKERS);
    pthread_t t[3];
    for (long k = 0; k < 3; k++) t[k] = spawn(k);
    for (int k = 0; k < 3; k++) pthread_join(t[k], NULL);
    return 0;
}
