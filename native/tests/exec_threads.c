/*
 * exec_threads.c — a process with other threads alive execs, as rustup does
 * when it runs the real cargo or rustc: its worker threads still wait when
 * the main thread calls execv, and the kernel ends them with the image.
 *
 * Usage: exec_threads T N ok     (execs /proc/self/exe with "inner")
 *        exec_threads T N fail K (execv of a missing file; then goes on)
 *        exec_threads inner      (the exec'd image: one malloc, exits 0)
 *
 * T threads each make N mallocs of 500 bytes in in_thread (kept), then wait.
 * The main thread waits until all are done, then execs. "fail": the exec
 * fails (ENOENT); each thread then makes K mallocs of 600 bytes in
 * after_failed_exec (kept) and ends; a new thread makes N mallocs of 700
 * bytes in in_new_thread (kept) and ends; the process exits 0.
 * Exit code: 0; 127 if the exec that should succeed failed; 2 on bad
 * arguments.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long n_allocs, k_allocs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int done, go_on;

__attribute__((noinline)) static void in_thread(long n) {
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(500);
        (void)p;
    }
}

__attribute__((noinline)) static void after_failed_exec(long k) {
    for (long i = 0; i < k; i++) {
        void *volatile p = malloc(600);
        (void)p;
    }
}

__attribute__((noinline)) static void in_new_thread(long n) {
    for (long i = 0; i < n; i++) {
        void *volatile p = malloc(700);
        (void)p;
    }
}

static void *worker(void *arg) {
    (void)arg;
    in_thread(n_allocs);
    pthread_mutex_lock(&mu);
    done++;
    pthread_cond_broadcast(&cv);
    while (!go_on) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    after_failed_exec(k_allocs);
    return NULL;
}

static void *new_worker(void *arg) {
    (void)arg;
    in_new_thread(n_allocs);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "inner") == 0) {
        void *volatile p = malloc(100);
        (void)p;
        return 0;
    }
    if (argc < 4) return 2;
    long t = atol(argv[1]);
    n_allocs = atol(argv[2]);
    int fail = strcmp(argv[3], "fail") == 0;
    if (fail && argc == 5) k_allocs = atol(argv[4]);
    if (t < 1 || t > 64 || n_allocs < 0 || k_allocs < 0) return 2;
    pthread_t th[64];
    for (long i = 0; i < t; i++) pthread_create(&th[i], NULL, worker, NULL);
    pthread_mutex_lock(&mu);
    while (done < t) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    if (!fail) {
        char *args[] = {argv[0], "inner", NULL};
        execv("/proc/self/exe", args);
        return 127;
    }
    char *args[] = {"missing", NULL};
    execv("/nonexistent/exec_threads_missing", args);
    pthread_mutex_lock(&mu);
    go_on = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (long i = 0; i < t; i++) pthread_join(th[i], NULL);
    pthread_t nt;
    pthread_create(&nt, NULL, new_worker, NULL);
    pthread_join(nt, NULL);
    return 0;
}
