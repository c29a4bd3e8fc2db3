/*
 * lower_fsize.c — N malloc(48)+free pairs, then the program lowers its own
 * RLIMIT_FSIZE to LIMIT bytes, then N*10 more pairs. Writing past the limit
 * would raise SIGXFSZ, which kills a process by default: a tracer must notice
 * the new limit, not only the one in force when its file was opened.
 *
 * Usage: lower_fsize N LIMIT
 *
 * Expected: exit code 0 (5 if setrlimit fails, 2 on bad arguments). No stdio.
 */
#include <stdlib.h>
#include <sys/resource.h>

static void *volatile sink;

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long n = atol(argv[1]);
    rlim_t limit = (rlim_t)atol(argv[2]);
    for (long i = 0; i < n; i++) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 5;
    for (long i = 0; i < 10 * n; i++) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
    return 0;
}
