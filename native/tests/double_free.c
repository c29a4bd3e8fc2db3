/*
 * double_free.c — N mallocs of 64 bytes (kept) from keep_allocs, then one
 * 48-byte block freed twice: glibc's free finds the double free and aborts
 * inside libc ("free(): double free detected in tcache 2"), past any abort()
 * shim.
 *
 * Usage: double_free N
 *
 * The process dies by SIGABRT. A tracer must have all N + 1 mallocs and the
 * first free (the second never returned). No stdio of its own.
 */
#include <stdlib.h>

static void *volatile sink;

__attribute__((noinline)) static void keep_allocs(long n) {
    for (long i = 0; i < n; i++) sink = malloc(64);
}

__attribute__((noinline)) static void free_twice(void) {
    void *p = malloc(48);
    sink = p;
    free(p);
    free(sink);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    keep_allocs(atol(argv[1]));
    free_twice();
    return 0;
}
