/*
 * null_calls.c — calls that change nothing, which a per-function table
 * counts all the same: free(NULL) 1234 times, sbrk(0) 567 times,
 * malloc_usable_size 89 times (of one block of 100 bytes, freed at the end).
 *
 * Expected, from this program: free 1235 calls (mean size 100: the one
 * block), sbrk 567 (no size), malloc_usable_size 89, malloc 1; the break
 * does not move. Exit code 0; 1 if a call did not answer as it should.
 *
 * "PROG baseline" returns 0 at once: the same process with none of the work,
 * whose counts (the C runtime's own calls, if any) a test subtracts.
 */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "baseline") == 0) return 0;
    void *volatile nothing = NULL;
    for (int i = 0; i < 1234; i++) free(nothing);
    void *start = sbrk(0);
    for (int i = 1; i < 567; i++)
        if (sbrk(0) != start) return 1;
    char *p = malloc(100);
    for (int i = 0; i < 89; i++)
        if (malloc_usable_size(p) < 100) return 1;
    free(p);
    return 0;
}
