/* Shared by the threads-study workloads (create, ctx, chat): the cycle timer
 * and its own cost, a log-linear latency histogram, CPU lists, pinning, the
 * record of CPUs a workload really ran on, and the one-line JSON result.
 *
 * Built twice: against glibc by build.rs, and at run time against any other
 * libc's compiler wrapper (musl-gcc), so only POSIX, Linux syscalls and
 * _GNU_SOURCE extensions both libcs have are used here. */
#ifndef MTLAB_THREADS_COMMON_H
#define MTLAB_THREADS_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A usage or system error: one line on stderr, exit 2 (the study shows it). */
static __attribute__((unused)) void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static __attribute__((unused)) void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

/* ---- time ---------------------------------------------------------------- */

/* Cycle counter. Plain rdtsc (27 cycles a read on the study's VM) rather
 * than rdtscp or lfence+rdtsc (about 50): every interval measured here is
 * bounded by system calls, which already order it, and the budget is
 * under 30 cycles a read. The "memory" clobber keeps the compiler from moving
 * loads and stores across it. */
static __attribute__((unused)) inline uint64_t ticks(void) {
#if defined(__x86_64__)
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi)::"memory");
    return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v)::"memory");
    return v;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
#endif
}

static __attribute__((unused)) inline uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Ticks per nanosecond, against CLOCK_MONOTONIC over `ms` milliseconds. */
static __attribute__((unused)) double ticks_per_ns(unsigned ms) {
    uint64_t n0 = mono_ns(), t0 = ticks();
    while (mono_ns() - n0 < (uint64_t)ms * 1000000ull) {
    }
    uint64_t n1 = mono_ns(), t1 = ticks();
    return (double)(t1 - t0) / (double)(n1 - n0);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The timer's own cost: the median of back-to-back differences, in ticks.
 * Every interval a workload measures contains one such cost; it is
 * subtracted from hand-off and create times and printed. */
static __attribute__((unused)) double timer_cost_ticks(void) {
    enum { N = 20001 };
    static uint64_t d[N];
    for (int i = 0; i < N; i++) {
        uint64_t a = ticks();
        uint64_t b = ticks();
        d[i] = b - a;
    }
    qsort(d, N, sizeof d[0], cmp_u64);
    return (double)d[N / 2];
}

/* ---- histogram ----------------------------------------------------------- */

/* Log-linear buckets over ticks: 128 sub-buckets per power of two, so any
 * percentile is within 1/128 (0.8 %) of the value; exact below 256. */
#define HIST_BITS 7
#define HIST_SUB (1u << HIST_BITS)
#define HIST_GROUPS 40 /* up to 2^46 ticks: hours */
typedef struct {
    uint64_t n[HIST_GROUPS * HIST_SUB];
    uint64_t count;
    double sum;
} hist_t;

static __attribute__((unused)) inline unsigned hist_index(uint64_t v) {
    if (v < 2 * HIST_SUB)
        return (unsigned)v;
    unsigned msb = 63 - (unsigned)__builtin_clzll(v);
    unsigned shift = msb - HIST_BITS; /* keeps v >> shift in [HIST_SUB, 2 HIST_SUB) */
    unsigned g = shift + 1;
    if (g >= HIST_GROUPS)
        return HIST_GROUPS * HIST_SUB - 1;
    return g * HIST_SUB + (unsigned)((v >> shift) - HIST_SUB);
}

/* Midpoint of a bucket, the value a percentile reports. */
static __attribute__((unused)) double hist_value(unsigned i) {
    if (i < 2 * HIST_SUB)
        return (double)i;
    unsigned g = i / HIST_SUB, s = i % HIST_SUB;
    unsigned shift = g - 1;
    double lo = (double)((uint64_t)(HIST_SUB + s) << shift);
    return lo + (double)((1ull << shift) - 1) / 2.0;
}

static __attribute__((unused)) inline void hist_add(hist_t *h, uint64_t v) {
    h->n[hist_index(v)]++;
    h->count++;
    h->sum += (double)v;
}

static __attribute__((unused)) void hist_merge(hist_t *into, const hist_t *h) {
    for (unsigned i = 0; i < HIST_GROUPS * HIST_SUB; i++)
        into->n[i] += h->n[i];
    into->count += h->count;
    into->sum += h->sum;
}

static __attribute__((unused)) double hist_quantile(const hist_t *h, double q) {
    if (h->count == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)(h->count - 1)) + 1, seen = 0;
    for (unsigned i = 0; i < HIST_GROUPS * HIST_SUB; i++) {
        seen += h->n[i];
        if (seen >= rank)
            return hist_value(i);
    }
    return hist_value(HIST_GROUPS * HIST_SUB - 1);
}

