/*
 * calloc_once.c — one calloc(nmemb=10, size=100), checked to be zeroed, freed.
 *
 * Expected, from this program: calloc calls 1, mean size 1000 (10*100),
 * free calls 1, peak live bytes 1000, live at end 0. No stdio.
 * Exit code 0; 1 if the block is not zeroed, 3 if calloc fails.
 *
 * "PROG baseline" returns 0 at once: the same process with none of the work,
 * whose counts (the C runtime's own calls, if any) a test subtracts.
 */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static char *one_calloc(void) { return calloc(10, 100); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    char *p = one_calloc();
    if (!p) return 3;
    for (int i = 0; i < 1000; i++)
        if (p[i]) return 1;
    free(p);
    return 0;
}
