/*
 * resolve.c — finding the real allocator functions behind the shims.
 *
 * dlsym itself may allocate (glibc's dlerror state uses calloc); while we are
 * resolving, those calls are served from a small static pool, as heaptrack
 * does, and frees of pool memory are ignored.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "internal.h"

HIDDEN struct mtlab_real mtlab_real;

HIDDEN _Alignas(64) unsigned char mtlab_pool[64 * 1024];
#define pool mtlab_pool
static _Atomic size_t pool_used;
static _Atomic int resolved; /* 0 no, 1 in progress, 2 done */

/* 16-byte header holds the size so realloc of pool memory can copy. */
void *mtlab_bootstrap_alloc(size_t n) {
    size_t need = (n + 16 + 15) & ~(size_t)15;
    size_t off = atomic_fetch_add(&pool_used, need);
    if (off + need > sizeof pool) return NULL;
    *(size_t *)(pool + off) = n;
    return pool + off + 16;
}

int mtlab_pool_in_use(void) { return atomic_load(&pool_used) != 0; }

#define RESOLVE(name) mtlab_real.name = (__typeof__(mtlab_real.name))dlsym(RTLD_NEXT, #name)

void mtlab_resolve(void) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&resolved, &expected, 1)) {
        while (atomic_load(&resolved) != 2) { /* another thread is resolving */
        }
        return;
    }
    MTLAB_GUARD_ENTER(&mtlab_tls);
    RESOLVE(malloc);
    RESOLVE(free);
    RESOLVE(calloc);
    RESOLVE(realloc);
    RESOLVE(reallocarray);
    RESOLVE(posix_memalign);
    RESOLVE(aligned_alloc);
    RESOLVE(memalign);
    RESOLVE(valloc);
    RESOLVE(pvalloc);
    RESOLVE(malloc_usable_size);
    RESOLVE(mmap);
    RESOLVE(mmap64);
    RESOLVE(munmap);
    RESOLVE(mremap);
    RESOLVE(brk);
    RESOLVE(sbrk);
    RESOLVE(execve);
    RESOLVE(execvp);
    RESOLVE(execvpe);
    RESOLVE(fexecve);
    RESOLVE(abort);
    RESOLVE(pthread_create);
    RESOLVE(dlclose);
    RESOLVE(prctl);
    RESOLVE(syscall);
    mtlab_real.curbrk = (void **)dlsym(RTLD_DEFAULT, "__curbrk");
    mtlab_tls.guard--;
    atomic_store(&resolved, 2);
}
