/*
 * raw_clone.c — a thread made by the clone system call without CLONE_SETTLS
 * (no glibc thread descriptor: it shares its parent's thread-local storage)
 * makes N malloc/free pairs of S bytes in clone_worker while the parent
 * waits; then the parent makes M pairs in parent_work. The two never call
 * the allocator at the same time (the allocators' own thread caches are
 * thread-local, so that would be unsafe without mtlab too).
 *
 * Usage: raw_clone N M S
 * Expected: malloc = free = N + M; the clone_worker site N calls, the
 * parent_work site M calls; exit 0 (2: bad arguments, 3: clone failed).
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static long n_child, n_parent;
static size_t size;
static _Atomic int done;

__attribute__((noinline)) static void clone_worker(void) {
    for (long i = 0; i < n_child; i++) {
        void *p = malloc(size);
        if (!p) _exit(4);
        *(volatile char *)p = 1;
        free(p);
    }
}

static int child(void *arg) {
    (void)arg;
    clone_worker();
    atomic_store(&done, 1);
    return 0;
}

__attribute__((noinline)) static void parent_work(void) {
    for (long i = 0; i < n_parent; i++) {
        void *p = malloc(size);
        if (!p) _exit(4);
        *(volatile char *)p = 1;
        free(p);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    n_child = atol(argv[1]);
    n_parent = atol(argv[2]);
    size = (size_t)atol(argv[3]);
    size_t stack_size = 1 << 20;
    char *stack = mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return 3;
    int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
    if (clone(child, stack + stack_size, flags, NULL) == -1) return 3;
    while (!atomic_load(&done)) sched_yield();
    parent_work();
    return 0;
}
