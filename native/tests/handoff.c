/*
 * handoff.c — blocks passed between threads: a producer mallocs N blocks
 * (sizes 32, 48, ..., cycling through 16 sizes) and hands each through a
 * ring of R slots to a consumer, which frees it. With a small ring the two
 * threads alternate within microseconds, and glibc gives the consumer's
 * freed blocks back to the producer, so the same addresses go back and
 * forth between the threads.
 *
 * Usage: handoff [N [R]]     (defaults 200000, 4; R at most 64)
 *
 * Expected, from this program: malloc calls N (from `produce`), free calls
 * N (from `consume`), every block freed, at most R + 1 of them live at once.
 * No stdio. Exit code 0; 2 on bad arguments, 3 if a thread cannot start.
 */
#include <pthread.h>
#include <stdlib.h>

static long n_blocks = 200000;
static long ring_size = 4;
static void *ring[64];
static long head, tail; /* head: next slot to fill, tail: next to take */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static void *produce(void *arg) {
    (void)arg;
    for (long i = 0; i < n_blocks; i++) {
        void *p = malloc((size_t)(32 + 16 * (i % 16)));
        pthread_mutex_lock(&lock);
        while (head - tail == ring_size) pthread_cond_wait(&changed, &lock);
        ring[head % ring_size] = p;
        head++;
        pthread_cond_signal(&changed);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

__attribute__((noinline)) static void *consume(void *arg) {
    (void)arg;
    for (long i = 0; i < n_blocks; i++) {
        pthread_mutex_lock(&lock);
        while (head == tail) pthread_cond_wait(&changed, &lock);
        void *p = ring[tail % ring_size];
        tail++;
        pthread_cond_signal(&changed);
        pthread_mutex_unlock(&lock);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) n_blocks = atol(argv[1]);
    if (argc > 2) ring_size = atol(argv[2]);
    if (n_blocks < 0 || ring_size < 1 || ring_size > 64) return 2;
    pthread_t a, b;
    if (pthread_create(&a, NULL, produce, NULL) != 0) return 3;
    if (pthread_create(&b, NULL, consume, NULL) != 0) return 3;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
