/* Context-switch cost (lmbench's lat_ctx turned into lat_thread_ctx, as in the
 * NPTL study): N threads pass a token round a ring; on every turn a thread
 * sums its private working set of --ws KiB, which evicts the others' data the
 * way a real switch between busy threads does.
 *
 * Two answers, both printed:
 *   - lmbench's: (ring time per hand-off) − (one thread doing the same
 *     transport operations and working-set walk with no switch), so what is
 *     left is the switch;
 *   - the distribution of single hand-offs: the sender stamps the time just
 *     before passing the token, the receiver just after it wakes; p50/p99.
 *
 * Transports: pipe (the original), futex, eventfd, cond (mutex+condvar).
 * Options: --threads N (>= 2), --ws KiB, --transport T, --ms MS (measured
 * time after a warm-up), --cpus LIST (the process), --pin LIST (thread i runs
 * on the i mod k-th CPU of the list: how placement classes are set),
 * --ticks-per-ns X. */
#include "common.h"

#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The futex operations, defined here because musl-gcc has no kernel headers. */
#ifndef FUTEX_WAIT
#define FUTEX_WAIT 0
#define FUTEX_WAKE 1
#define FUTEX_PRIVATE_FLAG 128
#endif

enum transport { PIPE, FUTEX, EVENTFD, COND };
static const char *transport_names[] = {"pipe", "futex", "eventfd", "cond"};

#define STOP UINT64_MAX
enum { WARM_LAPS = 20 };

/* One receiving end of the ring, on its own cache lines. */
typedef struct {
    int fd[2];                  /* pipe: [0] read, [1] write; eventfd: fd[0] */
    uint32_t word;              /* futex: 1 when a token waits */
    pthread_mutex_t mu;         /* cond */
    pthread_cond_t cv;
    int full;
    uint64_t token;             /* lap number or STOP (futex, cond) */
    uint64_t sent_at;           /* ticks() just before the token was passed */
    int cpu;                    /* -1: not pinned */
    size_t ws_bytes;
} __attribute__((aligned(128))) slot_t;

/* Hand-off latencies, in ticks. One histogram for the whole ring, written
 * without atomics: only the thread holding the token records, and passing
 * the token (a system call, or a release/acquire pair) orders its writes
 * before the next holder's. */
static hist_t handoffs;

static enum transport tr;
static slot_t *slots;
static int nthreads;
static uint64_t deadline_ns, measured_laps, t_first, t_last;
static pthread_barrier_t ready;

