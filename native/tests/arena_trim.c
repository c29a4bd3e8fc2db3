/*
 * arena_trim.c — a thread grows its arena's first heap with 200 blocks of
 * 100 000 bytes (below glibc's mmap threshold, ~20 MB in all), frees them
 * newest first (glibc shrinks the heap inside free), then prints glibc's own
 * count of the bytes its arenas hold, mallinfo2's `arena`, to stderr:
 * "after frees: arena N". Nothing is allocated after the frees. Exit 0.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#define N 200
static void *b[N];
static void *work(void *a) {
    (void)a;
    for (int i = 0; i < N; i++) b[i] = malloc(100000);
    for (int i = N - 1; i >= 0; i--) free(b[i]);
    struct mallinfo2 m = mallinfo2();
    fprintf(stderr, "after frees: arena %zu\n", m.arena);
    return 0;
}
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, work, 0);
    pthread_join(t, 0);
    return 0;
}
