/* Two versions of one program for `mtlab report --diff` (tests/diff.rs),
 * built from this file with -DV=1 or -DV=2: version 2 calls grow() 8 times
 * instead of 5 (3 more 64-byte temporaries) and leaks one more block, 333
 * bytes from extra(). Every other allocation is the same. -DPAD adds a
 * function before all others on the line below, so a padded build has other
 * addresses and the same lines: a rebuild. */
#include <stdlib.h>
#ifdef PAD
#define PADDING __attribute__((noinline, used)) static int pad(volatile int *x) { int s = 0; for (int i = 0; i < *x; i++) s += (i * *x) ^ (s >> 3); for (int i = 0; i < *x; i++) s -= i & s; return s; }
#else
#define PADDING
#endif
#ifndef V
#define V 1
#endif
PADDING
__attribute__((noinline)) static void *keep(size_t n) { return malloc(n); }
__attribute__((noinline)) static void *grow(size_t n) { return malloc(n); }
__attribute__((noinline)) static void *extra(size_t n) { return malloc(n); }

int main(void) {
    for (int i = 0; i < 10; i++) free(keep(100));
    for (int i = 0; i < (V == 2 ? 8 : 5); i++) free(grow(64));
    void *leak = keep(1000);
    if (V == 2) {
        void *more = extra(333);
        (void)more;
    }
    (void)leak;
    return 0;
}
