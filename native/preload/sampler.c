/*
 * sampler.c — the sampling heap profiler (`mtlab record --sample INTERVAL`).
 *
 * Each thread counts allocated bytes down from a distance drawn from the
 * exponential distribution with mean INTERVAL, so every byte is sampled with
 * probability 1/INTERVAL whatever the allocation sizes. Only when the count
 * runs out does the slow path below run: capture the stack, append a SAMPLE
 * event, remember the block so its free is recorded. Frees check a small
 * counting filter first, so a free of an unsampled block costs one load.
 *
 * The control page (/dev/shm/mtlab-PID, see mtlab_trace.h) lets `mtlab ctl`
 * switch sampling on and off, change the interval and ask for a dump with
 * no restart. It wakes mtlab's control thread in the process through a
 * futex on the page; no signal reaches the program's threads, so none of
 * their system calls is interrupted. The signal in page->signal (a manual
 * `kill`, or ctl when the thread could not start) toggles sampling, or
 * dumps when queued with MTLAB_CTL_DUMP_VALUE.
 *
 * A sampled block is remembered in a lock-free address set behind a 16 KiB
 * counting filter. With --sample-seed, each thread's seed comes from its
 * place in the creation tree (pthread_create passes it on through a
 * trampoline), so a run's samples repeat.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"

HIDDEN struct mtlab_ctl_page *mtlab_ctl;
HIDDEN struct mtlab_ctl_page mtlab_ctl_area __attribute__((aligned(4096)));
_Static_assert(sizeof(struct mtlab_ctl_page) == MTLAB_CTL_SIZE, "the control page is one page");
_Static_assert(offsetof(struct mtlab_ctl_page, routed) == MTLAB_CTL_OFF_ROUTED, "control page layout");
_Static_assert(offsetof(struct mtlab_ctl_page, stats_done) == MTLAB_CTL_OFF_STATS_DONE, "control page layout");
_Static_assert(offsetof(struct mtlab_ctl_page, trace_path) == MTLAB_CTL_OFF_PATH, "control page layout");
_Static_assert(offsetof(struct mtlab_ctl_page, ctl_seq) == MTLAB_CTL_OFF_CTL_SEQ, "control page layout");
_Static_assert(offsetof(struct mtlab_ctl_page, wake) == MTLAB_CTL_OFF_WAKE, "control page layout");

#define SET_BITS 16
#define SET_SLOTS (1u << SET_BITS)
#define SET_PROBE 128
#define TOMBSTONE 1ull

static _Atomic uint64_t sampled_set[SET_SLOTS]; /* live sampled block addresses */
HIDDEN _Atomic uint8_t mtlab_filter[MTLAB_FILTER_SLOTS];
static _Atomic uint64_t untracked, stacks_captured, unwind_cycles;
/* Each thread adds its stack-capture counts to the shared ones every
 * PUBLISH_EVERY captures (and when it flushes): two atomic additions per
 * sample on a line all threads write cost as much as the capture itself.
 * The samples count itself (page->samples) stays exact, sample by sample. */
#define PUBLISH_EVERY 64

static void publish_captures(struct mtlab_tls *t) {
    if (!t->pend_captures) return;
    atomic_fetch_add_explicit(&stacks_captured, t->pend_captures, memory_order_relaxed);
    atomic_fetch_add_explicit(&unwind_cycles, t->pend_unwind, memory_order_relaxed);
    t->pend_captures = 0;
    t->pend_unwind = 0;
}
static char shm_path[64];

static inline uint32_t set_hash(uint64_t p) { return (uint32_t)((p >> 4) * 0x9e3779b97f4a7c15ull >> (64 - SET_BITS)); }

static int set_insert(uint64_t p) {
    uint32_t i = set_hash(p);
    for (int n = 0; n < SET_PROBE; n++, i = (i + 1) & (SET_SLOTS - 1)) {
        uint64_t cur = atomic_load_explicit(&sampled_set[i], memory_order_relaxed);
        if ((cur == 0 || cur == TOMBSTONE) && atomic_compare_exchange_strong(&sampled_set[i], &cur, p)) return 1;
    }
    return 0;
}

