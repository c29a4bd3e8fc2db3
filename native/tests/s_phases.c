/* s_phases.c — allocations in phases separated by pauses, so a test can
 * drive `mtlab ctl` between them (crates/mtlab/tests/sampler.rs).
 *
 * Prints "pid N" first. Then for each phase name given as an argument
 * (phase1, phase2, phase3, phase4): allocates COUNT blocks of SIZE bytes from
 * that function (the first KEEP of them stay live until exit, the others are
 * freed at once), prints "done NAME" and, except after the last phase, waits
 * for a line on stdin. Exits with code 7 (so a test sees the program's own
 * code come through `mtlab record`).
 *
 *   s_phases COUNT SIZE KEEP PHASE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static void **kept;
static long n_kept;

static void work(void *(*one)(size_t), long count, size_t size, long keep) {
    for (long i = 0; i < count; i++) {
        void *p = one(size);
        memset(p, 0, 16);
        if (i < keep) kept[n_kept++] = p;
        else free(p);
    }
}

NOINLINE void *phase1(size_t n) { return malloc(n); }
NOINLINE void *phase2(size_t n) { return malloc(n); }
NOINLINE void *phase3(size_t n) { return malloc(n); }
NOINLINE void *phase4(size_t n) { return malloc(n); }

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: s_phases COUNT SIZE KEEP PHASE...\n");
        return 2;
    }
    long count = atol(argv[1]), keep = atol(argv[3]);
    size_t size = (size_t)atol(argv[2]);
    kept = calloc((size_t)(argc - 4) * (size_t)(keep > 0 ? keep : 1), sizeof *kept);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    for (int a = 4; a < argc; a++) {
        void *(*one)(size_t) = strcmp(argv[a], "phase1") == 0   ? phase1
                               : strcmp(argv[a], "phase2") == 0 ? phase2
                               : strcmp(argv[a], "phase3") == 0 ? phase3
                               : strcmp(argv[a], "phase4") == 0 ? phase4
                                                                : NULL;
        if (!one) {
            fprintf(stderr, "unknown phase %s\n", argv[a]);
            return 2;
        }
        work(one, count, size, keep);
        printf("done %s\n", argv[a]);
        fflush(stdout);
        if (a + 1 < argc) {
            char line[64];
            if (!fgets(line, sizeof line, stdin)) return 3;
        }
    }
    for (long i = 0; i < n_kept; i++) free(kept[i]);
    return 7;
}
