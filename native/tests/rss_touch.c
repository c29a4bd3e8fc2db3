/*
 * rss_touch.c — one malloc of N MiB, every page written, then freed; exit(0).
 *
 * Usage: rss_touch N      (1 <= N <= 4096)
 *
 * The process's peak resident set is then at least N MiB (the block is
 * mmap'd by glibc and every page of it touched), plus what any process
 * holds (code, stack, libc). Expected from the heap: 1 malloc of N MiB,
 * 1 free; peak live N MiB. No stdio. Exit code 0; 2 on bad arguments.
 */
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc == 2 ? atol(argv[1]) : 0;
    if (n < 1 || n > 4096) return 2;
    size_t bytes = (size_t)n << 20;
    char *p = malloc(bytes);
    if (!p) return 3;
    /* Through a volatile pointer: a compiler may drop a memset of a block it
     * frees unread. */
    volatile char *v = p;
    for (size_t i = 0; i < bytes; i += 4096) v[i] = 1;
    free(p);
    return 0;
}
