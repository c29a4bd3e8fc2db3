/* The report's hardest replay: N blocks of SIZE bytes allocated side by side,
 * then freed in a shuffled order, so that every free looks up a block far from
 * the last one (docs/benchmarks.md, `mtlab report` speed).
 *
 *   cc -O2 -o random_frees bench/random_frees.c
 *   LD_PRELOAD=libjemalloc.so.2 mtlab record -o je8.mtl -- ./random_frees 8 2000000
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    size_t size = argc > 1 ? strtoul(argv[1], NULL, 10) : 8;
    size_t n = argc > 2 ? strtoul(argv[2], NULL, 10) : 2000000;
    void **blocks = malloc(n * sizeof *blocks);
    if (!blocks) {
        perror("random_frees");
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        blocks[i] = malloc(size);
    /* Fisher-Yates with a fixed xorshift seed: the same order every run. */
    uint64_t x = 88172645463325252ull;
    for (size_t i = n - 1; i > 0; i--) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = x % (i + 1);
        void *t = blocks[i];
        blocks[i] = blocks[j];
        blocks[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
    free(blocks);
    return 0;
}
