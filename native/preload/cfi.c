/*
 * cfi.c — mtlab's own DWARF unwinder: whole stacks in code built without
 * frame pointers, at close to frame-pointer cost.
 *
 * Every x86-64 object carries call-frame information (.eh_frame, indexed by
 * .eh_frame_hdr) that says, for each instruction, where the caller's frame
 * starts (the CFA, almost always rsp+k or rbp+16) and where the return
 * address and the saved rbp lie relative to it. libgcc and libunwind find and
 * interpret that program again at every frame of every walk; here it is done
 * once per return address and thread:
 *
 *  - modules: a snapshot of the executable segments of the loaded objects
 *    and their .eh_frame_hdr search tables, built with dl_iterate_phdr at
 *    start and rebuilt when a return address lies outside every segment and
 *    the loader's object count moved (dlopen), or after a dlclose (the shim
 *    in shims.c bumps mtlab_cfi_gen);
 *  - rules: the CFA program of the FDE covering a return address, run up to
 *    it, is folded into an 8-byte rule (CFA base and offset, where rbp and the
 *    return address are saved) and kept in a per-thread direct-mapped cache
 *    keyed by the address, so a warm walk is a few loads per frame;
 *  - the walk: reads only this thread's stack between the first frame and the
 *    stack's top, the CFA must grow at every frame, and a return address
 *    outside every executable segment ends the walk. A return address in
 *    code without CFI steps by the frame pointer when rbp points into the
 *    stack; a signal trampoline (glibc's __restore_rt) resumes at the
 *    interrupted instruction from the ucontext the kernel pushed.
 *
 * Only x86-64 is unwound this way; elsewhere the walk uses frame pointers.
 */
#define _GNU_SOURCE
#include <link.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ucontext.h>

#include "internal.h"

HIDDEN _Atomic uint32_t mtlab_cfi_gen = 1;

#if defined(__x86_64__)

/* ---- modules ---- */

struct segment {
    uintptr_t lo, hi;        /* one executable PT_LOAD segment */
    const uint8_t *hdr;      /* its object's .eh_frame_hdr (NULL: none usable) */
    const int32_t *table;    /* sorted (initial location, FDE) pairs, hdr-relative */
    uint32_t count;
};

struct snapshot {
    uint32_t gen;              /* mtlab_cfi_gen it was built under */
    unsigned long long adds;   /* the loader's count of objects ever loaded */
    uint32_t n;
    size_t bytes;
    struct segment seg[];
};

static struct snapshot *_Atomic current;
static _Atomic int rebuilding;

struct build {
    struct snapshot *s;
    uint32_t cap;
    unsigned long long adds;
};

static void index_hdr(struct segment *g, const uint8_t *hdr) {
    g->hdr = NULL;
    g->table = NULL;
    g->count = 0;
    /* version 1, eh_frame_ptr any, fde_count udata4, table datarel|sdata4: what
     * every linker writes; other layouts fall back to frame pointers. */
    if (!hdr || hdr[0] != 1 || hdr[2] != 0x03 || hdr[3] != 0x3b) return;
    size_t ptr_len;
    switch (hdr[1] & 0x0f) {
    case 0x03: case 0x0b: ptr_len = 4; break;
    case 0x00: case 0x04: case 0x0c: ptr_len = 8; break;
    default: return;
    }
    uint32_t count;
    memcpy(&count, hdr + 4 + ptr_len, 4);
    g->hdr = hdr;
    g->table = (const int32_t *)(hdr + 8 + ptr_len);
    g->count = count;
}

static int collect(struct dl_phdr_info *info, size_t size, void *arg) {
    struct build *b = (struct build *)arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds) b->adds = info->dlpi_adds;
    const uint8_t *hdr = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME)
            hdr = (const uint8_t *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0) continue;
        if (b->s) {
            if (b->s->n >= b->cap) return 0;
            struct segment *g = &b->s->seg[b->s->n++];
            g->lo = info->dlpi_addr + ph->p_vaddr;
            g->hi = g->lo + ph->p_memsz;
            index_hdr(g, hdr);
        } else {
            b->cap++;
        }
    }
    return 0;
}

/* The loader's count of loaded objects, without building anything. */
static int adds_only(struct dl_phdr_info *info, size_t size, void *arg) {
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1;
}

static void rebuild(void) {
    int expected = 0;
    if (!atomic_compare_exchange_strong(&rebuilding, &expected, 1)) {
        /* Another thread builds it. With a snapshot to use (the constructor
         * built the first), use it: waiting could deadlock, if this thread
         * holds the loader's lock (a dl_iterate_phdr callback that allocates)
         * that the builder needs. Without one, wait a bounded while. */
        for (long spins = 0; !atomic_load(&current) && atomic_load(&rebuilding) && spins < (1L << 24); spins++)
            __builtin_ia32_pause();
        return;
    }
    uint32_t gen = atomic_load(&mtlab_cfi_gen);
    struct build b = {NULL, 0, 0};
    dl_iterate_phdr(collect, &b);
    b.cap += 16; /* room for objects loaded between the two passes */
    size_t bytes = sizeof(struct snapshot) + b.cap * sizeof(struct segment);
    struct snapshot *s = (struct snapshot *)mtlab_sys_mmap(bytes);
    if (s) {
        s->bytes = bytes;
        b.s = s;
        dl_iterate_phdr(collect, &b);
        for (uint32_t i = 1; i < s->n; i++) { /* by address; a few hundred at most */
            struct segment g = s->seg[i];
            uint32_t j = i;
            for (; j > 0 && s->seg[j - 1].lo > g.lo; j--) s->seg[j] = s->seg[j - 1];
            s->seg[j] = g;
        }
        s->gen = gen;
        s->adds = b.adds;
        /* The old snapshot stays mapped: a walk on another thread may still
         * be reading it. Rebuilds happen once per dlopen or dlclose. */
        atomic_store_explicit(&current, s, memory_order_release);
    }
    atomic_store(&rebuilding, 0);
}

/* The first snapshot, built by the constructor before the program's threads run. */
void mtlab_cfi_init(void) { rebuild(); }

static const struct segment *find_segment(const struct snapshot *s, uintptr_t pc) {
    uint32_t lo = 0, hi = s->n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (s->seg[mid].hi <= pc) lo = mid + 1;
        else hi = mid;
    }
    return lo < s->n && s->seg[lo].lo <= pc ? &s->seg[lo] : NULL;
}

/* The segment holding `pc`, from a fresh snapshot if the loader has loaded
 * something since the last one. */
