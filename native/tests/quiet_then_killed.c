/* A service stopped while idle: a worker thread and the main thread
 * allocate, go quiet (the main thread twice: it allocates again after a
 * pause long enough for its first buffer to be copied and then written),
 * say "ready" and wait to be killed. Counts: main 1000 + 500 mallocs of
 * 64 bytes, the worker 300 of 100; `write`, not stdio, so that no buffer of
 * stdio's is allocated. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *volatile sink;
static pthread_barrier_t done;

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 300; i++) sink = malloc(100);
    pthread_barrier_wait(&done);
    for (;;) pause();
    return NULL;
}

int main(void) {
    pthread_barrier_init(&done, NULL, 2);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 1;
    for (int i = 0; i < 1000; i++) sink = malloc(64);
    /* Long enough for `record` to copy this buffer; the next call writes it. */
    struct timespec pause_ms = {0, 400 * 1000 * 1000};
    nanosleep(&pause_ms, NULL);
    for (int i = 0; i < 500; i++) sink = malloc(64);
    pthread_barrier_wait(&done);
    if (write(1, "ready\n", 6) != 6) return 1;
    for (;;) pause();
}
