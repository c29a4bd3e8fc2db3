/*
 * thread_shares.c — three threads allocate from one site, each its own
 * amount: thread k (1..3) mallocs k*1000 blocks of k*64 bytes in `worker`,
 * frees all but the first k*10, which stay live at exit. Each thread
 * prints "thread K TID" (its kernel thread id) before it allocates.
 *
 * Expected, from this program, at worker's site: thread k has k*1000
 * calls, k*k*64000 bytes, k*10 live blocks, k*k*640 live bytes; all
 * threads: 6000 calls, 896000 bytes, 60 live blocks, 8960 live bytes. Exit code 0; 3 if a thread cannot start.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *kept[3][30];

__attribute__((noinline)) static void *worker(void *arg) {
    long k = (long)arg;
    char line[64];
    int n = snprintf(line, sizeof line, "thread %ld %ld\n", k, (long)syscall(SYS_gettid));
    if (write(1, line, (size_t)n) != n) return NULL;
    for (long i = 0; i < k * 1000; i++) {
        void *p = malloc((size_t)(k * 64));
        memset(p, 1, 1);
        if (i < k * 10)
            kept[k - 1][i] = p;
        else
            free(p);
    }
    return NULL;
}

int main(void) {
    pthread_t t[3];
    /* One after the other: each thread's output line and allocations are its own. */
    for (long k = 1; k <= 3; k++) {
        if (pthread_create(&t[k - 1], NULL, worker, (void *)k) != 0) return 3;
        pthread_join(t[k - 1], NULL);
    }
    return 0;
}
