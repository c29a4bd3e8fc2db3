/*
 * errno_kept.c — every allocation call leaves errno as the program set it.
 *
 * Usage: errno_kept N      (N <= 1000000)
 *
 * Two threads each set errno to a sentinel before every successful call —
 * malloc (at varying call depths and sizes), calloc, realloc, posix_memalign,
 * free, mmap, munmap — and check it after. C guarantees nothing here, but
 * glibc's allocator leaves errno alone on success, so any change is the
 * tracer's. Prints the number of changes; exit 0 if none, 1 otherwise,
 * 2 on bad arguments.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define SENTINEL 4242
static long n;

__attribute__((noinline)) static void *at_depth(size_t size, int depth) {
    if (depth) {
        void *p = at_depth(size, depth - 1);
        __asm__ __volatile__("" ::: "memory");
        return p;
    }
    return malloc(size);
}

/* Counts the calls after which errno is not the sentinel any more. */
#define CHECKED(bad, call) (errno = SENTINEL, (call), (bad) += errno != SENTINEL)

static void *worker(void *arg) {
    long *bad = arg;
    for (long i = 0; i < n; i++) {
        void *p, *q, *r = NULL, *m;
        CHECKED(*bad, p = at_depth(16 + (size_t)(i % 64) * 8, (int)(i % 7)));
        CHECKED(*bad, q = calloc(4, 32));
        CHECKED(*bad, q = realloc(q, 4096));
        CHECKED(*bad, posix_memalign(&r, 64, 256));
        CHECKED(*bad, m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        if (!p || !q || !r || m == MAP_FAILED) exit(3);
        CHECKED(*bad, munmap(m, 4096));
        CHECKED(*bad, free(p));
        CHECKED(*bad, free(q));
        CHECKED(*bad, free(r));
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    n = strtol(argv[1], NULL, 10);
    if (n < 0 || n > 1000000) return 2;
    long bad[2] = {0, 0};
    /* The process's first traced calls come first: unwinders set themselves
     * up on their first walk. */
    void *first;
    CHECKED(bad[0], first = malloc(100));
    CHECKED(bad[0], free(first));
    pthread_t t;
    if (pthread_create(&t, NULL, worker, &bad[1])) return 3;
    worker(&bad[0]);
    pthread_join(t, NULL);
    printf("errno changed %ld times\n", bad[0] + bad[1]);
    return bad[0] + bad[1] ? 1 : 0;
}
