/*
 * killed_tail.c — a process killed (SIGKILL) after a pause: what its
 * threads buffered before the pause must be in the trace.
 *
 * Usage: killed_tail N PAUSE_MS
 * The main thread and one worker each: N mallocs of 1000 bytes, kept
 * (main_before / worker_before); PAUSE_MS of sleep; one malloc of 2000
 * bytes, kept (main_after / worker_after). When both are done the main
 * thread raises SIGKILL. Each thread's last malloc is its newest event,
 * still in its buffer at the kill. Exit: killed by signal 9; 2 on bad
 * arguments, 3 if a malloc failed. No stdio.
 */
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>

static long n, pause_ms;
static pthread_barrier_t done;
void *keep[2][10001]; /* not static, and each result checked: the calls are kept */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

__attribute__((noinline)) static void main_before(void) {
    for (long i = 0; i < n; i++)
        if (!(keep[0][i] = malloc(1000))) exit(3);
}
__attribute__((noinline)) static void main_after(void) {
    if (!(keep[0][n] = malloc(2000))) exit(3);
}
__attribute__((noinline)) static void worker_before(void) {
    for (long i = 0; i < n; i++)
        if (!(keep[1][i] = malloc(1000))) exit(3);
}
__attribute__((noinline)) static void worker_after(void) {
    if (!(keep[1][n] = malloc(2000))) exit(3);
}

static void *worker(void *arg) {
    (void)arg;
    worker_before();
    sleep_ms(pause_ms);
    worker_after();
    pthread_barrier_wait(&done);
    sleep_ms(100000); /* killed meanwhile */
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    n = atol(argv[1]);
    pause_ms = atol(argv[2]);
    if (n < 1 || n > 10000 || pause_ms < 0) return 2;
    pthread_barrier_init(&done, NULL, 2);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    main_before();
    sleep_ms(pause_ms);
    main_after();
    pthread_barrier_wait(&done);
    raise(SIGKILL);
    return 0;
}
