/* Seven 100-byte blocks allocated and freed by the main thread: all seven
 * stay in glibc's thread cache (tcache: 7 chunks per size, up to 1032 B),
 * which mallinfo2 counts as in use, beside the thread's cache table itself;
 * mtlab counts 0 bytes in use at exit (tests/e2e.rs). */
#include <stdlib.h>

int main(void) {
    void *p[7];
    for (int i = 0; i < 7; i++) p[i] = malloc(100);
    for (int i = 0; i < 7; i++) free(p[i]);
    return 0;
}
