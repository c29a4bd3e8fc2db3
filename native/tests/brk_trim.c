/*
 * brk_trim.c — glibc gives the brk heap back inside free: 60 000 blocks of
 * 1000 bytes (~60 MiB of brk heap), all freed, in the order allocated; the
 * last free merges them into the top chunk, and glibc trims it to
 * M_TRIM_THRESHOLD with its internal brk, which no shim sees.
 *
 * Prints one line (with no allocation after the frees: mtlab reads the
 * break after each allocation) "heap=BYTES mmapped=BYTES", the brk heap's size at the
 * end (the break, read with a raw brk system call — not sbrk(0), which
 * mtlab traces — minus where [heap] starts in /proc/self/maps) and the bytes
 * of glibc's mmap'd chunks (mallinfo2). Exit code 0; 1 if the heap did not
 * grow past 50 MiB or did not shrink below 5 MiB.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define N 60000

static unsigned long heap_start(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo = 0;
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "[heap]")) {
            lo = strtoul(line, NULL, 16);
            break;
        }
    if (f) fclose(f);
    return lo;
}

static unsigned long brk_now(void) { return (unsigned long)syscall(SYS_brk, 0); }

static void *blocks[N];

int main(void) {
    /* First: its FILE, freed into a thread cache, would sit above the blocks. */
    unsigned long start = heap_start();
    for (int i = 0; i < N; i++) blocks[i] = malloc(1000);
    if (!start || brk_now() - start < (50ul << 20)) return 1;
    for (int i = 0; i < N; i++) free(blocks[i]);
    unsigned long heap = brk_now() - start;
    struct mallinfo2 mi = mallinfo2();
    /* Written with no allocation: one after the frees would show mtlab the break. */
    char line[64];
    int n = snprintf(line, sizeof line, "heap=%lu mmapped=%zu\n", heap, mi.hblkhd);
    if (write(1, line, (size_t)n) != n) return 1;
    return heap < (5ul << 20) ? 0 : 1;
}
