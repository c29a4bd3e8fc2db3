/*
 * thread.c — per-thread buffers: creation, flushing, thread exit and fork.
 *
 * A buffer belongs to one thread at a time. Buffers sit in a global list
 * that only grows (push by CAS); a buffer released at thread exit is reused
 * by the next new thread, so programs that churn threads use bounded memory.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

HIDDEN __thread struct mtlab_tls mtlab_tls __attribute__((tls_model(MTLAB_TLS_MODEL)));

static struct mtlab_buf *_Atomic all_bufs;
static pthread_key_t exit_key;

static inline void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void put_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* prev_tsc is kept: the next chunk's time must not start before this one's
 * end (a free is stamped at its start, which can precede a nested event). */
static void reset(struct mtlab_buf *b) {
    b->n_events = 0;
    b->first_tsc = 0;
    b->prev_ptr = 0;
    b->flush_by = UINT64_MAX;
    atomic_store_explicit(&b->len, 0, memory_order_release);
}

/* The record and chunk headers before `len` bytes of `n` events. */
static void put_headers(uint8_t *h, uint32_t tid, uint32_t n, uint64_t first, uint64_t last, uint32_t len, uint16_t flags) {
    put_u32(h, MTLAB_EVENTS_HEADER + len);
    put_u16(h + 4, MTLAB_REC_EVENTS);
    put_u16(h + 6, flags);
    put_u32(h + 8, tid);
    put_u32(h + 12, n);
    put_u64(h + 16, first);
    put_u64(h + 24, last);
}

static void count_dropped_chunk(uint32_t n) {
    atomic_fetch_add(&mtlab_counters.events_dropped, n);
    atomic_fetch_add(&mtlab_counters.chunks_dropped, 1);
}

/* Writes a record of `n` events (headers filled, `len` bytes of events) and
 * counts them as written or dropped. */
static void write_counted(const uint8_t *rec, uint32_t len, uint32_t n) {
    if (MTLAB_SKIP(MTLAB_SKIP_WRITE) && n) {
        atomic_fetch_add(&mtlab_counters.events_written, n);
        return;
    }
    if (mtlab_write_raw(rec, MTLAB_BUF_HEAD + len) == 0) {
        atomic_fetch_add(&mtlab_counters.events_written, n);
    } else {
        count_dropped_chunk(n);
    }
}

/* Writes the buffer's events as one EVENTS record; drops them on failure.
 * Called by the owner (or, in sampling mode, by whoever holds b->lock). */
void mtlab_flush_buf(struct mtlab_buf *b) {
    uint32_t len = atomic_load_explicit(&b->len, memory_order_acquire);
    if (len == 0) return;
    /* One system call per 64 KiB of events catches a process made by a raw
     * fork or clone before it writes into its parent's file. */
    uint32_t pid = mtlab_sys_getpid();
    if (UNLIKELY(pid != mtlab_pid) && mtlab_check_forked(pid)) return;
    int saved = errno; /* the shims leave errno to the slow paths */
    /* From the write to the emptied buffer, no signal handler may run: one
     * that exits or jumps out, or an asynchronous cancel, would leave the
     * events written and still in the buffer, for the next flush (the exit
     * flush, the thread-exit flush) to write again. Two system calls per
     * 64 KiB chunk; a signal waits for one write. */
    uint64_t mask;
    int blocked = mtlab_sys_block_signals(&mask);
    atomic_fetch_add_explicit(&b->busy, 1, memory_order_relaxed);
    /* Pairs with the exit flusher's fence: either it sees us busy, or we see it closed. */
    atomic_thread_fence(memory_order_seq_cst);
    int closed = atomic_load(&b->closed);
    if (closed) {
        uint32_t counted = atomic_exchange(&b->counted, 0);
        atomic_fetch_add(&mtlab_counters.events_dropped, b->n_events > counted ? b->n_events - counted : 0);
        /* Closed before an exec this thread outlived (it failed, or had not
         * ended the thread yet): the events added since the copy are
         * dropped above, as they cannot be written without the copied ones
         * before them in their chunk; from here on they are written again. */
        if (closed == MTLAB_CLOSED_EXEC) atomic_compare_exchange_strong(&b->closed, &closed, MTLAB_CLOSED_NO);
    } else {
        /* Only the one thread could have started another: if none was, no
         * other thread's event can lie within this chunk's time. */
        uint16_t solo = atomic_load(&mtlab_threads_beyond_first) ? 0 : MTLAB_RECORD_FLAG_SOLO;
        put_headers(b->data, b->tid, b->n_events, b->first_tsc, b->n_events ? b->prev_tsc : 0, len, solo);
        write_counted(b->data, len, b->n_events);
    }
    uint64_t first = b->first_tsc;
    reset(b);
    if (mtlab_watermark) mtlab_progress_flushed(b, first);
    atomic_fetch_add_explicit(&b->gen, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->busy, 1, memory_order_release);
    if (blocked) mtlab_sys_restore_signals(&mask);
    errno = saved;
}

