/*
 * nofile_fork.c — the program lowers its RLIMIT_NOFILE to LIMIT descriptors
 * (the soft limit only, or with "hard" the hard limit too), then forks; the
 * child makes N malloc(48)+free pairs, then opens /dev/null until open fails,
 * and exits with the number of opens that succeeded, plus 100 if the first
 * one did not get descriptor 3 (the lowest after stdin, stdout, stderr).
 * Untraced, with LIMIT 8: exit code 5.
 *
 * Usage: nofile_fork LIMIT N [hard]
 *
 * Expected: the child's exit code (passed through), 200+SIG if it was killed
 * by signal SIG, 2 on bad arguments, 5x on setup failures. No stdio.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile sink;

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) return 2;
    rlim_t limit = (rlim_t)atol(argv[1]);
    long n = atol(argv[2]);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 50;
    rl.rlim_cur = limit;
    if (argc == 4 && strcmp(argv[3], "hard") == 0) rl.rlim_max = limit;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return 51;
    pid_t pid = fork();
    if (pid < 0) return 52;
    if (pid == 0) {
        for (long i = 0; i < n; i++) {
            void *p = malloc(48);
            sink = p;
            free(p);
        }
        int count = 0, first = -1, fd;
        while ((fd = open("/dev/null", O_RDONLY)) >= 0) {
            if (first < 0) first = fd;
            count++;
        }
        _exit(count + (first == 3 ? 0 : 100));
    }
    int st;
    if (waitpid(pid, &st, 0) != pid) return 53;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 200 + WTERMSIG(st);
}
