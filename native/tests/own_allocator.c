/*
 * own_allocator.c — a program with an allocator of its own, as rustc links
 * jemalloc or Go has its runtime's: N blocks of 64 bytes carved from one
 * mmap'd region of N * 64 bytes (rounded up to a page), every block
 * written; no call to malloc, free or any other heap function; no stdio.
 *
 * Usage: own_allocator N        (1 <= N <= 1000000)
 *        own_allocator N heap   the same, and one malloc(100) freed at the end
 * Exit code 0; 2 on bad arguments; 3 if mmap or malloc failed.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    long n = argc >= 2 ? atol(argv[1]) : 0;
    if (n < 1 || n > 1000000 || argc > 3 || (argc == 3 && strcmp(argv[2], "heap") != 0)) return 2;
    void *volatile h = NULL;
    if (argc == 3 && !(h = malloc(100))) return 3;
    size_t bytes = ((size_t)n * 64 + 4095) & ~(size_t)4095;
    char *region = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) return 3;
    volatile char *v = region;
    for (long i = 0; i < n; i++) v[i * 64] = (char)i;
    munmap(region, bytes);
    if (h) free(h);
    return 0;
}
