/*
 * replay.c — re-executes a recorded trace's heap calls (`mtlab heap
 * replay`): one thread per traced thread, each in its own recorded order; a
 * free (or realloc) of a block another thread allocated waits until that
 * allocation has happened here. The ops file is written by mtlab
 * (studies/heap/replay.rs):
 *
 *   "MTLABRP2"  u32 threads  u32 0  u64 objects
 *   per thread: u64 ops, then ops × { u32 kind, u32 align, u64 size, u64 id, u64 old, u64 seq }
 *
 * kind: 1 malloc, 2 calloc (size bytes), 3 aligned (posix_memalign with
 * align), 4 realloc (old → id), 5 free (id). Ids number the blocks 1..objects;
 * seq is the op's place in the recorded order of all threads (0, 1, ...).
 *
 * Cross-thread order: waiting only where a free needs its allocation let
 * producer threads run far ahead (peak live 34–325 MiB against 23 MiB
 * recorded), so every op also waits until all but WINDOW of the ops
 * recorded before it have been replayed (a count of replayed ops: each
 * thread's ops are in seq order, so the thread holding the lowest pending
 * seq never waits, and the replay cannot deadlock). The replay keeps its
 * own live bytes (the sizes asked for) and prints their peak, to compare
 * with the recording's.
 *
 * It allocates nothing itself (tables are mmapped, output goes through
 * write(2)), so a trace of the replay holds the replayed calls only.
 * Usage: replay OPS-FILE [WINDOW]  (WINDOW default 64; 0: lock-step)
 * Prints one JSON line: {"events": N, "seconds": S, "events_per_s": R,
 * "peak_live_bytes": P, "window": W, "own_rss_kib": K} — K is the replay's
 * resident memory before the first replayed call (its ops and tables), which
 * the study takes off its peak RSS to leave the heap's.
 * Exit code 0; 2 on a bad file; 3 if memory runs out.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct op {
    uint32_t kind, align;
    uint64_t size, id, old, seq;
};

struct thread_ops {
    const struct op *ops;
    uint64_t n;
};

static void **blocks;
static _Atomic uint8_t *ready;
static uint64_t *sizes; /* by id: the size asked for, for the live count */
static uint64_t window = 64;

/* Shared by every thread, each on its own cache line. */
static _Alignas(64) _Atomic uint64_t replayed;
static _Alignas(64) _Atomic uint64_t live;
static _Alignas(64) _Atomic uint64_t peak_live;

