/*
 * phased_mallocs.c — PHASES phases of N mallocs of 64 bytes each, 80 ms of
 * sleep after each phase (so `mtlab record` can rewrite the finished part of
 * the trace while the program runs), then every block is freed.
 *
 * Usage: phased_mallocs PHASES N      (PHASES * N <= 400000)
 * Expected: malloc calls PHASES*N, free calls PHASES*N, peak live bytes
 * PHASES*N*64, nothing live at the end. No stdio.
 */
#include <stdlib.h>
#include <time.h>

#define MAX 400000
static void *blocks[MAX];

__attribute__((noinline)) static void phase(long from, long n) {
    for (long i = from; i < from + n; i++) {
        blocks[i] = malloc(64);
        if (!blocks[i]) exit(3);
    }
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long phases = atol(argv[1]), n = atol(argv[2]);
    if (phases < 1 || n < 1 || phases * n > MAX) return 2;
    for (long p = 0; p < phases; p++) {
        phase(p * n, n);
        struct timespec ts = {0, 80 * 1000 * 1000};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    for (long i = 0; i < phases * n; i++) free(blocks[i]);
    return 0;
}
