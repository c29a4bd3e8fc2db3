/*
 * abort.c — N mallocs of 64 bytes (kept) from abort_allocs, then abort().
 *
 * Usage: abort N
 *
 * No exit path runs: no END record. mtlab's abort shim writes the calling
 * thread's buffer before the real abort, so all N calls are in the trace
 * (without it, those of the last, partly filled 64 KiB buffer were lost).
 * The process dies by SIGABRT (a shell shows status 134). No stdio.
 */
#include <stdlib.h>

static void *volatile sink;

__attribute__((noinline)) static void abort_allocs(long n) {
    for (long i = 0; i < n; i++) sink = malloc(64);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    abort_allocs(atol(argv[1]));
    abort();
}
