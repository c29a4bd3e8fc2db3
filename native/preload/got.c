/*
 * got.c — GOT routing: an inactive sampler costs nothing on the call path.
 *
 * In sampling mode every allocation call still went PLT → mtlab's shim →
 * state check → tail call to the real function, even while sampling was
 * switched off. Instead, the PLT slots that the modules loaded at startup use
 * for the intercepted functions are rewritten: while sampling is off they
 * hold the real functions (mtlab_real, dlsym RTLD_NEXT — exactly where the
 * shims would forward to), so the program runs the instructions it runs
 * without mtlab; when sampling is switched on they point at the shims again.
 *
 *   active                       every routed function → shim
 *   inactive, MTLAB_CTL_LIVE set allocations → real; free, realloc and
 *                                reallocarray → shim (frees of sampled
 *                                blocks are still recorded)
 *   inactive, nothing live       every routed function → real
 *   mmap family                  always real (sampling mode passes them through)
 *
 * The shims keep checking the state, so a slot that was not (or not yet)
 * rewritten is only slower, never wrong: modules dlopen'ed later, calls
 * through other relocations, a switch whose signal did not arrive.
 *
 * Only R_X86_64_JUMP_SLOT slots are rewritten, not R_X86_64_GLOB_DAT: a
 * GLOB_DAT slot is also where position-independent code reads a function's
 * *address* (`void (*f)(void *) = free;`). Rewriting it would make the same
 * function compare unequal to itself across a switch, and a pointer taken
 * while routed to the real function would keep bypassing the shims after
 * `start` (frees of sampled blocks through it would be missed). A JUMP_SLOT
 * is only ever jumped through by its module's PLT, and the canonical address
 * of a function in a non-PIC executable is its PLT entry, whose jumps follow
 * the slot. The price: code built with -fno-plt, and glibc's own internal
 * malloc/free (GLOB_DAT in libc.so.6), still pass through the shims.
 * Attached, where the shims are reached through slots alone, the malloc
 * family's GLOB_DAT slots are routed too, through stubs whose address stays
 * the same for the whole session (see "stubs" below).
 *
 * Everything is found once, in the constructor (mtlab_got_scan), and cached
 * in static arrays; mtlab_got_route only loads, stores and calls mprotect, so
 * the signal handler may call it.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "internal.h"

#define W_ALLOC MTLAB_CTL_ROUTE_ALLOC /* allocation slots → shims */
#define W_FREE MTLAB_CTL_ROUTE_FREE   /* release slots → shims */

#if defined(__x86_64__)

#define MAX_MODULES 256
#define MAX_SLOTS 2048

static const char *const names[MTLAB_GOT_N] = {
    [MTLAB_GOT_MALLOC] = "malloc",         [MTLAB_GOT_CALLOC] = "calloc",
    [MTLAB_GOT_POSIX_MEMALIGN] = "posix_memalign", [MTLAB_GOT_ALIGNED_ALLOC] = "aligned_alloc",
    [MTLAB_GOT_MEMALIGN] = "memalign",     [MTLAB_GOT_VALLOC] = "valloc",
    [MTLAB_GOT_PVALLOC] = "pvalloc",       [MTLAB_GOT_FREE] = "free",
    [MTLAB_GOT_REALLOC] = "realloc",       [MTLAB_GOT_REALLOCARRAY] = "reallocarray",
    [MTLAB_GOT_MMAP] = "mmap",             [MTLAB_GOT_MMAP64] = "mmap64",
    [MTLAB_GOT_MUNMAP] = "munmap",         [MTLAB_GOT_MREMAP] = "mremap",
    [MTLAB_GOT_BRK] = "brk",               [MTLAB_GOT_SBRK] = "sbrk",
    [MTLAB_GOT_DLOPEN] = "dlopen",
};

struct slot {
    void **addr;
    void *orig; /* the value found at scan time (our shim, or a lazy-binding stub) */
    uint8_t fn;
    uint8_t glob; /* an R_X86_64_GLOB_DAT slot (attached only): points at stubs_code[fn] */
};

