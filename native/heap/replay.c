/*
 * replay.c — re-executes a recorded trace's heap calls (`mtlab heap
 * replay`): one thread per traced thread, each in its own recorded order; a
 * free (or realloc) of a block another thread allocated waits until that
 * allocation has happened here. The ops file is written by mtlab
 * (studies/heap/replay.rs):
 *
 *   "MTLABRP1"  u32 threads  u32 0  u64 objects
 *   per thread: u64 ops, then ops × { u32 kind, u32 align, u64 size, u64 id, u64 old }
 *
 * kind: 1 malloc, 2 calloc (size bytes), 3 aligned (posix_memalign with
 * align), 4 realloc (old → id), 5 free (id). Ids number the blocks 1..objects.
 *
 * It allocates nothing itself (tables are mmapped, output goes through
 * write(2)), so a trace of the replay holds the replayed calls only.
 * Prints one JSON line: {"events": N, "seconds": S, "events_per_s": R}.
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
    uint64_t size, id, old;
};

struct thread_ops {
    const struct op *ops;
    uint64_t n;
};

static void **blocks;
static _Atomic uint8_t *ready;

static void fail(const char *msg, int code) {
    if (write(2, msg, strlen(msg)) < 0) _exit(code);
    _exit(code);
}

/* The block `id` once its allocation has been replayed (by any thread). */
static void *block(uint64_t id) {
    while (!atomic_load_explicit(&ready[id], memory_order_acquire)) sched_yield();
    return blocks[id];
}

static void put(uint64_t id, void *p) {
    if (!p) fail("replay: out of memory\n", 3);
    blocks[id] = p;
    atomic_store_explicit(&ready[id], 1, memory_order_release);
}

static void *run(void *arg) {
    const struct thread_ops *t = arg;
    for (uint64_t i = 0; i < t->n; i++) {
        const struct op *o = &t->ops[i];
        switch (o->kind) {
        case 1: put(o->id, malloc(o->size)); break;
        case 2: put(o->id, calloc(1, o->size)); break;
        case 3: {
            void *p = NULL;
            size_t align = o->align < sizeof(void *) ? sizeof(void *) : o->align;
            if (posix_memalign(&p, align, o->size) != 0) p = NULL;
            put(o->id, p);
            break;
        }
        case 4: put(o->id, realloc(o->old ? block(o->old) : NULL, o->size)); break;
        case 5: free(block(o->id)); break;
        default: fail("replay: unknown op\n", 2);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: replay OPS-FILE\n", 2);
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 24) fail("replay: cannot read the ops file\n", 2);
    const uint8_t *f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (f == MAP_FAILED || memcmp(f, "MTLABRP1", 8) != 0) fail("replay: not an mtlab ops file\n", 2);
    uint32_t threads;
    uint64_t objects;
    memcpy(&threads, f + 8, 4);
    memcpy(&objects, f + 16, 8);
    size_t tables = (size_t)(objects + 1) * (sizeof(void *) + 1);
    uint8_t *mem = mmap(NULL, tables, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    struct thread_ops *t = mmap(NULL, (threads + 1) * sizeof *t, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_t *tid = mmap(NULL, (threads + 1) * sizeof *tid, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED || t == MAP_FAILED || tid == MAP_FAILED) fail("replay: out of memory\n", 3);
    blocks = (void **)mem;
    ready = (_Atomic uint8_t *)(mem + (size_t)(objects + 1) * sizeof(void *));
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
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    /* The first thread is replayed by main, as the traced program's was. */
    for (uint32_t i = 1; i < threads; i++)
        if (pthread_create(&tid[i], NULL, run, &t[i]) != 0) fail("replay: cannot start a thread\n", 3);
    if (threads > 0) run(&t[0]);
    for (uint32_t i = 1; i < threads; i++) pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    char line[160];
    int n = snprintf(line, sizeof line, "{\"events\": %llu, \"seconds\": %.6f, \"events_per_s\": %.0f}\n",
                     (unsigned long long)events, s, s > 0 ? (double)events / s : 0.0);
    if (write(1, line, (size_t)n) < 0) return 1;
    return 0;
}
