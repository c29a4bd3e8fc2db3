/*
 * service.c — a long-running service's heap traffic, for `record --live`
 * and the flight recorder: a steady rate of heap calls through three call
 * paths, a slow leak, for a given time or until it is stopped.
 *
 * Every request makes a few allocations and frees them before the next
 * one, except what the three call paths keep:
 *
 *   parse_request   a 32-256 B header block and a 16-64 B string per
 *                   request, freed when the request is done
 *   build_response  a 512 B-4 KiB body, freed when the request is done
 *   cache_put       every 8th request: a 1-16 KiB entry in a cache of 256
 *                   entries, the oldest freed when a new one comes in
 *
 * The leak, one block per 1000 allocations: the first request string
 * (parse_string) after each 1000th allocation is never freed and nothing
 * keeps a pointer to it (about 20 KiB/s at 1 M calls/s, so a run of hours
 * stays small).
 *
 * Pacing: requests are made in ticks of 1 ms; each tick does the calls the
 * rate asks for since the start and sleeps until the next tick, so the rate
 * is the average over any second. Behind (a loaded host, a slow tracer) it
 * catches up at most 100 ms of calls and otherwise runs as fast as it can,
 * and it stops on time; "calls_per_s" says what it made.
 * Deterministic: an xorshift stream with a fixed seed, so the same calls in
 * the same order on every run of the same length.
 *
 * Usage: service [--rate CALLS/s] [--duration TIME] [--requests N]
 *   --rate      heap calls (malloc + free) per second: 1000000, 1M/s, 500k
 *               (default 1M/s; 0 = as fast as it can)
 *   --duration  how long: 90s, 10m, 2h, 500ms (default: until SIGINT/SIGTERM)
 *   --requests  stop after N requests instead (exact counts for tests)
 * On SIGINT or SIGTERM it finishes the request at hand and ends normally.
 *
 * Prints one JSON line at the end: {"workload": "service", "requests": N,
 * "mallocs": N, "frees": N, "leaked_blocks": N, "leaked_bytes": N,
 * "seconds": S, "calls_per_s": R}. mallocs and frees count the calls this
 * program makes (not libc's own). Exit code 0; 2 on a bad argument; 3 if
 * memory runs out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CACHE 256
#define LEAK_EVERY 1000
#define CACHE_EVERY 8

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static volatile sig_atomic_t stop;
static uint64_t mallocs, frees, leaked_blocks, leaked_bytes;
static void *cache[CACHE];
static unsigned cache_next;

static uint64_t next(void) {
    uint64_t x = rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng = x;
}

static size_t size_in(size_t lo, size_t hi) { return lo + (size_t)(next() % (hi - lo + 1)); }

/* Inlined, so each call path is an allocation site of its own. */
static inline __attribute__((always_inline)) void *get(size_t n) {
    char *p = malloc(n);
    if (!p) exit(3);
    memset(p, (int)(n & 0xff), n < 64 ? n : 64);
    mallocs++;
    return p;
}

static void put(void *p, int leak) {
    if (leak) return;
    free(p);
    frees++;
}

__attribute__((noinline)) static void *parse_request(void) { return get(size_in(32, 256)); }

/* The leak: the request's string, once for every 1000 allocations made so far. */
__attribute__((noinline)) static char *parse_string(int *leak) {
    size_t n = size_in(16, 64);
    char *s = get(n);
    *leak = mallocs / LEAK_EVERY > leaked_blocks;
    if (*leak) {
        leaked_blocks++;
        leaked_bytes += n;
    }
    return s;
}

__attribute__((noinline)) static void *build_response(void) { return get(size_in(512, 4096)); }

__attribute__((noinline)) static void cache_put(void) {
    void *e = get(size_in(1024, 16384));
    void **slot = &cache[cache_next++ % CACHE];
    if (*slot) put(*slot, 0);
    *slot = e;
}