struct module {
    const char *name; /* dlpi_name: "" for the program */
    uintptr_t base, dyn, lo, hi;   /* load bias, PT_DYNAMIC, extent of the PT_LOADs */
    uintptr_t relro_lo, relro_hi;  /* pages the dynamic linker made read-only */
    uintptr_t ro_lo, ro_hi;        /* the read-only pages holding our slots (0, 0: none) */
    uint32_t first, n;             /* its slots */
};

static struct module modules[MAX_MODULES];
static struct slot slots[MAX_SLOTS];
static uint32_t n_modules, n_slots;
static void *shim_of[MTLAB_GOT_N], *real_of[MTLAB_GOT_N];
static int routable[MTLAB_GOT_N];
static int pool_used; /* fixed at scan: the bootstrap pool is filled only while resolving */

static _Atomic int enabled; /* our signal handler is installed: routing may follow the state */
static _Atomic int busy;    /* one router at a time */
static _Atomic int applied = -1; /* W_* bits the slots hold; -1: not routed yet / unknown */

static uintptr_t page_size;
static uintptr_t page_down(uintptr_t a) { return a & ~(page_size - 1); }

/* ---- stubs for GLOB_DAT slots (attached only) ----
 *
 * A GLOB_DAT slot is where position-independent code reads a function's
 * address: to call it (-fno-plt code; glibc's own calls of malloc and free,
 * from strdup, fopen, getline…) or to keep it (`obstack_init`, a table of
 * destructors, `tdestroy(root, free)`). Attached, such slots of the malloc
 * family point at a stub, `jmp *word`, whose word holds the shim while the
 * session routes that function and the real one otherwise: a pointer read
 * during the session and called after the detach, when the library is
 * gone, still lands in the real function. The stubs live in two pages of a
 * memfd named mtlab-stubs (code r-x, words rw-, both private: a fork child
 * keeps its own words), made at the first attach and found in the maps by
 * every later one, so the stub addresses stay the same for the process's
 * life. No stubs (memfd_create or an executable mapping refused): GLOB_DAT
 * slots are left alone, as before. */
#ifdef MTLAB_ATTACH
#define STUBS_NAME "/memfd:mtlab-stubs (deleted)"
#define STUBS_MAGIC 0x3162757473626c6dull /* "mlbstub1" */
#define STUB_BYTES 16
struct stubs_words {
    uint64_t magic, n, stub_bytes;
    void *_Atomic word[MTLAB_GOT_N];
};
static unsigned char *stubs_code;
static struct stubs_words *stubs_data;

static int stubs_fit(const struct stubs_words *w) {
    return w->magic == STUBS_MAGIC && w->n == MTLAB_GOT_N && w->stub_bytes == STUB_BYTES;
}

