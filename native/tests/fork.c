/*
 * fork.c — parent_allocs: A mallocs of 100 bytes (kept); then fork.
 * The child does child_allocs: B mallocs of 200 bytes (kept) and ends with
 * exit(0). The parent waits for it and returns 0.
 *
 * Usage: fork A B
 *
 * Output: one line on stdout, "child <pid>\n", written with write(2) from a
 * stack buffer (no stdio buffer is allocated).
 * Expected: the parent's trace has the parent_allocs site with A calls and
 * A*100 live bytes and no child_allocs site; the child's trace (FILE.<pid>)
 * has the child_allocs site with B calls, B*200 bytes, and none of the
 * parent's allocations (it starts empty at the fork).
 * Exit code 0; 1 if the child failed; 2 on bad arguments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *keep[100000];

__attribute__((noinline)) static void parent_allocs(long a) {
    for (long i = 0; i < a; i++) keep[i] = malloc(100);
}

__attribute__((noinline)) static void child_allocs(long b) {
    for (long i = 0; i < b; i++) keep[i] = malloc(200);
}

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long a = atol(argv[1]), b = atol(argv[2]);
    if (a < 0 || b < 0 || a > 100000 || b > 100000) return 2;
    parent_allocs(a);
    pid_t pid = fork();
    if (pid < 0) return 3;
    if (pid == 0) {
        child_allocs(b);
        exit(0);
    }
    char line[64];
    int n = snprintf(line, sizeof line, "child %d\n", (int)pid);
    if (write(1, line, (size_t)n) != n) return 3;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 3;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
