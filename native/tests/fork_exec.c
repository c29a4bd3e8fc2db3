/*
 * fork_exec.c — fork, then exec in the child.
 *
 * Usage: fork_exec C M     (outer: what the test runs)
 *        fork_exec inner M (what the child execs)
 *
 * Outer: forks; the child does before_exec: C mallocs of 300 bytes (kept),
 * then execv()s this same program as "fork_exec inner M". The parent
 * waits and returns 0 if the child exited 0.
 * Inner: in_exec_image: M mallocs of 400 bytes, all freed; returns 0.
 * Output (outer, via write(2), no stdio buffer): "child <pid>\n".
 *
 * Expected traces: the root (outer parent) with neither site; the fork
 * child, which ends by exec and so has no END record, with the before_exec
 * site holding C calls (flushed at exec) when C > 0, and no trace at all
 * when C == 0; the exec'd image (same pid) with the in_exec_image site
 * holding M calls, 0 live bytes, and a clean end.
 * Exit code 0; 1 if the child failed; 2 on bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *keep[100000];

__attribute__((noinline)) static void before_exec(long c) {
    for (long i = 0; i < c; i++) keep[i] = malloc(300);
}

__attribute__((noinline)) static void in_exec_image(long m) {
    for (long i = 0; i < m; i++) keep[i] = malloc(400);
    for (long i = 0; i < m; i++) free(keep[i]);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long m = atol(argv[2]);
    if (m < 0 || m > 100000) return 2;
    if (strcmp(argv[1], "inner") == 0) {
        in_exec_image(m);
        return 0;
    }
    long c = atol(argv[1]);
    if (c < 0 || c > 100000) return 2;
    pid_t pid = fork();
    if (pid < 0) return 3;
    if (pid == 0) {
        before_exec(c);
        char *args[] = {argv[0], "inner", argv[2], NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "child %d\n", (int)pid);
    if (write(1, line, (size_t)n) != n) return 3;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 3;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