static struct mtlab_buf *acquire_buf(void) {
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        int expected = 0;
        if (!atomic_load(&b->closed) && atomic_compare_exchange_strong(&b->owned, &expected, 1)) return b;
    }
    struct mtlab_buf *b = (struct mtlab_buf *)mtlab_sys_mmap(MTLAB_BUF_BYTES);
    if (!b) return NULL;
    b->flush_by = UINT64_MAX;
    atomic_store(&b->owned, 1);
    struct mtlab_buf *head = atomic_load(&all_bufs);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak(&all_bufs, &head, b));
    return b;
}

/* Sampling mode: appends and flushes hold b->lock (the dump handler flushes
 * other threads' buffers). Full-trace mode needs no lock. */
/* Takes a buffer's lock as `who` (sampling mode); 1 when taken. Waits for a
 * flusher (a dump writes one buffer, briefly), up to `tries` attempts (the
 * later ones 1 µs apart); not for a buffer the exit flush closed and kept,
 * nor for an append the lock says its owner is in: only the owner appends,
 * so that is this very thread, interrupted by a signal handler (one that
 * calls exit would otherwise wait for itself forever). */
int mtlab_buf_lock(struct mtlab_buf *b, int who, int tries) {
    for (int i = 0;; i++) {
        int held = 0;
        if (atomic_compare_exchange_strong_explicit(&b->lock, &held, who, memory_order_acquire, memory_order_relaxed))
            return 1;
        if (held == MTLAB_LOCK_OWNER || atomic_load(&b->closed) || i >= tries) return 0;
        if (i >= 100) mtlab_sys_sleep_ns(1000);
    }
}

/* The owner's own flush (at exit, fork, exec, thread exit): up to ~100 ms. */
static inline int lock_buf(struct mtlab_buf *b) { return !mtlab_ctl || mtlab_buf_lock(b, MTLAB_LOCK_FLUSHER, 100000); }
static inline void unlock_buf(struct mtlab_buf *b) {
    if (mtlab_ctl) atomic_store_explicit(&b->lock, 0, memory_order_release);
}

static void release(struct mtlab_buf *b) {
    if (lock_buf(b)) {
        mtlab_flush_buf(b);
        unlock_buf(b);
    }
    mtlab_tls.buf = NULL;
    atomic_store(&b->owned, 0);
}

static void thread_exit(void *arg) {
    MTLAB_GUARD_ENTER(&mtlab_tls);
    release((struct mtlab_buf *)arg);
    mtlab_tls.dead = 1;
    mtlab_cfi_thread_exit();
    mtlab_stack_thread_exit();
    mtlab_tls.guard--;
}

/* An exited thread still allocating (glibc frees its thread-local caches
 * after every key destructor ran): write each event out at once. */
void mtlab_release_dead_buf(void) {
    int saved = errno;
    if (mtlab_tls.buf) release(mtlab_tls.buf);
    errno = saved;
}

