/* A process to attach to (tests/attach.rs): known allocations in phases,
 * each started by SIGUSR1 and ended by a line on stdout, so the test can
 * attach between phases.
 *
 *   before the attach  20 blocks of 1000 bytes (kept), "ready"
 *   phase 1 (traced)   100 x malloc(1000), 50 of them freed; the 20 older
 *                      blocks freed; 10 x calloc(10, 100); "phase 1 done"
 *   phase 2 (after the detach) 30 x malloc(500), freed; "phase 2 done SUM"
 *                      and exit 0.
 *
 * THREADS in argv[1] (default 0): that many extra threads, each doing
 * phase 1's malloc and free pattern too (100 + 50 each). "seccomp" in
 * argv[2]: a seccomp filter that allows everything is installed first.
 *
 * Built with -DCANONICAL_PLT (and -fno-pic -no-pie, as Debian builds
 * python3): the program takes malloc's and free's addresses in its code,
 * which makes its own PLT entries their canonical addresses. */
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

static sigset_t usr1;
#ifdef CANONICAL_PLT
void *(*volatile canonical_malloc)(size_t);
void (*volatile canonical_free)(void *);
#endif

static void wait_usr1(void) {
    int sig;
    sigwait(&usr1, &sig);
}

static void *phase1_pattern(void *arg) {
    void **kept = arg;
    for (int i = 0; i < 100; i++) {
        kept[i] = malloc(1000);
        memset(kept[i], i, 1000);
    }
    for (int i = 0; i < 50; i++) free(kept[i]);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 0;
    if (argc > 2 && strcmp(argv[2], "seccomp") == 0) {
        struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        struct sock_fprog prog = {.len = 1, .filter = &allow};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) return 2;
    }
#ifdef CANONICAL_PLT
    canonical_malloc = malloc;
    canonical_free = free;
#endif
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &usr1, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *old[20];
    for (int i = 0; i < 20; i++) old[i] = malloc(1000);
    printf("ready\n");

    wait_usr1();
    static void *kept[65][100];
    pthread_t th[64];
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++) pthread_create(&th[t], NULL, phase1_pattern, kept[t + 1]);
    phase1_pattern(kept[0]);
    for (int t = 0; t < threads; t++) pthread_join(th[t], NULL);
    for (int i = 0; i < 20; i++) free(old[i]);
    void *c[10];
    for (int i = 0; i < 10; i++) c[i] = calloc(10, 100);
    printf("phase 1 done\n");

    wait_usr1();
    unsigned long sum = 0;
    for (int i = 0; i < 30; i++) {
        unsigned char *p = malloc(500);
        memset(p, i, 500);
        sum += p[499];
        free(p);
    }
    printf("phase 2 done %lu\n", sum);
    (void)c;
    return 0;
}
