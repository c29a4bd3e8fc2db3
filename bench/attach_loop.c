/* The program `bench/attach_cycles.sh` attaches to and detaches from again
 * and again: THREADS threads (default 8) allocate, fill, check and free
 * blocks of varying sizes until SIGUSR1; each block's contents are checked
 * before its free, so a corrupted heap or a lost write shows as "BAD". Prints
 * "ready", then at the end "THREADS threads ok" (or the first failure) and
 * exits 0 (1 on a failure). On SIGUSR2 it prints "ops N T": the blocks
 * allocated so far by all threads and CLOCK_MONOTONIC in ns (the throughput
 * windows of bench/attach_service.sh). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int stop, bad;
/* One counter per thread, each on its own cache line. */
static struct {
    _Alignas(64) atomic_ulong ops;
} count[64];

static void *worker(void *arg) {
    atomic_ulong *ops = &count[(uintptr_t)arg - 1].ops;
    unsigned seed = (unsigned)(uintptr_t)arg * 2654435761u + 1;
    unsigned char *held[64] = {0};
    size_t size[64] = {0};
    for (unsigned long it = 0; !atomic_load_explicit(&stop, memory_order_relaxed); it++) {
        seed = seed * 1103515245u + 12345u;
        unsigned k = (seed >> 8) % 64;
        if (held[k]) {
            unsigned char want = (unsigned char)(k + size[k]);
            for (size_t i = 0; i < size[k]; i += 61)
                if (held[k][i] != want) atomic_store(&bad, 1);
            free(held[k]);
        }
        size[k] = 16 + (seed >> 16) % 4000;
        held[k] = (seed & 1) ? malloc(size[k]) : calloc(1, size[k]);
        if (!held[k]) { atomic_store(&bad, 1); break; }
        memset(held[k], (unsigned char)(k + size[k]), size[k]);
        atomic_store_explicit(ops, it + 1, memory_order_relaxed);
    }
    for (int k = 0; k < 64; k++) free(held[k]);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8;
    if (n < 1 || n > 64) n = 8;
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigaddset(&usr1, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    pthread_t th[64];
    for (int t = 0; t < n; t++) pthread_create(&th[t], NULL, worker, (void *)(uintptr_t)(t + 1));
    printf("ready\n");
    fflush(stdout);
    int sig;
    while (sigwait(&usr1, &sig) == 0 && sig == SIGUSR2) {
        unsigned long total = 0;
        for (int t = 0; t < n; t++) total += atomic_load_explicit(&count[t].ops, memory_order_relaxed);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        printf("ops %lu %lld\n", total, (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
        fflush(stdout);
    }
    atomic_store(&stop, 1);
    for (int t = 0; t < n; t++) pthread_join(th[t], NULL);
    if (atomic_load(&bad)) {
        printf("BAD: a block's contents changed\n");
        return 1;
    }
    printf("%d threads ok\n", n);
    return 0;
}
