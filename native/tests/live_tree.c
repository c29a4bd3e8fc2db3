/*
 * live_tree.c — a small process tree for `record --live`: a child that
 * allocates steadily for a while, and a child that execs.
 *
 * Usage: live_tree TICKS N M     (outer: what the test runs)
 *        live_tree inner|mid|last M  (the images the second child execs)
 *
 * Parent: parent_allocs: 50 mallocs of 100 bytes (kept); forks the steady
 * child, then a child that execs this program as "live_tree inner M"
 * without allocating first (so it leaves no trace of its own before the
 * exec); waits for both. Output (write(2), no stdio buffer):
 * "steady <pid>\nexec <pid>\n".
 * Steady child: TICKS ticks about 10 ms apart; in each, steady_allocs: N
 * mallocs of 64 bytes, then steady_frees: the previous tick's N blocks
 * freed; so TICKS*N mallocs, (TICKS-1)*N frees, and N blocks (N*64 bytes)
 * live at the end. exit(0).
 * Exec'd images, one after the other in the same pid: "inner":
 * in_exec_image, M mallocs of 400 bytes, all freed, then 200 ms later exec
 * "mid"; "mid": in_mid_image, M mallocs of 500 bytes, all freed, then 200 ms
 * later exec "last" (the pauses let a live recorder see each image end);
 * "last": in_last_image, M mallocs of 600 bytes, all freed; returns 0. So
 * the pid has three traces, ROOT.PID, ROOT.PID.1, ROOT.PID.2.
 * Exit code 0; 1 if a child failed; 2 on bad arguments; 3 on a failed call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *keep[100000];
static void *ring[2][100000];

__attribute__((noinline)) static void parent_allocs(long a) {
    for (long i = 0; i < a; i++) keep[i] = malloc(100);
}

__attribute__((noinline)) static void steady_allocs(void **to, long n) {
    for (long i = 0; i < n; i++) to[i] = malloc(64);
}

__attribute__((noinline)) static void steady_frees(void **from, long n) {
    for (long i = 0; i < n; i++) free(from[i]);
}

__attribute__((noinline)) static void in_exec_image(long m) {
    for (long i = 0; i < m; i++) keep[i] = malloc(400);
    for (long i = 0; i < m; i++) free(keep[i]);
}

__attribute__((noinline)) static void in_mid_image(long m) {
    for (long i = 0; i < m; i++) keep[i] = malloc(500);
    for (long i = 0; i < m; i++) free(keep[i]);
}

__attribute__((noinline)) static void in_last_image(long m) {
    for (long i = 0; i < m; i++) keep[i] = malloc(600);
    for (long i = 0; i < m; i++) free(keep[i]);
}

/* Execs this program as "live_tree WHAT M", 200 ms from now. */
static int exec_as(const char *self, const char *what, const char *m) {
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL);
    char *args[] = {(char *)self, (char *)what, (char *)m, NULL};
    execv("/proc/self/exe", args);
    return 127;
}

static int say(const char *what, pid_t pid) {
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", what, (int)pid);
    return write(1, line, (size_t)n) == n ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc == 3) {
        long m = atol(argv[2]);
        if (m < 0 || m > 100000) return 2;
        if (strcmp(argv[1], "inner") == 0) {
            in_exec_image(m);
            return exec_as(argv[0], "mid", argv[2]);
        }
        if (strcmp(argv[1], "mid") == 0) {
            in_mid_image(m);
            return exec_as(argv[0], "last", argv[2]);
        }
        if (strcmp(argv[1], "last") == 0) {
            in_last_image(m);
            return 0;
        }
        return 2;
    }
    if (argc != 4) return 2;
    long ticks = atol(argv[1]), n = atol(argv[2]), m = atol(argv[3]);
    if (ticks < 1 || ticks > 100000 || n < 0 || n > 100000 || m < 0 || m > 100000) return 2;
    parent_allocs(50);
    pid_t steady = fork();
    if (steady < 0) return 3;
    if (steady == 0) {
        struct timespec tick = {0, 10 * 1000 * 1000};
        for (long t = 0; t < ticks; t++) {
            steady_allocs(ring[t % 2], n);
            if (t > 0) steady_frees(ring[(t + 1) % 2], n);
            nanosleep(&tick, NULL);
        }
        exit(0);
    }
    pid_t execd = fork();
    if (execd < 0) return 3;
    if (execd == 0) {
        char marg[32];
        snprintf(marg, sizeof marg, "%ld", m);
        _exit(exec_as(argv[0], "inner", marg));
    }
    if (say("steady", steady) != 0 || say("exec", execd) != 0) return 3;
    int ok = 1;
    for (int i = 0; i < 2; i++) {
        int status = 0;
        pid_t p = wait(&status);
        if (p < 0) return 3;
        ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    return ok ? 0 : 1;
}
