/* s_estimator.c — known allocations per call site, for the sampling
 * profiler's estimator (crates/mtlab/tests/sampler.rs).
 *
 *   site_a: 20000 x 1000 B   (all freed)
 *   site_b:  2000 x 10000 B  (the last 500 stay live at exit)
 *   site_c:   100 x 100000 B (the last 50 stay live at exit)
 */
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

static void *keep_b[2000];
static void *keep_c[100];

NOINLINE void *site_a(void) { return malloc(1000); }
NOINLINE void *site_b(void) { return malloc(10000); }
NOINLINE void *site_c(void) { return malloc(100000); }

int main(void) {
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 1000; i++) {
            void *p = site_a();
            memset(p, 1, 8);
            free(p);
        }
        for (int i = 0; i < 100; i++) keep_b[round * 100 + i] = site_b();
        for (int i = 0; i < 5; i++) keep_c[round * 5 + i] = site_c();
    }
    for (int i = 0; i < 1500; i++) free(keep_b[i]);
    for (int i = 0; i < 50; i++) free(keep_c[i]);
    return 0;
}
