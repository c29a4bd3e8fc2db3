/* A service-like loop to attach to (tests/attach.rs): "ready", then rounds
 * of 100 x (malloc(64), free) and a 2 ms sleep, until SIGUSR1; then
 * "done ROUNDS" and exit 0. At most one block is live at any moment, so a
 * trace of any stretch of it has as many frees as mallocs, give or take one. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile sig_atomic_t stop;

static void on_usr1(int sig) {
    (void)sig;
    stop = 1;
}

int main(void) {
    signal(SIGUSR1, on_usr1);
    printf("ready\n");
    fflush(stdout);
    unsigned long rounds = 0;
    struct timespec pause = {0, 2000000};
    while (!stop) {
        for (int i = 0; i < 100; i++) {
            char *volatile p = malloc(64);
            p[0] = (char)i;
            free(p);
        }
        rounds++;
        nanosleep(&pause, NULL);
    }
    printf("done %lu\n", rounds);
    return 0;
}