static long futex(uint32_t *uaddr, int op, uint32_t val) {
    return syscall(SYS_futex, uaddr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static void xwrite(int fd, const void *p, size_t n) {
    while (write(fd, p, n) != (ssize_t)n)
        if (errno != EINTR)
            die("write: %s", strerror(errno));
}

static void xread(int fd, void *p, size_t n) {
    while (read(fd, p, n) != (ssize_t)n)
        if (errno != EINTR)
            die("read: %s", strerror(errno));
}

static void send_token(slot_t *to, uint64_t v) {
    __atomic_store_n(&to->sent_at, ticks(), __ATOMIC_RELEASE);
    switch (tr) {
    case PIPE:
        xwrite(to->fd[1], &v, sizeof v);
        break;
    case EVENTFD:
        v = v == STOP ? STOP - 1 : v + 1; /* an eventfd cannot carry 0 or 2^64-1 */
        xwrite(to->fd[0], &v, sizeof v);
        break;
    case FUTEX:
        __atomic_store_n(&to->token, v, __ATOMIC_RELAXED);
        __atomic_store_n(&to->word, 1, __ATOMIC_RELEASE);
        futex(&to->word, FUTEX_WAKE, 1);
        break;
    case COND:
        pthread_mutex_lock(&to->mu);
        to->token = v;
        to->full = 1;
        pthread_cond_signal(&to->cv);
        pthread_mutex_unlock(&to->mu);
        break;
    }
}

static uint64_t receive_token(slot_t *s) {
    uint64_t v = 0;
    switch (tr) {
    case PIPE:
        xread(s->fd[0], &v, sizeof v);
        break;
    case EVENTFD:
        xread(s->fd[0], &v, sizeof v);
        v = v == STOP - 1 ? STOP : v - 1;
        break;
    case FUTEX:
        while (__atomic_load_n(&s->word, __ATOMIC_ACQUIRE) == 0)
            futex(&s->word, FUTEX_WAIT, 0);
        __atomic_store_n(&s->word, 0, __ATOMIC_RELAXED);
        v = __atomic_load_n(&s->token, __ATOMIC_RELAXED);
        break;
    case COND:
        pthread_mutex_lock(&s->mu);
        while (!s->full)
            pthread_cond_wait(&s->cv, &s->mu);
        s->full = 0;
        v = s->token;
        pthread_mutex_unlock(&s->mu);
        break;
    }
    return v;
}

/* Sums the working set; the result is kept so the walk is not optimised away. */
static volatile uint64_t sink;
static void walk(const uint64_t *ws, size_t bytes) {
    uint64_t s = 0;
    for (size_t i = 0; i < bytes / sizeof *ws; i++)
        s += ws[i];
    sink += s;
}

static uint64_t *working_set(size_t bytes) {
    if (!bytes)
        return NULL;
    uint64_t *ws = malloc(bytes);
    if (!ws)
        die("cannot allocate a %zu KiB working set", bytes / 1024);
    for (size_t i = 0; i < bytes / sizeof *ws; i++)
        ws[i] = i;
    return ws;
}

static void *ring_thread(void *arg) {
    int i = (int)(intptr_t)arg;
    slot_t *me = &slots[i], *next = &slots[(i + 1) % nthreads];
    if (me->cpu >= 0)
        pin_one(me->cpu);
    uint64_t *ws = working_set(me->ws_bytes);
    note_cpu();
    pthread_barrier_wait(&ready);
    if (i == 0) /* thread 0 starts the first lap and decides when to stop */
        send_token(next, 0);
    for (;;) {
        uint64_t v = receive_token(me);
        uint64_t now = ticks();
        if (v != STOP && v >= WARM_LAPS)
            hist_add(&handoffs, now - __atomic_load_n(&me->sent_at, __ATOMIC_ACQUIRE));
        if (v == STOP) {
            if (i != 0)
                send_token(next, STOP);
            break;
        }
        walk(ws, me->ws_bytes);
        if (i == 0) {
            v++; /* a lap is complete */
            if (v == WARM_LAPS) {
                t_first = ticks();
                deadline_ns = mono_ns() + deadline_ns;
            }
            if (v > WARM_LAPS && (v & 7) == 0 && mono_ns() >= deadline_ns) {
                t_last = ticks();
                measured_laps = v - WARM_LAPS;
                note_cpu();
                send_token(next, STOP);
                continue;
            }
        }
        if ((v & 255) == 0)
            note_cpu();
        send_token(next, v);
    }
    free(ws);
    return NULL;
}

static void open_slot(slot_t *s) {
    switch (tr) {
    case PIPE:
        if (pipe(s->fd) != 0)
            die("pipe: %s", strerror(errno));
        break;
    case EVENTFD:
        if ((s->fd[0] = eventfd(0, 0)) < 0)
            die("eventfd: %s", strerror(errno));
        break;
    case FUTEX:
        break;
    case COND:
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        break;
    }
}

/* lmbench's overhead: one thread passing the token to itself and walking its
 * working set, per hand-off, in ticks (the minimum of three runs of `n`). */
static double overhead_ticks(size_t ws_bytes, int n, uint64_t budget_ns) {
    slot_t *s = &slots[0];
    uint64_t *ws = working_set(ws_bytes);
    double best = 1e300;
    for (int rep = 0; rep < 3; rep++) {
        /* At most n turns, and no longer than the budget once 8 are done: a
         * 64 MiB working set made 3 x 2000 turns take a minute against --ms 20. */
        uint64_t t0 = ticks(), start = mono_ns();
        int k = 0;
        while (k < n) {
            send_token(s, (uint64_t)k);
            (void)receive_token(s);
            walk(ws, ws_bytes);
            k++;
            if (k >= 8 && (k & 7) == 0 && mono_ns() - start >= budget_ns)
                break;
        }
        double per = (double)(ticks() - t0) / k;
        if (per < best)
            best = per;
    }
    free(ws);
    return best;
}

static void usage(void) {
    die("usage: ctx [--threads N] [--ws KiB] [--transport pipe|futex|eventfd|cond] [--ms MS] "
        "[--cpus LIST] [--pin LIST] [--ticks-per-ns X]");
}

int main(int argc, char **argv) {
    long ws_kib = 0;
    common_opts_t co = {.ms = 200};
    const char *pin = NULL, *tname = "pipe";
    nthreads = 2;
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc)
            usage();
        const char *o = argv[i], *v = argv[++i];
        if (common_option(&co, o, v))
            continue;
        if (!strcmp(o, "--threads"))
            nthreads = (int)opt_long(o, v, 2, 100000);
        else if (!strcmp(o, "--ws"))
            ws_kib = opt_long(o, v, 0, 1 << 20);
        else if (!strcmp(o, "--transport"))
            tname = v;
        else if (!strcmp(o, "--pin"))
            pin = v;
        else
            usage();
    }
    int t;
    for (t = 0; t < 4 && strcmp(tname, transport_names[t]); t++) {
    }
    if (t == 4)
        die("--transport: expected pipe, futex, eventfd or cond, got '%s'", tname);
    tr = (enum transport)t;
    common_setup(&co);
    long ms = co.ms;
    double tpn = co.ticks_per_ns;

    /* --pin "a,b,c": thread i on the (i mod 3)-th; ranges are not allowed, order matters. */
    int pins[1024], npins = 0;
    if (pin) {
        const char *p = pin;
        while (*p) {
            char *end;
            long c = strtol(p, &end, 10);
            if (end == p || c < 0 || c >= CPU_SETSIZE || npins == 1024)
                die("--pin: expected CPU numbers separated by commas, got '%s'", pin);
            pins[npins++] = (int)c;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',')
                die("--pin: expected CPU numbers separated by commas, got '%s'", pin);
        }
    }
    if (tpn == 0)
        tpn = ticks_per_ns(20);
    double timer = timer_cost_ticks();

    /* Pipes take two descriptors a thread, eventfds one: raise the soft limit
     * as far as the hard one allows, and say so if a ring cannot fit. */
    long fds = tr == PIPE ? 2L * nthreads : tr == EVENTFD ? nthreads : 0;
    struct rlimit rl;
    if (fds && getrlimit(RLIMIT_NOFILE, &rl) == 0 && (rlim_t)(fds + 32) > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        if ((rlim_t)(fds + 32) > rl.rlim_cur)
            die("a ring of %d threads over %s needs %ld descriptors, but at most %llu may be open (raise ulimit -n, or use "
                "--transport futex or cond)",
                nthreads, tname, fds + 32, (unsigned long long)rl.rlim_cur);
    }
    slots = aligned_alloc(128, sizeof(slot_t) * (size_t)nthreads);
    if (!slots)
        die("cannot allocate %d ring slots", nthreads);
    memset(slots, 0, sizeof(slot_t) * (size_t)nthreads);
    for (int i = 0; i < nthreads; i++) {
        open_slot(&slots[i]);
        slots[i].cpu = npins ? pins[i % npins] : -1;
        slots[i].ws_bytes = (size_t)ws_kib * 1024;
    }
    /* The calibration takes at most about a quarter of the measured time. */
    double overhead = overhead_ticks((size_t)ws_kib * 1024, 2000, (uint64_t)ms * 1000000ull / 12 + 1000000ull);

    deadline_ns = (uint64_t)ms * 1000000ull; /* made absolute by thread 0 after the warm-up */
    pthread_barrier_init(&ready, NULL, (unsigned)nthreads);
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024); /* thousands of threads fit */
    for (int i = 0; i < nthreads; i++) {
        int e = pthread_create(&th[i], &attr, ring_thread, (void *)(intptr_t)i);
        if (e)
            die("cannot create thread %d of %d: %s", i + 1, nthreads, strerror(e));
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);

    const hist_t *all = &handoffs;
    double switches = (double)measured_laps * nthreads;
    double loop = (double)(t_last - t_first) / switches;
    double ns = 1.0 / tpn;
    char seen[256];
    cpus_seen(seen, sizeof seen);
    printf("{\"workload\":\"ctx\",\"libc\":\"%s\",\"transport\":\"%s\",\"threads\":%d,\"ws_kib\":%ld,"
           "\"laps\":%llu,\"switches\":%.0f,\"handoffs\":%llu,\"seconds\":%.6f,"
           "\"loop_ns\":%.2f,\"overhead_ns\":%.2f,\"switch_ns\":%.2f,"
           "\"handoff_mean_ns\":%.2f,\"handoff_p50_ns\":%.2f,\"handoff_p99_ns\":%.2f,"
           "\"timer_ticks\":%.1f,\"ticks_per_ns\":%.6f,\"cpus_seen\":\"%s\"}\n",
           libc_name(), tname, nthreads, ws_kib, (unsigned long long)measured_laps, switches,
           (unsigned long long)all->count,
           (double)(t_last - t_first) * ns / 1e9, loop * ns, overhead * ns, (loop - overhead) * ns,
           (all->sum / (double)all->count - timer) * ns, (hist_quantile(all, 0.5) - timer) * ns,
           (hist_quantile(all, 0.99) - timer) * ns, timer, tpn, seen);
    return 0;
}
