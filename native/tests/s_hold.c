/* s_hold.c — holds a known number of bytes while it keeps allocating, so
 * `mtlab ctl dump` finds a sampled allocation to read the heap manager's own
 * figures at (crates/mtlab/tests/sampler.rs).
 *
 * Allocates COUNT blocks of SIZE bytes and keeps them, prints "pid N" and
 * "held", then until a line arrives on stdin: every millisecond, one block of
 * SIZE bytes allocated and freed at once. Exits 0.
 *
 *   s_hold COUNT SIZE
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Read after the loop: keeps the compiler from dropping a malloc/free pair
 * whose block nothing reads. */
void *volatile last_block;

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: s_hold COUNT SIZE\n");
        return 2;
    }
    long count = atol(argv[1]);
    size_t size = (size_t)atol(argv[2]);
    void **kept = malloc(sizeof(void *) * (size_t)count);
    for (long i = 0; i < count; i++) {
        kept[i] = malloc(size);
        memset(kept[i], 1, 16);
    }
    printf("pid %d\nheld\n", (int)getpid());
    fflush(stdout);
    for (;;) {
        struct pollfd in = {.fd = 0, .events = POLLIN};
        int r = poll(&in, 1, 1);
        if (r > 0) break;
        if (r < 0 && errno != EINTR) break;
        void *p = malloc(size);
        memset(p, 2, 16);
        last_block = p;
        free(last_block);
    }
    for (long i = 0; i < count; i++) free(kept[i]);
    free(kept);
    return 0;
}
