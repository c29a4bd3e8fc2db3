/*
 * drop_priv.c MODE N [fork] — what daemons do before their first allocations
 * are flushed: MODE "setuid" becomes user nobody (65534); MODE "chroot"
 * chroots into the directory given as $DROP_ROOT. Then N malloc/free pairs
 * of 80 bytes in after_drop(). With "fork", the process forks a worker
 * after the drop, which makes the pairs (the parent none) and prints
 * "worker PID mallocs M\n" (M: the mallocs it counted making, written with
 * write(2)); the parent waits for it. Needs root. Exit code 0; 2 when the
 * drop failed; 3 when the fork or the worker failed.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile sink;

__attribute__((noinline)) static long after_drop(long n) {
    long made = 0;
    for (long i = 0; i < n; i++) {
        sink = malloc(80);
        made += sink != NULL;
        free(sink);
    }
    return made;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) return 2;
    if (strcmp(argv[1], "setuid") == 0) {
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0) return 2;
    } else {
        const char *root = getenv("DROP_ROOT");
        if (!root || chroot(root) != 0 || chdir("/") != 0) return 2;
    }
    if (argc == 4 && strcmp(argv[3], "fork") == 0) {
        pid_t pid = fork();
        if (pid < 0) return 3;
        if (pid == 0) {
            long made = after_drop(atol(argv[2]));
            char line[64];
            int len = snprintf(line, sizeof line, "worker %d mallocs %ld\n", (int)getpid(), made);
            if (write(1, line, (size_t)len) != len) _exit(3);
            exit(0);
        }
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 3;
        return 0;
    }
    after_drop(atol(argv[2]));
    return 0;
}
