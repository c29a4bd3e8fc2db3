/*
 * musl.c — what the musl build of the library (MTLAB_MUSL, build.rs) needs
 * that musl's libc does not export.
 *
 * musl-gcc links libgcc's unwinder statically (libgcc_eh.a: the shims are
 * built with -fexceptions, so a C++ operator new that throws runs the shim's
 * cleanup and its _Unwind_Resume). Debian's libgcc_eh.a was built against
 * glibc ≥ 2.35 and finds a frame's unwind tables with glibc's
 * _dl_find_object, which musl has not: left undefined, musl's loader would
 * refuse to load the library at all. Defined here (hidden, so only the
 * static unwinder binds to it) with dl_iterate_phdr, which musl has: the
 * loaded object whose PT_LOAD segments hold the address, and its
 * PT_GNU_EH_FRAME segment (.eh_frame_hdr), which is what the unwinder reads.
 *
 * And glibc's dladdr1, which the attach build uses to tell a program's PLT
 * entry made a function's canonical address (resolve.c): here the
 * program's own relocations say whether it imports the name.
 */
#ifdef MTLAB_MUSL
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <sys/auxv.h>
#include <string.h>

#include "internal.h"

/* glibc's layout on x86-64 (dlfcn.h; no dlfo_eh_dbase, no dlfo_eh_count). */
struct dl_find_object {
    unsigned long long dlfo_flags;
    void *dlfo_map_start;
    void *dlfo_map_end;
    void *dlfo_link_map;
    void *dlfo_eh_frame;
    unsigned long long dlfo_reserved[7];
};

struct find_ctx {
    uintptr_t pc;
    struct dl_find_object *out;
    int found;
};

static int find_object(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct find_ctx *c = arg;
    const ElfW(Phdr) *eh = NULL;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    int inside = 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_GNU_EH_FRAME) eh = ph;
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
        if (start < lo) lo = start;
        if (end > hi) hi = end;
        if (c->pc >= start && c->pc < end) inside = 1;
    }
    if (!inside) return 0;
    memset(c->out, 0, sizeof *c->out);
    c->out->dlfo_map_start = (void *)lo;
    c->out->dlfo_map_end = (void *)hi;
    c->out->dlfo_eh_frame = eh ? (void *)(info->dlpi_addr + eh->p_vaddr) : NULL;
    c->found = 1;
    return 1;
}

HIDDEN int _dl_find_object(void *pc, struct dl_find_object *out);
int _dl_find_object(void *pc, struct dl_find_object *out) {
    struct find_ctx c = {(uintptr_t)pc, out, 0};
    dl_iterate_phdr(find_object, &c);
    return c.found ? 0 : -1;
}

/* ---- the program's imports (resolve.c, attach build) ---- */

struct import_ctx {
    const char *name;
    uintptr_t f;
    int found;
};

static int program_imports(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    struct import_ctx *c = arg;
    if ((uintptr_t)info->dlpi_phdr != (uintptr_t)getauxval(AT_PHDR)) return 0;
    uintptr_t base = info->dlpi_addr, dyn = 0;
    int inside = 0;
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = base + ph->p_vaddr;
        if (ph->p_type == PT_DYNAMIC) dyn = start;
        if (ph->p_type == PT_LOAD && c->f >= start && c->f < start + ph->p_memsz) inside = 1;
    }
    if (!inside || !dyn) return 1;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const ElfW(Rela) *tables[2] = {NULL, NULL};
    size_t sizes[2] = {0, 0};
    /* musl leaves the dynamic section's addresses unrelocated (glibc
     * relocates a writable one in place): below the load bias, an offset. */
#define DPTR(v) ((uintptr_t)(v) < base ? (uintptr_t)(v) + base : (uintptr_t)(v))
    for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)DPTR(d->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)DPTR(d->d_un.d_ptr); break;
        case DT_JMPREL: tables[0] = (const ElfW(Rela) *)DPTR(d->d_un.d_ptr); break;
        case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
        case DT_RELA: tables[1] = (const ElfW(Rela) *)DPTR(d->d_un.d_ptr); break;
        case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
        }
    }
#undef DPTR
    if (!symtab || !strtab) return 1;
    for (int t = 0; t < 2 && !c->found; t++)
        for (size_t i = 0; tables[t] && i < sizes[t] / sizeof *tables[t]; i++) {
            const ElfW(Sym) *sym = &symtab[ELF64_R_SYM(tables[t][i].r_info)];
            if (sym->st_name && sym->st_shndx == SHN_UNDEF && strcmp(strtab + sym->st_name, c->name) == 0) {
                c->found = 1;
                break;
            }
        }
    return 1;
}

int mtlab_program_imports(const char *name, const void *f) {
    struct import_ctx c = {name, (uintptr_t)f, 0};
    dl_iterate_phdr(program_imports, &c);
    return c.found;
}
#endif