/* ---- CPUs ---------------------------------------------------------------- */

/* Parses "0-3,6" into `set`; returns the number of CPUs or -1. */
static __attribute__((unused)) int parse_cpus(const char *s, cpu_set_t *set) {
    CPU_ZERO(set);
    int n = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s || a < 0 || a >= CPU_SETSIZE)
            return -1;
        s = end;
        if (*s == '-') {
            b = strtol(s + 1, &end, 10);
            if (end == s + 1 || b < a || b >= CPU_SETSIZE)
                return -1;
            s = end;
        }
        for (long c = a; c <= b; c++)
            if (!CPU_ISSET((int)c, set)) {
                CPU_SET((int)c, set);
                n++;
            }
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

/* Restricts the calling thread (and threads it creates later) to `list`. */
static __attribute__((unused)) void pin_to(const char *list) {
    cpu_set_t set;
    if (parse_cpus(list, &set) <= 0)
        die("bad CPU list '%s' (expected e.g. 0 or 0-3,6)", list);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("cannot run on CPUs %s: %s", list, strerror(errno));
}

/* Pins the calling thread to one CPU. */
static __attribute__((unused)) void pin_one(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        die("cannot pin a thread to CPU %d: %s", cpu, strerror(errno));
}

/* CPUs any thread was seen on (sched_getcpu), so the study can check that a
 * CPU set was really used. */
static volatile uint64_t cpus_seen_mask[CPU_SETSIZE / 64];

static __attribute__((unused)) inline void note_cpu(void) {
    int c = sched_getcpu();
    if (c >= 0 && c < CPU_SETSIZE)
        __atomic_fetch_or(&cpus_seen_mask[c / 64], 1ull << (c % 64), __ATOMIC_RELAXED);
}

/* Writes the seen CPUs as a list ("0-1,3") into buf. */
static __attribute__((unused)) void cpus_seen(char *buf, size_t len) {
    size_t o = 0;
    buf[0] = 0;
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!(cpus_seen_mask[c / 64] >> (c % 64) & 1))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && (cpus_seen_mask[(e + 1) / 64] >> ((e + 1) % 64) & 1))
            e++;
        int w = e > c ? snprintf(buf + o, len - o, "%s%d-%d", o ? "," : "", c, e)
                      : snprintf(buf + o, len - o, "%s%d", o ? "," : "", c);
        if (w < 0 || (size_t)w >= len - o)
            break;
        o += (size_t)w;
        c = e;
    }
}

/* The libc the workload was built against, for the result line. */
static __attribute__((unused)) const char *libc_name(void) {
#if defined(__GLIBC__)
    return "glibc";
#else
    return "other"; /* musl defines no macro of its own */
#endif
}

/* ---- options ------------------------------------------------------------- */

/* A non-negative integer option value, or die naming the option. */
static __attribute__((unused)) long opt_long(const char *name, const char *v, long min, long max) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min || x > max)
        die("%s: expected an integer from %ld to %ld, got '%s'", name, min, max, v);
    return x;
}

static __attribute__((unused)) double opt_double(const char *name, const char *v, double min) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= min))
        die("%s: expected a number >= %g, got '%s'", name, min, v);
    return x;
}

/* The options every workload takes: --cpus LIST, --ticks-per-ns X, --ms MS. */
typedef struct {
    const char *cpus;
    double ticks_per_ns; /* 0: calibrate */
    long ms;             /* 0: the workload's default */
} common_opts_t;

/* Takes option `o` with value `v` if it is a common one; returns whether it was. */
static __attribute__((unused)) int common_option(common_opts_t *c, const char *o, const char *v) {
    if (!strcmp(o, "--cpus"))
        c->cpus = v;
    else if (!strcmp(o, "--ticks-per-ns"))
        c->ticks_per_ns = opt_double(o, v, 1e-6);
    else if (!strcmp(o, "--ms"))
        c->ms = opt_long(o, v, 1, 3600 * 1000);
    else
        return 0;
    return 1;
}

/* Applies the common options before any thread starts: the CPU set, then
 * the tick rate (calibrated on those CPUs when not given). */
static __attribute__((unused)) void common_setup(common_opts_t *c) {
    if (c->cpus)
        pin_to(c->cpus);
    if (c->ticks_per_ns == 0)
        c->ticks_per_ns = ticks_per_ns(20);
}

#endif
