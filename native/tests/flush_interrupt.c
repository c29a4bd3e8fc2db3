/*
 * flush_interrupt.c MODE MS — malloc(64)/free pairs in a loop while signals
 * (or a cancel) interrupt the thread, often inside mtlab's 64 KiB flush (the
 * write system call is where a traced loop spends its time, and a signal
 * that arrives during it runs just after it returns):
 *   exit     one SIGALRM after MS ms calls exit(0) from the handler;
 *   longjmp  a SIGPROF every 200 µs of CPU for MS ms longjmps back to the loop,
 *            unless it interrupted the C library or the dynamic loader: a
 *            longjmp out of glibc's own malloc leaves its tcache broken and
 *            crashes the program untraced (42 runs in 100 did, 2026-11-30),
 *            while one out of mtlab's shim or its flush (its own code, raw
 *            system calls included) is what this mode is for;
 *   cancel   a thread runs the loop with asynchronous cancellation enabled
 *            and is cancelled after MS ms; main then exits.
 * Prints "pairs N": the pairs completed (each counted after its free).
 * No block is ever freed twice or allocated over a live one, so a trace of it
 * has no unknown frees and no overlapping allocations.
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>

static sigjmp_buf env;
static volatile long pairs;
static void *volatile sink;

static void on_alarm(int sig) {
    (void)sig;
    char line[64];
    int n = snprintf(line, sizeof line, "pairs %ld\n", pairs);
    write(1, line, (size_t)n);
    exit(0);
}

/* The executable segments of libc and the dynamic loader, found before the
 * timer starts (the handler only compares). */
static struct { uintptr_t lo, hi; } unsafe[8];
static int n_unsafe;

static int note_unsafe(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (!strstr(name, "/libc.so") && !strstr(name, "/ld-linux")) return 0;
    for (int i = 0; i < info->dlpi_phnum && n_unsafe < 8; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            unsafe[n_unsafe].lo = info->dlpi_addr + ph->p_vaddr;
            unsafe[n_unsafe].hi = unsafe[n_unsafe].lo + ph->p_memsz;
            n_unsafe++;
        }
    }
    return 0;
}

static void on_prof(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)si;
    uintptr_t pc = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
    for (int i = 0; i < n_unsafe; i++)
        if (pc >= unsafe[i].lo && pc < unsafe[i].hi) return;
    siglongjmp(env, 1);
}

static void loop_forever(void) {
    for (;;) {
        sink = malloc(64);
        free(sink);
        pairs++;
    }
}

static void *cancelled(void *arg) {
    (void)arg;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    loop_forever();
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "exit";
    long ms = argc > 2 ? atol(argv[2]) : 50;
    if (!strcmp(mode, "exit")) {
        signal(SIGALRM, on_alarm);
        struct itimerval t = {{0, 0}, {ms / 1000, (ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &t, NULL);
        loop_forever();
    } else if (!strcmp(mode, "longjmp")) {
        struct timeval end, now;
        gettimeofday(&end, NULL);
        end.tv_usec += ms * 1000;
        end.tv_sec += end.tv_usec / 1000000;
        end.tv_usec %= 1000000;
        dl_iterate_phdr(note_unsafe, NULL);
        if (n_unsafe < 2) {
            fprintf(stderr, "flush_interrupt: libc's and the loader's code not found\n");
            return 2;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_prof;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGPROF, &sa, NULL);
        struct itimerval t = {{0, 200}, {0, 200}};
        setitimer(ITIMER_PROF, &t, NULL);
        sigsetjmp(env, 1);
        for (;;) {
            gettimeofday(&now, NULL);
            if (timercmp(&now, &end, >)) break;
            for (int i = 0; i < 1000; i++) {
                sink = malloc(64);
                free(sink);
                pairs++;
            }
        }
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
    } else {
        pthread_t th;
        pthread_create(&th, NULL, cancelled, NULL);
        usleep((useconds_t)ms * 1000);
        pthread_cancel(th);
        pthread_join(th, NULL);
    }
    printf("pairs %ld\n", pairs);
    return 0;
}
