/*
 * sig_alloc.c N — N malloc(64)/free pairs in a loop while a timer's SIGPROF
 * (every 50 µs of wall time) interrupts it; the handler makes one malloc(24)
 * and its free in in_handler() each time. Linked with sig_hook.c, a heap
 * manager a handler may safely interrupt. Prints "handler mallocs H\n": the
 * handler's mallocs, counted by the handler (write(2), no stdio).
 * Exit code 0; 2 on bad arguments; 3 if the timer could not be set.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t handler_mallocs;
static void *volatile sink;

__attribute__((noinline)) static void in_handler(void) {
    void *p = malloc(24);
    sink = p;
    free(p);
    handler_mallocs++;
}

static void on_prof(int sig) {
    (void)sig;
    in_handler();
}

__attribute__((noinline)) static void in_loop(long n) {
    for (long i = 0; i < n; i++) {
        void *p = malloc(64);
        sink = p;
        free(p);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_prof;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) return 3;
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGPROF;
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return 3;
    struct itimerspec every = {{0, 50000}, {0, 50000}};
    if (timer_settime(timer, 0, &every, NULL) != 0) return 3;
    in_loop(atol(argv[1]));
    struct itimerspec off;
    memset(&off, 0, sizeof off);
    timer_settime(timer, 0, &off, NULL);
    char line[64];
    int len = snprintf(line, sizeof line, "handler mallocs %ld\n", (long)handler_mallocs);
    return write(1, line, (size_t)len) == len ? 0 : 3;
}
