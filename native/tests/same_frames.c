/*
 * same_frames.c — the same inner frames, reached from two different outer
 * callers, alternating N times each.
 *
 * Usage: same_frames N      (N <= 1000000)
 *
 * main calls from_a and from_b in turn; each calls middle, which calls leaf,
 * which mallocs and frees one block. from_a and from_b have the same frame
 * size, so leaf's and middle's frames lie at the same addresses, hold the
 * same saved frame pointers and the same return addresses in both cases:
 * only from_a's or from_b's return address (two frames up from leaf) tells
 * the stacks apart. A tracer that reused a stack from the inner frames alone
 * would put every block on one site. Expected, from this program alone:
 *   the leaf site under from_a: N calls of 100 bytes
 *   the leaf site under from_b: N calls of 200 bytes
 * Exit code 0; 2 on bad arguments.
 */
#include <stdlib.h>

__attribute__((noinline)) static void leaf(size_t s) {
    void *p = malloc(s);
    if (!p) exit(3);
    __asm__ __volatile__("" : : "r"(p) : "memory");
    free(p);
}

__attribute__((noinline)) static void middle(size_t s) {
    leaf(s);
    __asm__ __volatile__("");
}

__attribute__((noinline)) static void from_a(void) {
    middle(100);
    __asm__ __volatile__("");
}

__attribute__((noinline)) static void from_b(void) {
    middle(200);
    __asm__ __volatile__("");
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    long n = strtol(argv[1], NULL, 10);
    if (n < 0 || n > 1000000) return 2;
    for (long i = 0; i < n; i++) {
        from_a();
        from_b();
    }
    return 0;
}
