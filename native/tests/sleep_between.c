/*
 * sleep_between.c — timing: first_alloc does malloc(100), the program then
 * sleeps 200 ms (nanosleep, no allocation), second_alloc does malloc(200),
 * and both blocks are freed; returns 0.
 *
 * Expected: malloc calls 2, free calls 2; the peak (300 live bytes) is
 * reached by the second malloc, at least 200 ms after tracing started; the
 * traced duration is at least 200 ms; the first event is well before that.
 * No stdio.
 */
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) static void *first_alloc(void) { return malloc(100); }
__attribute__((noinline)) static void *second_alloc(void) { return malloc(200); }

int main(void) {
    void *a = first_alloc();
    struct timespec ts = {0, 200 * 1000 * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
    void *b = second_alloc();
    free(a);
    free(b);
    return 0;
}
