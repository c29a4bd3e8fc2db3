/*
 * flight_phases.c — two phases far apart, for the flight recorder
 * (`record --keep-last`): phase A (a thread) mallocs NA blocks of 1000
 * bytes and keeps them; GAP ms of sleep; phase B (another thread) frees
 * every block of A, then mallocs NB blocks of 3000 bytes and keeps them,
 * and touches BIG_MB MiB in 1 MiB blocks (freed again). Each phase runs in
 * a thread of its own, whose exit flushes its events to the trace. Then
 * the file READY is created, and the program ends as MODE says:
 *   wait   — until the file STOP exists, then returns 0
 *   segv   — a write through a null pointer (SIGSEGV)
 *   abort  — abort() (SIGABRT)
 *   exit   — returns 0 at once
 *
 * Usage: flight_phases NA NB GAP_MS BIG_MB MODE READY STOP
 * Expected, in a window of B only: malloc calls from phase_b NB (NB*3000
 * bytes, all live) plus BIG_MB from big_blocks (freed); frees of blocks
 * allocated before the window NA; no call from phase_a. No stdio.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX 200000
static void *a_blocks[MAX], *b_blocks[MAX];
static long na, nb, big_mb;

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) static void phase_a(void) {
    for (long i = 0; i < na; i++)
        if (!(a_blocks[i] = malloc(1000))) exit(3);
}

__attribute__((noinline)) static void phase_b(void) {
    for (long i = 0; i < nb; i++)
        if (!(b_blocks[i] = malloc(3000))) exit(3);
}

__attribute__((noinline)) static void big_blocks(void) {
    for (long i = 0; i < big_mb; i++) {
        char *p = malloc(1 << 20);
        if (!p) exit(3);
        memset(p, 1, 1 << 20);
        free(p);
    }
}

static void *run_a(void *arg) {
    (void)arg;
    phase_a();
    return NULL;
}

static void *run_b(void *arg) {
    (void)arg;
    for (long i = 0; i < na; i++) free(a_blocks[i]);
    phase_b();
    big_blocks();
    return NULL;
}

static void in_thread(void *(*f)(void *)) {
    pthread_t t;
    if (pthread_create(&t, NULL, f, NULL) != 0 || pthread_join(t, NULL) != 0) exit(4);
}

int main(int argc, char **argv) {
    if (argc != 8) return 2;
    na = atol(argv[1]), nb = atol(argv[2]), big_mb = atol(argv[4]);
    long gap = atol(argv[3]);
    if (na < 0 || nb < 0 || na > MAX || nb > MAX || big_mb < 0) return 2;
    in_thread(run_a);
    sleep_ms(gap);
    in_thread(run_b);
    int fd = open(argv[6], O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    if (!strcmp(argv[5], "segv")) *(volatile int *)(long)(argc - 8) = 1;
    if (!strcmp(argv[5], "abort")) abort();
    if (!strcmp(argv[5], "wait"))
        while (access(argv[7], F_OK) != 0) sleep_ms(20);
    return 0;
}
