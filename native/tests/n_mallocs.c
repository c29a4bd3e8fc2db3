/*
 * n_mallocs.c — N mallocs of S bytes; all freed except the last K; exit(0).
 *
 * Usage: n_mallocs N S K      (N <= 4000000, K <= N)
 *
 * All N blocks are allocated first (by do_allocs, one call site), then the
 * first N-K are freed (by do_frees). Nothing else is done: no stdio, so the
 * C runtime adds no allocation of its own in a normal glibc program.
 * Expected, from this program alone:
 *   malloc calls = N, mean size = S, free calls = N-K
 *   the do_allocs site: calls N, bytes N*S, live objects K, live bytes K*S
 *   peak live bytes = N*S (all blocks live at once), live at end = K*S
 * Exit code 0; 2 on bad arguments.
 */
#include <stdlib.h>

#define MAX_N 4000000
static void *blocks[MAX_N];

__attribute__((noinline)) static void do_allocs(long n, size_t s) {
    for (long i = 0; i < n; i++) {
        blocks[i] = malloc(s);
        if (!blocks[i]) exit(3);
    }
}

__attribute__((noinline)) static void do_frees(long n) {
    for (long i = 0; i < n; i++) free(blocks[i]);
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    long n = atol(argv[1]);
    long s = atol(argv[2]);
    long k = atol(argv[3]);
    if (n < 0 || n > MAX_N || s < 1 || k < 0 || k > n) return 2;
    do_allocs(n, (size_t)s);
    do_frees(n - k);
    exit(0);
}