void mtlab_flush_own(void) {
    struct mtlab_buf *b = mtlab_tls.buf;
    if (!b) return;
    if (!lock_buf(b)) { /* its own append was interrupted, or the exit flush closed it */
        if (!atomic_load(&b->closed)) atomic_fetch_add(&mtlab_counters.events_dropped, b->n_events);
        return;
    }
    mtlab_flush_buf(b);
    unlock_buf(b);
}

static uintptr_t main_lo, main_hi; /* the initial thread's stack */

void mtlab_set_main_stack(uint64_t lo, uint64_t hi) {
    main_lo = (uintptr_t)lo;
    main_hi = (uintptr_t)hi;
}

/* This thread's stack: the mapping that holds the current frame, found in
 * /proc/self/maps with raw reads into a stack buffer. Nothing here may
 * allocate: the first event of a thread can come from inside the allocator
 * (an mmap made while it holds its own lock), and pthread_getattr_np calls
 * realloc. The initial thread's range comes from the constructor. */
static void mapping_of(uintptr_t here, uintptr_t *lo, uintptr_t *hi);
static void stack_bounds(uintptr_t *lo, uintptr_t *hi) {
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    *lo = *hi = 0; /* unknown: no frame-pointer walks on this thread */
    if (main_hi && here >= main_lo && here < main_hi) {
        *lo = main_lo;
        *hi = main_hi;
        return;
    }
    mapping_of(here, lo, hi);
}

/* The mapping that holds `here`, from /proc/self/maps; 0, 0 if none. */
static void mapping_of(uintptr_t here, uintptr_t *lo, uintptr_t *hi) {
    *lo = *hi = 0;
    int fd = mtlab_open_self("maps");
    if (fd < 0) return;
    char buf[4096];
    size_t have = 0;
    for (;;) {
        long n = mtlab_sys_read(fd, buf + have, sizeof buf - have);
        if (n <= 0) break;
        have += (size_t)n;
        size_t start = 0;
        for (size_t i = 0; i < have; i++) {
            if (buf[i] != '\n') continue;
            /* "lo-hi perms ..." */
            uintptr_t a = 0, b = 0;
            size_t k = start;
            for (; k < i && buf[k] != '-'; k++) a = a * 16 + (uintptr_t)(buf[k] <= '9' ? buf[k] - '0' : buf[k] - 'a' + 10);
            for (k++; k < i && buf[k] != ' '; k++) b = b * 16 + (uintptr_t)(buf[k] <= '9' ? buf[k] - '0' : buf[k] - 'a' + 10);
            if (here >= a && here < b) {
                *lo = a;
                *hi = b;
                mtlab_sys_close(fd);
                return;
            }
            start = i + 1;
        }
        /* Keep the unfinished last line for the next read. */
        memmove(buf, buf + start, have - start);
        have -= start;
        if (have == sizeof buf) have = 0; /* a line longer than the buffer: skip it */
    }
    mtlab_sys_close(fd);
}

/* The calling thread's buffer, set up on first use. Caller holds the guard. */
struct mtlab_buf *mtlab_thread_buf(void) {
    struct mtlab_tls *t = &mtlab_tls;
    if (LIKELY(t->buf != NULL)) return t->buf;
    int saved = errno; /* pthread_setspecific and the set-up may set it: the caller's errno stays */
    struct mtlab_buf *b = acquire_buf();
    if (!b) {
        errno = saved;
        return NULL;
    }
    /* A second buffer taken: a thread not started by pthread_create (or a
     * buffer taken again) ends the solo chunks too. */
    static _Atomic uint32_t bufs_taken;
    if (atomic_fetch_add(&bufs_taken, 1) != 0) atomic_store(&mtlab_threads_beyond_first, 1);
    reset(b);
    b->prev_tsc = 0;
    atomic_store(&b->lock, 0);
    b->tid = mtlab_gettid();
    if (!t->stack_hi) stack_bounds(&t->stack_lo, &t->stack_hi);
    t->buf = b;
    if (!t->dead) pthread_setspecific(exit_key, b);
    errno = saved;
    return b;
}

/* Bumped by every munmap and mremap the shims see: a foreign stack found
 * before one may be gone. */
