/* A library that allocates in its constructor and frees in its destructor,
 * as libstdc++ and libselinux do: its constructor runs before mtlab's (the
 * loader initializes a preloaded library after the libraries the program
 * links), its destructor after mtlab's destructor would. Built as a shared
 * library and linked by ctor_main.c. */
#include <stdlib.h>

static void *kept;

__attribute__((constructor)) static void ctor_lib_start(void) { kept = malloc(777); }

__attribute__((destructor)) static void ctor_lib_end(void) { free(kept); }

void *ctor_lib_kept(void) { return kept; }
