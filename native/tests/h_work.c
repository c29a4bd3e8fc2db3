/*
 * h_work.c — a program whose work depends on the heap manager that serves
 * it, as a time-bounded one's does (xmalloc-test makes 2.8–5.7 M mallocs in
 * the same time under different allocators), but exactly: 20 000
 * malloc/free pairs of 64 bytes, or 40 000 when LD_PRELOAD names jemalloc.
 * No stdio, so those are all its heap calls. Exit 0 (3: out of memory).
 */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static void work(long n) {
    for (long i = 0; i < n; i++) {
        void *p = malloc(64);
        if (!p) exit(3);
        *(volatile char *)p = 1;
        free(p);
    }
}

int main(void) {
    const char *pre = getenv("LD_PRELOAD");
    work(pre && strstr(pre, "jemalloc") ? 40000 : 20000);
    return 0;
}
