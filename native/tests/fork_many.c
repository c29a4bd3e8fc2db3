/*
 * fork_many.c — forks N children one after another; child i (0-based) does
 * child_allocs: i*K mallocs of 64 bytes (kept) and ends with exit(0). The
 * parent waits for each before forking the next and allocates nothing itself.
 *
 * Usage: fork_many N K      (N <= 1000, N*K <= 1000000)
 *
 * Output: one line per child on stdout, "child <pid> <i>\n", written with
 * write(2) from a stack buffer (no stdio buffer is allocated).
 * Expected: N child traces; child i's has the child_allocs site with i*K
 * calls and i*K*64 live bytes, and i*K more events and bytes at its peak
 * than child 0's (whatever exit adds is the same in every child).
 * Exit code 0; 1 if a child failed; 2 on bad arguments; 3 if fork failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void *keep[1000000];

__attribute__((noinline)) static void child_allocs(long n) {
    for (long j = 0; j < n; j++) keep[j] = malloc(64);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long n = atol(argv[1]), k = atol(argv[2]);
    if (n < 0 || k < 0 || n > 1000 || n * k > 1000000) return 2;
    for (long i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) return 3;
        if (pid == 0) {
            child_allocs(i * k);
            exit(0);
        }
        char line[64];
        int len = snprintf(line, sizeof line, "child %d %ld\n", (int)pid, i);
        if (write(1, line, (size_t)len) != len) return 3;
        int status = 0;
        if (waitpid(pid, &status, 0) != pid) return 3;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    }
    return 0;
}
