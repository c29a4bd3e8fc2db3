/*
 * malloc_test.c — the malloc-test workload (source 000/001, DESIGN.md §2).
 *
 * Each thread, after a common start barrier, repeats: descend DEPTH calls,
 * malloc(SIZE), optionally touch the block, free it. The memory is not
 * touched by default, as in the paper, so the allocator and whatever is
 * interposed on it dominate. Per-thread TSC cycles over the loop, divided by
 * the iterations, give cycles per operation (one malloc + one free).
 *
 * Output: one JSON object on stdout. Exit code 2 on bad arguments.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline uint64_t tsc(void) {
#if defined(__x86_64__)
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
#else
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#endif
}

static size_t block_size = 512;
static int depth = 10;
static long iterations = 1000000;
static int touch;
static pthread_barrier_t start;

struct result {
    uint64_t cycles;
};

/* noinline + a volatile sink keep every level a real frame. */
__attribute__((noinline)) static void descend(int level) {
    if (level > 1) {
        descend(level - 1);
        __asm__ __volatile__("" ::: "memory");
        return;
    }
    void *p = malloc(block_size);
    if (!p) abort();
    if (touch) memset(p, 0xa5, block_size);
    __asm__ __volatile__("" : : "r"(p) : "memory");
    free(p);
}

static void *worker(void *arg) {
    struct result *r = arg;
    pthread_barrier_wait(&start);
    uint64_t t0 = tsc();
    for (long i = 0; i < iterations; i++) descend(depth);
    r->cycles = tsc() - t0;
    return NULL;
}

static long parse_num(const char *flag, const char *v) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || x <= 0) {
        fprintf(stderr, "mtlab-malloc-test: %s needs a positive integer, got '%s'\n", flag, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    int threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--threads")) threads = (int)parse_num(a, v), i++;
        else if (!strcmp(a, "--size")) block_size = (size_t)parse_num(a, v), i++;
        else if (!strcmp(a, "--depth")) depth = (int)parse_num(a, v), i++;
        else if (!strcmp(a, "--iterations")) iterations = parse_num(a, v), i++;
        else if (!strcmp(a, "--touch")) touch = 1;
        else {
            fprintf(stderr,
                    "usage: mtlab-malloc-test [--threads N] [--size BYTES] [--depth N] [--iterations N] [--touch]\n");
            return 2;
        }
    }
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    struct result *res = calloc((size_t)threads, sizeof *res);
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    for (int i = 0; i < threads; i++) pthread_create(&tids[i], NULL, worker, &res[i]);
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        total += res[i].cycles;
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall_ns = (double)(w1.tv_sec - w0.tv_sec) * 1e9 + (double)(w1.tv_nsec - w0.tv_nsec);
    double per_op = (double)total / ((double)iterations * threads);
    printf("{\"workload\":\"malloc-test\",\"threads\":%d,\"size\":%zu,\"depth\":%d,\"iterations\":%ld,"
           "\"touch\":%s,\"cycles_per_op\":%.2f,\"wall_ns\":%.0f}\n",
           threads, block_size, depth, iterations, touch ? "true" : "false", per_op, wall_ns);
    free(tids);
    free(res);
    return 0;
}
