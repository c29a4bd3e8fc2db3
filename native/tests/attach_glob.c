/* Allocations that reach malloc and free through GLOB_DAT slots
 * (tests/attach.rs): glibc's own calls from strdup, fopen, getline and
 * fclose, and, built with -fno-plt, the program's own calls too.
 *
 *   attach_glob FILE         writes FILE (10 short lines, with write(2)),
 *                            "ready"; on SIGUSR1 one phase, "phase 1 done";
 *                            on SIGUSR1 again "phase 2 done N", exit 0
 *   attach_glob FILE REPS    the phase REPS times at once, "done N", exit 0
 *                            (the same phase under `mtlab record`)
 *
 * One phase: 40 x strdup + free; fopen(FILE), getline to its end, fclose,
 * free of the line; 20 x malloc(100) + free. glibc 2.36: 63 mallocs (40
 * strdup, the FILE, its buffer at the first read, getline's first line of
 * 120 bytes, 20 own) and 63 frees.
 *
 * Phase 1 also keeps free's address as read then (from the GLOB_DAT slot,
 * routed while attached), and phase 2 calls it after the detach: it must
 * still free. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void (*volatile kept_free)(void *);

static unsigned long phase(const char *file) {
    unsigned long sum = 0;
    for (int i = 0; i < 40; i++) {
        char *s = strdup("a string of some length");
        sum += (unsigned long)strlen(s);
        free(s);
    }
    FILE *f = fopen(file, "r");
    if (!f) return 0;
    char *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) sum += (unsigned char)line[0];
    fclose(f);
    free(line);
    for (int i = 0; i < 20; i++) {
        unsigned char *p = malloc(100);
        memset(p, i, 100);
        sum += p[99];
        free(p);
    }
    return sum;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int i = 0; i < 10 && fd >= 0; i++) {
        char l[] = "line 0 of the file\n";
        l[5] = (char)('0' + i);
        if (write(fd, l, sizeof l - 1) != (ssize_t)(sizeof l - 1)) return 3;
    }
    if (fd < 0 || close(fd) != 0) return 3;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2) {
        unsigned long sum = 0;
        for (int r = atoi(argv[2]); r > 0; r--) sum += phase(argv[1]);
        printf("done %lu\n", sum);
        return 0;
    }
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    printf("ready\n");
    int sig;
    sigwait(&usr1, &sig);
    unsigned long sum = phase(argv[1]);
    kept_free = free;
    printf("phase 1 done\n");
    sigwait(&usr1, &sig);
    kept_free(malloc(77));
    printf("phase 2 done %lu\n", sum + phase(argv[1]));
    return 0;
}
