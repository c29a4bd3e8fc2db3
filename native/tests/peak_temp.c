/*
 * peak_temp.c — a known peak and a known count of temporary allocations, for
 * the report's "at the peak" and "temporary" views (crates/mtlab/tests/e2e.rs).
 *
 *   build_up: 100 blocks of 1000 B, all live together, then freed: the peak
 *             (100 000 B live, all from build_up)
 *   keep:     10 blocks of 5000 B, live to the end (50 000 B)
 *   churn:    50 × (malloc 64 B, free it at once): 50 temporary allocations
 *   first/second: 30 × (p = first(), q = second(), free p, free q): p has
 *             another allocation after it, so it is not temporary; q is (30)
 *
 *   temporary allocations 81 (churn 50, second 30, and build_up's last
 *   block: frees in between do not count, only allocations), of 220 calls
 * Exit code 0. No stdio.
 */
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static void *held[100], *kept[10];
void *volatile sink;

NOINLINE void *build_up(void) { return malloc(1000); }
NOINLINE void *keep(void) { return malloc(5000); }
NOINLINE void *churn(void) { return malloc(64); }
NOINLINE void *first(void) { return malloc(64); }
NOINLINE void *second(void) { return malloc(64); }

int main(void) {
    for (int i = 0; i < 100; i++) {
        held[i] = build_up();
        memset(held[i], 1, 16);
    }
    for (int i = 0; i < 100; i++) free(held[i]);
    for (int i = 0; i < 10; i++) kept[i] = keep();
    for (int i = 0; i < 50; i++) {
        sink = churn();
        free(sink);
    }
    for (int i = 0; i < 30; i++) {
        void *p = first(), *q = second();
        sink = p;
        free(p);
        sink = q;
        free(q);
    }
    return 0;
}
