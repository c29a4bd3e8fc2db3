/*
 * h_holes.c — a heap region with known holes, for fragmentation by hand
 * (crates/mtlab/tests/heap.rs).
 *
 * 100 blocks of 1008 B (glibc chunks of 1024 B) in the brk heap, one after
 * another; then every even-numbered block is freed (into glibc's thread
 * cache and bins, so the heap does not shrink). Left: blocks 1, 3, …, 99 —
 * 50 × 1008 B live. Before the first block glibc puts its thread cache
 * (tcache_perthread_struct, a 0x290 = 656 B chunk, glibc 2.30 and later,
 * allocated even with tcache_count=0),
 * which is not a traced allocation. The last live block therefore ends
 * 656 + 16 + 99 × 1024 + 1008 = 103 056 B after the heap's start:
 *
 *   fragmentation of the heap = (103056 − 50400) / 103056 = 0.51094550...
 *
 * Exit code 0. No stdio (it would allocate its buffer in the heap first).
 */
#include <stdlib.h>

static void *b[100];

int main(void) {
    for (int i = 0; i < 100; i++) b[i] = malloc(1008);
    for (int i = 0; i < 100; i += 2) free(b[i]);
    return 0;
}
