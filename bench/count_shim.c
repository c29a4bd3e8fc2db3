/*
 * count_shim.c — an independent count for bench/flight_window.sh: an
 * LD_PRELOAD library that counts malloc/calloc/realloc/free calls and the
 * bytes requested, and passes each call on (dlsym RTLD_NEXT). The counters
 * are exported (count_malloc, count_calloc, count_realloc, count_free,
 * count_bytes) for the program to read, e.g. with Python's ctypes.
 * calloc during dlsym's own start-up is served from a static pool.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
uint64_t count_malloc, count_calloc, count_realloc, count_free, count_bytes;
static void *(*m)(size_t); static void (*f)(void *); static void *(*r)(void *, size_t);
static char boot[65536]; static size_t boot_used;
static void *bootalloc(size_t n) { void *p = boot + boot_used; boot_used += (n + 15) & ~15ul; return p; }
void *malloc(size_t n) { if (!m) { m = dlsym(RTLD_NEXT, "malloc"); } __atomic_add_fetch(&count_malloc, 1, 0); __atomic_add_fetch(&count_bytes, n, 0); return m(n); }
void free(void *p) { if ((char *)p >= boot && (char *)p < boot + sizeof boot) return; if (!f) f = dlsym(RTLD_NEXT, "free"); if (p) __atomic_add_fetch(&count_free, 1, 0); f(p); }
void *calloc(size_t a, size_t b) { static void *(*c)(size_t, size_t); static int in; if (!c) { if (in) return bootalloc(a * b); in = 1; c = dlsym(RTLD_NEXT, "calloc"); in = 0; } __atomic_add_fetch(&count_calloc, 1, 0); __atomic_add_fetch(&count_bytes, a * b, 0); return c(a, b); }
void *realloc(void *p, size_t n) { if (!r) r = dlsym(RTLD_NEXT, "realloc"); __atomic_add_fetch(&count_realloc, 1, 0); __atomic_add_fetch(&count_bytes, n, 0); return r(p, n); }