_Atomic uint32_t mtlab_unmap_gen;
static _Atomic uint64_t shared_tls_calls;

/* A thread made by the clone system call without CLONE_SETTLS has no
 * thread-local storage of its own: it runs on a stack of its own but shares
 * its creator's (this) block, so its frames lie outside stack_lo..stack_hi.
 * So does a signal handler's on an alternate stack. Either way the walk may
 * read the mapping that holds the frame: found in /proc/self/maps once and
 * kept (foreign_*) while the same thread calls from it and no munmap was
 * seen since; gettid, one system call, tells the threads apart on this path
 * only. A walk for another thread than the buffer's owner is counted
 * (STATS shared_tls_calls): its events are in the creator's buffer, under
 * its thread. Returns 1 with the bounds, 0 when the frame's stack is unknown. */
int mtlab_frame_bounds(uintptr_t frame, uintptr_t *lo, uintptr_t *hi, int *own) {
    struct mtlab_tls *t = &mtlab_tls;
    *own = frame >= t->stack_lo && frame < t->stack_hi;
    if (LIKELY(*own)) {
        *lo = t->stack_lo;
        *hi = t->stack_hi;
        return 1;
    }
    uint32_t tid = mtlab_gettid();
    if (t->buf && tid != t->buf->tid) atomic_fetch_add_explicit(&shared_tls_calls, 1, memory_order_relaxed);
    uint32_t gen = atomic_load_explicit(&mtlab_unmap_gen, memory_order_relaxed);
    if (!(frame >= t->foreign_lo && frame < t->foreign_hi && tid == t->foreign_tid && gen == t->foreign_gen)) {
        mapping_of(frame, &t->foreign_lo, &t->foreign_hi);
        t->foreign_tid = tid;
        t->foreign_gen = gen;
    }
    *lo = t->foreign_lo;
    *hi = t->foreign_hi;
    return *hi > frame;
}

uint64_t mtlab_shared_tls_calls(void) { return atomic_load(&shared_tls_calls); }

struct mtlab_buf *mtlab_first_buf(void) { return atomic_load(&all_bufs); }

void mtlab_thread_init_global(void) { pthread_key_create(&exit_key, thread_exit); }

/* Detach (attach build): no thread's exit may call into the library after
 * it is unloaded. */
void mtlab_thread_release(void) { pthread_key_delete(exit_key); }

/* Copy of another thread's buffer, taken by the exit flusher (or the flush
 * before an exec); `copying` keeps the two apart. */
static uint8_t exit_copy[MTLAB_BUF_BYTES];
static _Atomic int copying;

/* Full-trace mode, at exit (`how` MTLAB_CLOSED_EXIT) or before an exec
 * (MTLAB_CLOSED_EXEC): another thread may still be appending. Close the
 * buffer (its owner drops what it flushes from now on), then copy it and
 * write the copy only if the owner was neither busy nor done anything during
 * the copy. An owner in the middle of an event finishes it within
 * microseconds (at exit it starts no other: tracing is off by then), so a
 * busy buffer is tried again for up to ~1 ms; what cannot be copied whole is
 * counted as dropped. Either way the events are marked counted, so that an
 * owner that flushes afterwards does not count them again. */