/* One request: its calls, and how many heap calls it made. */
static uint64_t request(uint64_t i) {
    uint64_t before = mallocs + frees;
    int leak;
    void *req = parse_request();
    char *s = parse_string(&leak);
    void *resp = build_response();
    if (i % CACHE_EVERY == 0) cache_put();
    put(resp, 0);
    put(s, leak);
    put(req, 0);
    return mallocs + frees - before;
}

static int bad(const char *what, const char *v) {
    fprintf(stderr, "service: bad %s %s\nusage: service [--rate CALLS/s] [--duration TIME] [--requests N]\n", what, v);
    return 2;
}

/* 1000000, 1M, 1M/s, 500k, 2.5M/s -> calls per second; -1 if unreadable. */
static double parse_rate(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    if (*end == 'k' || *end == 'K') v *= 1e3, end++;
    else if (*end == 'M' || *end == 'm') v *= 1e6, end++;
    else if (*end == 'G' || *end == 'g') v *= 1e9, end++;
    if (strcmp(end, "/s") == 0) end += 2;
    return *end ? -1 : v;
}

/* 500ms, 90s, 90, 10m, 2h -> seconds; -1 if unreadable. */
static double parse_time(const char *s) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    if (strcmp(end, "ms") == 0) return v / 1e3;
    if (*end == 0 || strcmp(end, "s") == 0) return v;
    if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0) return v * 60;
    if (strcmp(end, "h") == 0) return v * 3600;
    return -1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void on_signal(int sig) {
    (void)sig;
    stop = 1;
}

int main(int argc, char **argv) {
    double rate = 1e6, duration = 0;
    long long requests = -1;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "(missing)";
        if (strcmp(argv[i], "--rate") == 0) {
            if ((rate = parse_rate(v)) < 0) return bad("--rate", v);
        } else if (strcmp(argv[i], "--duration") == 0) {
            if ((duration = parse_time(v)) < 0) return bad("--duration", v);
        } else if (strcmp(argv[i], "--requests") == 0) {
            char *end;
            requests = strtoll(v, &end, 10);
            if (*end || end == v || requests < 0) return bad("--requests", v);
        } else {
            return bad("argument", argv[i]);
        }
        i++;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    double start = now_s();
    uint64_t i = 0, paced = 0;
    while (!stop) {
        double t = now_s() - start;
        if (duration > 0 && t >= duration) break;
        /* This tick's share: the calls the rate asks for by the end of it
         * (`paced`: the calls counted against the rate), at most 100 ms of
         * them behind: a service that cannot keep up runs as fast as it
         * can, it does not owe the calls it could not make. */
        double due = rate > 0 ? rate * (t + 0.001) : 1e300;
        if (rate > 0 && due - (double)paced > rate * 0.1) paced = (uint64_t)(due - rate * 0.1);
        while (!stop && (double)paced < due && (requests < 0 || (long long)i < requests)) {
            paced += request(i++);
            if ((i & 1023) == 0) break;
        }
        if (requests >= 0 && (long long)i >= requests) break;
        if (rate > 0 && (double)paced >= due) {
            /* To the next 1 ms boundary since the start. */
            double wake = start + (double)((uint64_t)(t * 1000) + 1) / 1000;
            struct timespec w = {(time_t)wake, (long)((wake - (double)(time_t)wake) * 1e9)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &w, NULL);
        }
    }
    /* The cache is emptied, so what stays live at exit is the leak alone. */
    for (unsigned c = 0; c < CACHE; c++)
        if (cache[c]) put(cache[c], 0), cache[c] = NULL;
    double secs = now_s() - start;
    printf("{\"workload\": \"service\", \"requests\": %llu, \"mallocs\": %llu, \"frees\": %llu, "
           "\"leaked_blocks\": %llu, \"leaked_bytes\": %llu, \"seconds\": %.3f, \"calls_per_s\": %.0f}\n",
           (unsigned long long)i, (unsigned long long)mallocs, (unsigned long long)frees,
           (unsigned long long)leaked_blocks, (unsigned long long)leaked_bytes, secs,
           secs > 0 ? (double)(mallocs + frees) / secs : 0.0);
    return 0;
}
