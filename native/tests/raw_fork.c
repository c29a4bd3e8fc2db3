/*
 * raw_fork.c MODE N — a child process made without fork handlers.
 * MODE "_Fork": glibc's _Fork(); MODE "clone": the clone system call itself.
 * The parent allocates 10 blocks of 100 bytes before and 10 of 300 after the
 * child; the child makes N malloc/free pairs of 200 bytes and exits through
 * exit(). Prints "child PID". Exit code 0 when the child exited 0.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

pid_t _Fork(void);

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long n = atol(argv[2]);
    void *before[10], *after[10];
    for (int i = 0; i < 10; i++) before[i] = malloc(100);
    pid_t pid = strcmp(argv[1], "_Fork") == 0 ? _Fork() : (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (pid < 0) return 3;
    if (pid == 0) {
        for (long i = 0; i < n; i++) free(malloc(200));
        exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return 4;
    for (int i = 0; i < 10; i++) after[i] = malloc(300);
    for (int i = 0; i < 10; i++) free(before[i]), free(after[i]);
    printf("child %d\n", (int)pid);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 5;
}
