/*
 * many_stacks.c — one malloc(16)+free at the end of each of the 4^LEVELS
 * paths through LEVELS levels of recursion, where each level calls one of
 * four functions (f0..f3, chosen by two bits of the path's number) that call
 * back into `step`: 4^LEVELS distinct call stacks, each allocating once. The
 * stacks differ only in which return addresses sit at which depth — the
 * shape a hash that sums position-weighted addresses maps onto few values.
 *
 * Usage: many_stacks LEVELS
 *
 * Expected: exit code 0 (2 on bad arguments). No stdio.
 */
#include <stdlib.h>

static void *volatile sink;

static void step(int depth, unsigned path);

__attribute__((noinline)) static void f0(int d, unsigned p) { step(d, p); __asm__ volatile(""); }
__attribute__((noinline)) static void f1(int d, unsigned p) { step(d, p); __asm__ volatile(""); }
__attribute__((noinline)) static void f2(int d, unsigned p) { step(d, p); __asm__ volatile(""); }
__attribute__((noinline)) static void f3(int d, unsigned p) { step(d, p); __asm__ volatile(""); }

__attribute__((noinline)) static void leaf(void) {
    void *p = malloc(16);
    sink = p;
    free(p);
}

__attribute__((noinline)) static void step(int depth, unsigned path) {
    if (depth == 0) {
        leaf();
        return;
    }
    switch (path & 3) {
    case 0: f0(depth - 1, path >> 2); break;
    case 1: f1(depth - 1, path >> 2); break;
    case 2: f2(depth - 1, path >> 2); break;
    default: f3(depth - 1, path >> 2); break;
    }
    __asm__ volatile("");
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    int levels = atoi(argv[1]);
    if (levels < 0 || levels > 12) return 2;
    for (unsigned p = 0; p < (1u << (2 * levels)); p++) step(levels, p);
    return 0;
}