static const struct segment *segment_of(uintptr_t pc) {
    struct snapshot *s = atomic_load_explicit(&current, memory_order_acquire);
    if (!s || s->gen != atomic_load_explicit(&mtlab_cfi_gen, memory_order_relaxed)) {
        rebuild();
        s = atomic_load_explicit(&current, memory_order_acquire);
        if (!s) return NULL;
    }
    const struct segment *g = find_segment(s, pc);
    if (g) return g;
    unsigned long long adds = 0;
    dl_iterate_phdr(adds_only, &adds);
    if (adds == s->adds) return NULL;
    rebuild();
    s = atomic_load_explicit(&current, memory_order_acquire);
    return s ? find_segment(s, pc) : NULL;
}

/* ---- reading .eh_frame ---- */

static uint64_t uleb(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    unsigned shift = 0;
    while (*p < end) {
        uint8_t b = *(*p)++;
        if (shift < 64) v |= (uint64_t)(b & 0x7f) << shift;
        shift += 7;
        if (!(b & 0x80)) break;
    }
    return v;
}

static int64_t sleb(const uint8_t **p, const uint8_t *end) {
    int64_t v = 0;
    unsigned shift = 0;
    uint8_t b = 0;
    while (*p < end) {
        b = *(*p)++;
        if (shift < 64) v |= (int64_t)((uint64_t)(b & 0x7f) << shift);
        shift += 7;
        if (!(b & 0x80)) break;
    }
    if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
    return v;
}

/* A DW_EH_PE-encoded pointer; 0 with *ok = 0 for encodings not handled. */
static uintptr_t encoded(const uint8_t **p, const uint8_t *end, uint8_t enc, int *ok) {
    const uint8_t *at = *p;
    uintptr_t v = 0;
    if (enc == 0xff) return 0; /* DW_EH_PE_omit */
    switch (enc & 0x0f) {
    case 0x00: case 0x04: case 0x0c: {
        if (end - at < 8) { *ok = 0; return 0; }
        uint64_t x; memcpy(&x, at, 8); v = (uintptr_t)x; *p += 8; break;
    }
    case 0x03: {
        if (end - at < 4) { *ok = 0; return 0; }
        uint32_t x; memcpy(&x, at, 4); v = x; *p += 4; break;
    }
    case 0x0b: {
        if (end - at < 4) { *ok = 0; return 0; }
        int32_t x; memcpy(&x, at, 4); v = (uintptr_t)(intptr_t)x; *p += 4; break;
    }
    case 0x02: {
        if (end - at < 2) { *ok = 0; return 0; }
        uint16_t x; memcpy(&x, at, 2); v = x; *p += 2; break;
    }
    case 0x0a: {
        if (end - at < 2) { *ok = 0; return 0; }
        int16_t x; memcpy(&x, at, 2); v = (uintptr_t)(intptr_t)x; *p += 2; break;
    }
    case 0x01: v = (uintptr_t)uleb(p, end); break;
    case 0x09: v = (uintptr_t)sleb(p, end); break;
    default: *ok = 0; return 0;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += (uintptr_t)at; break; /* pcrel */
    default: *ok = 0; return 0;           /* textrel/datarel/funcrel: not in .eh_frame on x86-64 */
    }
    if (enc & 0x80) *ok = 0; /* indirect: only personality pointers, which are skipped */
    return v;
}

/* Where one register was saved, as the CFA program leaves it. */
enum { REG_SAME = 0, REG_UNDEF, REG_AT_CFA, REG_AT_RBP, REG_UNSUPPORTED };
struct reg_rule { uint8_t kind; int64_t off; };
/* How the CFA is found. */
enum { CFA_RSP = 0, CFA_RBP, CFA_DEREF_RSP, CFA_DEREF_RBP, CFA_UNSUPPORTED };
struct frame_state {
    uint8_t cfa_kind;
    int64_t cfa_off;
    struct reg_rule rbp, ra;
};

#define DW_RBP 6
#define DW_RSP 7
#define STATE_STACK 8

struct cie {
    uint64_t code_align;
    int64_t data_align;
    uint64_t ra_reg;
    uint8_t fde_enc;
    int has_aug_len;
    const uint8_t *insns, *end;
};

static int parse_cie(const uint8_t *p, struct cie *c) {
    uint32_t len;
    memcpy(&len, p, 4);
    if (len == 0 || len == 0xffffffffu) return -1;
    const uint8_t *end = p + 4 + len;
    p += 8; /* length, CIE id */
    uint8_t version = *p++;
    const char *aug = (const char *)p;
    while (p < end && *p) p++;
    if (p >= end) return -1;
    p++;
    c->code_align = uleb(&p, end);
    c->data_align = sleb(&p, end);
    c->ra_reg = version == 1 ? *p++ : uleb(&p, end);
    c->fde_enc = 0x00;
    c->has_aug_len = 0;
    const uint8_t *aug_end = NULL;
    for (const char *a = aug; *a; a++) {
        int ok = 1;
        switch (*a) {
        case 'z': {
            uint64_t n = uleb(&p, end);
            c->has_aug_len = 1;
            aug_end = p + n;
            break;
        }
        case 'R': c->fde_enc = *p++; break;
        case 'L': p++; break;
        case 'P': { uint8_t enc = *p++; encoded(&p, end, enc & 0x7f, &ok); break; }
        case 'S': break;
        default:
            if (!aug_end) return -1; /* an augmentation we cannot skip */
            goto aug_done;        /* the rest is covered by the 'z' length */
        }
        if (p > end) return -1;
    }
aug_done:
    if (aug_end) p = aug_end;
    c->insns = p;
    c->end = end;
    return p <= end ? 0 : -1;
}

/* Runs CFA instructions [p, end) from `st` while the location is <= target.
 * `init` holds the rules after the CIE's instructions (DW_CFA_restore). */
