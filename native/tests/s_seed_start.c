/*
 * s_seed_start.c — allocations while sampling is off, then the toggle signal,
 * then a fixed workload: with a fixed --sample-seed the samples must not
 * depend on how much was allocated while off.
 *
 * Usage: s_seed_start OFF      (run under --sample … --inactive --sample-seed S)
 *
 * Does OFF strdup+free pairs of a 999-byte string while sampling is off
 * (strdup calls malloc from inside glibc, through a PLT slot that mtlab does
 * not route, so those calls still pass through mtlab's shim), raises the
 * toggle signal (default SIGRTMIN+7) to switch sampling on, then makes 20 000
 * mallocs of 100..999 bytes, each freed at once. Exit code 0; 2 on bad
 * arguments.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    long off = strtol(argv[1], NULL, 10);
    if (off < 0) return 2;
    static char s[1000];
    memset(s, 'x', sizeof s - 1);
    for (long i = 0; i < off; i++) free(strdup(s));
    raise(SIGRTMIN + 7);
    for (int i = 0; i < 20000; i++) {
        void *volatile p = malloc(100 + (size_t)(i % 900));
        free(p);
    }
    return 0;
}
