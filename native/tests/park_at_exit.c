/*
 * park_at_exit.c — main does N malloc(48)+free pairs, then starts T threads
 * that each do P malloc(64)+free pairs and then park forever; main returns
 * while they are parked, so their buffers are written by the exit flush
 * (mtlab's copy of other threads' buffers), not by the threads themselves.
 *
 * Usage: park_at_exit N T P
 *
 * Expected, from this program: malloc calls N + T*P, free calls the same.
 * No stdio. Exit code 0; 2 on bad arguments, 3 if a thread cannot start.
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static long pairs;
static pthread_barrier_t done;
static void *volatile sink;

__attribute__((noinline)) static void *worker(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        void *p = malloc(64);
        sink = p;
        free(p);
    }
    pthread_barrier_wait(&done);
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    long n = atol(argv[1]), threads = atol(argv[2]);
    pairs = atol(argv[3]);
    if (n < 0 || threads < 1 || threads > 256 || pairs < 0) return 2;
    for (long i = 0; i < n; i++) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
    pthread_barrier_init(&done, NULL, (unsigned)threads + 1);
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, worker, NULL) != 0) return 3;
    }
    pthread_barrier_wait(&done);
    return 0;
}
