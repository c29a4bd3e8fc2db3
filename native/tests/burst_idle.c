/*
 * burst_idle.c — 2 threads each make P pairs of malloc(64) + free as fast
 * as they can, then the program sleeps MS milliseconds, prints "done" and
 * exits with code 5.
 *
 * Usage: burst_idle P MS
 * Expected: malloc and free calls 2*P each from `burst`; nothing live.
 * Exit code 5; 2 on bad arguments, 3 on a failed call.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long pairs;
static void *volatile sink;

__attribute__((noinline)) static void *burst(void *arg) {
    (void)arg;
    for (long i = 0; i < pairs; i++) {
        void *p = malloc(64);
        if (!p) exit(3);
        sink = p;
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3 || (pairs = atol(argv[1])) < 1) return 2;
    long ms = atol(argv[2]);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, burst, NULL) != 0) return 3;
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
    printf("done\n");
    return 5;
}