static void stubs_open(void) {
    uint64_t lo = 0, hi = 0;
    if (mtlab_find_mapping(STUBS_NAME, &lo, &hi) == 0) { /* an earlier session's: code page first */
        struct stubs_words *w = (struct stubs_words *)(uintptr_t)(lo + page_size);
        if (hi - lo == page_size && stubs_fit(w)) {
            stubs_code = (unsigned char *)(uintptr_t)lo;
            stubs_data = w;
        }
        return; /* another layout (another mtlab build): no GLOB_DAT routing */
    }
    int fd = (int)mtlab_sys6(SYS_memfd_create, (long)"mtlab-stubs", 1 /* MFD_CLOEXEC */, 0, 0, 0, 0);
    if (fd < 0) return;
    long at = -1;
    if (mtlab_sys_ftruncate(fd, 2 * page_size) == 0)
        at = mtlab_sys6(SYS_mmap, 0, (long)(2 * page_size), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    mtlab_sys_close(fd);
    if (at < 0 && at > -4096) return;
    unsigned char *code = (unsigned char *)at;
    struct stubs_words *w = (struct stubs_words *)(code + page_size);
    for (int f = 0; f < MTLAB_GOT_N; f++) {
        unsigned char *stub = code + f * STUB_BYTES;
        int32_t disp = (int32_t)((unsigned char *)&w->word[f] - (stub + 6));
        stub[0] = 0xff; /* jmp *disp32(%rip) */
        stub[1] = 0x25;
        memcpy(stub + 2, &disp, 4);
        memset(stub + 6, 0xcc, STUB_BYTES - 6); /* int3 */
        atomic_store(&w->word[f], real_of[f]);
    }
    w->n = MTLAB_GOT_N;
    w->stub_bytes = STUB_BYTES;
    w->magic = STUBS_MAGIC;
    if (mtlab_sys_mprotect(code, page_size, PROT_READ | PROT_EXEC) != 0) {
        /* Not executable here (a policy against it): no stubs, and no second
         * mapping of that name for a later session to trip on. */
        mtlab_sys_munmap(code, 2 * page_size);
        return;
    }
    stubs_code = code;
    stubs_data = w;
}

static inline void *stub_of(int fn) { return stubs_code + fn * STUB_BYTES; }
#else
static void *const stubs_data = NULL;
static inline void *stub_of(int fn) { (void)fn; return NULL; }
#endif

/* ---- scan ---- */

static int collect(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (vdso && (uintptr_t)info->dlpi_phdr >= vdso && (uintptr_t)info->dlpi_phdr < vdso + 0x10000) return 0;
    if (n_modules == MAX_MODULES) return 1;
    uintptr_t dyn_of = 0;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn_of = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    for (uint32_t i = 0; i < n_modules; i++)
        if (modules[i].dyn == dyn_of) return 0; /* scanned before (mtlab_got_add_loaded) */
    struct module m = {.name = info->dlpi_name ? info->dlpi_name : "", .base = info->dlpi_addr, .lo = UINTPTR_MAX};
    /* glibc names the program "", musl by the path it was started with
     * (which dlopen would not find): known by its program headers. */
    if ((uintptr_t)info->dlpi_phdr == (uintptr_t)getauxval(AT_PHDR)) m.name = "";
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD) {
            if (start < m.lo) m.lo = start;
            if (start + ph->p_memsz > m.hi) m.hi = start + ph->p_memsz;
        } else if (ph->p_type == PT_DYNAMIC) {
            m.dyn = start;
        } else if (ph->p_type == PT_GNU_RELRO) {
            /* As the dynamic linker protects it: the last partial page stays writable. */
            m.relro_lo = page_down(start);
            m.relro_hi = page_down(start + ph->p_memsz);
        }
    }
    /* mtlab's own library: its slots must keep reaching the real functions. */
    uintptr_t self = (uintptr_t)(void *)collect;
    if (!m.dyn || (self >= m.lo && self < m.hi)) return 0;
    modules[n_modules++] = m;
    return 0;
}

/* glibc relocates the d_ptr values of a writable dynamic section in place;
 * the vDSO's (and a read-only one's) stay offsets. */
static uintptr_t dptr(const struct module *m, uintptr_t v) { return v < m->base ? v + m->base : v; }

static const char *strtab_of(const struct module *m) {
    for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)m->dyn; d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_STRTAB) return (const char *)dptr(m, d->d_un.d_ptr);
    return NULL;
}

/* Whether a module among the first `n` names `m` as DT_NEEDED (by its
 * DT_SONAME, else the last part of its path): then the loader loaded it at
 * startup with them, or with a dlopen'ed module that needs it, which keeps
 * it loaded as long as that one. */
static int needed_by_another(const struct module *m, uint32_t n) {
    const char *strtab = strtab_of(m), *name = NULL;
    for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)m->dyn; strtab && d->d_tag != DT_NULL; d++)
        if (d->d_tag == DT_SONAME) name = strtab + d->d_un.d_val;
    if (!name) {
        const char *slash = strrchr(m->name, '/');
        name = slash ? slash + 1 : m->name;
    }
    if (!name[0]) return 0;
    for (uint32_t j = 0; j < n; j++) {
        const char *st = strtab_of(&modules[j]);
        if (!st || &modules[j] == m) continue;
        for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)modules[j].dyn; d->d_tag != DT_NULL; d++)
            if (d->d_tag == DT_NEEDED && strcmp(st + d->d_un.d_val, name) == 0) return 1;
    }
    return 0;
}

/* Set while the constructor scans: the loader may not have run every
 * startup module's initializers yet. */
static int at_startup;

/* A module dlopen'ed before the constructor (by another library's
 * constructor) could be dlclose'd later and its slots unmapped: keep every
 * scanned module loaded (RTLD_NODELETE). The handle must be this very module
 * (not one of the same name in another namespace). Returns 0 if the module
 * cannot be kept. A module another one needs is left alone in the
 * constructor: loaded at startup it is never unloaded, and a dlopen of it
 * from the constructor is not harmless (postgres 15, which loads 44
 * modules: after the dlopen of its libldap the program waited for ever on
 * glibc's gettext lock in `textdomain`, before its first line). */
