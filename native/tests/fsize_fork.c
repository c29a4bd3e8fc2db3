/*
 * fsize_fork.c — the program lowers its RLIMIT_FSIZE to LIMIT bytes (below a
 * trace header, below a page), then forks; the child makes N malloc(48)+free
 * pairs and exits 7. Untraced, nothing here writes a file, so neither process
 * can receive SIGXFSZ.
 *
 * Usage: fsize_fork LIMIT N
 *
 * Expected: exit code 7 (the child's exit code, passed through), 100+SIG if
 * the child was killed by signal SIG, 5 if setrlimit fails, 2 on bad
 * arguments. No stdio.
 */
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static void *volatile sink;

int main(int argc, char **argv) {
    if (argc != 3) return 2;
    rlim_t limit = (rlim_t)atol(argv[1]);
    long n = atol(argv[2]);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 5;
    pid_t pid = fork();
    if (pid < 0) return 6;
    if (pid == 0) {
        for (long i = 0; i < n; i++) {
            void *p = malloc(48);
            sink = p;
            free(p);
        }
        _exit(7);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid) return 8;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st);
}
