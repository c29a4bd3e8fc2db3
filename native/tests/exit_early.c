/*
 * exit_early.c — allocates ten blocks of 100 bytes and leaves through
 * _exit(3), before any buffer filled and without exit handlers: mtlab's
 * _exit wrapper must finish the trace. Built static too, where no library
 * is loaded and `mtlab record` must say why. Exit code 3.
 */
#include <stdlib.h>
#include <unistd.h>

void *volatile sink;

int main(void) {
    for (int i = 0; i < 10; i++) sink = malloc(100);
    _exit(3);
}
