/*
 * merge_order.c — site rows that merge must rank by their sums.
 *
 * five_sites() is called from five call sites in main (five stacks of one
 * malloc(16) each); one_site() from one call site in a loop (one stack of
 * three malloc(16)). Ranked by full stack, one_site's 3 calls come first;
 * shown with one frame, five_sites' rows merge into 5 calls, which rank
 * first. Everything is freed.
 */
#include <stdlib.h>

__attribute__((noinline)) void *five_sites(void) { return malloc(16); }
__attribute__((noinline)) void *one_site(void) { return malloc(16); }

int main(void) {
    void *v[8];
    int n = 0;
    v[n++] = five_sites();
    v[n++] = five_sites();
    v[n++] = five_sites();
    v[n++] = five_sites();
    v[n++] = five_sites();
    for (int i = 0; i < 3; i++) v[n++] = one_site();
    for (int i = 0; i < n; i++) free(v[i]);
    return 0;
}
