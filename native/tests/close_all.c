/*
 * close_all.c — a program that closes every descriptor above stderr
 * (close_range(3, ~0U, 0), as daemons and closefrom() do) while traced,
 * then keeps allocating.
 *
 * Usage: close_all N
 *
 * before_close: mallocs of 32 bytes (kept) until the tracer's trace file is
 * open (a descriptor from 900 up names a .mtl file); then close_range; then
 * after_close: N mallocs of 48 bytes (kept).
 * Output: one line, "trace was open: yes|no".
 * Expected: the trace has the after_close site with N calls and N*48 live
 * bytes. Exit code 0; 2 on bad arguments or a failed close_range.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace_fd.h"

static void *keep[500000];

__attribute__((noinline)) static long before_close(void) {
    long i = 0;
    int open = 0;
    for (; i < 400000 && !open; i++) {
        keep[i] = malloc(32);
        if ((i & 1023) == 0) open = trace_fd() >= 0;
    }
    return open ? i : -i;
}

__attribute__((noinline)) static void after_close(long from, long n) {
    for (long i = 0; i < n; i++) keep[from + i] = malloc(48);
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    long n = atol(argv[1]);
    if (n < 0 || n > 90000) return 2;
    long used = before_close();
    int was_open = used > 0;
    if (used < 0) used = -used;
    if (close_range(3, ~0U, 0) != 0) return 2;
    after_close(used, n);
    char line[64];
    int len = snprintf(line, sizeof line, "trace was open: %s\n", was_open ? "yes" : "no");
    return write(1, line, (size_t)len) == len ? 0 : 2;
}
