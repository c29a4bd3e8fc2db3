/*
 * exec_root.c — the process mtlab record runs replaces itself by exec.
 *
 * Usage: exec_root C M CODE   (outer: what the test runs)
 *        exec_root inner M CODE (what it execs)
 *        exec_root C true       (outer, exec'ing /bin/true)
 *
 * Outer: before_exec: C mallocs of 300 bytes (kept), then execv()s this
 * same program as "exec_root inner M CODE" (or /bin/true with "true").
 * Inner: in_exec_image: M mallocs of 400 bytes, all freed; exits with CODE.
 * No fork: the root pid's first image is the outer one, its last the inner
 * one (or true's), which is the image whose exit status mtlab record passes on.
 * Exit code: CODE (0 with true); 127 if the exec failed; 2 on bad arguments.
 */
#include <stdlib.h>
#include <string.h>
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
    if (argc == 3 && strcmp(argv[2], "true") == 0) {
        long c = atol(argv[1]);
        if (c < 0 || c > 100000) return 2;
        before_exec(c);
        char *args[] = {"true", NULL};
        execv("/bin/true", args);
        return 127;
    }
    if (argc != 4) return 2;
    long m = atol(argv[2]);
    if (m < 0 || m > 100000) return 2;
    if (strcmp(argv[1], "inner") == 0) {
        in_exec_image(m);
        return atoi(argv[3]);
    }
    long c = atol(argv[1]);
    if (c < 0 || c > 100000) return 2;
    before_exec(c);
    char *args[] = {argv[0], "inner", argv[2], argv[3], NULL};
    execv("/proc/self/exe", args);
    return 127;
}