static void flush_foreign(struct mtlab_buf *b, int how) {
    int was = atomic_exchange(&b->closed, how);
    atomic_thread_fence(memory_order_seq_cst);
    if (was == MTLAB_CLOSED_EXEC) {
        /* Copied before an exec that failed, and not flushed by its owner
         * since: the copied events are written, the ones after them are
         * dropped (they would need the copied ones in their chunk). */
        for (int attempt = 0; attempt < 200 && atomic_load_explicit(&b->busy, memory_order_acquire); attempt++)
            mtlab_sys_sleep_ns(5000);
        uint32_t n = b->n_events, done = atomic_exchange(&b->counted, n);
        if (n > done) count_dropped_chunk(n - done);
        return;
    }
    for (int attempt = 0; attempt < 200; attempt++) {
        if (attempt) mtlab_sys_sleep_ns(5000);
        uint32_t busy = atomic_load_explicit(&b->busy, memory_order_acquire);
        uint32_t gen = atomic_load_explicit(&b->gen, memory_order_acquire);
        uint32_t len = atomic_load_explicit(&b->len, memory_order_acquire);
        if (busy) continue;
        if (len == 0) {
            /* Nothing to write: an exec's close is undone (an owner that
             * saw it meanwhile opened the buffer itself). */
            if (how == MTLAB_CLOSED_EXEC) atomic_compare_exchange_strong(&b->closed, &how, MTLAB_CLOSED_NO);
            return;
        }
        uint32_t n = b->n_events;
        uint64_t first = b->first_tsc, last = n ? b->prev_tsc : 0;
        memcpy(exit_copy + MTLAB_BUF_HEAD, b->data + MTLAB_BUF_HEAD, len);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load(&b->busy) || atomic_load(&b->gen) != gen) continue; /* torn: again */
        atomic_store(&b->counted, n);
        put_headers(exit_copy, b->tid, n, first, last, len, 0);
        write_counted(exit_copy, len, n);
        return;
    }
    uint32_t n = b->n_events;
    atomic_store(&b->counted, n);
    count_dropped_chunk(n);
}

/* At exit: flush every buffer; other threads may still run. */
void mtlab_flush_all(void) {
    /* An exec's flush in another thread uses the copy buffer: waited for up to ~10 ms. */
    int held = 0;
    for (int i = 0; i < 10000 && !(held = !atomic_exchange(&copying, 1)); i++) mtlab_sys_sleep_ns(1000);
    struct mtlab_buf *mine = mtlab_tls.buf;
    mtlab_flush_own();
    if (mine) atomic_store(&mine->closed, MTLAB_CLOSED_EXIT);
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        if (b == mine) continue;
        if (mtlab_ctl) {
            /* Sampling: take the lock and keep it, so later appends drop. */
            if (mtlab_buf_lock(b, MTLAB_LOCK_FLUSHER, 0)) {
                mtlab_flush_buf(b);
                atomic_store(&b->closed, MTLAB_CLOSED_EXIT);
            }
        } else {
            flush_foreign(b, MTLAB_CLOSED_EXIT);
        }
    }
    if (held) atomic_store(&copying, 0);
}

/* Before an exec: the kernel ends every other thread with the image, and
 * the events still in their buffers with them (rustup runs the real cargo
 * or rustc by exec while its worker threads wait: their calls were lost,
 * uncounted). They are written now, as at exit. Tracing goes on meanwhile,
 * and the exec may fail: a buffer copied (full-trace mode) stays closed
 * until its owner's next flush, which drops what it added since (counted)
 * and opens it again. Sampling mode flushes under the buffer's lock and
 * closes nothing. A buffer being appended to or flushed is passed over. */
void mtlab_flush_others_before_exec(void) {
    if (!mtlab_ctl && atomic_exchange(&copying, 1)) return; /* another thread's exec or exit is copying */
    struct mtlab_buf *mine = mtlab_tls.buf;
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        if (b == mine || !atomic_load(&b->owned) || atomic_load(&b->closed) || !atomic_load(&b->len)) continue;
        if (mtlab_ctl) {
            if (mtlab_buf_lock(b, MTLAB_LOCK_FLUSHER, 0)) {
                mtlab_flush_buf(b);
                atomic_store_explicit(&b->lock, 0, memory_order_release);
            }
        } else {
            flush_foreign(b, MTLAB_CLOSED_EXEC);
        }
    }
    if (!mtlab_ctl) atomic_store(&copying, 0);
}

/* In a fork child only the forking thread exists: other buffers hold the
 * parent's events, which the parent writes itself. Locks held at fork time
 * by threads that no longer exist are released. */
void mtlab_fork_child_reset(void) {
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        reset(b);
        atomic_store(&b->closed, MTLAB_CLOSED_NO);
        atomic_store(&b->lock, 0);
        atomic_store(&b->busy, 0);
        atomic_store(&b->counted, 0);
        atomic_store(&b->owned, b == mtlab_tls.buf);
        /* Its slot was in the parent's watermark page. */
        b->progress = 0;
        b->pending_tsc = b->flushed_end = b->last_first = 0;
    }
    if (mtlab_tls.buf) mtlab_tls.buf->tid = mtlab_gettid();
}