static int run_cfa(const uint8_t *p, const uint8_t *end, const struct cie *c, uintptr_t loc, uintptr_t target,
                   struct frame_state *st, const struct frame_state *init) {
    struct frame_state saved[STATE_STACK];
    int depth = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg = 0;
        int64_t off = 0;
        uint8_t high = op & 0xc0;
        if (high == 0x40) { /* advance_loc */
            loc += (op & 0x3f) * c->code_align;
            if (loc > target) return 0;
            continue;
        }
        if (high == 0x80) { /* offset */
            reg = op & 0x3f;
            off = (int64_t)uleb(&p, end) * c->data_align;
            goto at_cfa;
        }
        if (high == 0xc0) { /* restore */
            reg = op & 0x3f;
            goto restore;
        }
        switch (op) {
        case 0x00: break; /* nop */
        case 0x01: { int ok = 1; loc = encoded(&p, end, c->fde_enc, &ok); if (!ok) return -1; if (loc > target) return 0; break; }
        case 0x02: loc += (uintptr_t)(*p++) * c->code_align; if (loc > target) return 0; break;
        case 0x03: { uint16_t d; memcpy(&d, p, 2); p += 2; loc += d * c->code_align; if (loc > target) return 0; break; }
        case 0x04: { uint32_t d; memcpy(&d, p, 4); p += 4; loc += d * c->code_align; if (loc > target) return 0; break; }
        case 0x05: reg = uleb(&p, end); off = (int64_t)uleb(&p, end) * c->data_align; goto at_cfa;
        case 0x06: reg = uleb(&p, end); goto restore;
        case 0x07: /* undefined */
            reg = uleb(&p, end);
            if (reg == DW_RBP) st->rbp.kind = REG_UNDEF;
            if (reg == c->ra_reg) st->ra.kind = REG_UNDEF;
            break;
        case 0x08: /* same_value */
            reg = uleb(&p, end);
            if (reg == DW_RBP) st->rbp.kind = REG_SAME;
            if (reg == c->ra_reg) st->ra.kind = REG_UNSUPPORTED;
            break;
        case 0x09: /* register */
            reg = uleb(&p, end);
            uleb(&p, end);
            if (reg == DW_RBP) st->rbp.kind = REG_UNSUPPORTED;
            if (reg == c->ra_reg) st->ra.kind = REG_UNSUPPORTED;
            break;
        case 0x0a: /* remember_state */
            if (depth == STATE_STACK) return -1;
            saved[depth++] = *st;
            break;
        case 0x0b: /* restore_state: the CFA too, as every consumer does */
            if (depth == 0) return -1;
            *st = saved[--depth];
            break;
        case 0x0c: /* def_cfa */
            reg = uleb(&p, end);
            st->cfa_off = (int64_t)uleb(&p, end);
            st->cfa_kind = reg == DW_RSP ? CFA_RSP : reg == DW_RBP ? CFA_RBP : CFA_UNSUPPORTED;
            break;
        case 0x0d: /* def_cfa_register */
            reg = uleb(&p, end);
            st->cfa_kind = reg == DW_RSP ? CFA_RSP : reg == DW_RBP ? CFA_RBP : CFA_UNSUPPORTED;
            break;
        case 0x0e: st->cfa_off = (int64_t)uleb(&p, end); break; /* def_cfa_offset */
        case 0x0f: { /* def_cfa_expression: breg(rsp|rbp) k; deref, as stack realignment writes */
            uint64_t n = uleb(&p, end);
            const uint8_t *e = p, *e_end = p + n;
            p = e_end;
            st->cfa_kind = CFA_UNSUPPORTED;
            if (e_end > end || e >= e_end) break;
            uint8_t o = *e++;
            if (o != 0x70 + DW_RSP && o != 0x70 + DW_RBP) break;
            int64_t k = sleb(&e, e_end);
            if (e + 1 != e_end || *e != 0x06) break; /* DW_OP_deref */
            st->cfa_kind = o == 0x70 + DW_RSP ? CFA_DEREF_RSP : CFA_DEREF_RBP;
            st->cfa_off = k;
            break;
        }
        case 0x10: { /* expression: rbp saved at breg(rbp) k, as stack realignment writes */
            reg = uleb(&p, end);
            uint64_t n = uleb(&p, end);
            const uint8_t *e = p, *e_end = p + n;
            p = e_end;
            struct reg_rule r = {REG_UNSUPPORTED, 0};
            if (e_end <= end && e < e_end && *e == 0x70 + DW_RBP) {
                e++;
                int64_t k = sleb(&e, e_end);
                if (e == e_end) r = (struct reg_rule){REG_AT_RBP, k};
            }
            if (reg == DW_RBP) st->rbp = r;
            if (reg == c->ra_reg) st->ra.kind = REG_UNSUPPORTED;
            break;
        }
        case 0x11: reg = uleb(&p, end); off = sleb(&p, end) * c->data_align; goto at_cfa;
        case 0x12: /* def_cfa_sf */
            reg = uleb(&p, end);
            st->cfa_off = sleb(&p, end) * c->data_align;
            st->cfa_kind = reg == DW_RSP ? CFA_RSP : reg == DW_RBP ? CFA_RBP : CFA_UNSUPPORTED;
            break;
        case 0x13: st->cfa_off = sleb(&p, end) * c->data_align; break;
        case 0x14: case 0x15: /* val_offset(_sf): a value, not a saved slot */
            reg = uleb(&p, end);
            if (op == 0x14) uleb(&p, end); else sleb(&p, end);
            if (reg == DW_RBP) st->rbp.kind = REG_UNSUPPORTED;
            if (reg == c->ra_reg) st->ra.kind = REG_UNSUPPORTED;
            break;
        case 0x16: { /* val_expression */
            reg = uleb(&p, end);
            uint64_t n = uleb(&p, end);
            p += n;
            if (reg == DW_RBP) st->rbp.kind = REG_UNSUPPORTED;
            if (reg == c->ra_reg) st->ra.kind = REG_UNSUPPORTED;
            break;
        }
        case 0x2e: uleb(&p, end); break; /* GNU_args_size */
        case 0x2f: reg = uleb(&p, end); off = -(int64_t)uleb(&p, end) * c->data_align; goto at_cfa;
        default: return -1;
        }
        continue;
    at_cfa:
        if (reg == DW_RBP) st->rbp = (struct reg_rule){REG_AT_CFA, off};
        if (reg == c->ra_reg) st->ra = (struct reg_rule){REG_AT_CFA, off};
        continue;
    restore:
        if (reg == DW_RBP) st->rbp = init->rbp;
        if (reg == c->ra_reg) st->ra = init->ra;
        continue;
    }
    return 0;
}

/* ---- rules and their per-thread cache ---- */

enum {
    RULE_NONE = 0, /* not in an executable segment: the walk ends before it */
    RULE_CFI,      /* cfa/rbp/ra as below */
    RULE_FP,       /* no usable CFI: step by the frame pointer */
    RULE_END,      /* the outermost frame (return address undefined) */
    RULE_SIGRETURN /* the signal trampoline: registers from the ucontext */
};
struct rule {
    int32_t cfa_off;
    int16_t rbp_off;
    int8_t ra_off8; /* return address at CFA + 8*ra_off8 */
    uint8_t kind : 3, cfa_kind : 2, rbp_kind : 2;
};
_Static_assert(sizeof(struct rule) == 8, "a rule packs into 8 bytes");

