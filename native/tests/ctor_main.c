/* Links ctor_lib.so (one 777-byte block from its constructor, freed by its
 * destructor) and leaks exactly one block of 555 bytes itself. */
#include <stdlib.h>

void *ctor_lib_kept(void);

static volatile void *sink;

int main(void) {
    if (!ctor_lib_kept()) return 2;
    sink = malloc(555);
    return 0;
}