static int pin(const struct module *m, int needed_at_startup) {
    if (!m->name[0]) return 1; /* the program */
    if (needed_at_startup) return 1;
    void *h = dlopen(m->name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (!h) return 0;
    struct link_map *lm = NULL;
    int ok = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && (uintptr_t)lm->l_ld == m->dyn;
    return ok; /* the handle stays open: one more reference on a module that is never unloaded */
}

static void scan_relocs(struct module *m, const ElfW(Rela) *rel, size_t bytes, const ElfW(Sym) *symtab,
                        const char *strtab, size_t strsz) {
    for (size_t i = 0; i < bytes / sizeof *rel; i++) {
        unsigned type = (unsigned)ELF64_R_TYPE(rel[i].r_info);
        if (type != R_X86_64_JUMP_SLOT && !(type == R_X86_64_GLOB_DAT && stubs_data)) continue;
        const ElfW(Sym) *sym = &symtab[ELF64_R_SYM(rel[i].r_info)];
        if (!sym->st_name || (strsz && sym->st_name >= strsz)) continue;
        const char *name = strtab + sym->st_name;
        int fn = -1;
        for (int f = 0; f < MTLAB_GOT_N; f++)
            if (routable[f] && strcmp(name, names[f]) == 0) fn = f;
        if (fn < 0) continue;
        /* GLOB_DAT: the malloc family's, which a pointer read from the slot
         * may outlive the session with (see the stubs above). */
        if (type == R_X86_64_GLOB_DAT && fn >= MTLAB_GOT_FIRST_PASS) continue;
        void **addr = (void **)(m->base + rel[i].r_offset);
        if ((uintptr_t)addr < m->lo || (uintptr_t)addr + sizeof *addr > m->hi) continue;
        void *cur = __atomic_load_n(addr, __ATOMIC_RELAXED);
        /* Bound to our shim, or not bound yet (lazy binding: the slot holds
         * the module's own PLT stub, and the lookup would find our shim —
         * checked in mtlab_got_scan). Anything else (another definition the
         * module binds to) is left alone. */
        int lazy = (uintptr_t)cur >= m->lo && (uintptr_t)cur < m->hi && cur != real_of[fn];
#ifdef MTLAB_ATTACH
        /* Attached, bound slots hold the real function (ours is not in the
         * global scope). */
        if (cur != real_of[fn] && !lazy) continue;
#else
        if (cur != shim_of[fn] && !lazy) continue;
#endif
        if (type == R_X86_64_GLOB_DAT && cur != real_of[fn]) continue; /* bound elsewhere (a canonical PLT entry) */
        if (n_slots == MAX_SLOTS) return;
        slots[n_slots++] = (struct slot){.addr = addr, .orig = cur, .fn = (uint8_t)fn, .glob = type == R_X86_64_GLOB_DAT};
    }
}

static void scan_module(struct module *m) {
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t pltrelsz = 0, relasz = 0, strsz = 0;
    long pltrel = DT_RELA;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)m->dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)dptr(m, d->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
        case DT_PLTREL: pltrel = (long)d->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)dptr(m, d->d_un.d_ptr); break;
        case DT_RELASZ: relasz = d->d_un.d_val; break;
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)dptr(m, d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)dptr(m, d->d_un.d_ptr); break;
        case DT_STRSZ: strsz = d->d_un.d_val; break;
        }
    }
    if (!symtab || !strtab) return;
    m->first = n_slots;
    if (jmprel && pltrel == DT_RELA) scan_relocs(m, jmprel, pltrelsz, symtab, strtab, strsz);
    if (rela) scan_relocs(m, rela, relasz, symtab, strtab, strsz); /* JUMP_SLOTs are normally in DT_JMPREL only */
    m->n = n_slots - m->first;

    /* Slots in the read-only part need mprotect around the write: check
     * now that the kernel allows it (a sealed mapping would not). */
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (uint32_t i = m->first; i < m->first + m->n; i++) {
        uintptr_t a = (uintptr_t)slots[i].addr;
        if (a >= m->relro_lo && a < m->relro_hi) {
            if (page_down(a) < lo) lo = page_down(a);
            if (page_down(a) + page_size > hi) hi = page_down(a) + page_size;
        }
    }
    if (hi) {
        if (mtlab_sys_mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0) {
            n_slots = m->first; /* cannot write there: leave this module alone */
            m->n = 0;
            return;
        }
        mtlab_sys_mprotect((void *)lo, hi - lo, PROT_READ);
        m->ro_lo = lo;
        m->ro_hi = hi;
    }
}

