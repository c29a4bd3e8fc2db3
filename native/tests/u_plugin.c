/* u_plugin.c — the shared library u_places.c loads with dlopen (built
 * -O2 -fomit-frame-pointer -fPIC -shared). */
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))
void *volatile plugin_keep;

NOINLINE void plugin_inner(size_t size) { plugin_keep = malloc(size); __asm__ volatile("" ::: "memory"); }
NOINLINE void plugin_outer(size_t size) { plugin_inner(size); __asm__ volatile("" ::: "memory"); }
