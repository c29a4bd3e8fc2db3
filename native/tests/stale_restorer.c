/*
 * stale_restorer.c — sigaction() at many stack depths, each followed by
 * reallocarray at many depths. glibc builds the kernel's struct sigaction on
 * the stack, so the restorer's address stays behind in a dead stack slot;
 * glibc's reallocarray calls realloc inside. No signal is ever delivered:
 * the trace must hold ROUNDS reallocarray calls and no realloc.
 * Prints "reallocarray N".
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEPTHS 48

static void on_usr1(int sig) { (void)sig; }

/* Installs the handler DEPTH frames down, so that the restorer lands in a
 * different slot each time. */
__attribute__((noinline)) static int install_at(int depth) {
    volatile char pad[40];
    pad[0] = (char)depth;
    if (pad[0] > 0) return install_at(depth - 1);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    return sigaction(SIGUSR1, &sa, NULL);
}

__attribute__((noinline)) static void allocate_at(int depth) {
    volatile char pad[24];
    pad[0] = (char)depth;
    if (pad[0] > 0) {
        allocate_at(depth - 1);
        return;
    }
    free(reallocarray(NULL, 4, 4));
}

int main(void) {
    unsigned long n = 0;
    for (int d = 0; d < DEPTHS; d++)
        for (int e = 0; e < DEPTHS; e++) {
            if (install_at(d) != 0) return 1;
            allocate_at(e);
            n++;
        }
    printf("reallocarray %lu\n", n);
    return 0;
}
