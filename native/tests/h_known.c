/*
 * h_known.c — a heap of exactly known shape, for `mtlab heap compare` and
 * the validation against the allocator's own figures
 * (crates/mtlab/tests/heap.rs).
 *
 * Phase 1: 10 blocks of 1 MiB, all live together (peak live 10 MiB), freed.
 * Phase 2: 5000 blocks of 100 B and 500 of 3000 B, kept to the end.
 *
 *   malloc calls 5510, free calls 10
 *   peak live bytes 10485760, live at exit 5000*100 + 500*3000 = 2000000
 * Exit code 0. No stdio.
 */
#include <stdlib.h>
#include <string.h>

static void *big[10], *small[5000], *mid[500];

int main(void) {
    for (int i = 0; i < 10; i++) {
        big[i] = malloc(1 << 20);
        memset(big[i], 1, 64);
    }
    for (int i = 0; i < 10; i++) free(big[i]);
    for (int i = 0; i < 5000; i++) small[i] = malloc(100);
    for (int i = 0; i < 500; i++) mid[i] = malloc(3000);
    return 0;
}
