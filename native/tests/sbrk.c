/*
 * sbrk.c — moving the program break by hand, with no malloc at all:
 *   start = sbrk(0), sbrk(4096), sbrk(4096), sbrk(-4096), sbrk(0),
 *   brk(start), sbrk(0).
 *
 * Expected, from this program: sbrk calls 6 (mean |increment| 4096: the
 * three sbrk(0) are calls, with no size), brk calls 1, none failed; the brk
 * heap, starting at the break seen when tracing started, is 0, 4096, 8192,
 * 4096, 4096, 0 and 0 bytes after each call, and 0 at the end. Exit code 0;
 * 1 if the break is not where it should be.
 *
 * "PROG baseline" returns 0 at once: the same process with none of the work,
 * whose counts (the C runtime's own calls, if any) a test subtracts.
 */
#define _DEFAULT_SOURCE
#include <string.h>
#include <stdint.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    char *start = sbrk(0);
    if (sbrk(4096) != start) return 1;
    if (sbrk(4096) != start + 4096) return 1;
    if (sbrk(-4096) != start + 8192) return 1;
    if (sbrk(0) != start + 4096) return 1;
    if (brk(start) != 0) return 1;
    if (sbrk(0) != start) return 1;
    return 0;
}
