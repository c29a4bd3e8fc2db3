/*
 * s_eintr.c ITERATIONS [UNTIL] — waits in the system calls that fail with EINTR
 * when a signal handler runs, whatever SA_RESTART says (nanosleep, poll,
 * sem_timedwait; 2 ms each), and allocates between them: ITERATIONS times,
 * and on until the file UNTIL exists if given (so that a loaded host cannot
 * end it before the test's requests are done). Prints "pid N", "ready", then
 * at the end "eintr N of M" (N calls of M interrupted). `mtlab ctl` acting on
 * it meanwhile must leave N at 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long iterations = argc > 1 ? atol(argv[1]) : 500;
    const char *until = argc > 2 ? argv[2] : NULL;
    sem_t sem;
    sem_init(&sem, 0, 0);
    void *keep[64] = {0};
    long eintr = 0, calls = 0;
    printf("pid %d\nready\n", (int)getpid());
    fflush(stdout);
    for (long i = 0; i < iterations || (until && access(until, F_OK) != 0); i++) {
        struct timespec ts = {0, 2000000};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR) eintr++;
        if (poll(NULL, 0, 2) < 0 && errno == EINTR) eintr++;
        struct timespec abs;
        clock_gettime(CLOCK_REALTIME, &abs);
        abs.tv_nsec += 2000000;
        if (abs.tv_nsec >= 1000000000) abs.tv_sec++, abs.tv_nsec -= 1000000000;
        if (sem_timedwait(&sem, &abs) != 0 && errno == EINTR) eintr++;
        calls += 3;
        free(keep[i % 64]);
        keep[i % 64] = malloc(1000 + (size_t)(i % 5000) * 16);
    }
    printf("eintr %ld of %ld\n", eintr, calls);
    return 0;
}
