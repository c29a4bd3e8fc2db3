/* s_got.c — where this program's own PLT slots for the allocation functions
 * point, so a test can see mtlab's GOT routing (crates/mtlab/tests/sampler.rs).
 *
 * Finds its own R_X86_64_JUMP_SLOT relocations (dl_iterate_phdr on the main
 * program, then its dynamic section) for malloc, calloc, realloc and free.
 * Prints "pid N", then obeys commands read from stdin, one a line:
 *
 *   show            "slots malloc=LIB calloc=LIB realloc=LIB free=LIB": the
 *                   file (base name) dladdr gives for each slot's value
 *   alloc N SIZE K  N blocks of SIZE bytes from malloc (in got_site), the
 *                   first K kept live until exit; prints "done alloc"
 *   fork            the child prints "child " + show's line and exits 0; the
 *                   parent waits for it and prints "forked"
 *   ignore SIG      sets signal SIG to SIG_IGN (a program that takes over
 *                   mtlab's signal); prints "ignored"
 *   exit (or EOF)   frees the kept blocks and exits 0
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const names[] = {"malloc", "calloc", "realloc", "free"};
#define N_NAMES (sizeof names / sizeof names[0])
static void **slot[N_NAMES];

static int find_slots(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    ElfW(Addr) base = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 1;
    const ElfW(Rela) *rel = NULL;
    size_t relsz = 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        ElfW(Addr) v = dyn->d_un.d_ptr;
        if (v < base) v += base; /* not relocated in place */
        if (dyn->d_tag == DT_JMPREL) rel = (const ElfW(Rela) *)v;
        if (dyn->d_tag == DT_PLTRELSZ) relsz = dyn->d_un.d_val;
        if (dyn->d_tag == DT_SYMTAB) symtab = (const ElfW(Sym) *)v;
        if (dyn->d_tag == DT_STRTAB) strtab = (const char *)v;
    }
    for (size_t i = 0; rel && symtab && strtab && i < relsz / sizeof *rel; i++) {
        if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT) continue;
        const char *name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
        for (size_t n = 0; n < N_NAMES; n++)
            if (strcmp(name, names[n]) == 0) slot[n] = (void **)(base + rel[i].r_offset);
    }
    return 1; /* the first object is the program */
}

static const char *owner(void **s) {
    if (!s) return "none";
    Dl_info di;
    if (!dladdr(*s, &di) || !di.dli_fname) return "unknown";
    const char *b = strrchr(di.dli_fname, '/');
    return b ? b + 1 : di.dli_fname;
}

static void show(const char *prefix) {
    printf("%sslots", prefix);
    for (size_t n = 0; n < N_NAMES; n++) printf(" %s=%s", names[n], owner(slot[n]));
    printf("\n");
    fflush(stdout);
}

__attribute__((noinline)) void *got_site(size_t n) { return malloc(n); }

int main(void) {
    dl_iterate_phdr(find_slots, NULL);
    size_t cap = 16, n_kept = 0;
    void **kept = calloc(cap, sizeof *kept);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        long count, size, keep;
        if (strncmp(line, "show", 4) == 0) {
            show("");
        } else if (sscanf(line, "alloc %ld %ld %ld", &count, &size, &keep) == 3) {
            for (long i = 0; i < count; i++) {
                void *p = got_site((size_t)size);
                memset(p, 0, 16);
                if (i < keep) {
                    if (n_kept == cap) kept = realloc(kept, (cap *= 2) * sizeof *kept);
                    kept[n_kept++] = p;
                } else {
                    free(p);
                }
            }
            printf("done alloc\n");
            fflush(stdout);
        } else if (strncmp(line, "fork", 4) == 0) {
            pid_t c = fork();
            if (c == 0) {
                show("child ");
                exit(0);
            }
            waitpid(c, NULL, 0);
            printf("forked\n");
            fflush(stdout);
        } else if (sscanf(line, "ignore %ld", &count) == 1) {
            signal((int)count, SIG_IGN);
            printf("ignored\n");
            fflush(stdout);
        } else if (strncmp(line, "exit", 4) == 0) {
            break;
        }
    }
    for (size_t i = 0; i < n_kept; i++) free(kept[i]);
    free(kept);
    return 0;
}
