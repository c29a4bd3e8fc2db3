/*
 * arena_heaps.c — thread arenas whose heaps glibc changes where no traced
 * call shows it:
 *   - thread `grow` allocates 800 blocks of 100 000 bytes (below the mmap
 *     threshold, ~80 MB: past one 64 MiB heap, so its arena gets a second
 *     heap), then frees them newest first: glibc unmaps the second heap
 *     whole and shrinks the first, inside free;
 *   - thread `drain` only frees (blocks main allocated): glibc makes it an
 *     arena for its tcache inside its first free, and no block of that
 *     arena is ever returned to the program;
 *   - thread `cache` frees 7 small blocks of its own arena as its last
 *     calls: they stay in its tcache until the thread exits, when glibc's
 *     tcache_thread_shutdown frees them (internally) into the arena.
 * None goes on past its first call before all three have made theirs (a
 * barrier), so that none can take an arena another has left: each gets
 * one of its own. After joining them all, main prints glibc's own count of the bytes its
 * arenas hold, mallinfo2's `arena`, to stderr: "after joins: arena N".
 * Nothing is allocated after that. Exit 0.
 */
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_barrier_t start;

#define BIG 800
static void *big[BIG];
static void *grow(void *a) {
    (void)a;
    big[0] = malloc(100000);
    pthread_barrier_wait(&start);
    for (int i = 1; i < BIG; i++) big[i] = malloc(100000);
    for (int i = BIG - 1; i >= 0; i--) free(big[i]);
    return 0;
}

#define MAINS 64
static void *from_main[MAINS];
static void *drain(void *a) {
    (void)a;
    free(from_main[0]);
    pthread_barrier_wait(&start);
    for (int i = 1; i < MAINS; i++) free(from_main[i]);
    return 0;
}

static void *cache(void *a) {
    (void)a;
    pthread_barrier_wait(&start);
    void *keep[2000], *small[7];
    for (int i = 0; i < 2000; i++) keep[i] = malloc(1000); /* ~2 MB: the arena's heap grows */
    for (int i = 0; i < 7; i++) small[i] = malloc(200);
    for (int i = 1999; i >= 0; i--) free(keep[i]);
    for (int i = 0; i < 7; i++) free(small[i]);
    return 0;
}

int main(void) {
    for (int i = 0; i < MAINS; i++) from_main[i] = malloc(64);
    pthread_barrier_init(&start, 0, 3);
    pthread_t t[3];
    pthread_create(&t[0], 0, grow, 0);
    pthread_create(&t[1], 0, drain, 0);
    pthread_create(&t[2], 0, cache, 0);
    for (int i = 0; i < 3; i++) pthread_join(t[i], 0);
    struct mallinfo2 m = mallinfo2();
    fprintf(stderr, "after joins: arena %zu\n", m.arena);
    return 0;
}
