/*
 * abort.c — N mallocs of 64 bytes (kept) from abort_allocs, then abort().
 *
 * Usage: abort N
 *
 * No exit path runs: no END record, and the events still in the thread's
 * 64 KiB buffer at the abort are lost. With N = 100000 the buffer fills
 * many times (an event is at least 7 bytes, so a buffer holds at most
 * 65536/7 < 9363 of them), so every event except those of the last,
 * partly filled buffer is in the trace: the abort_allocs site has between
 * N - 9362 and N - 1 calls.
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
