/*
 * fork_fd_reuse.c — a program that puts a file of its own at the number the
 * tracer's descriptor had, then forks; the child must still have that file.
 *
 * Usage: fork_fd_reuse
 *
 * It allocates until the tracer's trace is open (at descriptor 900 or above:
 * the tracer moves its descriptor up there), then dup2()s a pipe's write end
 * onto that number, forks, and the child writes "ok\n" into it and exits 0
 * when the write succeeds (1 with EBADF). The parent reads the pipe.
 *
 * Output: one line, "trace at N: yes|no; child wrote: ok|-", N the number.
 * Exit code 0 when the child's write arrived, 1 when it did not, 2 on setup errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace_fd.h"

static void *keep[400000];

int main(void) {
    /* Enough events to fill the thread's buffer and open the trace. */
    int fd = -1;
    for (long i = 0; i < 400000 && fd < 0; i++) {
        keep[i] = malloc(32);
        if ((i & 1023) == 0) fd = trace_fd();
    }
    int p[2];
    if (pipe(p) != 0) return 2;
    int target = fd >= 0 ? fd : 900;
    if (dup2(p[1], target) != target) return 2;
    close(p[1]);
    pid_t pid = fork();
    if (pid < 0) return 2;
    if (pid == 0) {
        close(p[0]);
        _exit(write(target, "ok\n", 3) == 3 ? 0 : 1);
    }
    close(target);
    char got[8] = {0};
    ssize_t n = read(p[0], got, sizeof got - 1);
    int status = 0;
    waitpid(pid, &status, 0);
    int ok = n == 3 && memcmp(got, "ok\n", 3) == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("trace at %d: %s; child wrote: %s\n", target, fd >= 0 ? "yes" : "no", ok ? "ok" : "-");
    return ok ? 0 : 1;
}
