/*
 * quiet_thread.c — one thread makes a few blocks and then blocks on a pipe
 * read while another allocates steadily for MS milliseconds; then the
 * quiet thread is woken, frees two of its blocks and ends.
 *
 * Usage: quiet_thread MS [ROUNDS]
 *
 * Expected, from this program:
 *   quiet_allocs: 5 mallocs of 1000 B, 2 freed (by the same thread, after
 *     the busy thread is done): 3 blocks, 3000 B live at the end;
 *   busy_pairs: rounds of 100 pairs of malloc(64) + free until MS have
 *     passed and at least ROUNDS (default 0) are done, so that a test can
 *     ask for a volume of trace however loaded the host is, and one
 *     malloc(48) kept per round (busy_keep):
 *     live at the end = rounds blocks of 48 B.
 * Prints "rounds N" on stdout (N: the busy thread's rounds). Exit code 0;
 * 2 on bad arguments, 3 on a failed call.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int wake[2];
static void *volatile sink;
static long ms, min_rounds;

__attribute__((noinline)) static void *quiet_allocs(void *arg) {
    (void)arg;
    void *b[5];
    for (int i = 0; i < 5; i++)
        if (!(b[i] = malloc(1000))) exit(3);
    char c;
    if (read(wake[0], &c, 1) != 1) exit(3); /* blocks until the busy thread is done */
    free(b[0]);
    free(b[1]);
    sink = b[2];
    return NULL;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__attribute__((noinline)) static void busy_keep(void) {
    if (!(sink = malloc(48))) exit(3);
}

__attribute__((noinline)) static long busy_pairs(void) {
    double start = now_ms();
    long rounds = 0;
    while (now_ms() - start < ms || rounds < min_rounds) {
        for (int i = 0; i < 100; i++) {
            void *p = malloc(64);
            if (!p) exit(3);
            sink = p;
            free(p);
        }
        busy_keep();
        rounds++;
        if (rounds % 2 == 0) {
            struct timespec ts = {0, 1000 * 1000}; /* a steady rate, not a flat-out one */
            nanosleep(&ts, NULL);
        }
    }
    return rounds;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3 || (ms = atol(argv[1])) < 1) return 2;
    if (argc == 3 && (min_rounds = atol(argv[2])) < 0) return 2;
    if (pipe(wake) != 0) return 3;
    pthread_t q;
    if (pthread_create(&q, NULL, quiet_allocs, NULL) != 0) return 3;
    long rounds = busy_pairs();
    if (write(wake[1], "x", 1) != 1) return 3;
    pthread_join(q, NULL);
    printf("rounds %ld\n", rounds);
    return 0;
}
