/*
 * threads.c — T threads (default 8), each doing P (default 50000) pairs of
 * malloc(64) + free, i.e. 2*P traced calls per thread; all threads start
 * together at a barrier; main joins them all and returns 0.
 *
 * Usage: threads [T [P]]
 *
 * Expected, from this program: malloc calls T*P (all of size 64, all from
 * the one site in worker), free calls T*P, live at end 0 from this site.
 * With the defaults: 8 x 100000 = 800000 events. No stdio.
 * Exit code 0; 2 on bad arguments, 3 if a thread cannot start.
 */
#include <pthread.h>
#include <stdlib.h>

static long pairs = 50000;
static pthread_barrier_t start;
static void *volatile sink;

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    pthread_barrier_wait(&start);
    for (long i = 0; i < pairs; i++) {
        void *p = malloc(64);
        sink = p;
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    long threads = argc > 1 ? atol(argv[1]) : 8;
    if (argc > 2) pairs = atol(argv[2]);
    if (threads < 1 || threads > 256 || pairs < 0) return 2;
    pthread_t tid[256];
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (long i = 0; i < threads; i++)
        if (pthread_create(&tid[i], NULL, worker, NULL) != 0) return 3;
    for (long i = 0; i < threads; i++) pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start);
    return 0;
}