/* A signal handler that longjmps out of mtlab's code (or out of a real
 * allocator call the shim was timing) leaves the guard or in_alloc raised
 * for good, and every later call of the thread would pass untraced. The
 * frame that raised it is gone when the current call is not below it on
 * the stack, or when the two words it had saved there (frame pointer and
 * return address, never changed while it lives) were overwritten by later
 * calls. A nested call — mtlab's own, or a signal handler's interrupting it
 * — leaves both in place. On an alternate signal stack outside the
 * thread's stack, nothing is decided. */
static _Atomic uint64_t guards_reset;

static int frame_gone(struct mtlab_tls *t, uintptr_t sp, const uintptr_t w[2], uintptr_t here) {
    if (sp < t->stack_lo || sp > t->stack_hi - 2 * sizeof(uintptr_t)) return 0; /* held across a return (fork) */
    if (here >= sp) return 1;
    const uintptr_t *at = (const uintptr_t *)sp;
    return at[0] != w[0] || at[1] != w[1];
}

/* Signal handlers that call the allocator while the thread is inside mtlab.
 *
 * A handler that interrupted mtlab's own code (an event half-written, a
 * buffer being flushed, a stack being walked) cannot be recorded: its call
 * passes through, and is counted. One that interrupted the real allocator
 * call a shim was timing (the program's malloc, most of a traced loop's time
 * with a slow allocator) is recorded: no buffer is in use then, so the
 * interrupted call's timing state is set aside for the handler's call and
 * put back after it (mtlab_resume_interrupted).
 *
 * A handler is told from mtlab's own nested calls (and the allocator's) by
 * the signal frame between the current call and the frame that raised the
 * flag: on x86-64 the kernel puts the handler's return address, the
 * sigaction's restorer, at its base. On an alternate signal stack, by that
 * stack (sigaltstack says the thread is on it) not holding the flag's frame.
 * Elsewhere nothing is decided: the call passes through, as before. */
static _Atomic uint64_t signal_untraced;
static _Atomic uintptr_t restorer;

uint64_t mtlab_signal_calls_untraced(void) { return atomic_load(&signal_untraced); }

/* The restorer of an installed handler (glibc's __restore_rt): every handler
 * installed through the C library has the same one. 0: no handler at all. */
static uintptr_t find_restorer(void) {
#if defined(__x86_64__)
    uintptr_t r = atomic_load_explicit(&restorer, memory_order_relaxed);
    if (r) return r;
    struct {
        uintptr_t handler;
        unsigned long flags;
        uintptr_t restorer;
        uint64_t mask;
    } k;
    for (long sig = 1; sig <= 64; sig++) {
        if (mtlab_sys6(SYS_rt_sigaction, sig, 0, (long)&k, 8, 0, 0) != 0) continue;
        if (k.handler > 1 /* not SIG_DFL, SIG_IGN */ && (k.flags & 0x04000000 /* SA_RESTORER */) && k.restorer) {
            atomic_store_explicit(&restorer, k.restorer, memory_order_relaxed);
            return k.restorer;
        }
    }
#endif
    return 0;
}

#define SIGNAL_SCAN_BYTES (256u << 10)

/* A word equal to the restorer is not enough: the stack below live frames
 * keeps stale words, and every sigaction() call leaves the restorer in one
 * (glibc builds the kernel's struct sigaction on the stack). Taken for a
 * handler, such a word let the allocator's own nested call be recorded
 * beside the outer one (operator new's malloc, reallocarray's realloc: the
 * same block twice, an overlapping allocation; node did it once a run). So
 * the frame behind it must be the kernel's: the restorer is the handler's
 * return address at the base of an rt_sigframe, followed by the ucontext —
 * uc_flags, uc_link (0: the kernel's), uc_stack (3 words), then sigcontext
 * whose 16th word is the interrupted stack pointer, which lies above the
 * signal frame and below (within) the frame that raised the flag. */
