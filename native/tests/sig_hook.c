/* A heap manager that a signal handler may call at any moment (linked by
 * sig_alloc.c, so mtlab's RTLD_NEXT lookup finds it): blocks are cut from a
 * static arena with one atomic add and never reused, so an allocation that
 * interrupts another is safe, as glibc's is not. Each call spins a little
 * first, so that a traced loop spends much of its time inside the real
 * allocator call mtlab is timing. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ARENA (256u << 20)
static _Alignas(64) unsigned char arena[ARENA];
static _Atomic size_t used;

static void spin(void) {
    for (volatile int i = 0; i < 300; i++) {
    }
}

static void *cut(size_t n, size_t align) {
    spin();
    if (align < 16) align = 16;
    size_t need = ((n + 15) & ~(size_t)15) + align;
    size_t at = atomic_fetch_add(&used, need);
    if (at + need > ARENA) return NULL;
    uintptr_t p = ((uintptr_t)arena + at + 16 + align - 1) & ~(uintptr_t)(align - 1);
    ((size_t *)p)[-1] = n;
    return (void *)p;
}

void *malloc(size_t n) { return cut(n, 16); }
void free(void *p) {
    (void)p;
    spin();
}
void *calloc(size_t a, size_t b) { return cut(a * b, 16); } /* the arena is never reused: zero */
size_t malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }
void *realloc(void *old, size_t n) {
    void *p = cut(n, 16);
    if (p && old) {
        size_t was = ((size_t *)old)[-1];
        memcpy(p, old, was < n ? was : n);
    }
    return p;
}
void *memalign(size_t align, size_t n) { return cut(n, align); }
void *aligned_alloc(size_t align, size_t n) { return cut(n, align); }
int posix_memalign(void **out, size_t align, size_t n) {
    *out = cut(n, align);
    return *out ? 0 : 12;
}