/* The modules dl_iterate_phdr lists that are not in modules[] yet: their
 * slots scanned, the modules holding any kept (a module without slots is
 * looked at again next time, it costs a walk of its relocations). */
static void scan_new(void) {
    static uint8_t needed[MAX_MODULES];
    uint32_t kept = n_modules;
    dl_iterate_phdr(collect, NULL);
    /* Before the loop below moves modules over the ones it drops. */
    for (uint32_t i = kept; i < n_modules; i++) needed[i] = at_startup && needed_by_another(&modules[i], n_modules);
    for (uint32_t i = kept; i < n_modules; i++) {
        if (!pin(&modules[i], needed[i])) continue;
        modules[kept] = modules[i];
        scan_module(&modules[kept]);
        if (modules[kept].n) kept++;
    }
    n_modules = kept;
}

void mtlab_got_scan(void) {
    page_size = (uintptr_t)getauxval(AT_PAGESZ);
    if (!page_size) page_size = 4096;
    mtlab_shim_addresses(shim_of);
    void *real[MTLAB_GOT_N] = {
        [MTLAB_GOT_MALLOC] = (void *)mtlab_real.malloc,
        [MTLAB_GOT_CALLOC] = (void *)mtlab_real.calloc,
        [MTLAB_GOT_POSIX_MEMALIGN] = (void *)mtlab_real.posix_memalign,
        [MTLAB_GOT_ALIGNED_ALLOC] = (void *)mtlab_real.aligned_alloc,
        [MTLAB_GOT_MEMALIGN] = (void *)mtlab_real.memalign,
        [MTLAB_GOT_VALLOC] = (void *)mtlab_real.valloc,
        [MTLAB_GOT_PVALLOC] = (void *)mtlab_real.pvalloc,
        [MTLAB_GOT_FREE] = (void *)mtlab_real.free,
        [MTLAB_GOT_REALLOC] = (void *)mtlab_real.realloc,
        [MTLAB_GOT_REALLOCARRAY] = (void *)mtlab_real.reallocarray,
        [MTLAB_GOT_MMAP] = (void *)mtlab_real.mmap,
        [MTLAB_GOT_MMAP64] = (void *)mtlab_real.mmap64,
        [MTLAB_GOT_MUNMAP] = (void *)mtlab_real.munmap,
        [MTLAB_GOT_MREMAP] = (void *)mtlab_real.mremap,
        [MTLAB_GOT_BRK] = (void *)mtlab_real.brk,
        [MTLAB_GOT_SBRK] = (void *)mtlab_real.sbrk,
        [MTLAB_GOT_DLOPEN] = (void *)mtlab_real.dlopen,
    };
    memcpy(real_of, real, sizeof real_of);
    /* A function is routed only if the lookup of its name finds our shim
     * (the program may define malloc itself) and the real one is known. */
    for (int f = 0; f < MTLAB_GOT_N; f++)
#ifdef MTLAB_ATTACH
        routable[f] = shim_of[f] && real_of[f] && real_of[f] != shim_of[f]; /* real_of is the global lookup itself */
#else
        routable[f] = shim_of[f] && real_of[f] && real_of[f] != shim_of[f] && dlsym(RTLD_DEFAULT, names[f]) == shim_of[f];
#endif
    pool_used = mtlab_pool_in_use();
#ifdef MTLAB_ATTACH
    if (!stubs_data) stubs_open();
#endif
    n_modules = 0;
    n_slots = 0;
#ifndef MTLAB_ATTACH
    at_startup = 1; /* the preload library's constructor; attached, the program has long started */
#endif
    scan_new();
    at_startup = 0;
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *arg) {
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the same count in every entry: one is enough */
}

