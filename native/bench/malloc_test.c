/*
 * malloc_test.c — the malloc-test workload (source 000/001, DESIGN.md §2).
 *
 * Each thread, after a common start barrier, runs WARMUP unmeasured
 * iterations, waits at a second barrier, then repeats ITERATIONS times:
 * descend DEPTH calls, malloc(SIZE), optionally touch the block, free it. The
 * memory is not touched by default, as in the paper, so the allocator and
 * whatever is interposed on it dominate. Per-thread TSC cycles over the
 * measured loop, divided by the iterations, give cycles per operation (one
 * malloc + one free).
 *
 * With --time-each the TSC is also read immediately around every malloc call
 * (fenced: lfence; rdtsc; lfence on both sides) and each raw sample goes into
 * a per-thread log-linear histogram (64 sub-buckets per power of two: exact
 * below 128 cycles, within 1/64 above) that lives in memory allocated and
 * pre-faulted before the loop. The timer's own cost is measured at start on
 * 20001 empty pairs: their mean ("timer_overhead_cycles") is taken off the
 * means, their median off p50/p99 (clamped at 0). Means, not single samples,
 * are corrected because the TSC may tick in coarse steps (26 cycles on some
 * VMs). The histograms are merged after the join: mean, p50, p99, max (a
 * descheduled thread shows up in max and the mean), and a mean trimmed at the
 * 99.99th percentile that leaves such outliers out: the figure to compare.
 * cycles_per_op then includes the cost of the two timer reads.
 *
 * With --stamp-calls the TSC is read, unfenced, before and after every malloc
 * and every free and the differences are kept, as a tracer that times every
 * call must: cycles_per_op then shows the floor of such a tracer on this
 * machine (`mtlab bench tracer` runs it beside the untraced workload).
 *
 * Frames: worker -> descend x DEPTH -> malloc, all noinline, so a
 * frame-pointer walk from malloc sees about DEPTH + 3 frames.
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
#include <unistd.h>

#include "hist.h"

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

/* A fenced read for timing one call: earlier instructions have completed and
 * later ones have not started when the counter is read. */
