/* s_deep.c — malloc at call depth 5: main -> f1 -> f2 -> f3 -> f4 -> f5 ->
 * malloc, for the stack unwinders (crates/mtlab/tests/sampler.rs). Built
 * both with and without frame pointers. Every function does work after its
 * call, so none of the calls is a tail call, and noipa keeps them whole. */
#include <stdlib.h>

#define KEEP __attribute__((noipa))

void *volatile sink;

KEEP void *f5(size_t n) {
    void *p = malloc(n);
    sink = p;
    return p;
}
KEEP void *f4(size_t n) {
    void *p = f5(n + 1);
    sink = p;
    return p;
}
KEEP void *f3(size_t n) {
    void *p = f4(n + 1);
    sink = p;
    return p;
}
KEEP void *f2(size_t n) {
    void *p = f3(n + 1);
    sink = p;
    return p;
}
KEEP void *f1(size_t n) {
    void *p = f2(n + 1);
    sink = p;
    return p;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    for (int i = 0; i < n; i++) free(f1(60)); /* 64-byte blocks */
    return 0;
}
