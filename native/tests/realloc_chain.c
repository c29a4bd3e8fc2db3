/*
 * realloc_chain.c — malloc(16), then 9 reallocs doubling the size each time:
 * 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192; then free.
 *
 * Expected, from this program: malloc calls 1 (mean size 16), realloc calls 9
 * (mean size (32+64+...+8192)/9 = 16352/9), free calls 1, peak live bytes 8192
 * (only one block is ever live), live at end 0. The contents are checked to
 * survive every move (exit code 1 if not). No stdio.
 *
 * "PROG baseline" returns 0 at once: the same process with none of the work,
 * whose counts (the C runtime's own calls, if any) a test subtracts.
 */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static char *grow(char *p, size_t n) { return realloc(p, n); }

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    char *p = malloc(16);
    if (!p) return 3;
    memset(p, 0x5a, 16);
    for (size_t n = 32; n <= 8192; n *= 2) {
        p = grow(p, n);
        if (!p) return 3;
        for (size_t i = 0; i < n / 2; i++)
            if ((unsigned char)p[i] != 0x5a) return 1;
        memset(p, 0x5a, n);
    }
    free(p);
    return 0;
}
