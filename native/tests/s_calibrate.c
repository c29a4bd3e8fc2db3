/*
 * s_calibrate.c — five call sites of one block size each, with known counts
 * and lifetimes, for the calibration of the sampled profile's 95 % intervals
 * (crates/mtlab/tests/sampler.rs). Sizes span "far below the mean interval"
 * to "above it"; some sites keep only a few blocks to the end, so that
 * their in-use figures often have no sample at all.
 *
 *   site        blocks  size       live at exit
 *   site_tiny   20000   32 B       50
 *   site_small   2000   1000 B     500
 *   site_page     300   12288 B    34
 *   site_large     40   262144 B   10
 *   site_huge       6   3145728 B  2
 *
 * Allocations are interleaved over 20 rounds; blocks that do not stay live
 * are freed in the round after their allocation (the tiny ones at once).
 * Exit code 0. No stdio.
 */
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

NOINLINE void *site_tiny(void) { return malloc(32); }
NOINLINE void *site_small(void) { return malloc(1000); }
NOINLINE void *site_page(void) { return malloc(12288); }
NOINLINE void *site_large(void) { return malloc(262144); }
NOINLINE void *site_huge(void) { return malloc(3145728); }

struct site {
    void *(*alloc)(void);
    int blocks, live;
    void **held;
};

int main(void) {
    static void *held_tiny[20000], *held_small[2000], *held_page[300], *held_large[40], *held_huge[6];
    struct site sites[] = {
        {site_tiny, 20000, 50, held_tiny},   {site_small, 2000, 500, held_small}, {site_page, 300, 34, held_page},
        {site_large, 40, 10, held_large},    {site_huge, 6, 2, held_huge},
    };
    const int rounds = 20;
    int done[5] = {0};
    for (int r = 0; r < rounds; r++) {
        for (int s = 0; s < 5; s++) {
            struct site *x = &sites[s];
            int upto = x->blocks * (r + 1) / rounds;
            int from = done[s];
            for (int i = from; i < upto; i++) {
                void *p = x->alloc();
                memset(p, 1, 16);
                /* The first `live` blocks stay to the end; the rest of the
                 * tiny ones go at once, the others one round later. */
                if (i >= x->live && s == 0)
                    free(p);
                else
                    x->held[i] = p;
            }
            done[s] = upto;
        }
        /* Free last round's short-lived blocks (not the first `live`). */
        if (r > 0)
            for (int s = 1; s < 5; s++) {
                struct site *x = &sites[s];
                int lo = x->blocks * (r - 1) / rounds, hi = x->blocks * r / rounds;
                for (int i = lo > x->live ? lo : x->live; i < hi; i++) free(x->held[i]);
            }
    }
    for (int s = 1; s < 5; s++) {
        struct site *x = &sites[s];
        int lo = x->blocks * (rounds - 1) / rounds;
        for (int i = lo > x->live ? lo : x->live; i < x->blocks; i++) free(x->held[i]);
    }
    return 0;
}