static int set_remove(uint64_t p) {
    uint32_t i = set_hash(p);
    for (int n = 0; n < SET_PROBE; n++, i = (i + 1) & (SET_SLOTS - 1)) {
        uint64_t cur = atomic_load_explicit(&sampled_set[i], memory_order_relaxed);
        if (cur == 0) return 0;
        if (cur == p) return atomic_compare_exchange_strong(&sampled_set[i], &cur, TOMBSTONE);
    }
    return 0;
}

static inline uint64_t rng_next(struct mtlab_tls *t) {
    return mtlab_xorshift(&t->rng);
}

/* Bytes to the next sample point: exponential with mean `interval`. */
static int64_t draw(struct mtlab_tls *t, uint64_t interval) {
    double u = ((double)(rng_next(t) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double v = -log(u) * (double)interval;
    return v < 1.0 ? 1 : v > 4e18 ? (int64_t)4e18 : (int64_t)v;
}



/* ---- Thread lineage: what a fixed seed's thread streams hang on ----
 * With --sample-seed, a thread's draws must not depend on which thread
 * happens to allocate first (a race between threads). A thread is named by
 * its place in the creation tree instead: the initial thread is the root,
 * and the k-th thread a thread creates with pthread_create is its child k.
 * The name repeats whenever each thread creates its threads in the same
 * order. The new thread learns its name through a trampoline whose slot
 * comes from a static pool (no malloc in a shim); a thread started while the
 * pool is full, or otherwise than by pthread_create, has no name and falls
 * back to the order of first samples (counted: samples_threads_unnamed). */
#define ROOT_LINEAGE 0x6d746c6162ull /* any non-zero constant */
#define SPAWN_SLOTS 256
struct spawn_slot {
    _Atomic int used;
    void *(*start)(void *);
    void *arg;
    uint64_t lineage;
};
static struct spawn_slot spawn_slots[SPAWN_SLOTS];
static _Atomic uint64_t threads_unnamed;
static _Atomic uint64_t threads_seeded;

void mtlab_sampler_name_root(void) { mtlab_tls.lineage = ROOT_LINEAGE; }

static void *spawn_start(void *p) {
    struct spawn_slot *s = p;
    void *(*start)(void *) = s->start;
    void *arg = s->arg;
    mtlab_tls.lineage = s->lineage;
    atomic_store_explicit(&s->used, 0, memory_order_release);
    return start(arg);
}

int mtlab_sampler_spawn(pthread_t *th, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
    struct mtlab_tls *t = &mtlab_tls;
    if (t->lineage) {
        for (unsigned i = 0; i < SPAWN_SLOTS; i++) {
            struct spawn_slot *s = &spawn_slots[i];
            int expected = 0;
            if (atomic_load_explicit(&s->used, memory_order_relaxed) ||
                !atomic_compare_exchange_strong(&s->used, &expected, 1))
                continue;
            s->start = start;
            s->arg = arg;
            s->lineage = mtlab_mix64(t->lineage * 0x9e3779b97f4a7c15ull + ++t->children) | 1;
            int r = mtlab_real.pthread_create(th, attr, spawn_start, s);
            if (r != 0) atomic_store_explicit(&s->used, 0, memory_order_release);
            return r;
        }
    }
    atomic_fetch_add_explicit(&threads_unnamed, 1, memory_order_relaxed);
    return mtlab_real.pthread_create(th, attr, start, arg);
}

static void seed(struct mtlab_tls *t) {
    uint64_t s = mtlab_cfg.sample_seed ? mtlab_cfg.sample_seed : mtlab_tsc();
    /* With a fixed seed: the thread's name in the creation tree, or (no
     * name) the order in which unnamed threads first sample; otherwise the
     * thread id. */
    uint64_t which = !mtlab_cfg.sample_seed ? (uint64_t)mtlab_gettid()
                     : t->lineage           ? t->lineage
                                            : (1ull << 63) | (atomic_fetch_add(&threads_seeded, 1) + 1);
    /* Distinct (seed, thread) pairs give distinct, unrelated states (`| 1`
     * on the raw value made seeds 2k and 2k+1 the same). */
    uint64_t z = mtlab_mix64(s + which * 0x9e3779b97f4a7c15ull);
    t->rng = z ? z : 1; /* xorshift needs a non-zero state */
    t->sampler_init = 1;
}

/* Sampling-mode appends lock their buffer (as its owner) so a dump may
 * flush it from another thread, which takes it as MTLAB_LOCK_FLUSHER. */
/* An append waits for a dump's flush (~20 ms at most) rather than drop its sample. */
static inline int lock_buf(struct mtlab_buf *b) { return mtlab_buf_lock(b, MTLAB_LOCK_OWNER, 20000); }
static inline void unlock_buf(struct mtlab_buf *b) { atomic_store_explicit(&b->lock, 0, memory_order_release); }

static void maybe_flush(struct mtlab_tls *t, struct mtlab_buf *b, uint64_t now) {
    uint64_t seq = __atomic_load_n(&mtlab_ctl->dump_seq, __ATOMIC_RELAXED);
    if (seq != t->dump_seen || now - t->last_flush_tsc > mtlab_cfg.flush_age) {
        publish_captures(t);
        mtlab_flush_buf(b); /* (the page's sample count is kept live by mtlab_sample_alloc) */
        t->dump_seen = seq;
        t->last_flush_tsc = now;
    }
}

static void append_sample(struct mtlab_tls *t, unsigned kind, void *r, size_t size, uint64_t interval,
                          const void *frame) {
    struct mtlab_buf *b = mtlab_thread_buf();
    if (!b || !lock_buf(b)) {
        atomic_fetch_add(&mtlab_counters.events_dropped, 1);
        return;
    }
    if (atomic_load_explicit(&b->len, memory_order_relaxed) + MTLAB_MAX_EVENT_BYTES + 16 + 10 * MTLAB_MAX_DEPTH >
        MTLAB_BUF_CAP)
        mtlab_flush_buf(b);
    uint64_t c0 = mtlab_tsc();
    uint32_t stack = mtlab_cfg.stacks ? mtlab_stack_id_at(b, frame) : 0;
    uint64_t now = mtlab_tsc();
    t->pend_captures++;
    t->pend_unwind += now - c0;
    if (t->pend_captures >= PUBLISH_EVERY) publish_captures(t);
    uint8_t *p = mtlab_begin_event(b, MTLAB_EV_SAMPLE, r ? 0 : MTLAB_EVF_FAILED, now, 0, stack);
    p = mtlab_put_varint(p, kind);
    p = mtlab_put_varint(p, size);
    p = mtlab_put_ptr(b, p, (uint64_t)r);
    p = mtlab_put_varint(p, interval);
    mtlab_commit_event(b, p);
    maybe_flush(t, b, now);
    unlock_buf(b);
    if (UNLIKELY(t->dead)) mtlab_release_dead_buf();
}

/* The last dump whose heap-manager figures are wanted, and the last one a
 * thread took on itself to read: the figures cannot be read in the signal
 * handler (the interrupted thread may hold the allocator's lock), so the
 * next sample, taken after its real call returned, reads them. */
static _Atomic uint64_t stats_wanted, stats_claimed;

static void read_allocator_if_wanted(void) {
    uint64_t want = atomic_load_explicit(&stats_wanted, memory_order_acquire);
    uint64_t had = atomic_load_explicit(&stats_claimed, memory_order_relaxed);
    if (LIKELY(want == had)) return;
    if (!atomic_compare_exchange_strong(&stats_claimed, &had, want)) return; /* another thread reads */
    mtlab_allocator_reading(want);
    __atomic_store_n(&mtlab_ctl->stats_done, want, __ATOMIC_RELEASE);
}

void *mtlab_sample_alloc(unsigned kind, void *r, size_t size, const void *frame) {
    /* Shims tail-call this function: its own frame returns to the program. */
    if (!frame) frame = __builtin_frame_address(0);
    struct mtlab_tls *t = &mtlab_tls;
    if (t->guard && !mtlab_guard_stale(t, (uintptr_t)__builtin_frame_address(0))) {
        /* mtlab's own allocation: its bytes are not the program's, so the
         * shim's subtraction is undone and the sample point stays where it
         * was, with no draw spent (a fixed seed's stream does not depend on
         * mtlab's own allocations). Setting the count to the interval here
         * instead left the program's first INTERVAL bytes on the initial
         * thread never sampled: mtlab's start creates its control thread
         * (calloc inside pthread_create) before the program runs. A thread
         * never drawn for keeps its count at 0, so its first allocation of
         * the program's still draws the distance from that block's start. */
        t->countdown += (int64_t)size;
        return r;
    }
    /* Inside a heap manager's operator new, whose shim samples the call (its
     * count is put back there): nothing here. */
    if (UNLIKELY(t->in_alloc) && !mtlab_guard_stale(t, (uintptr_t)__builtin_frame_address(0))) return r;
    if (!r || !(__atomic_load_n(&mtlab_ctl->state, __ATOMIC_RELAXED) & MTLAB_CTL_ACTIVE)) {
        /* The point fell in bytes never allocated, or sampling was switched
         * off since the shim looked: draw the next point, sample nothing. */
        MTLAB_GUARD_ENTER(t);
        if (!t->sampler_init) seed(t);
        t->countdown = draw(t, __atomic_load_n(&mtlab_ctl->interval, __ATOMIC_RELAXED));
        t->guard--;
        return r;
    }
    int saved = errno;
    MTLAB_GUARD_ENTER(t); /* from here on, allocations (even by the dynamic linker) pass through */
    uint64_t interval = __atomic_load_n(&mtlab_ctl->interval, __ATOMIC_RELAXED);
    if (!t->sampler_init) {
        seed(t);
        /* The countdown was 0 (never drawn): draw the distance to the first
         * sample point from the start of this block. */
        int64_t first = draw(t, interval);
        if (first > (int64_t)size) {
            t->countdown = first - (int64_t)size;
            t->guard--;
            errno = saved;
            return r;
        }
    }
    t->countdown = draw(t, interval);
    append_sample(t, kind, r, size, interval, frame);
    read_allocator_if_wanted();
    if (set_insert((uint64_t)r)) {
        atomic_fetch_add_explicit(&mtlab_filter[mtlab_filter_hash((uint64_t)r)], 1, memory_order_relaxed);
        /* LIVE is never cleared: once set, no write to the page's first
         * line, which every allocation call of every thread reads. */
        if (!(__atomic_load_n(&mtlab_ctl->state, __ATOMIC_RELAXED) & MTLAB_CTL_LIVE)) {
            uint32_t was = __atomic_fetch_or(&mtlab_ctl->state, MTLAB_CTL_LIVE, __ATOMIC_SEQ_CST);
            /* First live sample: if sampling was switched off meanwhile,
             * frees must be routed to the shims after all. */
            if (!(was & MTLAB_CTL_LIVE)) mtlab_got_route();
        }
    } else {
        atomic_fetch_add_explicit(&untracked, 1, memory_order_relaxed);
    }
    __atomic_fetch_add(&mtlab_ctl->samples, 1, __ATOMIC_RELAXED);
    t->guard--;
    errno = saved;
    return r;
}

/* The filter said `p` may be sampled: check, and record its free. */
void mtlab_sample_free(void *p) {
    struct mtlab_tls *t = &mtlab_tls;
    if (t->guard || !set_remove((uint64_t)p)) return;
    atomic_fetch_sub_explicit(&mtlab_filter[mtlab_filter_hash((uint64_t)p)], 1, memory_order_relaxed);
    int saved = errno;
    MTLAB_GUARD_ENTER(t);
    struct mtlab_buf *b = mtlab_thread_buf();
    if (b && lock_buf(b)) {
        if (atomic_load_explicit(&b->len, memory_order_relaxed) + MTLAB_MAX_EVENT_BYTES > MTLAB_BUF_CAP)
            mtlab_flush_buf(b);
        uint64_t now = mtlab_tsc();
        uint8_t *w = mtlab_begin_event(b, MTLAB_EV_SAMPLE_FREE, 0, now, 0, 0);
        mtlab_commit_event(b, mtlab_put_ptr(b, w, (uint64_t)p));
        maybe_flush(t, b, now);
        unlock_buf(b);
        if (UNLIKELY(t->dead)) mtlab_release_dead_buf();
    } else {
        atomic_fetch_add(&mtlab_counters.events_dropped, 1);
    }
    t->guard--;
    errno = saved;
}

/* Flushes every buffer that is not in the middle of an append. */
static void flush_all_locked(void) {
    for (struct mtlab_buf *b = mtlab_first_buf(); b; b = b->next) {
        if (!mtlab_buf_lock(b, MTLAB_LOCK_FLUSHER, 0)) continue; /* busy: skipped, never waited for */
        mtlab_flush_buf(b);
        unlock_buf(b);
    }
}

/* A dump: every buffer flushed, the maps, and (where it is safe) the heap
 * manager's own figures. */
static void dump_now(uint64_t seq, int read_allocator_here) {
    flush_all_locked();
    mtlab_write_maps();
    if (read_allocator_here) {
        /* (claimed, so that the sampler does not read them for this dump again) */
        atomic_store(&stats_claimed, seq);
        atomic_store(&stats_wanted, seq);
        mtlab_allocator_reading(seq);
        __atomic_store_n(&mtlab_ctl->stats_done, seq, __ATOMIC_RELEASE);
    } else {
        atomic_store_explicit(&stats_wanted, seq, memory_order_release);
    }
    __atomic_store_n(&mtlab_ctl->dump_done, seq, __ATOMIC_RELEASE);
}

/* The heap manager's figures for the STATS record at exit, read by the
 * control thread: the exiting thread may be a signal handler's that
 * interrupted the allocator while it held its lock, and would wait for
 * itself forever. The wait here is bounded; the figures are then left out. */
static _Atomic int exit_reading; /* 1 wanted, 2 done */
static char exit_text[1024];
static char *exit_text_end;

char *mtlab_allocator_stats_at_exit(char *p, const char *end) {
    struct mtlab_ctl_page *page = mtlab_ctl;
    if (!page || __atomic_load_n(&page->wake, __ATOMIC_ACQUIRE) != MTLAB_CTL_WAKE_FUTEX || mtlab_pid != mtlab_sys_getpid())
        return mtlab_allocator_stats(p, end);
    atomic_store(&exit_reading, 1);
    __atomic_fetch_add(&page->ctl_seq, 1, __ATOMIC_ACQ_REL);
    syscall(SYS_futex, &page->ctl_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
    for (int i = 0; i < 2000 && atomic_load(&exit_reading) != 2; i++) {
        mtlab_sys_sleep_ns(100000);
    }
    if (atomic_load(&exit_reading) != 2) return p; /* ~200 ms: the allocator is held */
    for (const char *q = exit_text; q < exit_text_end && p < end; q++) *p++ = *q;
    return p;
}

/* mtlab's control thread: blocked on the page's futex word with every
 * signal blocked (so the program's signals go to its own threads), it acts
 * on each request of `mtlab ctl`. It holds no lock of the program's or the
 * heap manager's while it waits, so it may read the heap manager's figures
 * at once. Its own allocations pass through (guard held for good). */
static _Atomic int ctl_quit, ctl_running;
static int saved_signal; /* the signal whose disposition mtlab_sampler_init replaced */
static struct sigaction saved_action;

static void *control_thread(void *arg) {
    struct mtlab_ctl_page *page = (struct mtlab_ctl_page *)arg;
    struct mtlab_tls *t = &mtlab_tls;
    MTLAB_GUARD_ENTER(t);
    t->guard_sp = UINTPTR_MAX; /* never taken for a longjmp's leftover */
    prctl(PR_SET_NAME, "mtlab-ctl", 0, 0, 0);
    uint32_t seen = 0;
    for (;;) {
        uint32_t seq = __atomic_load_n(&page->ctl_seq, __ATOMIC_ACQUIRE);
        if (seq == seen) {
            syscall(SYS_futex, &page->ctl_seq, FUTEX_WAIT, seen, NULL, NULL, 0);
            continue;
        }
        seen = seq;
        if (atomic_load(&ctl_quit)) break; /* detach: the library is about to be unloaded */
        if (mtlab_ctl != page) continue; /* (never: a fork child has no copy of this thread) */
        /* The exit's request and one of `mtlab ctl` may arrive as one wake:
         * both are answered, the exit's last, so that the exiting thread
         * finishes the trace after any dump (and ctl is never left waiting). */
        int exiting = atomic_load(&exit_reading) == 1;
        if (exiting) exit_text_end = mtlab_allocator_stats(exit_text, exit_text + sizeof exit_text - 1);
        mtlab_got_route();
        uint64_t dump = __atomic_load_n(&page->dump_seq, __ATOMIC_ACQUIRE);
        if (dump != __atomic_load_n(&page->dump_done, __ATOMIC_ACQUIRE)) dump_now(dump, 1);
        __atomic_store_n(&page->ctl_done, seq, __ATOMIC_RELEASE);
        if (exiting) atomic_store(&exit_reading, 2);
    }
    t->guard--;
    atomic_store(&ctl_running, 0);
    return NULL;
}

/* Starts the control thread with every signal blocked; 0 on success. */
static int start_control_thread(struct mtlab_ctl_page *page) {
    if (!mtlab_real.pthread_create) return -1;
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t th;
    atomic_store(&ctl_running, 1);
    int r = mtlab_real.pthread_create(&th, &attr, control_thread, page);
    if (r != 0) atomic_store(&ctl_running, 0);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return r == 0 ? 0 : -1;
}

/* `mtlab ctl dump` queues the signal with MTLAB_CTL_DUMP_VALUE: flush (once
 * for any number of queued requests); `mtlab ctl start|stop` queues it with
 * MTLAB_CTL_APPLY_VALUE after changing the state: route the GOT slots for
 * it; any other sender toggles sampling (and routes). */
static void on_signal(int sig, siginfo_t *info, void *uctx) {
    (void)sig;
    (void)uctx;
    if (!mtlab_ctl) return; /* between fork and the child's new page */
    int saved = errno;
    MTLAB_GUARD_ENTER(&mtlab_tls);
    if (info && info->si_code == SI_QUEUE && info->si_value.sival_int == (int)MTLAB_CTL_DUMP_VALUE) {
        uint64_t seq = __atomic_load_n(&mtlab_ctl->dump_seq, __ATOMIC_ACQUIRE);
        /* The interrupted thread may hold the heap manager's lock: its
         * figures are read at the next sampled allocation instead. */
        if (seq != __atomic_load_n(&mtlab_ctl->dump_done, __ATOMIC_ACQUIRE)) dump_now(seq, 0);
    } else {
        if (!(info && info->si_code == SI_QUEUE && info->si_value.sival_int == (int)MTLAB_CTL_APPLY_VALUE))
            __atomic_fetch_xor(&mtlab_ctl->state, MTLAB_CTL_ACTIVE, __ATOMIC_SEQ_CST);
        mtlab_got_route();
    }
    mtlab_tls.guard--;
    errno = saved;
}

/* Puts a fresh private zero page at the control page's place. */
static int area_private(void) {
    return mtlab_real.mmap && mtlab_real.mmap(&mtlab_ctl_area, MTLAB_CTL_SIZE, PROT_READ | PROT_WRITE,
                                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
}

/* 1: the page's name was taken by something that is not a stale page of
 * this user's (another user's file, a link, a FIFO), so this process keeps a
 * private page and only the signal controls it (STATS ctl_page_refused=1). */
static int page_refused;

/* Creates the control page's file new, or returns -1. Whatever another user
 * put at the name first is never opened (O_EXCL|O_NOFOLLOW): a followed link
 * would overwrite its target, and a file someone else owns would let them
 * change this process's sampling. A regular file of this euid there is a
 * stale page: left by a process that had this pid and died, or by this
 * process before an exec. It is removed and the file created once more
 * (others cannot put anything back meanwhile: /dev/shm is sticky). */
static int create_page_file(void) {
    const int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    uint32_t euid = mtlab_sys_geteuid();
    struct stat st;
    int fd = mtlab_sys_open(shm_path, flags, 0600);
    if (fd == -EEXIST && mtlab_sys_lstat(shm_path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == euid &&
        mtlab_sys_unlink(shm_path) == 0)
        fd = mtlab_sys_open(shm_path, flags, 0600);
    if (fd == -EEXIST) page_refused = 1;
    if (fd < 0) return -1;
    if (mtlab_sys_fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != euid || st.st_size != 0) {
        /* (cannot happen after an exclusive create; not ours to remove then) */
        mtlab_sys_close(fd);
        page_refused = 1;
        return -1;
    }
    return fd;
}

/* Sets up the control page; falls back to private memory when /dev/shm is
 * unusable or the name is taken (then only the signal controls the sampler). */
void mtlab_sampler_init(uint64_t interval, int active, int sig) {
    char *p = mtlab_append(shm_path, shm_path + sizeof shm_path - 1, "/dev/shm/mtlab-");
    p = mtlab_append_u64(p, shm_path + sizeof shm_path - 1, (uint64_t)getpid());
    *p = 0;
    /* The shared file is mapped over the page reserved in this library's
     * data, so the shims find the state at a fixed address. */
    struct mtlab_ctl_page *page = &mtlab_ctl_area;
    int shared = 0;
    /* Sizing the file past RLIMIT_FSIZE (the program may have set it below a
     * page before a fork) would raise SIGXFSZ, which kills by default: the
     * private page instead. */
    struct rlimit rl;
    int fits = mtlab_sys_getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= MTLAB_CTL_SIZE;
    page_refused = 0;
    int fd = fits ? create_page_file() : -1;
    if (fd >= 0 && ftruncate(fd, MTLAB_CTL_SIZE) == 0 && mtlab_real.mmap)
        shared = mtlab_real.mmap(page, MTLAB_CTL_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) != MAP_FAILED;
    if (fd >= 0) {
        if (!shared) mtlab_sys_unlink(shm_path);
        mtlab_sys_close(fd);
    }
    if (!shared) {
        /* Only the signal controls the sampler then. (A fork child's page may
         * still be its parent's shared one: it must not be written.) */
        shm_path[0] = 0;
        if (!area_private()) return;
    }
    page->magic = MTLAB_CTL_MAGIC;
    page->version = MTLAB_CTL_VERSION;
    page->pid = (uint32_t)getpid();
    page->signal = (uint32_t)sig;
    __atomic_store_n(&page->interval, interval, __ATOMIC_RELAXED);
    mtlab_writer_path(page->trace_path, sizeof page->trace_path);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    /* GOT routing needs a way in: once calls bypass the shims, only the
     * control thread (or the signal's handler) can bring them back when
     * sampling is switched on. */
    int handler = sig > 0 && sigaction(sig, &sa, &saved_action) == 0;
    if (handler) saved_signal = sig;
    /* The pointer first: a shim that sees the state ACTIVE uses it. */
    mtlab_ctl = page;
    __atomic_store_n(&page->state, MTLAB_CTL_ON | (active ? MTLAB_CTL_ACTIVE : 0), __ATOMIC_RELEASE);
    int thread = shared && mtlab_cfg.ctl_thread && start_control_thread(page) == 0;
    mtlab_got_enable(thread || handler);
    /* Only now may ctl act: the thread waits, or the handler is in place
     * (a signal before it would have killed the program). */
    __atomic_store_n(&page->wake, thread ? MTLAB_CTL_WAKE_FUTEX : MTLAB_CTL_WAKE_SIGNAL, __ATOMIC_RELEASE);
    mtlab_got_route(); /* --inactive: straight to the real functions from here on */
}

/* A fork child gets its own page (the parent's stays the parent's). */
void mtlab_sampler_fork_child(void) {
    if (!mtlab_ctl) return;
    struct mtlab_ctl_page *old = mtlab_ctl;
    uint64_t interval = __atomic_load_n(&old->interval, __ATOMIC_RELAXED);
    int active = (__atomic_load_n(&old->state, __ATOMIC_RELAXED) & MTLAB_CTL_ACTIVE) != 0;
    memset((void *)sampled_set, 0, sizeof sampled_set);
    memset((void *)mtlab_filter, 0, sizeof mtlab_filter);
    /* The child's GOT is the parent's copy; its new page has no live samples:
     * mtlab_sampler_init routes the slots for the child's own state. */
    mtlab_got_fork_child();
    uint32_t sig = old->signal;
    /* The page is remapped in place: until it is set up its state reads 0
     * (the shims pass through), never the parent's. */
    mtlab_sampler_init(interval, active, (int)sig);
    /* The parent's unpublished capture counts are the parent's. */
    mtlab_tls.pend_captures = 0;
    mtlab_tls.pend_unwind = 0;
    /* Parent and child must not draw the same sample points. */
    uint64_t z = mtlab_tls.rng ^ 0x5851f42d4c957f2dull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    mtlab_tls.rng = (z ^ (z >> 31)) | 1;
}

/* A --no-follow fork child: no sampler, and not the parent's page either. */
void mtlab_sampler_detach(void) {
    area_private();
    mtlab_ctl = NULL;
}

void mtlab_sampler_stop(void) {
    if (!mtlab_ctl) return;
    __atomic_fetch_and(&mtlab_ctl->state, ~(uint32_t)MTLAB_CTL_ACTIVE, __ATOMIC_RELAXED);
    flush_all_locked();
    if (shm_path[0]) unlink(shm_path);
}

/* Detach (attach build): the control thread leaves its loop (at most ~1 s
 * is waited for it) and the program's disposition of the signal comes back. */
void mtlab_sampler_release(void) {
    if (atomic_load(&ctl_running) && mtlab_ctl) {
        atomic_store(&ctl_quit, 1);
        __atomic_fetch_add(&mtlab_ctl->ctl_seq, 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &mtlab_ctl->ctl_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
        for (int i = 0; i < 1000 && atomic_load(&ctl_running); i++) mtlab_sys_sleep_ns(1000000);
    }
    if (saved_signal) sigaction(saved_signal, &saved_action, NULL);
    saved_signal = 0;
}

/* "key=value" lines of the sampler's own costs for the STATS record. */
char *mtlab_sampler_stats(char *p, const char *end) {
    p = mtlab_append(p, end, "stacks_captured=");
    p = mtlab_append_u64(p, end, atomic_load(&stacks_captured));
    p = mtlab_append(p, end, "\nunwind_cycles=");
    p = mtlab_append_u64(p, end, atomic_load(&unwind_cycles));
    p = mtlab_append(p, end, "\nsamples_untracked=");
    p = mtlab_append_u64(p, end, atomic_load(&untracked));
    p = mtlab_append(p, end, "\nsamples_threads_unnamed=");
    p = mtlab_append_u64(p, end, atomic_load(&threads_unnamed));
    p = mtlab_append(p, end, "\nsamples=");
    p = mtlab_append_u64(p, end, mtlab_ctl ? __atomic_load_n(&mtlab_ctl->samples, __ATOMIC_RELAXED) : 0);
    if (page_refused) p = mtlab_append(p, end, "\nctl_page_refused=1");
    return mtlab_append(p, end, "\n");
}