struct cache_entry {
    uintptr_t key; /* the address looked up (a return address - 1, or an interrupted pc) */
    struct rule rule;
};
#define CACHE_BITS 14
#define CACHE_SLOTS (1u << CACHE_BITS)
#define CACHE_BYTES (CACHE_SLOTS * sizeof(struct cache_entry))

static int is_sigreturn(const struct segment *g, uintptr_t pc) {
    /* mov $15, %rax; syscall — glibc's __restore_rt */
    static const uint8_t code[9] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
    return pc >= g->lo && pc + sizeof code <= g->hi && memcmp((const void *)pc, code, sizeof code) == 0;
}

/* The FDE covering `key` in `g`, or NULL. */
static const uint8_t *find_fde(const struct segment *g, uintptr_t key) {
    if (!g->table || g->count == 0) return NULL;
    uintptr_t base = (uintptr_t)g->hdr;
    uint32_t lo = 0, hi = g->count;
    while (lo < hi) { /* first entry whose start is > key */
        uint32_t mid = lo + (hi - lo) / 2;
        if (base + (intptr_t)g->table[2 * mid] <= key) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    return (const uint8_t *)(base + (intptr_t)g->table[2 * (lo - 1) + 1]);
}

static struct rule make_rule(const struct segment *g, uintptr_t key, int ret_addr) {
    struct rule r = {0, 0, 0, RULE_FP, 0, 0};
    if (ret_addr && is_sigreturn(g, key + 1)) {
        r.kind = RULE_SIGRETURN;
        return r;
    }
    const uint8_t *fde = find_fde(g, key);
    if (!fde) return r;
    uint32_t len;
    memcpy(&len, fde, 4);
    if (len == 0 || len == 0xffffffffu) return r;
    const uint8_t *end = fde + 4 + len;
    int32_t cie_off;
    memcpy(&cie_off, fde + 4, 4);
    if (cie_off == 0) return r; /* a CIE, not an FDE */
    struct cie c;
    if (parse_cie(fde + 4 - cie_off, &c) != 0) return r;
    const uint8_t *p = fde + 8;
    int ok = 1;
    uintptr_t start = encoded(&p, end, c.fde_enc, &ok);
    uintptr_t range = encoded(&p, end, c.fde_enc & 0x0f, &ok);
    if (!ok || key < start || key >= start + range) return r;
    if (c.has_aug_len) {
        uint64_t n = uleb(&p, end);
        p += n;
    }
    struct frame_state st = {CFA_UNSUPPORTED, 0, {REG_SAME, 0}, {REG_UNSUPPORTED, 0}};
    if (run_cfa(c.insns, c.end, &c, start, (uintptr_t)-1, &st, &st) != 0) return r;
    struct frame_state init = st;
    if (run_cfa(p, end, &c, start, key, &st, &init) != 0) return r;
    if (st.ra.kind == REG_UNDEF) {
        r.kind = RULE_END;
        return r;
    }
    if (st.cfa_kind == CFA_UNSUPPORTED || st.ra.kind != REG_AT_CFA || st.rbp.kind == REG_UNSUPPORTED ||
        st.cfa_off != (int32_t)st.cfa_off || st.rbp.off != (int16_t)st.rbp.off || st.ra.off % 8 != 0 ||
        st.ra.off / 8 != (int8_t)(st.ra.off / 8))
        return r;
    r.kind = RULE_CFI;
    r.cfa_kind = st.cfa_kind;
    r.cfa_off = (int32_t)st.cfa_off;
    r.rbp_kind = st.rbp.kind == REG_UNDEF ? REG_SAME : st.rbp.kind; /* an undefined rbp is never read */
    r.rbp_off = (int16_t)st.rbp.off;
    r.ra_off8 = (int8_t)(st.ra.off / 8);
    return r;
}

/* ---- the walk, and what a thread keeps between walks ---- */

/* The thread's last walk, kept for the next to reuse. Its levels, the stack
 * words they read and the pcs they gave are stored outermost first: level k
 * from the inside (the state before the k-th step: pc, rsp, rbp, whether pc
 * is a return address) is lv[levels - 1 - k], and from it outward the walk
 * read the first `wtail` words and gave the first `otail` pcs. Only words the
 * walk used are kept (not their neighbours: a local variable beside a return
 * address changes all the time and would spoil the comparison). A later walk
 * that reaches a level with the same state, while every one of those words
 * still holds what was read, would repeat the rest exactly: it takes the rest
 * from here. The outer frames of consecutive allocations are mostly the same,
 * so most of a deep walk becomes independent compares; stored outermost
 * first, the reused part stays where it is and only the new inner levels are
 * written. */
#define WALK_LEVELS 128
#define WALK_WORDS 384
enum { LV_RET = 1, LV_RBP_USED = 2, LV_RBP_READ = 4, LV_RBP_SET = 8 };
struct level {
    uintptr_t rsp, rbp, pc;
    uint16_t wtail, otail;
    /* LV_RET: pc is a return address. LV_RBP_READ / LV_RBP_SET: this level's
     * rule reads the incoming rbp / replaces it. LV_RBP_USED: the walk from
     * here reads the incoming rbp before replacing it; without frame pointers
     * rbp is an ordinary register an outer frame may have changed between two
     * calls, so it must match only then. */
    uint8_t flags;
};
struct word {
    uintptr_t addr, val;
};
struct walk {
    uint32_t levels, windows, n;
    int whole; /* ended by the stack's end, not by the depth limit */
    struct level lv[WALK_LEVELS];
    struct word words[WALK_WORDS]; /* side by side: one line holds four */
    uintptr_t pcs[MTLAB_MAX_DEPTH]; /* (the kept walk's only: the walk being made gives them to its caller) */
};

/* Whole walks seen before, not only the last: a program that allocates from
 * a few places in turn (cfrac's bignum routines: pmul, pdivmod, psub, ... each
 * calling palloc) repeats a stack every few calls but seldom twice in a row,
 * so the last walk's repeat check misses and each call walked its inner
 * levels again (~1 100 instructions for 2-3 levels and the splice). A walk
 * is a function of its start (first frame, its return address, rbp where
 * the walk reads it) and the words it read: an entry keeps those and the
 * stack's id (stack.c's), and a start with every word unchanged has that id.
 *
 * The walks from one start (one allocating function at one depth) are many:
 * cfrac calls palloc from a dozen routines, each called from a dozen places
 * in pcfrac. They differ first in the first or second word they read (the
 * return address into the caller, then into its caller), and the address
 * of the first word is the same for every walk from the start (the first
 * level's rule is the start's), that of the second the same for every walk
 * that read the same first word. So `first` notes, by start, the first
 * word's address, and `second`, by start and first word, the second's; the
 * set is chosen by the start and the two words found there now. */
#define SEEN_WORDS 24
#define SEEN_WAYS 4
#define SEEN_SET_BITS 7
#define SEEN_FIRST_BITS 7
#define SEEN_SECOND_BITS 10
#define SEEN_SETS (1u << SEEN_SET_BITS)
#define SEEN_FIRST (1u << SEEN_FIRST_BITS)
#define SEEN_SECOND (1u << SEEN_SECOND_BITS)
struct seen_walk {
    uintptr_t lo, pc0, rbp0; /* the walk's first frame; rbp0 compared only if rbp_used */
    uint32_t id;             /* 0: empty */
    uint16_t nwords;
    uint8_t rbp_used;
    struct word words[SEEN_WORDS]; /* outermost first: the last one is the innermost */
};
struct seen_set {
    uint32_t next; /* the way replaced next */
    struct seen_walk way[SEEN_WAYS];
};
struct seen_first {
    uintptr_t lo, pc0, at; /* a start, and the address of the first word its walks read */
};
struct seen_second {
    uintptr_t lo, pc0, first, at; /* a start and first word, and the address of the second (0: none) */
};

struct cfi_thread {
    struct cache_entry cache[CACHE_SLOTS];
    struct walk last; /* outermost first (above); levels > WALK_LEVELS: not usable */
    struct walk cur;  /* the walk being made, innermost first, its own levels only */
    struct seen_first first[SEEN_FIRST];
    struct seen_second second[SEEN_SECOND];
    struct seen_set seen[SEEN_SETS];
    int last_fresh; /* `last` is the walk the latest mtlab_cfi_walk made (not a repeat, not seen) */
    uint32_t turn;  /* which of a full pair of `first` or `second` is replaced */
};

static inline uint64_t seen_hash(uintptr_t lo, uintptr_t pc0, uintptr_t a, uintptr_t b) {
    return (lo ^ pc0 * 0x9e3779b97f4a7c15ull ^ a * 0xc2b2ae3d27d4eb4full ^ b * 0x165667b19e3779f9ull) * 0xbf58476d1ce4e5b9ull;
}

static struct cfi_thread *thread_state(void) {
    struct mtlab_tls *t = &mtlab_tls;
    uint32_t gen = atomic_load_explicit(&mtlab_cfi_gen, memory_order_relaxed);
    struct cfi_thread *c = (struct cfi_thread *)t->cfi_cache;
    if (!c) {
        /* A thread past its exit destructor walks without: its state was
         * released and would never be again. */
        if (t->dead) return NULL;
        c = (struct cfi_thread *)mtlab_sys_mmap(sizeof(struct cfi_thread));
        if (!c) return NULL;
        c->last.levels = WALK_LEVELS + 1;
        t->cfi_cache = c;
        t->cfi_gen = gen;
    } else if (t->cfi_gen != gen) { /* something was unloaded: its rules may be stale */
        memset(c->cache, 0, sizeof c->cache);
        memset(c->first, 0, sizeof c->first);
        memset(c->second, 0, sizeof c->second);
        memset(c->seen, 0, sizeof c->seen);
        c->last.levels = WALK_LEVELS + 1;
        t->cfi_gen = gen;
    }
    return c;
}

static inline struct rule rule_for(struct cache_entry *cache, uintptr_t key, int ret_addr) {
    struct cache_entry *e = &cache[(key * 0x9e3779b97f4a7c15ull) >> (64 - CACHE_BITS)];
    /* a return-address key never equals an interrupted pc's: they differ by kind bit */
    if (e->key == (key << 1 | (uintptr_t)ret_addr) && e->rule.kind != RULE_NONE) return e->rule;
    const struct segment *g = segment_of(key);
    struct rule r = {0, 0, 0, RULE_NONE, 0, 0};
    if (g) r = make_rule(g, key, ret_addr);
    if (r.kind != RULE_NONE) { /* misses are not kept: a later dlopen may map code there */
        e->key = key << 1 | (uintptr_t)ret_addr;
        e->rule = r;
    }
    return r;
}

void mtlab_cfi_thread_exit(void) {
    if (mtlab_tls.cfi_cache) mtlab_sys_munmap(mtlab_tls.cfi_cache, sizeof(struct cfi_thread));
    mtlab_tls.cfi_cache = NULL;
}

/* A word's address with this bit set: the word is a saved rbp (the next
 * level's incoming rbp), which matters to the walk only where a level
 * further out reads rbp before replacing it (LV_RBP_USED). Without frame
 * pointers rbp is an ordinary register, so a saved copy of it differs from
 * call to call under the same stack (mtlab_cfi_seen leaves those out). */
#define RBP_WORD 1u
#define WORD_AT(a) (*(const uintptr_t *)((a) & ~(uintptr_t)RBP_WORD))

/* Reads the stack word at `addr` (in bounds: checked) and notes it, with
 * `tag` (0 or RBP_WORD). */
static inline uintptr_t load_tagged(struct walk *w, uintptr_t addr, uintptr_t tag) {
    uintptr_t v = *(const uintptr_t *)addr;
    if (w->windows < WALK_WORDS) {
        w->words[w->windows].addr = addr | tag;
        w->words[w->windows].val = v;
    }
    w->windows++;
    return v;
}
static inline uintptr_t load(struct walk *w, uintptr_t addr) { return load_tagged(w, addr, 0); }
static inline uintptr_t load_rbp(struct walk *w, uintptr_t addr) { return load_tagged(w, addr, RBP_WORD); }

/* Do the first `count` of `words` still hold what was read? */
static int words_hold_at(const struct word *words, uint32_t count) {
    /* Every repeat of a deep stack runs this over all its words: four at a
     * time into two sums keeps the loads independent and the loop short. */
    uintptr_t d0 = 0, d1 = 0;
    const struct word *p = words, *end = words + count;
    for (; end - p >= 4; p += 4) {
        d0 |= (WORD_AT(p[0].addr) ^ p[0].val) | (WORD_AT(p[1].addr) ^ p[1].val);
        d1 |= (WORD_AT(p[2].addr) ^ p[2].val) | (WORD_AT(p[3].addr) ^ p[3].val);
    }
    for (; p < end; p++) d0 |= WORD_AT(p->addr) ^ p->val;
    return (d0 | d1) == 0;
}

/* Do the first `count` words of `w` still hold what it read? */
static inline int words_hold(const struct walk *w, uint32_t count) { return words_hold_at(w->words, count); }

/* Is the word at `addr` inside the part of the stack the walk may read? */
static inline int readable(uintptr_t addr, uintptr_t lo, uintptr_t hi) {
    return addr >= lo && addr <= hi - 8 && (addr & 7) == 0;
}

/* How a level's rule treats rbp (LV_RBP_READ, LV_RBP_SET). */
static inline uint8_t rbp_flags(struct rule r) {
    switch (r.kind) {
    case RULE_FP: return LV_RBP_READ | LV_RBP_SET;
    case RULE_SIGRETURN: return LV_RBP_SET;
    case RULE_CFI:
        return (uint8_t)((r.cfa_kind == CFA_RBP || r.cfa_kind == CFA_DEREF_RBP || r.rbp_kind == REG_AT_RBP ? LV_RBP_READ : 0) |
                         (r.rbp_kind != REG_SAME ? LV_RBP_SET : 0));
    default: return 0; /* the walk ends there */
    }
}

/* The last walk, if it can be reused: complete and of the current objects. */
static inline const struct walk *last_walk(const struct cfi_thread *ts) {
    const struct walk *w = &ts->last;
    return w->levels <= WALK_LEVELS && w->windows <= WALK_WORDS ? w : NULL;
}

/* Level k of `w` counted from the inside. */
static inline const struct level *inner_level(const struct walk *w, uint32_t k) {
    return &w->lv[w->levels - 1 - k];
}

/* The innermost `take` of the first `count` pcs of `w` (outermost first), to
 * `out` innermost first. */
static inline void pcs_inward(uintptr_t *out, const struct walk *w, uint32_t count, uint32_t take) {
    for (uint32_t i = 0; i < take; i++) out[i] = w->pcs[count - 1 - i];
}

int mtlab_cfi_last_pairs(uintptr_t *base, uintptr_t *words, int max) {
    const struct cfi_thread *ts = (const struct cfi_thread *)mtlab_tls.cfi_cache;
    const struct walk *w = ts ? last_walk(ts) : NULL;
    if (!w || w->windows == 0 || (w->windows & 1) || w->windows / 2 > (uint32_t)max) return -1;
    /* Innermost first: the memo's first pair must be the walk's first frame. */
    int j = 0;
    for (uint32_t i = w->windows; i >= 2; i -= 2, j++) {
        const struct word *a = &w->words[i - 2], *b = &w->words[i - 1];
        uintptr_t a_at = a->addr & ~(uintptr_t)RBP_WORD, b_at = b->addr & ~(uintptr_t)RBP_WORD;
        if (a_at + 8 != b_at) {
            if (b_at + 8 != a_at) return -1;
            const struct word *t = a; /* a CFI rule reads the return address first, then the rbp below it */
            a = b;
            b = t;
            a_at = b_at;
        }
        base[j] = a_at;
        words[2 * j] = a->val;
        words[2 * j + 1] = b->val;
    }
    return j;
}

/* The id of a walk seen before from this start whose words all hold; 0: none.
 * Reads only words a walk from `lo` on this thread's stack read before. */
static inline uint32_t seen_id(struct cfi_thread *ts, uintptr_t lo, uintptr_t rbp0, uintptr_t pc0) {
    /* `first` and `second` are sets of two: a program's hot starts must not
     * take each other's place (direct-mapped, two of them in one slot made
     * a fifth of cfrac's calls walk). */
    const struct seen_first *f = &ts->first[seen_hash(lo, pc0, 0, 0) >> (64 - SEEN_FIRST_BITS) & ~1ull];
    if (f->lo != lo || f->pc0 != pc0) {
        f++;
        if (f->lo != lo || f->pc0 != pc0) return 0;
    }
    uintptr_t v0 = *(const uintptr_t *)f->at, v1 = 0;
    const struct seen_second *g = &ts->second[seen_hash(lo, pc0, v0, 0) >> (64 - SEEN_SECOND_BITS) & ~1ull];
    if (g->lo != lo || g->pc0 != pc0 || g->first != v0) {
        g++;
        if (g->lo != lo || g->pc0 != pc0 || g->first != v0) return 0;
    }
    if (g->at) v1 = *(const uintptr_t *)g->at;
    const struct seen_set *set = &ts->seen[seen_hash(lo, pc0, v0, v1) >> (64 - SEEN_SET_BITS)];
    for (int i = 0; i < SEEN_WAYS; i++) {
        const struct seen_walk *e = &set->way[i];
        if (e->lo == lo && e->pc0 == pc0 && (!e->rbp_used || e->rbp0 == rbp0) && words_hold_at(e->words, e->nwords))
            return e->id;
    }
    return 0;
}

void mtlab_cfi_seen_reset(void) {
    struct cfi_thread *ts = (struct cfi_thread *)mtlab_tls.cfi_cache;
    if (!ts) return;
    memset(ts->first, 0, sizeof ts->first);
    memset(ts->second, 0, sizeof ts->second);
    memset(ts->seen, 0, sizeof ts->seen);
}

void mtlab_cfi_seen(uint32_t id) {
    struct cfi_thread *ts = (struct cfi_thread *)mtlab_tls.cfi_cache;
    if (!ts || !id || !ts->last_fresh) return;
    ts->last_fresh = 0;
    const struct walk *w = last_walk(ts);
    if (!w || w->levels == 0) return;
    const struct level *l0 = inner_level(w, 0);
    if (!(l0->flags & LV_RET)) return;
    uintptr_t lo = l0->rsp - 16, pc0 = l0->pc;
    /* The words the stack depends on, outermost first: every word but the
     * first frame's two (rbp0, pc0: kept apart) and the saved rbps that no
     * level further out reads (level j's saved rbp is level j-1's incoming). */
    struct word words[SEEN_WORDS];
    uint32_t count = 0, from = 0;
    for (uint32_t j = 0; j < w->levels; j++) {
        int rbp_used = j > 0 && (w->lv[j - 1].flags & LV_RBP_USED);
        for (uint32_t i = from; i < w->lv[j].wtail; i++) {
            if ((w->words[i].addr & RBP_WORD) && !rbp_used) continue;
            if (count == SEEN_WORDS) return; /* too deep to keep */
            words[count].addr = w->words[i].addr & ~(uintptr_t)RBP_WORD;
            words[count++].val = w->words[i].val;
        }
        from = w->lv[j].wtail;
    }
    if (count == 0) return;
    const struct word *w0 = &words[count - 1], *w1 = count > 1 ? w0 - 1 : NULL;
    struct seen_first *f = &ts->first[seen_hash(lo, pc0, 0, 0) >> (64 - SEEN_FIRST_BITS) & ~1ull];
    if (f->lo != lo || f->pc0 != pc0) f += f[1].lo == lo && f[1].pc0 == pc0 ? 1 : ts->turn++ & 1;
    *f = (struct seen_first){lo, pc0, w0->addr};
    struct seen_second *g = &ts->second[seen_hash(lo, pc0, w0->val, 0) >> (64 - SEEN_SECOND_BITS) & ~1ull];
    if (g->lo != lo || g->pc0 != pc0 || g->first != w0->val)
        g += g[1].lo == lo && g[1].pc0 == pc0 && g[1].first == w0->val ? 1 : ts->turn++ & 1;
    *g = (struct seen_second){lo, pc0, w0->val, w1 ? w1->addr : 0};
    struct seen_set *set = &ts->seen[seen_hash(lo, pc0, w0->val, w1 ? w1->val : 0) >> (64 - SEEN_SET_BITS)];
    struct seen_walk *e = &set->way[set->next++ % SEEN_WAYS];
    e->lo = lo;
    e->pc0 = pc0;
    e->rbp0 = l0->rbp;
    e->rbp_used = (l0->flags & LV_RBP_USED) != 0;
    e->nwords = (uint16_t)count;
    memcpy(e->words, words, count * sizeof *words);
    e->id = id;
}

int mtlab_cfi_last_pcs(uintptr_t *pcs, int max) {
    const struct cfi_thread *ts = (const struct cfi_thread *)mtlab_tls.cfi_cache;
    const struct walk *w = ts ? last_walk(ts) : NULL;
    if (!w) return -1;
    uint32_t n = w->n < (uint32_t)max ? w->n : (uint32_t)max;
    pcs_inward(pcs, w, w->n, n);
    return (int)n;
}

/* Makes `last` the walk just made: its outer part from level `k` (from the
 * inside) of `last` when it was reused (k < 0: none), then `cur`'s own levels
 * and words and the `own_pcs` pcs it gave (`pcs`, innermost first), reversed
 * to outermost first. */
static void keep_walk(struct walk *last, const struct walk *cur, int k, const uintptr_t *pcs, uint32_t own_pcs, int whole) {
    uint32_t keep_levels = 0, keep_words = 0, keep_pcs = 0;
    if (k >= 0) {
        const struct level *from = inner_level(last, (uint32_t)k);
        keep_levels = last->levels - (uint32_t)k;
        keep_words = from->wtail;
        keep_pcs = from->otail;
    }
    if (cur->levels > WALK_LEVELS || cur->windows > WALK_WORDS || keep_levels + cur->levels > WALK_LEVELS ||
        keep_words + cur->windows > WALK_WORDS || keep_pcs + own_pcs > MTLAB_MAX_DEPTH) {
        last->levels = WALK_LEVELS + 1; /* too deep to keep for the next walk */
        return;
    }
    /* From the outside in: whether the walk from each new level reads the
     * incoming rbp (the reused levels came with theirs). */
    int used = keep_levels ? (last->lv[keep_levels - 1].flags & LV_RBP_USED) != 0 : 0;
    struct level *dst = last->lv + keep_levels;
    for (int i = (int)cur->levels - 1; i >= 0; i--, dst++) {
        const struct level *l = &cur->lv[i];
        *dst = *l;
        /* (cur's tails hold where the level's words and pcs start in cur) */
        dst->wtail = (uint16_t)(keep_words + cur->windows - l->wtail);
        dst->otail = (uint16_t)(keep_pcs + own_pcs - l->otail);
        used = (l->flags & LV_RBP_READ) || (!(l->flags & LV_RBP_SET) && used);
        dst->flags = (uint8_t)((l->flags & ~LV_RBP_USED) | (used ? LV_RBP_USED : 0));
    }
    for (uint32_t i = 0; i < cur->windows; i++) last->words[keep_words + i] = cur->words[cur->windows - 1 - i];
    for (uint32_t i = 0; i < own_pcs; i++) last->pcs[keep_pcs + i] = pcs[own_pcs - 1 - i];
    last->levels = keep_levels + cur->levels;
    last->windows = keep_words + cur->windows;
    last->n = keep_pcs + own_pcs;
    last->whole = whole;
}

int mtlab_cfi_walk(uintptr_t *pcs, int max, const void *frame, int *repeat, uint32_t *seen, uintptr_t self_lo,
                   uintptr_t self_hi) {
    uintptr_t lo = (uintptr_t)frame, hi, stack_lo;
    int need_pcs = !*repeat, on_own;
    *repeat = 0;
    *seen = 0;
    if (!mtlab_frame_bounds(lo, &stack_lo, &hi, &on_own) || lo < stack_lo || !readable(lo + 8, lo, hi)) return 0;
    struct cfi_thread *ts = thread_state();
    if (!ts) return 0;
    ts->last_fresh = 0;
    struct walk *prev = &ts->last;
    /* A foreign stack's walk (a thread sharing this block, a sigaltstack)
     * neither uses the last walk nor is kept as it: the words it read may
     * be gone by the next call. */
    int usable = on_own && last_walk(ts) != NULL && prev->levels > 0;
    /* The last walk's first level in the same state (rbp only where the walk
     * reads it: without frame pointers it is an ordinary register) and every
     * word it read unchanged: the same stack (the caller keeps its id). */
    uintptr_t rbp0 = ((const uintptr_t *)lo)[0], pc0 = ((const uintptr_t *)lo)[1];
    if (usable) {
        const struct level *l0 = inner_level(prev, 0);
        if (l0->rsp == lo + 16 && l0->pc == pc0 && (l0->flags & LV_RET) && (l0->rbp == rbp0 || !(l0->flags & LV_RBP_USED)) &&
            words_hold(prev, l0->wtail)) {
            uint32_t n = prev->n < (uint32_t)max ? prev->n : (uint32_t)max;
            *repeat = 1;
            if (need_pcs) pcs_inward(pcs, prev, prev->n, n);
            return (int)n;
        }
    }
    /* Every word read from this thread's own stack at or above `lo`, as before. */
    if (on_own && (*seen = seen_id(ts, lo, rbp0, pc0)) != 0) return 0;
    /* cur: this walk's own levels, innermost first; its tails note where
     * each level's words and pcs start (keep_walk turns them around). */
    struct walk *cur = &ts->cur;
    cur->levels = cur->windows = 0;
    uintptr_t rbp = load_rbp(cur, lo), pc = load(cur, lo + 8), rsp = lo + 16;
    int ret_addr = 1; /* pc is a return address: the call is the instruction before it */
    int n = 0, whole = 0, spliced = -1;
    uint32_t k = 0; /* prev's levels below rsp are behind us: the CFA only grows */
    while (n < max && pc >= 4096) {
        if (usable && n > 0) {
            while (k < prev->levels && inner_level(prev, k)->rsp < rsp) k++;
            const struct level *p = k < prev->levels ? inner_level(prev, k) : NULL;
            if (p && p->rsp == rsp && p->pc == pc && (p->flags & LV_RET) == (unsigned)ret_addr &&
                (p->rbp == rbp || !(p->flags & LV_RBP_USED)) && p->otail <= prev->n &&
                (prev->whole || n + p->otail >= max) && words_hold(prev, p->wtail)) {
                spliced = (int)k;
                break;
            }
        }
        uint32_t at = cur->levels++;
        struct level *l = at < WALK_LEVELS ? &cur->lv[at] : NULL;
        uintptr_t key = ret_addr ? pc - 1 : pc;
        struct rule r = rule_for(ts->cache, key, ret_addr);
        if (l) {
            l->rsp = rsp;
            l->rbp = rbp;
            l->pc = pc;
            l->otail = (uint16_t)n; /* for now: where its pcs start, and where its words start */
            l->wtail = (uint16_t)cur->windows;
            l->flags = (uint8_t)ret_addr | rbp_flags(r);
        }
        if (r.kind == RULE_NONE) {
            whole = 1;
            break;
        }
        if (n > 0 || pc < self_lo || pc >= self_hi) pcs[n++] = pc;
        if (r.kind == RULE_END) {
            whole = 1;
            break;
        }
        uintptr_t cfa, ra, next_rbp = rbp;
        if (r.kind == RULE_SIGRETURN) {
            /* The kernel's frame: the ucontext lies at rsp once the handler returned. */
            uintptr_t gregs = rsp + offsetof(ucontext_t, uc_mcontext.gregs);
            uintptr_t a_rbp = gregs + 8 * REG_RBP, a_rsp = gregs + 8 * REG_RSP;
            uintptr_t a_rip = gregs + 8 * REG_RIP;
            if (!readable(a_rbp, rsp, hi) || !readable(a_rsp, rsp, hi) || !readable(a_rip, rsp, hi)) { whole = 1; break; }
            next_rbp = load_rbp(cur, a_rbp);
            cfa = load(cur, a_rsp);
            ra = load(cur, a_rip);
            if (cfa <= rsp || cfa > hi) { whole = 1; break; }
            rsp = cfa;
            rbp = next_rbp;
            pc = ra;
            ret_addr = 0;
            continue;
        }
        if (r.kind == RULE_FP) {
            if (!readable(rbp, rsp, hi) || !readable(rbp + 8, rsp, hi)) { whole = 1; break; }
            next_rbp = load_rbp(cur, rbp);
            ra = load(cur, rbp + 8);
            cfa = rbp + 16;
        } else {
            uintptr_t base = r.cfa_kind == CFA_RSP || r.cfa_kind == CFA_DEREF_RSP ? rsp : rbp;
            cfa = base + (intptr_t)r.cfa_off;
            if (r.cfa_kind >= CFA_DEREF_RSP) {
                if (!readable(cfa, rsp, hi)) { whole = 1; break; }
                cfa = load(cur, cfa);
            }
            if (cfa <= rsp || cfa > hi) { whole = 1; break; }
            uintptr_t ra_at = cfa + 8 * (intptr_t)r.ra_off8;
            uintptr_t rbp_at = r.rbp_kind == REG_AT_CFA ? cfa + r.rbp_off : r.rbp_kind == REG_AT_RBP ? rbp + r.rbp_off : 0;
            if (!readable(ra_at, rsp, hi) || (rbp_at && !readable(rbp_at, rsp, hi))) { whole = 1; break; }
            ra = load(cur, ra_at);
            if (rbp_at) next_rbp = load_rbp(cur, rbp_at);
        }
        if (cfa <= rsp || cfa > hi) { whole = 1; break; }
        rsp = cfa;
        rbp = next_rbp;
        pc = ra;
        ret_addr = 1;
    }
    uint32_t own = (uint32_t)n;
    if (spliced >= 0) {
        /* The rest of the stack is the last walk's from level `spliced` on
         * (given up to the depth limit; kept whole for the next walk). */
        const struct level *from = inner_level(prev, (uint32_t)spliced);
        uint32_t tail = from->otail;
        if (own + tail > (uint32_t)max) tail = (uint32_t)max - own;
        pcs_inward(pcs + own, prev, from->otail, tail);
        n += (int)tail;
        whole = prev->whole;
    } else if (pc < 4096 && n < max) {
        whole = 1;
    }
    keep_walk(prev, cur, spliced, pcs, own, whole);
    if (!on_own) prev->levels = WALK_LEVELS + 1; /* last_walk: none to reuse */
    ts->last_fresh = on_own;
    return n;
}

#else /* not x86-64: frame pointers */

int mtlab_cfi_last_pairs(uintptr_t *base, uintptr_t *words, int max) {
    (void)base; (void)words; (void)max;
    return -1;
}

int mtlab_cfi_last_pcs(uintptr_t *pcs, int max) {
    (void)pcs; (void)max;
    return -1;
}

int mtlab_cfi_walk(uintptr_t *pcs, int max, const void *frame, int *repeat, uint32_t *seen, uintptr_t self_lo,
                   uintptr_t self_hi) {
    (void)pcs; (void)max; (void)frame; (void)repeat; (void)self_lo; (void)self_hi;
    *seen = 0;
    return -1;
}
void mtlab_cfi_seen(uint32_t id) { (void)id; }
void mtlab_cfi_seen_reset(void) {}
void mtlab_cfi_thread_exit(void) {}
void mtlab_cfi_init(void) {}

#endif
