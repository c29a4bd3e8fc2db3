/*
 * thread_shares.c — three threads allocate from one site, each its own
 * amount: thread k (1..3) mallocs k*N blocks of k*SIZE bytes in `worker`,
 * frees all but the first k*KEEP, which stay live at exit. Each thread
 * prints "thread K TID" (its kernel thread id) before it allocates.
 *
 *   thread_shares [N SIZE KEEP]     (default 1000 64 10; KEEP at most 10)
 *
 * Expected, from this program, at worker's site: thread k has k*N calls,
 * k*k*N*SIZE bytes, k*KEEP live blocks, k*k*KEEP*SIZE live bytes. With the
 * defaults: thread k has k*1000 calls, k*k*64000 bytes, k*10 live blocks,
 * k*k*640 live bytes; all threads: 6000 calls, 896000 bytes, 60 live
 * blocks, 8960 live bytes. Exit code 0; 2 on bad arguments; 3 if a thread
 * cannot start.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *kept[3][30];
static long n = 1000, size = 64, keep = 10;

__attribute__((noinline)) static void *worker(void *arg) {
    long k = (long)arg;
    char line[64];
    int len = snprintf(line, sizeof line, "thread %ld %ld\n", k, (long)syscall(SYS_gettid));
    if (write(1, line, (size_t)len) != len) return NULL;
    for (long i = 0; i < k * n; i++) {
        void *p = malloc((size_t)(k * size));
        memset(p, 1, 1);
        if (i < k * keep)
            kept[k - 1][i] = p;
        else
            free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 4) {
        n = atol(argv[1]);
        size = atol(argv[2]);
        keep = atol(argv[3]);
    }
    if ((argc != 1 && argc != 4) || n < 1 || size < 1 || keep < 0 || keep > 10 || keep > n) return 2;
    pthread_t t[3];
    /* One after the other: each thread's output line and allocations are its own. */
    for (long k = 1; k <= 3; k++) {
        if (pthread_create(&t[k - 1], NULL, worker, (void *)k) != 0) return 3;
        pthread_join(t[k - 1], NULL);
    }
    return 0;
}
