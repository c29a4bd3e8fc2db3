/* Thread creation cost (lmbench's lat_proc turned into lat_thread, as in the
 * NPTL study): pthread_create of a thread that returns at once, then the wait
 * for it, timed one iteration at a time so the result is a distribution.
 *
 *   --wait join      pthread_create + pthread_join (the original)
 *   --wait barrier   detached threads; the creator waits on a barrier the new
 *                    thread passes (no join, no stack handed back by join)
 *   --stack KiB      the new threads' stack size (default: the libc's)
 *   --touch KiB      the new thread first touches this much of its stack; the
 *                    time it takes is reported on its own (page faults on a
 *                    fresh stack, nothing on a stack the libc cached)
 *   --ms MS          measure for this long after a warm-up (default 200)
 *   --cpus LIST      run on these CPUs
 *
 * Prints one JSON line; times are in microseconds with the timer's own cost
 * subtracted once per interval. */
#include "common.h"

#include <pthread.h>
#include <alloca.h>

enum { WARMUP = 50 };

static pthread_barrier_t barrier;
static int waiting_on_barrier;
static size_t touch_bytes;
static volatile uint64_t touch_ticks; /* written by the thread, read after the wait */

static void *child(void *arg) {
    (void)arg;
    note_cpu();
    if (touch_bytes) {
        uint64_t t0 = ticks();
        volatile char *p = alloca(touch_bytes);
        for (size_t i = 0; i < touch_bytes; i += 4096)
            p[i] = 1;
        touch_ticks = ticks() - t0;
    }
    if (waiting_on_barrier)
        pthread_barrier_wait(&barrier);
    return NULL;
}

static void usage(void) {
    die("usage: create [--wait join|barrier] [--stack KiB] [--touch KiB] [--ms MS] [--cpus LIST] "
        "[--ticks-per-ns X]");
}

int main(int argc, char **argv) {
    long stack_kib = 0;
    common_opts_t co = {.ms = 200};
    const char *wait = "join";
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *o = argv[i], *v = argv[++i];
        if (common_option(&co, o, v))
            continue;
        if (!strcmp(o, "--wait"))
            wait = v;
        else if (!strcmp(o, "--stack"))
            stack_kib = opt_long(o, v, 16, 1 << 20);
        else if (!strcmp(o, "--touch"))
            touch_bytes = (size_t)opt_long(o, v, 0, 1 << 20) * 1024;
        else
            usage();
    }
    if (strcmp(wait, "join") && strcmp(wait, "barrier"))
        die("--wait: expected join or barrier, got '%s'", wait);
    waiting_on_barrier = !strcmp(wait, "barrier");
    common_setup(&co);
    long ms = co.ms;
    double tpn = co.ticks_per_ns;
    double timer = timer_cost_ticks();

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (stack_kib) {
        int e = pthread_attr_setstacksize(&attr, (size_t)stack_kib * 1024);
        if (e)
            die("--stack %ld KiB: the thread library refuses it: %s", stack_kib, strerror(e));
    }
    size_t stack_size = 0;
    pthread_attr_getstacksize(&attr, &stack_size);
    if (touch_bytes + 64 * 1024 > stack_size)
        die("--touch %zu KiB does not fit in the %zu KiB thread stack (leave 64 KiB; raise --stack)",
            touch_bytes / 1024, stack_size / 1024);
    if (waiting_on_barrier) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_barrier_init(&barrier, NULL, 2);
    }

    static hist_t total, create_only, touch;
    uint64_t deadline = 0, iterations = 0, start_ns = 0;
    for (uint64_t it = 0;; it++) {
        if (it == WARMUP) {
            start_ns = mono_ns();
            deadline = start_ns + (uint64_t)ms * 1000000ull;
        }
        if (it > WARMUP && (it & 15) == 0 && mono_ns() >= deadline)
            break;
        pthread_t t;
        uint64_t t0 = ticks();
        int e = pthread_create(&t, &attr, child, NULL);
        uint64_t t1 = ticks();
        if (e)
            die("pthread_create failed after %llu threads: %s", (unsigned long long)it, strerror(e));
        if (waiting_on_barrier)
            pthread_barrier_wait(&barrier);
        else
            pthread_join(t, NULL);
        uint64_t t2 = ticks();
        if (it >= WARMUP) {
            hist_add(&total, t2 - t0);
            hist_add(&create_only, t1 - t0);
            if (touch_bytes)
                hist_add(&touch, touch_ticks);
            iterations++;
        }
    }
    double seconds = (double)(mono_ns() - start_ns) / 1e9;
    note_cpu();

    double us = 1.0 / (tpn * 1000.0);
    char seen[256];
    cpus_seen(seen, sizeof seen);
    printf("{\"workload\":\"create\",\"libc\":\"%s\",\"wait\":\"%s\",\"stack_kib\":%ld,\"touch_kib\":%zu,"
           "\"iterations\":%llu,\"seconds\":%.6f,"
           "\"mean_us\":%.4f,\"p50_us\":%.4f,\"p99_us\":%.4f,"
           "\"create_mean_us\":%.4f,\"create_p50_us\":%.4f,\"touch_p50_us\":%.4f,"
           "\"timer_ticks\":%.1f,\"ticks_per_ns\":%.6f,\"cpus_seen\":\"%s\"}\n",
           libc_name(), wait, stack_kib, touch_bytes / 1024, (unsigned long long)iterations, seconds,
           (total.sum / (double)total.count - timer) * us, (hist_quantile(&total, 0.5) - timer) * us,
           (hist_quantile(&total, 0.99) - timer) * us, (create_only.sum / (double)create_only.count - timer) * us,
           (hist_quantile(&create_only, 0.5) - timer) * us,
           touch_bytes ? (hist_quantile(&touch, 0.5) - timer) * us : 0.0, timer, tpn, seen);
    return 0;
}
