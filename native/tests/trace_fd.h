/*
 * trace_fd.h — for test programs that act on the tracer's own descriptor:
 * the lowest descriptor from 900 up (where the tracer moves its trace) that
 * names a trace file (.mtl), or -1 while the trace is not open yet.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int trace_fd(void) {
    for (int fd = 900; fd < 1024; fd++) {
        char link[64], target[512];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, target, sizeof target - 1);
        if (n > 0) {
            target[n] = 0;
            if (strstr(target, ".mtl")) return fd;
        }
    }
    return -1;
}