static int is_signal_frame(const uintptr_t *w, uintptr_t flag_sp, uintptr_t stack_hi) {
    enum { UC_LINK = 2, SAVED_RSP = 1 + 2 + 3 + 15 };
    if ((uintptr_t)(w + SAVED_RSP + 1) > stack_hi) return 0;
    uintptr_t rsp = w[SAVED_RSP];
    return w[UC_LINK] == 0 && rsp > (uintptr_t)(w + SAVED_RSP) && rsp <= flag_sp;
}

static int in_handler_since(struct mtlab_tls *t, uintptr_t here, uintptr_t flag_sp) {
    if (!flag_sp || flag_sp == UINTPTR_MAX) return 0; /* unknown, or held across fork */
    if (t->stack_hi && here >= t->stack_lo && here < t->stack_hi) {
        uintptr_t r = find_restorer();
        if (!r || flag_sp <= here) return 0;
        uintptr_t hi = flag_sp < t->stack_hi ? flag_sp : t->stack_hi;
        if (hi - here > SIGNAL_SCAN_BYTES) hi = here + SIGNAL_SCAN_BYTES;
        for (const uintptr_t *w = (const uintptr_t *)(here & ~(uintptr_t)7); (uintptr_t)w < hi; w++)
            if (*w == r && is_signal_frame(w, flag_sp, t->stack_hi)) return 1;
        return 0;
    }
    stack_t ss;
    if (mtlab_sys6(SYS_sigaltstack, 0, (long)&ss, 0, 0, 0, 0) != 0 || !(ss.ss_flags & SS_ONSTACK)) return 0;
    uintptr_t lo = (uintptr_t)ss.ss_sp;
    return flag_sp < lo || flag_sp >= lo + ss.ss_size;
}

/* The flags are up and not stale at `here`: 1 when this call is a signal
 * handler's that may be recorded (the interrupted allocator call set aside). */
static int handler_call(struct mtlab_tls *t, uintptr_t here) {
    if (atomic_load_explicit(&mtlab_state, memory_order_relaxed) != MTLAB_TRACING) return 0;
    uintptr_t flag_sp = t->guard ? (t->guard_sp ? t->guard_sp : t->alloc_sp) : t->alloc_sp;
    if (!in_handler_since(t, here, flag_sp)) return 0;
    if (t->guard || t->resume) { /* mtlab's code, or a handler's call already set aside */
        atomic_fetch_add_explicit(&signal_untraced, 1, memory_order_relaxed);
        return 0;
    }
    t->saved_in_alloc = t->in_alloc;
    t->saved_alloc_sp = t->alloc_sp;
    t->saved_alloc_w[0] = t->alloc_w[0];
    t->saved_alloc_w[1] = t->alloc_w[1];
    t->in_alloc = 0;
    t->resume = 1;
    return 1;
}

int mtlab_guard_stale(struct mtlab_tls *t, uintptr_t here) {
    if (!t->stack_hi) stack_bounds(&t->stack_lo, &t->stack_hi); /* before the thread's first event */
    if (!t->stack_hi || here < t->stack_lo || here >= t->stack_hi) return handler_call(t, here);
    int reset = 0;
    if (t->guard && (t->guard_sp ? frame_gone(t, t->guard_sp, t->guard_w, here)
                                 : frame_gone(t, t->alloc_sp, t->alloc_w, here))) {
        t->guard = 0;
        /* An append cut short left its buffer marked busy: only this thread raises it. */
        if (t->buf) atomic_store(&t->buf->busy, 0);
        reset = 1;
    }
    if (t->in_alloc && frame_gone(t, t->alloc_sp, t->alloc_w, here)) {
        t->in_alloc = 0;
        reset = 1;
    }
    if (reset) atomic_fetch_add(&guards_reset, 1);
    if (!t->guard && !t->in_alloc) return 1;
    return handler_call(t, here);
}

uint64_t mtlab_guards_reset(void) { return atomic_load(&guards_reset); }