/* ---- routing ---- */

static inline int release_fn(int fn) { return fn >= MTLAB_GOT_FIRST_RELEASE && fn < MTLAB_GOT_FIRST_PASS; }

/* Attached in full-trace mode: every routable slot goes to the shims, the
 * mmap family's too (a preloaded full trace sees those calls). */
static int attach_full;

static inline void *target(int fn, int w) {
    if (fn == MTLAB_GOT_DLOPEN) return shim_of[fn]; /* whatever the state: new modules are routed too */
    if (fn >= MTLAB_GOT_FIRST_PASS) return attach_full && (w & W_ALLOC) ? shim_of[fn] : real_of[fn];
    int to_shim = release_fn(fn) ? (w & W_FREE) : (w & W_ALLOC);
    return to_shim ? shim_of[fn] : real_of[fn];
}

/* Where a slot points in state w: a GLOB_DAT slot at its stub for the
 * whole session (its word follows the state), so that its value changes
 * only at attach and detach. */
static inline void *slot_target(const struct slot *s, int w) { return s->glob ? stub_of(s->fn) : target(s->fn, w); }

/* A slot is written only while it holds a value mtlab put or found there. */
static inline int ours(const struct slot *s, void *cur) {
    if (s->glob) return cur == stub_of(s->fn) || cur == s->orig;
    return cur == shim_of[s->fn] || cur == real_of[s->fn] || cur == s->orig;
}

static void apply(int w) {
#ifdef MTLAB_ATTACH
    /* The words first: a slot newly pointed at its stub finds it set. */
    if (stubs_data)
        for (int f = 0; f < MTLAB_GOT_FIRST_PASS; f++)
            if (routable[f]) atomic_store(&stubs_data->word[f], target(f, w));
#endif
    for (uint32_t m = 0; m < n_modules; m++) {
        const struct module *mod = &modules[m];
        int dirty = 0;
        for (uint32_t i = mod->first; i < mod->first + mod->n && !dirty; i++) {
            void *cur = __atomic_load_n(slots[i].addr, __ATOMIC_RELAXED);
            dirty = cur != slot_target(&slots[i], w) && ours(&slots[i], cur);
        }
        if (!dirty) continue;
        if (mod->ro_hi &&
            mtlab_sys_mprotect((void *)mod->ro_lo, mod->ro_hi - mod->ro_lo, PROT_READ | PROT_WRITE) != 0)
            continue;
        for (uint32_t i = mod->first; i < mod->first + mod->n; i++) {
            void *cur = __atomic_load_n(slots[i].addr, __ATOMIC_RELAXED);
            void *to = slot_target(&slots[i], w);
            /* One aligned 8-byte store: a thread jumping through the slot
             * meanwhile takes the old target or the new, both valid. */
            if (cur != to && ours(&slots[i], cur)) __atomic_store_n(slots[i].addr, to, __ATOMIC_RELAXED);
        }
        if (mod->ro_hi) mtlab_sys_mprotect((void *)mod->ro_lo, mod->ro_hi - mod->ro_lo, PROT_READ);
    }
}

/* What the control page's state wants. Without a page (a --no-follow fork
 * child) nothing is recorded any more: everything may go to the real
 * functions. Frees of bootstrap-pool memory must reach the free shim, which
 * ignores them. */
static int wanted(void) {
    if (attach_full) return W_ALLOC | W_FREE;
    struct mtlab_ctl_page *c = mtlab_ctl;
    uint32_t st = c ? __atomic_load_n(&c->state, __ATOMIC_SEQ_CST) : 0;
    int w = 0;
    if (st & MTLAB_CTL_ACTIVE) w |= W_ALLOC | W_FREE;
    if ((st & MTLAB_CTL_LIVE) || pool_used) w |= W_FREE;
    return w;
}

void mtlab_got_route(void) {
    if (!atomic_load(&enabled)) return;
    for (;;) {
        /* Another router (another thread, or the code this signal handler
         * interrupted) re-reads the state after it lets go: nothing is lost. */
        if (atomic_exchange(&busy, 1)) return;
        int w = wanted();
        if (w != atomic_load_explicit(&applied, memory_order_relaxed)) {
            apply(w);
            atomic_store_explicit(&applied, w, memory_order_relaxed);
        }
        struct mtlab_ctl_page *c = mtlab_ctl;
        if (c) __atomic_store_n(&c->routed, MTLAB_CTL_ROUTE_ON | (uint32_t)w, __ATOMIC_RELEASE);
        atomic_store(&busy, 0);
        if (wanted() == atomic_load_explicit(&applied, memory_order_relaxed)) return;
    }
}

