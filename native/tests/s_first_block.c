/*
 * s_first_block.c — one 256 KiB block, the first allocation of a thread,
 * kept to the end: under `--sample 512KiB` it must be sampled with
 * probability 1 − exp(−256/512) ≈ 39 %, like any block of that size
 * anywhere else (crates/mtlab/tests/sampler.rs).
 *
 * Usage: s_first_block main|thread
 *   main    the block is the first allocation main makes
 *   thread  the block is the first allocation of a thread main creates
 *
 * Exit code 0; 2 on bad arguments or a failed call. No stdio.
 */
#include <pthread.h>
#include <string.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

static void *volatile held;

NOINLINE void *first_block(void) { return malloc(256 * 1024); }

static void *in_thread(void *arg) {
    (void)arg;
    held = first_block();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    if (strcmp(argv[1], "main") == 0) {
        held = first_block();
    } else if (strcmp(argv[1], "thread") == 0) {
        pthread_t th;
        if (pthread_create(&th, NULL, in_thread, NULL) != 0 || pthread_join(th, NULL) != 0) return 2;
    } else {
        return 2;
    }
    return held ? 0 : 2;
}
