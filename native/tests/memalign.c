/*
 * memalign.c — the aligned-allocation family, once each, all freed:
 *   posix_memalign(&p, 64, 1000), aligned_alloc(4096, 8192),
 *   memalign(128, 300), valloc(100), pvalloc(100).
 * All five blocks are live together, then freed in order.
 *
 * Expected, from this program: one call of each function, with requested
 * sizes 1000, 8192, 300, 100, 100; free calls 5; peak live bytes
 * 1000+8192+300+100+100 = 9692 (requested bytes, not rounded); live at end 0.
 * Each result is checked for its alignment (exit code 1 if wrong). No stdio.
 *
 * "PROG baseline" returns 0 at once: the same process with none of the work,
 * whose counts (the C runtime's own calls, if any) a test subtracts.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int aligned(void *p, uintptr_t a) { return p && ((uintptr_t)p % a) == 0; }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *b[5];
    if (posix_memalign(&b[0], 64, 1000) != 0) return 3;
    b[1] = aligned_alloc(4096, 8192);
    b[2] = memalign(128, 300);
    b[3] = valloc(100);
    b[4] = pvalloc(100);
    if (!aligned(b[0], 64) || !aligned(b[1], 4096) || !aligned(b[2], 128) || !aligned(b[3], page) ||
        !aligned(b[4], page))
        return 1;
    for (int i = 0; i < 5; i++) free(b[i]);
    return 0;
}