void mtlab_got_enable(int on) { atomic_store(&enabled, on && n_slots > 0); }

void mtlab_got_fork_child(void) {
    /* A thread of the parent may have been routing when fork copied memory:
     * it does not exist here. Every slot is checked again at the next route. */
    atomic_store(&busy, 0);
    atomic_store(&applied, -1);
}

/* From mtlab_attach_dlopen: modules the loader added since the last scan
 * get their slots scanned and pointed where the others point, before the
 * caller of dlopen can call into them. The loader's count of added objects
 * makes the common case (nothing new) one walk of the loaded-object list. */
void mtlab_got_add_loaded(void) {
    static unsigned long long adds_seen;
    unsigned long long adds = 0;
    dl_iterate_phdr(count_adds, &adds);
    if (adds == __atomic_load_n(&adds_seen, __ATOMIC_RELAXED)) return;
    while (atomic_exchange(&busy, 1)) {
        if (!atomic_load(&enabled)) return; /* detaching: the restore holds it for good */
        mtlab_sys_sleep_ns(1000);
    }
    if (!atomic_load(&enabled)) { /* the restore is waiting for us */
        atomic_store(&busy, 0);
        return;
    }
    MTLAB_GUARD_ENTER(&mtlab_tls);
    __atomic_store_n(&adds_seen, adds, __ATOMIC_RELAXED);
    uint32_t before = n_modules;
    scan_new();
    int w = atomic_load_explicit(&applied, memory_order_relaxed);
    if (n_modules != before && w >= 0) apply(w);
    mtlab_tls.guard--;
    atomic_store(&busy, 0);
    mtlab_got_route(); /* the state may have changed while we held the slots */
}

void mtlab_got_attach_route(int full_trace) {
    attach_full = full_trace;
    if (full_trace) mtlab_got_enable(1);
    mtlab_got_route();
}

/* Detach: no router may run again, and every slot mtlab wrote gets back the
 * value it held at the scan (a single 8-byte store each, as in apply). */
void mtlab_got_restore(void) {
    atomic_store(&enabled, 0);
    while (atomic_exchange(&busy, 1)) mtlab_sys_sleep_ns(1000);
    for (uint32_t m = 0; m < n_modules; m++) {
        const struct module *mod = &modules[m];
        if (mod->ro_hi &&
            mtlab_sys_mprotect((void *)mod->ro_lo, mod->ro_hi - mod->ro_lo, PROT_READ | PROT_WRITE) != 0)
            continue;
        for (uint32_t i = mod->first; i < mod->first + mod->n; i++) {
            void *cur = __atomic_load_n(slots[i].addr, __ATOMIC_RELAXED);
            if (cur != slots[i].orig && ours(&slots[i], cur)) __atomic_store_n(slots[i].addr, slots[i].orig, __ATOMIC_RELAXED);
        }
        if (mod->ro_hi) mtlab_sys_mprotect((void *)mod->ro_lo, mod->ro_hi - mod->ro_lo, PROT_READ);
    }
#ifdef MTLAB_ATTACH
    /* Pointers read from GLOB_DAT slots meanwhile keep the stubs: from now
     * on they reach the real functions, with or without this library. */
    if (stubs_data)
        for (int f = 0; f < MTLAB_GOT_N; f++) atomic_store(&stubs_data->word[f], real_of[f]);
#endif
    atomic_store(&applied, -1);
    /* busy stays set: routing is over for this copy of the library. */
}

#else /* not x86-64: no routing, every call goes through the shims */

void mtlab_got_scan(void) {}
void mtlab_got_enable(int on) { (void)on; }
void mtlab_got_route(void) {}
void mtlab_got_fork_child(void) {}
void mtlab_got_attach_route(int full_trace) { (void)full_trace; }
void mtlab_got_restore(void) {}
void mtlab_got_add_loaded(void) {}

#endif
