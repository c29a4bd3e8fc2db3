/*
 * thread_exit.c — a thread that ends by pthread_exit in the middle of its work.
 *
 * Usage: thread_exit M P MODE     (MODE: exit | _exit)
 *
 * The thread runs thread_allocs, a loop meant for 2*M mallocs of 32 bytes
 * (never freed) that calls pthread_exit from a nested function after
 * exactly M of them. Meanwhile main runs main_allocs: P mallocs of 48 bytes,
 * kept. Main then joins the thread and starts a second thread that runs
 * second_allocs: 10 mallocs of 16 bytes (kept) — it may reuse the first
 * thread's released trace buffer. Then:
 *   MODE exit:  main returns 0 (normal exit: END record, everything flushed);
 *   MODE _exit: main calls _exit(0): no END record, only the buffers flushed
 *               before are in the trace — among them the first thread's,
 *               flushed when it exited.
 * Expected: the thread_allocs site has exactly M calls and M*32 live bytes
 * in both modes; with MODE exit, main_allocs has P calls and second_allocs 10.
 * No stdio. Exit code 0; 2 on bad arguments.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long m_allocs, p_allocs;
static void *volatile sink;

__attribute__((noinline)) static void stop_here(void) { pthread_exit(NULL); }

__attribute__((noinline)) static void thread_allocs(void) {
    for (long i = 0; i < 2 * m_allocs; i++) {
        if (i == m_allocs) stop_here();
        sink = malloc(32);
    }
}

static void *first(void *arg) {
    (void)arg;
    thread_allocs();
    return NULL; /* not reached: m_allocs >= 1 */
}

__attribute__((noinline)) static void second_allocs(void) {
    for (int i = 0; i < 10; i++) sink = malloc(16);
}

static void *second(void *arg) {
    (void)arg;
    second_allocs();
    return NULL;
}

__attribute__((noinline)) static void main_allocs(long p) {
    for (long i = 0; i < p; i++) sink = malloc(48);
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    m_allocs = atol(argv[1]);
    p_allocs = atol(argv[2]);
    int quick = strcmp(argv[3], "_exit") == 0;
    if (m_allocs < 1 || p_allocs < 0 || (!quick && strcmp(argv[3], "exit") != 0)) return 2;
    pthread_t t;
    if (pthread_create(&t, NULL, first, NULL) != 0) return 3;
    main_allocs(p_allocs);
    pthread_join(t, NULL);
    if (pthread_create(&t, NULL, second, NULL) != 0) return 3;
    pthread_join(t, NULL);
    if (quick) _exit(0);
    return 0;
}
