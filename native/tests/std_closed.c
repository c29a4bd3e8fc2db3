/*
 * std_closed.c — makes N malloc(48)+free pairs, then writes a byte to stdout
 * and reads one from stdin, and tells by its exit code which of them found
 * the descriptor closed (EBADF): +1 for stdout, +2 for stdin.
 *
 * Usage: std_closed N
 *
 * Expected: 3 when started with both closed (`>&- <&-`), 0 with both open
 * (and stdin at end of file or holding a byte). No stdio.
 */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

static void *volatile sink;

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 0;
    for (long i = 0; i < n; i++) {
        void *p = malloc(48);
        sink = p;
        free(p);
    }
    int code = 0;
    if (write(1, "x", 1) < 0 && errno == EBADF) code += 1;
    char c;
    if (read(0, &c, 1) < 0 && errno == EBADF) code += 2;
    return code;
}
