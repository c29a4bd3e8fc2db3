/*
 * thread.c — per-thread buffers: creation, flushing, thread exit and fork.
 *
 * A buffer belongs to one thread at a time. Buffers sit in a global list
 * that only grows (push by CAS); a buffer released at thread exit is reused
 * by the next new thread, so programs that churn threads use bounded memory.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

HIDDEN __thread struct mtlab_tls mtlab_tls __attribute__((tls_model("initial-exec")));

static struct mtlab_buf *_Atomic all_bufs;
static pthread_key_t exit_key;

static inline void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void put_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

static void reset(struct mtlab_buf *b) {
    b->n_events = 0;
    b->first_tsc = b->last_tsc = b->prev_tsc = 0;
    b->prev_ptr = 0;
    atomic_store_explicit(&b->len, 0, memory_order_release);
}

/* Writes the buffer's events as one EVENTS record; drops them on failure. */
void mtlab_flush_buf(struct mtlab_buf *b) {
    uint32_t len = atomic_load_explicit(&b->len, memory_order_acquire);
    if (len == 0) return;
    if (atomic_load(&b->closed)) {
        atomic_fetch_add(&mtlab_counters.events_dropped, b->n_events);
        reset(b);
        return;
    }
    uint8_t *h = b->data;
    put_u32(h, MTLAB_EVENTS_HEADER + len);
    put_u16(h + 4, MTLAB_REC_EVENTS);
    put_u16(h + 6, 0);
    put_u32(h + 8, b->tid);
    put_u32(h + 12, b->n_events);
    put_u64(h + 16, b->first_tsc);
    put_u64(h + 24, b->last_tsc);
    if (mtlab_write_raw(h, MTLAB_BUF_HEAD + len) == 0) {
        atomic_fetch_add(&mtlab_counters.events_written, b->n_events);
    } else {
        atomic_fetch_add(&mtlab_counters.events_dropped, b->n_events);
        atomic_fetch_add(&mtlab_counters.chunks_dropped, 1);
    }
    reset(b);
}

static struct mtlab_buf *acquire_buf(void) {
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        int expected = 0;
        if (!atomic_load(&b->closed) && atomic_compare_exchange_strong(&b->owned, &expected, 1)) return b;
    }
    struct mtlab_buf *b = (struct mtlab_buf *)mtlab_sys_mmap(MTLAB_BUF_BYTES);
    if (!b) return NULL;
    atomic_store(&b->owned, 1);
    struct mtlab_buf *head = atomic_load(&all_bufs);
    do {
        b->next = head;
    } while (!atomic_compare_exchange_weak(&all_bufs, &head, b));
    return b;
}

static void thread_exit(void *arg) {
    struct mtlab_buf *b = (struct mtlab_buf *)arg;
    mtlab_tls.guard++;
    mtlab_flush_buf(b);
    mtlab_tls.buf = NULL;
    mtlab_tls.dead = 1;
    atomic_store(&b->owned, 0);
    mtlab_tls.guard--;
}

/* Set by the dynamic loader to the initial stack pointer of the process. */
extern void *__libc_stack_end __attribute__((weak));

static uintptr_t stack_top(void) {
    /* The main thread: glibc's pthread_getattr_np reads /proc/self/maps with
     * stdio there, i.e. calls malloc, which (untraced, under the guard) would
     * set up the brk heap in the middle of the program's first traced call —
     * moving the break under a program that uses sbrk itself. */
    if (&__libc_stack_end && __libc_stack_end && mtlab_gettid() == (uint32_t)getpid())
        return ((uintptr_t)__libc_stack_end + 4095) & ~(uintptr_t)4095;
    pthread_attr_t attr;
    void *addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &addr, &size);
        pthread_attr_destroy(&attr);
    }
    if (!addr) return (uintptr_t)__builtin_frame_address(0) + 4096; /* unknown: walk nearly nothing */
    return (uintptr_t)addr + size;
}

/* The calling thread's buffer, set up on first use. Caller holds the guard. */
struct mtlab_buf *mtlab_thread_buf(void) {
    struct mtlab_tls *t = &mtlab_tls;
    if (LIKELY(t->buf != NULL)) return t->buf;
    struct mtlab_buf *b = acquire_buf();
    if (!b) return NULL;
    reset(b);
    b->tid = mtlab_gettid();
    if (!t->stack_hi) t->stack_hi = stack_top();
    t->buf = b;
    /* Re-arming after the destructor ran lets glibc call it again for
     * frees made by destructors that ran after ours. */
    pthread_setspecific(exit_key, b);
    t->dead = 0;
    return b;
}

struct mtlab_buf *mtlab_first_buf(void) { return atomic_load(&all_bufs); }

void mtlab_thread_init_global(void) { pthread_key_create(&exit_key, thread_exit); }

/* At exit: flush every buffer; other threads may still run, so their
 * buffers are closed first and whatever they append later is dropped. */
void mtlab_flush_all(void) {
    struct mtlab_buf *mine = mtlab_tls.buf;
    if (mine) mtlab_flush_buf(mine);
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        if (b == mine) continue;
        atomic_store(&b->closed, 1);
        uint32_t len = atomic_load_explicit(&b->len, memory_order_acquire);
        if (len == 0) continue;
        atomic_store(&b->closed, 0); /* let this one flush go through */
        mtlab_flush_buf(b);
        atomic_store(&b->closed, 1);
    }
    if (mine) atomic_store(&mine->closed, 1);
}

/* In a fork child only the forking thread exists: other buffers hold the
 * parent's events, which the parent writes itself. */
void mtlab_fork_child_reset(void) {
    for (struct mtlab_buf *b = atomic_load(&all_bufs); b; b = b->next) {
        reset(b);
        atomic_store(&b->closed, 0);
        atomic_store(&b->owned, b == mtlab_tls.buf);
    }
    if (mtlab_tls.buf) mtlab_tls.buf->tid = mtlab_gettid();
}
