/*
 * exit_early.c — allocates a little and leaves through _exit(3), before any
 * buffer filled and without exit handlers: mtlab's library never writes, and
 * `mtlab record` must say why (crates/mtlab/tests/e2e.rs). Exit code 3.
 */
#include <stdlib.h>
#include <unistd.h>

void *volatile sink;

int main(void) {
    for (int i = 0; i < 10; i++) sink = malloc(100);
    _exit(3);
}
