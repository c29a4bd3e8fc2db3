/* The library attach_dlopen.c loads while mtlab is attached: allocations
 * made by a module the loader added after the attach. */
#include <stdlib.h>
#include <string.h>

unsigned long lib_allocate(void) {
    unsigned char *kept[40];
    unsigned long sum = 0;
    for (int i = 0; i < 40; i++) {
        kept[i] = malloc(200);
        memset(kept[i], i, 200);
        sum += kept[i][199];
    }
    for (int i = 0; i < 15; i++) free(kept[i]);
    return sum; /* 0 + 1 + ... + 39 = 780; 25 blocks stay allocated */
}
