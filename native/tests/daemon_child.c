/*
 * daemon_child.c — a program that starts a daemon-like child and exits
 * before it: what `record --live` sees of `sh -c 'service &'`.
 *
 * Usage: daemon_child TICKS N
 *
 * Parent: parent_allocs: 10 mallocs of 100 bytes (kept); forks the child,
 * writes "child <pid>\n" on stdout (write(2), no stdio buffer) and exits
 * with code 7 at once.
 * Child: setsid() (a terminal's ^C does not reach it), stdin/stdout/stderr
 * on /dev/null (so a reader of the parent's output does not wait for it),
 * then TICKS ticks about 10 ms apart; in each, child_allocs: N mallocs of
 * 48 bytes, then child_frees: the previous tick's N blocks freed; so
 * TICKS*N mallocs, (TICKS-1)*N frees, N blocks (N*48 bytes) live at its
 * end. exit(0).
 * Exit code 7; 2 on bad arguments; 3 on a failed call.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *keep[10];
static void *ring[2][100000];

__attribute__((noinline)) static void parent_allocs(void) {
    for (int i = 0; i < 10; i++) keep[i] = malloc(100);
}

__attribute__((noinline)) static void child_allocs(void **to, long n) {
    for (long i = 0; i < n; i++) to[i] = malloc(48);
}

__attribute__((noinline)) static void child_frees(void **from, long n) {
    for (long i = 0; i < n; i++) free(from[i]);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long ticks = atol(argv[1]), n = atol(argv[2]);
    if (ticks < 1 || ticks > 1000000 || n < 0 || n > 100000) return 2;
    parent_allocs();
    pid_t child = fork();
    if (child < 0) return 3;
    if (child == 0) {
        setsid();
        int null = open("/dev/null", O_RDWR);
        if (null < 0) return 3;
        for (int fd = 0; fd < 3; fd++) dup2(null, fd);
        if (null > 2) close(null);
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (long t = 0; t < ticks; t++) {
            child_allocs(ring[t % 2], n);
            if (t > 0) child_frees(ring[(t + 1) % 2], n);
            nanosleep(&tick, NULL);
        }
        exit(0);
    }
    char line[64];
    int len = snprintf(line, sizeof line, "child %d\n", (int)child);
    if (write(1, line, (size_t)len) != len) return 3;
    return 7;
}