static void add_live(uint64_t plus, uint64_t minus) {
    uint64_t now = atomic_fetch_add_explicit(&live, plus - minus, memory_order_relaxed) + plus - minus;
    uint64_t peak = atomic_load_explicit(&peak_live, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&peak_live, &peak, now, memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* Holds the op back until at most `window` ops recorded before it are still to come. */
static void wait_turn(uint64_t seq) {
    while (seq > atomic_load_explicit(&replayed, memory_order_acquire) + window) sched_yield();
}

static void fail(const char *msg, int code) {
    if (write(2, msg, strlen(msg)) < 0) _exit(code);
    _exit(code);
}

/* The block `id` once its allocation has been replayed (by any thread). */
static void *block(uint64_t id) {
    while (!atomic_load_explicit(&ready[id], memory_order_acquire)) sched_yield();
    return blocks[id];
}

static void put(uint64_t id, void *p, uint64_t size, uint64_t freed) {
    if (!p) fail("replay: out of memory\n", 3);
    blocks[id] = p;
    sizes[id] = size;
    add_live(size, freed);
    atomic_store_explicit(&ready[id], 1, memory_order_release);
}

static void *run(void *arg) {
    const struct thread_ops *t = arg;
    for (uint64_t i = 0; i < t->n; i++) {
        const struct op *o = &t->ops[i];
        wait_turn(o->seq);
        switch (o->kind) {
        case 1: put(o->id, malloc(o->size), o->size, 0); break;
        case 2: put(o->id, calloc(1, o->size), o->size, 0); break;
        case 3: {
            void *p = NULL;
            size_t align = o->align < sizeof(void *) ? sizeof(void *) : o->align;
            if (posix_memalign(&p, align, o->size) != 0) p = NULL;
            put(o->id, p, o->size, 0);
            break;
        }
        case 4: {
            void *old = o->old ? block(o->old) : NULL;
            put(o->id, realloc(old, o->size), o->size, o->old ? sizes[o->old] : 0);
            break;
        }
        case 5: {
            void *p = block(o->id);
            free(p);
            add_live(0, sizes[o->id]);
            break;
        }
        default: fail("replay: unknown op\n", 2);
        }
        atomic_fetch_add_explicit(&replayed, 1, memory_order_release);
    }
    return NULL;
}

/* Resident memory now, from /proc/self/statm (no stdio, no malloc); 0 if unreadable. */
static uint64_t rss_kib(void) {
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    char *p = strchr(buf, ' ');
    return p ? strtoull(p + 1, NULL, 10) * (uint64_t)sysconf(_SC_PAGESIZE) / 1024 : 0;
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) fail("usage: replay OPS-FILE [WINDOW]\n", 2);
    if (argc == 3) {
        char *end;
        window = strtoull(argv[2], &end, 10);
        if (end == argv[2] || *end) fail("replay: WINDOW is a number of ops\n", 2);
    }
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 24) fail("replay: cannot read the ops file\n", 2);
    const uint8_t *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (f == MAP_FAILED || memcmp(f, "MTLABRP2", 8) != 0) fail("replay: not an mtlab ops file\n", 2);
    uint32_t threads;
    uint64_t objects;
    memcpy(&threads, f + 8, 4);
    memcpy(&objects, f + 16, 8);
    size_t tables = (size_t)(objects + 1) * (sizeof(void *) + sizeof(uint64_t) + 1);
    uint8_t *mem = mmap(NULL, tables, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    struct thread_ops *t = mmap(NULL, (threads + 1) * sizeof *t, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_t *tid = mmap(NULL, (threads + 1) * sizeof *tid, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || t == MAP_FAILED || tid == MAP_FAILED) fail("replay: out of memory\n", 3);
    blocks = (void **)mem;
    sizes = (uint64_t *)(mem + (size_t)(objects + 1) * sizeof(void *));
    ready = (_Atomic uint8_t *)(mem + (size_t)(objects + 1) * (sizeof(void *) + sizeof(uint64_t)));
    size_t off = 24;
    uint64_t events = 0;
    for (uint32_t i = 0; i < threads; i++) {
        if (off + 8 > (size_t)st.st_size) fail("replay: ops file cut short\n", 2);
        memcpy(&t[i].n, f + off, 8);
        off += 8;
        if (t[i].n > ((size_t)st.st_size - off) / sizeof(struct op)) fail("replay: ops file cut short\n", 2);
        t[i].ops = (const struct op *)(f + off);
        off += t[i].n * sizeof(struct op);
        events += t[i].n;
    }
    uint64_t own_rss = rss_kib();
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* The first thread is replayed by main, as the traced program's was. */
    for (uint32_t i = 1; i < threads; i++)
        if (pthread_create(&tid[i], NULL, run, &t[i]) != 0) fail("replay: cannot start a thread\n", 3);
    if (threads > 0) run(&t[0]);
    for (uint32_t i = 1; i < threads; i++) pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    char line[320];
    int n = snprintf(line, sizeof line,
                     "{\"events\": %llu, \"seconds\": %.6f, \"events_per_s\": %.0f, \"peak_live_bytes\": %llu, \"window\": %llu, "
                     "\"own_rss_kib\": %llu}\n",
                     (unsigned long long)events, s, s > 0 ? (double)events / s : 0.0, (unsigned long long)peak_live,
                     (unsigned long long)window, (unsigned long long)own_rss);
    if (write(1, line, (size_t)n) < 0) return 1;
    return 0;
}
