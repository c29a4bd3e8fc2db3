/*
 * exec_own_preload.c — exec itself with an LD_PRELOAD of its own, as
 * `env LD_PRELOAD=libjemalloc.so.2 prog` or a wrapper choosing an allocator
 * does.
 *
 * Usage: exec_own_preload HOW M   (outer: what the test runs)
 *        exec_own_preload inner M (what it execs)
 *
 * HOW is how the new LD_PRELOAD is given:
 *   setenv — setenv("LD_PRELOAD", "libc.so.6") then execv (environ);
 *   envp   — execve with a copy of environ whose LD_PRELOAD entry is
 *            "LD_PRELOAD=libc.so.6";
 *   unset  — unsetenv("LD_PRELOAD") then execvp;
 *   spawn  — posix_spawn of a child with that copy of environ as envp, and
 *            the child's exit code passed on;
 *   spawnp — posix_spawnp of a child whose envp has no LD_PRELOAD at all.
 * libc.so.6 is loaded anyway: preloading it changes nothing else.
 * Inner: in_exec_image: M mallocs of 400 bytes, all freed; then prints its
 * LD_PRELOAD ("-" if unset) on stdout and returns 0.
 * Exit code 0; 2 on bad arguments; 127 if exec or spawn failed.
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;
static void *keep[100000];

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
        const char *lp = getenv("LD_PRELOAD");
        printf("%s\n", lp ? lp : "-");
        return 0;
    }
    char *args[] = {argv[0], "inner", argv[2], NULL};
    if (strncmp(argv[1], "spawn", 5) == 0) {
        static char *env[4096];
        size_t n = 0;
        for (char **e = environ; *e && n + 2 < 4096; e++)
            if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env[n++] = *e;
        if (strcmp(argv[1], "spawn") == 0) env[n++] = "LD_PRELOAD=libc.so.6";
        env[n] = NULL;
        pid_t pid;
        int status;
        int r = strcmp(argv[1], "spawn") == 0 ? posix_spawn(&pid, "/proc/self/exe", NULL, NULL, args, env)
                                               : posix_spawnp(&pid, argv[0], NULL, NULL, args, env);
        if (r != 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 127;
        return WEXITSTATUS(status);
    }
    if (strcmp(argv[1], "setenv") == 0) {
        setenv("LD_PRELOAD", "libc.so.6", 1);
        execv("/proc/self/exe", args);
    } else if (strcmp(argv[1], "envp") == 0) {
        static char *env[4096];
        size_t n = 0;
        for (char **e = environ; *e && n + 2 < 4096; e++)
            if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env[n++] = *e;
        env[n++] = "LD_PRELOAD=libc.so.6";
        env[n] = NULL;
        execve("/proc/self/exe", args, env);
    } else if (strcmp(argv[1], "unset") == 0) {
        unsetenv("LD_PRELOAD");
        execvp(argv[0], args);
    } else {
        return 2;
    }
    return 127;
}
