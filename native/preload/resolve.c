/*
 * resolve.c — finding the real allocator functions behind the shims.
 *
 * dlsym itself may allocate (glibc's dlerror state uses calloc); while we are
 * resolving, those calls are served from a small static pool, as heaptrack
 * does, and frees of pool memory are ignored.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
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

/* Preloaded, the real function is the next definition after ours. Attached,
 * the library was dlopen'ed RTLD_LOCAL: the global scope never holds ours,
 * and its first definition is the one the program's calls reach. */
#ifdef MTLAB_ATTACH

/* A program built without -fPIC and -pie that takes a function's address in
 * its code (`p = malloc;`, as Debian's python3 does) makes its own PLT entry
 * the function's canonical address: the program's dynamic symbol stays
 * undefined but gets that entry as its value, and the global lookup returns
 * it. Calling that entry jumps through the program's own slot, the very one
 * routing points at the shims: the shims would call themselves, and routing
 * would not recognise the slot's bound value as the real function and leave
 * it alone (no call of the program counted). The real function is the
 * definition the slot binds to: the first module after the program, in load
 * order, that defines the name. */
struct module_span {
    const char *name;
    uintptr_t lo, hi;
};
struct module_spans {
    struct module_span m[256];
    unsigned n;
};

static int span_of(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct module_spans *s = arg;
    if (s->n == sizeof s->m / sizeof *s->m) return 1;
    struct module_span m = {.name = info->dlpi_name ? info->dlpi_name : "", .lo = UINTPTR_MAX};
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (start < m.lo) m.lo = start;
        if (start + ph->p_memsz > m.hi) m.hi = start + ph->p_memsz;
    }
    s->m[s->n++] = m;
    return 0;
}

static int within(const struct module_span *m, const void *p) {
    return (uintptr_t)p >= m->lo && (uintptr_t)p < m->hi;
}

HIDDEN uintptr_t mtlab_loader_lo, mtlab_loader_hi;

/* The dynamic linker looks up its own malloc, calloc, realloc and free the
 * same way, so it too calls through the program's entry, and through the
 * slot routing points at the shims: while it sets up a new thread's
 * thread-local blocks, mtlab's among them. The shims hand its calls on
 * untouched (FROM_LOADER, shims.c); this is where its code lies. */
static void note_loader(const struct module_spans *spans) {
    void *tls_get_addr = dlsym(RTLD_DEFAULT, "__tls_get_addr"); /* defined by the dynamic linker */
    for (unsigned i = 0; i < spans->n; i++)
        if (within(&spans->m[i], tls_get_addr)) {
            mtlab_loader_lo = spans->m[i].lo;
            mtlab_loader_hi = spans->m[i].hi;
        }
}

static void *past_canonical_plt(const char *name, void *f) {
#ifdef MTLAB_MUSL
    /* musl has no dladdr1: the program's own relocations say whether it
     * takes the name from elsewhere (musl.c). */
    if (!f || !mtlab_program_imports(name, f)) return f;
#else
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    /* dladdr matches undefined symbols that have a value: exactly these entries. */
    if (!f || !dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || sym->st_shndx != SHN_UNDEF) return f;
#endif
    struct module_spans spans = {.n = 0}; /* on the stack: operator new's forms resolve on any thread */
    dl_iterate_phdr(span_of, &spans); /* no dlopen inside: the callback holds the loader's lock */
    if (!mtlab_loader_hi) note_loader(&spans);
    unsigned i = 0;
    while (i < spans.n && !within(&spans.m[i], f)) i++;
    for (i++; i < spans.n; i++) {
        const struct module_span *m = &spans.m[i];
        if (!m->name[0] || within(m, (void *)past_canonical_plt)) continue; /* the vDSO; mtlab itself */
        void *h = dlopen(m->name, RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *g = dlsym(h, name); /* the module's own definition comes first in its scope */
        dlclose(h);
        if (g && within(m, g)) return g;
    }
    return f;
}
#define LOOKUP(name) past_canonical_plt(name, dlsym(RTLD_DEFAULT, name))
#else
#define LOOKUP(name) dlsym(RTLD_NEXT, name)
#endif
#define RESOLVE(name) mtlab_real.name = (__typeof__(mtlab_real.name))LOOKUP(#name)

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
    RESOLVE(posix_spawn);
    RESOLVE(posix_spawnp);
    RESOLVE(abort);
    RESOLVE(pthread_create);
    RESOLVE(pthread_join);
    RESOLVE(dlclose);
    RESOLVE(dlopen);
    RESOLVE(prctl);
    RESOLVE(syscall);
    mtlab_real.curbrk = (void **)dlsym(RTLD_DEFAULT, "__curbrk");
    mtlab_tls.guard--;
    atomic_store(&resolved, 2);
}

/* ---- C++ operator new and delete ---- */

HIDDEN struct mtlab_cxx mtlab_cxx;

/* Mangled names by form (MTLAB_NEW_* bits: array, nothrow, aligned;
 * MTLAB_DELETE_SIZED besides for delete). NULL: no such form. */
static const char *const new_names[MTLAB_NEW_FORMS] = {
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t",
    "_ZnwmSt11align_val_t", "_ZnamSt11align_val_t",
    "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
};
static const char *const delete_names[MTLAB_DELETE_FORMS] = {
    "_ZdlPv", "_ZdaPv", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
    "_ZdlPvm", "_ZdaPvm", NULL, NULL, "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    NULL, NULL,
};

/* Where nothing after mtlab defines the operator: a C++ library loaded
 * with RTLD_LOCAL brings its runtime into its own scope only, yet binds its
 * operator calls to mtlab's (the global scope comes first). */
static void *in_runtime(const char *name) {
    static const char *const runtimes[] = {"libstdc++.so.6", "libc++.so.1"};
    for (unsigned i = 0; i < sizeof runtimes / sizeof *runtimes; i++) {
        void *h = dlopen(runtimes[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h) continue;
        void *f = dlsym(h, name);
        dlclose(h);
        if (f) return f;
    }
    return NULL;
}

static int is_runtime(void *f) {
    Dl_info info;
    if (!dladdr(f, &info) || !info.dli_fname) return 0;
    return strstr(info.dli_fname, "libstdc++") != NULL || strstr(info.dli_fname, "libc++") != NULL;
}

/* Found at a form's first call, not at start: most traced programs are C,
 * where every look-up would fail after walking every loaded object. Returns
 * NULL where no definition exists anywhere (the shim then uses malloc or
 * free); the next call looks again. */
void *mtlab_cxx_resolve(int is_delete, unsigned form) {
    const char *name = is_delete ? delete_names[form] : new_names[form];
    if (!name) return NULL;
    void *_Atomic *slot = is_delete ? &mtlab_cxx.delete_fn[form] : &mtlab_cxx.new_fn[form];
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f) return f;
    MTLAB_GUARD_ENTER(&mtlab_tls);
    f = LOOKUP(name);
    if (!f) f = in_runtime(name);
    if (f) {
        unsigned char via = (unsigned char)is_runtime(f);
        if (is_delete) atomic_store(&mtlab_cxx.delete_via_malloc[form], via);
        else atomic_store(&mtlab_cxx.new_via_malloc[form], via);
        atomic_store_explicit(slot, f, memory_order_release);
    }
    mtlab_tls.guard--;
    return f;
}