static inline uint64_t stamp(void) {
#if defined(__x86_64__)
    uint32_t lo, hi;
    __asm__ __volatile__("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi) : : "memory");
    return ((uint64_t)hi << 32) | lo;
#else
    uint64_t v;
    __asm__ __volatile__("isb\n\tmrs %0, cntvct_el0\n\tisb" : "=r"(v) : : "memory");
    return v;
#endif
}

/* ---- the workload ---- */
static size_t block_size = 512;
static int depth = 10;
static long iterations = 1000000;
static long warmup = -1; /* -1: 10% of iterations */
static int touch;
static int pin; /* --pin: thread i runs on CPU i mod ncpu */
static int time_each;
static int stamp_calls;
static __thread uint64_t stamp_sink; /* where --stamp-calls keeps its differences */
static uint64_t timer_overhead;      /* median of empty pairs: subtracted from quantiles */
static double timer_overhead_mean;   /* mean of empty pairs: subtracted from means */
static pthread_barrier_t start, measured;

struct result {
    uint64_t cycles;
    struct hist h; /* used with --time-each only */
} __attribute__((aligned(64)));

/* noinline + a volatile sink keep every level a real frame. */
__attribute__((noinline)) static void descend(int level, struct hist *h) {
    if (level > 1) {
        descend(level - 1, h);
        __asm__ __volatile__("" ::: "memory");
        return;
    }
    void *p;
    if (h) {
        uint64_t t0 = stamp();
        p = malloc(block_size);
        uint64_t t1 = stamp();
        /* Raw: the TSC ticks in steps here (26 on some VMs), so the timer's
         * cost is taken off the averages, not off each clamped sample. */
        hist_add(h, t1 - t0);
    } else if (stamp_calls) {
        uint64_t t0 = tsc();
        p = malloc(block_size);
        stamp_sink += tsc() - t0;
    } else {
        p = malloc(block_size);
    }
    if (!p) abort();
    if (touch) memset(p, 0xa5, block_size);
    __asm__ __volatile__("" : : "r"(p) : "memory");
    if (stamp_calls) {
        uint64_t t0 = tsc();
        free(p);
        stamp_sink += tsc() - t0;
        __asm__ __volatile__("" : : "r"(stamp_sink) : "memory");
    } else {
        free(p);
    }
}

static void *worker(void *arg) {
    struct result *r = arg;
    struct hist *h = time_each ? &r->h : NULL;
    if (h) hist_reset(h); /* also pre-faults the histogram's pages */
    pthread_barrier_wait(&start);
    for (long i = 0; i < warmup; i++) descend(depth, h);
    if (h) hist_reset(h);
    pthread_barrier_wait(&measured);
    uint64_t t0 = tsc();
    for (long i = 0; i < iterations; i++) descend(depth, h);
    r->cycles = tsc() - t0;
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median cost of an empty pair of fenced reads, as used around malloc. */
static uint64_t measure_timer_overhead(void) {
    enum { PAIRS = 20001 };
    static uint64_t d[PAIRS];
    for (int i = 0; i < 1000; i++) { /* warm the path */
        uint64_t a = stamp();
        uint64_t b = stamp();
        __asm__ __volatile__("" : : "r"(a), "r"(b));
    }
    for (int i = 0; i < PAIRS; i++) {
        uint64_t a = stamp();
        uint64_t b = stamp();
        d[i] = b - a;
    }
    qsort(d, PAIRS, sizeof d[0], cmp_u64);
    double sum = 0;
    for (int i = 0; i < PAIRS - PAIRS / 1000; i++) sum += (double)d[i]; /* drop interrupted pairs */
    timer_overhead_mean = sum / (double)(PAIRS - PAIRS / 1000);
    return d[PAIRS / 2];
}

static void usage(void) {
    fprintf(stderr, "usage: mtlab-malloc-test [--threads N] [--size BYTES] [--depth N] [--iterations N] "
                    "[--warmup N] [--touch] [--time-each | --stamp-calls] [--pin]\n");
}

static long parse_num(const char *flag, const char *v, long min) {
    char *end;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || x < min) {
        fprintf(stderr, "mtlab-malloc-test: %s needs a%s integer, got '%s'\n", flag,
                min > 0 ? " positive" : " non-negative", v);
        usage();
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    int threads = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--threads")) threads = (int)parse_num(a, v, 1), i++;
        else if (!strcmp(a, "--size")) block_size = (size_t)parse_num(a, v, 1), i++;
        else if (!strcmp(a, "--depth")) depth = (int)parse_num(a, v, 1), i++;
        else if (!strcmp(a, "--iterations")) iterations = parse_num(a, v, 1), i++;
        else if (!strcmp(a, "--warmup")) warmup = parse_num(a, v, 0), i++;
        else if (!strcmp(a, "--touch")) touch = 1;
        else if (!strcmp(a, "--pin")) pin = 1;
        else if (!strcmp(a, "--time-each")) time_each = 1;
        else if (!strcmp(a, "--stamp-calls")) stamp_calls = 1;
        else {
            usage();
            return 2;
        }
    }
    if (time_each && stamp_calls) {
        fprintf(stderr, "mtlab-malloc-test: --time-each and --stamp-calls exclude each other\n");
        usage();
        return 2;
    }
    if (warmup < 0) warmup = iterations / 10;
    if (time_each) timer_overhead = measure_timer_overhead();

    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    struct result *res = NULL;
    if (!tids || posix_memalign((void **)&res, 64, (size_t)threads * sizeof *res)) {
        fprintf(stderr, "mtlab-malloc-test: out of memory\n");
        return 1;
    }
    memset(res, 0, (size_t)threads * sizeof *res);
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    pthread_barrier_init(&measured, NULL, (unsigned)threads);
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    for (int i = 0; i < threads; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (pin) { /* fewer migrations: less noise between runs */
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(i % (int)sysconf(_SC_NPROCESSORS_ONLN), &set);
            pthread_attr_setaffinity_np(&attr, sizeof set, &set);
        }
        int failed = pthread_create(&tids[i], &attr, worker, &res[i]);
        pthread_attr_destroy(&attr);
        if (failed) {
            fprintf(stderr, "mtlab-malloc-test: cannot create thread %d\n", i);
            return 1;
        }
    }
    uint64_t total = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tids[i], NULL);
        total += res[i].cycles;
    }
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double wall_ns = (double)(w1.tv_sec - w0.tv_sec) * 1e9 + (double)(w1.tv_nsec - w0.tv_nsec);
    double per_op = (double)total / ((double)iterations * threads);
    printf("{\"workload\":\"malloc-test\",\"threads\":%d,\"size\":%zu,\"depth\":%d,\"iterations\":%ld,"
           "\"warmup\":%ld,\"touch\":%s,\"time_each\":%s,\"stamp_calls\":%s,\"cycles_per_op\":%.2f,\"wall_ns\":%.0f",
           threads, block_size, depth, iterations, warmup, touch ? "true" : "false",
           time_each ? "true" : "false", stamp_calls ? "true" : "false", per_op, wall_ns);
    if (time_each) {
        static struct hist all;
        hist_reset(&all);
        for (int i = 0; i < threads; i++) hist_merge(&all, &res[i].h);
        double mean = all.count ? (double)all.sum / (double)all.count - timer_overhead_mean : 0.0;
        uint64_t p50 = hist_quantile(&all, 0.50), p99 = hist_quantile(&all, 0.99);
        printf(",\"malloc_mean_cycles\":%.2f,\"malloc_trimmed_mean_cycles\":%.2f,\"malloc_p50_cycles\":%llu,"
               "\"malloc_p99_cycles\":%llu,\"malloc_max_cycles\":%llu,\"timer_overhead_cycles\":%.2f",
               mean, hist_trimmed_mean(&all, 0.9999) - timer_overhead_mean, (unsigned long long)(p50 > timer_overhead ? p50 - timer_overhead : 0),
               (unsigned long long)(p99 > timer_overhead ? p99 - timer_overhead : 0),
               (unsigned long long)all.max, timer_overhead_mean);
    }
    printf("}\n");
    free(tids);
    free(res);
    return 0;
}
