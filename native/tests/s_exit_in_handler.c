/*
 * s_exit_in_handler.c — a thread allocating without pause while a timer
 * signal aimed at it arrives every 50 µs; the 300th signal's handler calls
 * exit(7). Under `record --sample` with a tiny interval most of the time
 * is spent inside mtlab's sample appends, so the handler often runs while
 * the thread holds its buffer's lock: mtlab's exit flush must not wait for
 * it. Exit code 7.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t ticks;

static void on_tick(int sig) {
    (void)sig;
    if (++ticks == 300) exit(7);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_tick;
    sigaction(SIGALRM, &sa, NULL);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SIGALRM;
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) return 2;
    struct itimerspec its = {{0, 50000}, {0, 50000}};
    timer_settime(timer, 0, &its, NULL);
    void *keep[256] = {0};
    for (unsigned long i = 0;; i++) {
        free(keep[i % 256]);
        keep[i % 256] = malloc(16 + i % 200);
    }
}
