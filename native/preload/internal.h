/*
 * internal.h — shared state of the preload library (libmtlab_preload.so).
 *
 * The library records, it never analyses: shims call the real function, then
 * append one compact event to the calling thread's buffer. Buffers are written
 * to the trace file with pwrite at offsets reserved by one atomic add, so no
 * lock is taken on the hot path. See docs/architecture.md for the whole flow.
 */
#ifndef MTLAB_INTERNAL_H
#define MTLAB_INTERNAL_H

#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "../include/mtlab_trace.h"

/* musl (MTLAB_MUSL: the build for musl-linked programs, built.rs) defines
 * mmap64 as a macro for mmap; its libc still exports the name, and a
 * program built against an older musl may call it, so the shim keeps it. */
#ifdef mmap64
#undef mmap64
#endif

/* Bench builds only: bench/tracer_steps.sh builds the library with
 * -DMTLAB_BENCH_SKIP=MASK to leave steps of a traced call out, one at a
 * time, and measures what each costs (the TSC is all this VM offers: no
 * hardware counters). Every real build has 0, where each test is a constant
 * and the code is as without them. A build with any step left out writes
 * traces that are not to be read. */
#ifndef MTLAB_BENCH_SKIP
#define MTLAB_BENCH_SKIP 0
#endif
enum {
    MTLAB_SKIP_TSC = 1,     /* time stamps from a per-thread counter, not the TSC */
    MTLAB_SKIP_STACK = 2,   /* no stack id (the memo check, the walk) */
    MTLAB_SKIP_HEAP = 4,    /* no heap facts: break, glibc arena, usable size */
    MTLAB_SKIP_WRITE = 8,   /* full buffers emptied, not written to the file */
    MTLAB_SKIP_EVENT = 16,  /* no event appended (no stack either) */
    MTLAB_SKIP_RECORD = 32, /* the shim calls the real function and returns */
};
#define MTLAB_SKIP(step) ((MTLAB_BENCH_SKIP & (step)) != 0)

#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define HIDDEN __attribute__((visibility("hidden")))

/* Bytes of one thread buffer: record header + chunk header + events. */
#define MTLAB_BUF_BYTES (64 * 1024)
/* Room one event may need, so an append never checks twice. */
#define MTLAB_MAX_EVENT_BYTES 96
#define MTLAB_MAX_DEPTH 256

/* ---- configuration, fixed by the constructor ---- */
enum { MTLAB_UNWIND_FP = 0, MTLAB_UNWIND_LIBGCC = 1, MTLAB_UNWIND_LIBUNWIND = 2, MTLAB_UNWIND_DWARF = 3 };
struct mtlab_config {
    int stacks;    /* 1: frame-pointer stacks, 0: none */
    int max_depth; /* frames kept per stack */
    int follow;    /* trace children */
    int free_stacks; /* walk the stack for free too (off: stack id 0) */
    int no_arena_heaps; /* glibc heaps are not 64 MiB-aligned (hugetlb tunable): don't read heap_info */
    int unwind;      /* MTLAB_UNWIND_*: how stacks are captured */
    int unwind_check; /* dwarf stacks also taken by libgcc and compared (a test) */
    uint64_t sample_interval; /* 0: full trace; else mean bytes between samples */
    uint64_t sample_seed;     /* 0: seed each thread from the TSC */
    uint64_t time_gap;        /* full trace: one call in time_gap timed on average (1: every call) */
    int ctl_thread;           /* sampling: start the control thread (MTLAB_CTL_THREAD, default 1) */
    int live;                 /* `record --live` (MTLAB_LIVE=1): every traced image gets a watermark page */
    int is_glibc;  /* the program's malloc is glibc's: chunk headers readable */
    uint64_t tsc_hz;
    /* TSC ticks (~100 ms) a buffer's oldest event may wait before the
     * thread's next event writes the buffer out: what a process killed by a
     * signal (SIGKILL, an OOM kill, SIGTERM at its default) takes with it is
     * at most its threads' last ~100 ms, not up to 64 KiB of events each. */
    uint64_t flush_age;
    uint64_t brk_start; /* start of the brk heap ([heap] in maps, else the break) */
    uint64_t brk_init;  /* the break when tracing started */
    uint64_t start_ns, start_tsc; /* when tracing of this process started */
    char out_path[4096];
    char allocator[16];
    char allocator_path[512];
};
extern HIDDEN struct mtlab_config mtlab_cfg;

/* MTLAB_NOT_STARTED until the first intercepted call or the constructor
 * (whichever comes first) started tracing; then MTLAB_TRACING, MTLAB_OFF
 * (nothing to trace: no MTLAB_OUT, or an untraced --no-follow child), or at
 * the end MTLAB_STOPPED. */
enum { MTLAB_NOT_STARTED = 0, MTLAB_TRACING = 1, MTLAB_STOPPED = 2, MTLAB_OFF = 3 };
extern HIDDEN _Atomic int mtlab_state;
/* Starts tracing from the first intercepted call when it comes before
 * mtlab's constructor (another library's constructor); returns the state. */
HIDDEN int mtlab_start_early(void);
/* Process lifecycle (init.c): fork handlers, also run by the _Fork shim. */
HIDDEN void mtlab_fork_prepare(void);
HIDDEN void mtlab_fork_parent(void);
HIDDEN void mtlab_fork_child(void);
/* pid_now differs from mtlab_pid: a process made without fork handlers is
 * given its own trace (returns 1), a vfork child is left alone (0). */
HIDDEN int mtlab_check_forked(uint32_t pid_now);
HIDDEN uint64_t mtlab_forks_unseen(void);
/* Finishes the trace now and stops tracing (_exit; a seccomp filter coming). */
HIDDEN void mtlab_finish_now(void);
/* Attach build (attach.c, init.c): a setting of `mtlab record --pid`, and
 * the start and end of tracing it drives. */
HIDDEN const char *mtlab_attach_conf(const char *name);
HIDDEN int mtlab_attach_start(void);
HIDDEN void mtlab_attach_stop(void);
/* Where the time of the attach's two calls goes (attach.c): step i of
 * mtlab_attach_begin (0..15) or mtlab_attach_end (16..31) done now, in
 * CLOCK_MONOTONIC ns; mtlab reads the array after the call. */
#ifdef MTLAB_ATTACH
HIDDEN void mtlab_attach_mark(int step);
#define MTLAB_ATTACH_MARK(step) mtlab_attach_mark(step)
extern int mtlab_attach_watermark_fd; /* attach.c: `record --pid --live`'s page, for mtlab to open */
#else
#define MTLAB_ATTACH_MARK(step) ((void)0)
#endif
extern void *__dso_handle;
HIDDEN int mtlab_stopped_by_seccomp(void);
HIDDEN int mtlab_trace_fd(void);

/* ---- real functions (resolve.c) ---- */
struct mtlab_real {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
    size_t (*malloc_usable_size)(void *);
    void *(*mmap)(void *, size_t, int, int, int, off_t);
    void *(*mmap64)(void *, size_t, int, int, int, off_t);
    int (*munmap)(void *, size_t);
    void *(*mremap)(void *, size_t, size_t, int, ...);
    int (*brk)(void *);
    void *(*sbrk)(intptr_t);
    int (*execve)(const char *, char *const[], char *const[]);
    int (*execvp)(const char *, char *const[]);
    int (*execvpe)(const char *, char *const[], char *const[]);
    int (*fexecve)(int, char *const[], char *const[]);
    int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
                       char *const[], char *const[]);
    int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
                        char *const[], char *const[]);
    void (*abort)(void) __attribute__((noreturn));
    int (*pthread_create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    int (*pthread_join)(pthread_t, void **);
    int (*dlclose)(void *);
    void *(*dlopen)(const char *, int);
    int (*prctl)(int, ...);
    long (*syscall)(long, ...);
    void **curbrk; /* glibc's cached program break, read instead of calling sbrk(0) */
};
extern HIDDEN struct mtlab_real mtlab_real;
/* Attach build: the dynamic linker's code, where its allocations come from
 * the shims must not touch (resolve.c); 0, 0 unless the program's own PLT
 * entry is malloc's canonical address. */
extern HIDDEN uintptr_t mtlab_loader_lo, mtlab_loader_hi;
HIDDEN void mtlab_resolve(void);
/* musl build (musl.c): whether the program (not a library) holds `f`, and
 * takes `name` from another module (an undefined symbol it relocates):
 * then `f` is its PLT entry made the function's canonical address. */
HIDDEN int mtlab_program_imports(const char *name, const void *f);
/* C++ operator new and delete behind the shims, by form (MTLAB_NEW_*,
 * MTLAB_DELETE_*): the next definition (a heap manager's own, or the C++
 * runtime's, which calls malloc), found when first needed — a C program
 * may load a C++ library later. `via_malloc`: that definition is the C++
 * runtime's, whose malloc or free call the shims see too. */
struct mtlab_cxx {
    void *_Atomic new_fn[MTLAB_NEW_FORMS];
    void *_Atomic delete_fn[MTLAB_DELETE_FORMS];
    _Atomic unsigned char new_via_malloc[MTLAB_NEW_FORMS];
    _Atomic unsigned char delete_via_malloc[MTLAB_DELETE_FORMS];
};
extern HIDDEN struct mtlab_cxx mtlab_cxx;
HIDDEN void *mtlab_cxx_resolve(int is_delete, unsigned form);
extern HIDDEN unsigned char mtlab_pool[64 * 1024];
static inline int mtlab_in_bootstrap(const void *p) {
    return (const unsigned char *)p >= mtlab_pool && (const unsigned char *)p < mtlab_pool + sizeof mtlab_pool;
}
HIDDEN void *mtlab_bootstrap_alloc(size_t n);
HIDDEN int mtlab_pool_in_use(void); /* dlsym took pool memory: frees must see the shim */

/* ---- per-thread state (thread.c) ---- */
struct mtlab_buf {
    struct mtlab_buf *next; /* global list, never unlinked */
    _Atomic int owned;      /* 1 while a live thread writes into it */
    _Atomic int closed;     /* MTLAB_CLOSED_*: set by the exit flush (or before an exec): drop later appends */
    uint32_t tid;
    uint32_t n_events;
    uint64_t first_tsc, prev_tsc; /* the chunk's last_tsc is prev_tsc (0 while it has no event) */
    int64_t prev_ptr;
    _Atomic uint32_t len; /* bytes of events after the headers */
    _Atomic int lock;     /* sampling mode: MTLAB_LOCK_* while appending or flushing, else 0 */
    /* Full-trace mode: the owner raises `busy` around every append and own
     * flush and bumps `gen` when done, with plain stores; the exit flusher
     * copies a buffer only if neither changed meanwhile (a seqlock). */
    _Atomic uint32_t busy, gen;
    /* Events of it the exit flusher has written or counted as dropped: the
     * owner's own later flush drops only the rest. */
    _Atomic uint32_t counted;
    /* `record --live` (writer.c, mtlab_progress_*): the buffer's slot in the
     * watermark page (+1; 0: none yet, -1: none left), the oldest first
     * time stamp of its chunks not known below the watermark (0: none), the
     * file's end after its latest chunk, and that chunk's first time stamp. */
    int32_t progress;
    uint64_t pending_tsc, flushed_end, last_first;
    /* The time stamp past which the owner's next event writes the buffer out
     * first: its first event's plus mtlab_cfg.flush_age; UINT64_MAX while
     * it holds none. One compare per event (shims.c, begin). */
    uint64_t flush_by;
    _Alignas(8) uint8_t data[]; /* events start 8-aligned, as before `counted` */       /* MTLAB_RECORD_HEADER + MTLAB_EVENTS_HEADER + events */
};
/* Who holds a buffer's lock (sampling mode): its owner thread appending, or
 * another thread flushing it (a dump, the exit flush, which keeps it). The
 * owner that finds its own append holding it was interrupted by a signal
 * handler in the middle of it, and must not wait for itself. */
#define MTLAB_LOCK_FLUSHER 1
#define MTLAB_LOCK_OWNER 2
/* A buffer's `closed`: open; closed for good by the exit flush; closed by
 * the flush before an exec, which its owner opens again at its next flush
 * (the exec failed, or had not ended the thread yet). */
#define MTLAB_CLOSED_NO 0
#define MTLAB_CLOSED_EXIT 1
#define MTLAB_CLOSED_EXEC 2
HIDDEN int mtlab_buf_lock(struct mtlab_buf *b, int who, int tries); /* thread.c */
#define MTLAB_BUF_HEAD (MTLAB_RECORD_HEADER + MTLAB_EVENTS_HEADER)
/* `record --live` copies a quiet thread's buffer out of the process at these offsets (mtlab_trace.h). */
_Static_assert(offsetof(struct mtlab_buf, tid) == MTLAB_BUF_OFF_TID, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, n_events) == MTLAB_BUF_OFF_N_EVENTS, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, first_tsc) == MTLAB_BUF_OFF_FIRST_TSC, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, prev_tsc) == MTLAB_BUF_OFF_PREV_TSC, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, len) == MTLAB_BUF_OFF_LEN, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, busy) == MTLAB_BUF_OFF_BUSY, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, gen) == MTLAB_BUF_OFF_GEN, "buffer layout");
_Static_assert(offsetof(struct mtlab_buf, data) + MTLAB_BUF_HEAD == MTLAB_BUF_OFF_EVENTS, "buffer layout");
#define MTLAB_BUF_CAP (MTLAB_BUF_BYTES - sizeof(struct mtlab_buf) - MTLAB_BUF_HEAD)

/* The thread's last frame-pointer walk (stack.c).
 *
 * A walk is a chain of dependent loads (each frame's address is read from the
 * one before), so it costs the load latency times the depth. When the program
 * allocates again from the same place, the chain is the same: the memo keeps
 * the frame addresses and the two words read at each, and a hit re-reads
 * those words with independent loads. If the first frame's address and every
 * word read are unchanged, the walk would visit the same frames and make the
 * same decisions, so it would give the same stack: the memo's id is the
 * answer, with no hashing and no table probe. Every re-read lies in
 * [frame, stack top) of this thread's stack, which the walk itself reads; a
 * walk that did not start on that stack is never memoized (id 0). */
/* mtlab's DWARF walk (cfi.c) keeps its own record of the last walk and
 * reports an exact repeat; then only `id` (with `gen`: a dlclose, which bumps
 * mtlab_cfi_gen, invalidates it) is used from here. Where that walk read
 * only side-by-side pairs of words (code with frame pointers), they fill
 * `fp`/`words` as well: the walk is a function of its start and the words it
 * read, so the same check proves its repeat. */
#define MTLAB_MEMO_LEVELS 64
struct mtlab_stack_memo {
    uint32_t id;     /* 0: empty (a fork clears it: the child's ids start afresh) */
    uint32_t levels; /* windows read by the walk; > MTLAB_MEMO_LEVELS: not memoized */
    uint32_t gen;    /* mtlab_cfi_gen when it was filled */
    uint32_t code;   /* mtlab_stack_code(id): the id as the event writes it */
    uintptr_t fp[MTLAB_MEMO_LEVELS];
    uintptr_t words[2 * MTLAB_MEMO_LEVELS] __attribute__((aligned(16))); /* saved frame pointer, return address */
};

/* Everything mtlab keeps per thread, in one thread-local block of exactly one
 * page. A pthread's static TLS lies at the top of its stack, so a block of
 * any other size would move the program's stack frames to other offsets
 * within their pages, and with them which of its stack accesses alias its
 * heap accesses in the caches: on malloc-test, an 896-byte block made every
 * malloc ~3 cycles slower with the same instructions. A whole page keeps
 * every offset as it is without mtlab. */
#define MTLAB_TLS_BYTES 4096
#define MTLAB_RECENT_STACKS 32768
/* The stack's hash above bit 21 (a tag) and its id below (ids are < 2^21). */
struct mtlab_recent_stack { uint64_t tag_id; };
struct mtlab_tls {
    union {
        struct {
            int guard;    /* inside mtlab's own code: every shim passes through */
            int in_alloc; /* inside a real allocator call: nested mmaps are the allocator's */
            /* The frames that raised them from 0, and the two words there
             * then (saved frame pointer, return address): see mtlab_guard_stale. */
            uintptr_t guard_sp, guard_w[2], alloc_sp, alloc_w[2];
            int dead;     /* buffer released by the thread-exit destructor */
            /* A signal handler's call, traced while the allocator call it
             * interrupted was being timed: that call's in_alloc and frame,
             * put back when the handler's call is recorded
             * (mtlab_resume_interrupted). */
            int resume, saved_in_alloc;
            uintptr_t saved_alloc_sp, saved_alloc_w[2];
            struct mtlab_buf *buf;
            uintptr_t stack_lo, stack_hi; /* this thread's stack: frame walks stay inside */
            uint64_t arena_ar, arena_mem, arena_tail; /* the last glibc arena this thread looked at (arena.c) */
            int arenas_listed;                        /* ... and whether it has gone round all of them once */
            int64_t countdown;               /* sampler: bytes to the next sample point */
            uint64_t rng;                    /* sampler: xorshift state */
            int sampler_init;
            int64_t time_left; /* full trace: calls until the next timed one (timing.c) */
            uint64_t time_rng; /* ... its draws' xorshift state (0: not seeded yet) */
            uint64_t bench_clock; /* MTLAB_SKIP_TSC: the counter standing in for the TSC */
            uint64_t lineage;  /* sampler: this thread's place in the creation tree (0: unknown) */
            uint32_t children; /* sampler: threads this thread has created through pthread_create */
            uint64_t dump_seen, last_flush_tsc;
            uint32_t pend_captures; /* sampler: stack captures not yet added to the shared counts */
            uint64_t pend_unwind;   /* ... and their TSC cycles */
            void *cfi_cache;  /* cfi.c: this thread's unwind rules by return address */
            uint32_t cfi_gen; /* ... valid while mtlab_cfi_gen is this */
            struct mtlab_stack_memo memo; /* the last frame-pointer or DWARF walk (stack.c) */
            /* Ids of this thread's recent stacks by hash (stack.c), mapped on
             * first use: the shared table is megabytes, and a probe of it
             * misses the caches. */
            struct mtlab_recent_stack *recent;
            /* The last stack found outside this thread's own (mtlab_frame_bounds). */
            uintptr_t foreign_lo, foreign_hi;
            uint32_t foreign_tid, foreign_gen;
        };
        char page[MTLAB_TLS_BYTES];
    };
};
_Static_assert(sizeof(struct mtlab_tls) == MTLAB_TLS_BYTES, "mtlab's thread-local block is one page");
/* Preloaded, the block is static TLS (initial-exec: one load from %fs). The
 * attach build (MTLAB_ATTACH) is dlopen'ed into a running process, whose
 * static TLS has no room for a page: there it is dynamic TLS. */
#ifdef MTLAB_ATTACH
#define MTLAB_TLS_MODEL "global-dynamic"
#else
#define MTLAB_TLS_MODEL "initial-exec"
#endif
extern HIDDEN __thread struct mtlab_tls mtlab_tls __attribute__((tls_model(MTLAB_TLS_MODEL)));

/* Raises the guard; the outermost raise notes its frame, so that a guard
 * left set by a longjmp out of mtlab's code can be told from a nested one. */
#define MTLAB_NOTE_FRAME(sp, w)                                   \
    do {                                                          \
        (sp) = (uintptr_t)__builtin_frame_address(0);             \
        (w)[0] = ((const uintptr_t *)(sp))[0];                    \
        (w)[1] = ((const uintptr_t *)(sp))[1];                    \
    } while (0)
#define MTLAB_GUARD_ENTER(t)                                              \
    do {                                                                  \
        if ((t)->guard++ == 0) MTLAB_NOTE_FRAME((t)->guard_sp, (t)->guard_w); \
    } while (0)
/* The same, in the frame that noted itself for in_alloc just before (a
 * shim recording the allocator call it timed): guard_sp 0 says the guard's
 * frame is that one, alloc_sp and alloc_w, which stay as they are while the
 * guard is up (only a shim that may record notes them). */
#define MTLAB_GUARD_ENTER_AFTER_ALLOC(t)            \
    do {                                            \
        if ((t)->guard++ == 0) (t)->guard_sp = 0;   \
    } while (0)
/* Called where the guard or in_alloc is found set at `here`: clears them if
 * they were left by a longjmp (the frame that set them is gone); returns 1
 * when the thread may record now. */
HIDDEN int mtlab_guard_stale(struct mtlab_tls *t, uintptr_t here);
HIDDEN uint64_t mtlab_guards_reset(void);
/* Allocator calls of signal handlers that interrupted mtlab's own code, passed
 * through untraced (recording one there would corrupt the event being written). */
HIDDEN uint64_t mtlab_signal_calls_untraced(void);
/* At the end of a traced call: a handler's call is done, the allocator call it
 * interrupted is timed again. */
static inline void mtlab_resume_interrupted(struct mtlab_tls *t) {
    if (__builtin_expect(t->resume, 0)) {
        t->in_alloc = t->saved_in_alloc;
        t->alloc_sp = t->saved_alloc_sp;
        t->alloc_w[0] = t->saved_alloc_w[0];
        t->alloc_w[1] = t->saved_alloc_w[1];
        t->resume = 0;
    }
}

HIDDEN struct mtlab_buf *mtlab_thread_buf(void); /* guard must be set */
/* The stack a walk from `frame` may read: 1 with its bounds (*own: this
 * thread's own stack), 0 if unknown (thread.c). */
HIDDEN int mtlab_frame_bounds(uintptr_t frame, uintptr_t *lo, uintptr_t *hi, int *own);
extern HIDDEN _Atomic uint32_t mtlab_unmap_gen;
HIDDEN uint64_t mtlab_shared_tls_calls(void); /* calls of threads without thread storage of their own */
HIDDEN void mtlab_release_dead_buf(void);        /* after an event of an exited thread */
HIDDEN void mtlab_exec_keep_init(const char *ld_preload); /* the LD_PRELOAD entry an exec must keep */
HIDDEN void mtlab_catch_abort(void);             /* SIGABRT from inside libc: the thread's buffer written */
HIDDEN void mtlab_flush_own(void);               /* the calling thread's buffer, any mode */
HIDDEN void mtlab_set_main_stack(uint64_t lo, uint64_t hi);
HIDDEN void mtlab_thread_init_global(void);
HIDDEN void mtlab_flush_buf(struct mtlab_buf *b);
HIDDEN void mtlab_flush_all(void);
HIDDEN void mtlab_flush_others_before_exec(void); /* full trace: other threads' buffers, closed till their next flush */
HIDDEN void mtlab_fork_child_reset(void);
HIDDEN struct mtlab_buf *mtlab_first_buf(void);

/* ---- output (writer.c) ---- */
HIDDEN int mtlab_write_record(uint16_t type, const void *payload, uint32_t len);
HIDDEN int mtlab_write_raw(const void *data, size_t len); /* whole record(s) */
HIDDEN void mtlab_write_maps(void);
HIDDEN void mtlab_proc_open(void);               /* /proc held open: read after a chroot too */
HIDDEN int mtlab_open_self(const char *name);    /* /proc/self/NAME, read-only */
/* The mapping named `name` ("[heap]", "[stack]") in /proc/self/maps: 0 if found. */
HIDDEN int mtlab_find_mapping(const char *name, uint64_t *lo, uint64_t *hi);
HIDDEN void mtlab_thread_release(void); /* detach: thread exits no longer call in */
HIDDEN void mtlab_writer_release(void); /* detach: the trace and /proc descriptors closed */
HIDDEN void mtlab_writer_closing(void); /* no new records but END; waits for writes in flight */
HIDDEN void mtlab_write_end(void);
HIDDEN void mtlab_writer_before_exec(void); /* removes a file without events */
HIDDEN void mtlab_writer_fork_child(void);
HIDDEN void mtlab_set_root(int is_root);
HIDDEN void mtlab_watermark_attach(long fd); /* root process: MTLAB_WATERMARK_FD */
HIDDEN void mtlab_watermark_own(void); /* `record --live`, any other image: a page of its own */
HIDDEN int mtlab_watermark_make_attached(void); /* `record --pid --live`: the page, made here; its fd or -1 */
/* A buffer's progress for `record --live` (writer.c): its first event was
 * appended; its chunk was written. No-ops without a watermark page. */
HIDDEN void mtlab_progress_started(struct mtlab_buf *b);
/* The watermark page, or NULL (no `record` reading the file while it is
 * written: every progress call is skipped inline, and no shim makes it). */
HIDDEN extern _Atomic uint64_t *mtlab_watermark;
HIDDEN void mtlab_progress_flushed(struct mtlab_buf *b, uint64_t first_tsc);
HIDDEN int mtlab_progress_wanted(void); /* a watermark page takes the root's full-trace progress */
HIDDEN int mtlab_horizon_wanted(void);  /* ... for a reader that analyses up to its horizon (`--live`) */
HIDDEN void mtlab_writer_path(char *out, size_t cap); /* the file this process writes */
HIDDEN void mtlab_write_stats(void);
/* `mtlab record` makes the trace file of a process that cannot (broker.c). */
HIDDEN void mtlab_broker_init(const char *fd_value, uint32_t record_pid);
HIDDEN int mtlab_broker_preferred(void); /* a file of its own would be another user's */
HIDDEN int mtlab_broker_open(int own_error, char *path, size_t cap);
HIDDEN int mtlab_broker_send_page(int memfd); /* `record --live`: this image's page (0: sent) */

struct mtlab_counters {
    _Atomic uint64_t events_written;
    _Atomic uint64_t events_dropped;
    _Atomic uint64_t chunks_dropped;
    _Atomic uint64_t stacks_overflowed;
};
extern HIDDEN struct mtlab_counters mtlab_counters;
/* 1 once the process may have had a second thread (pthread_create called, a
 * second event buffer taken, or attached to a running process): chunks
 * flushed before it are marked MTLAB_RECORD_FLAG_SOLO. */
extern HIDDEN _Atomic uint32_t mtlab_threads_beyond_first;

HIDDEN void mtlab_init_brk(uint64_t brk);

/* ---- sampler (sampler.c) ---- */
#define MTLAB_FILTER_SLOTS (1u << 14)
extern HIDDEN struct mtlab_ctl_page *mtlab_ctl; /* NULL unless sampling; then &mtlab_ctl_area */
/* Where the control page is mapped: a fixed address, so the allocation shims
 * read its state with one load. All zero (state 0) unless sampling. */
extern HIDDEN struct mtlab_ctl_page mtlab_ctl_area;
extern HIDDEN _Atomic uint8_t mtlab_filter[MTLAB_FILTER_SLOTS];
static inline uint32_t mtlab_filter_hash(uint64_t p) {
    return (uint32_t)((p >> 4) * 0x9e3779b97f4a7c15ull >> (64 - 14));
}
HIDDEN void *mtlab_sample_alloc(unsigned kind, void *r, size_t size, const void *frame);
HIDDEN void mtlab_sample_free(void *p);
HIDDEN void mtlab_sampler_init(uint64_t interval, int active, int sig);
HIDDEN char *mtlab_allocator_stats_at_exit(char *p, const char *end); /* STATS lines, read safely */
HIDDEN void mtlab_sampler_fork_child(void);
/* pthread_create with a fixed --sample-seed: names the new thread by its
 * place in the creation tree, so its draws repeat from run to run. */
HIDDEN int mtlab_sampler_spawn(pthread_t *th, const pthread_attr_t *attr, void *(*start)(void *), void *arg);
HIDDEN void mtlab_sampler_name_root(void);
HIDDEN void mtlab_sampler_stop(void);
HIDDEN void mtlab_sampler_detach(void); /* a --no-follow fork child leaves the sampler */
HIDDEN void mtlab_sampler_release(void); /* detach: control thread ended, signal disposition put back */
HIDDEN char *mtlab_sampler_stats(char *p, const char *end);
/* "key=value" lines of the heap manager's own statistics (allocstats.c). */
HIDDEN char *mtlab_allocator_stats(char *p, const char *end);
HIDDEN void mtlab_allocator_stats_start(void); /* the same figures when tracing starts */
HIDDEN void mtlab_allocator_reading(uint64_t dump); /* an ALLOCSTATS record, after a ctl dump */

/* ---- GOT routing (got.c): sampling mode only ----
 * While sampling is off, the PLT slots (R_X86_64_JUMP_SLOT) of the modules
 * loaded at startup point straight at the real functions, so an inactive
 * program runs the instructions it runs without mtlab; they point back at
 * the shims when sampling is switched on. Functions, by how they are routed: */
enum {
    /* allocations: to the shims only while sampling is active */
    MTLAB_GOT_MALLOC, MTLAB_GOT_CALLOC, MTLAB_GOT_POSIX_MEMALIGN, MTLAB_GOT_ALIGNED_ALLOC,
    MTLAB_GOT_MEMALIGN, MTLAB_GOT_VALLOC, MTLAB_GOT_PVALLOC,
    /* releases: also while sampled blocks may be live (their frees are recorded) */
    MTLAB_GOT_FREE, MTLAB_GOT_REALLOC, MTLAB_GOT_REALLOCARRAY,
    /* the mmap family: sampling mode passes them straight through, always real */
    MTLAB_GOT_MMAP, MTLAB_GOT_MMAP64, MTLAB_GOT_MUNMAP, MTLAB_GOT_MREMAP, MTLAB_GOT_BRK, MTLAB_GOT_SBRK,
    /* attach build only: to mtlab_attach_dlopen while attached (modules loaded later are routed too) */
    MTLAB_GOT_DLOPEN,
    MTLAB_GOT_N
};
#define MTLAB_GOT_FIRST_RELEASE MTLAB_GOT_FREE
#define MTLAB_GOT_FIRST_PASS MTLAB_GOT_MMAP
HIDDEN void mtlab_shim_addresses(void *out[MTLAB_GOT_N]); /* shims.c: mtlab's own definitions */
HIDDEN void mtlab_got_scan(void);          /* once, in the constructor, after mtlab_resolve */
HIDDEN void mtlab_got_enable(int on);      /* routing follows the state only while our signal works */
/* Points the cached slots where the control page's state wants them; async-signal-safe. */
HIDDEN void mtlab_got_route(void);
HIDDEN void mtlab_got_fork_child(void);
/* Attach build: every routable slot to the shims (full trace: the mmap family
 * too), and back to what it held before (detach). */
HIDDEN void mtlab_got_attach_route(int full_trace);
HIDDEN void mtlab_got_restore(void);    /* a router of the parent may have been cut off by fork */
/* Attach build: the modules loaded since the last scan get their slots routed. */
HIDDEN void mtlab_got_add_loaded(void);
HIDDEN void *mtlab_attach_dlopen(const char *file, int mode); /* attach.c */

/* ---- stacks (stack.c) ---- */
HIDDEN int mtlab_unwind_init(int unwind); /* 0 ok, -1: that unwinder is not available */
HIDDEN char *mtlab_unwind_stats(char *p, const char *end); /* MTLAB_UNWIND_CHECK counts */
/* Walks the stack from `frame` (see mtlab_stack_id_at, below, for the usual entry). */
HIDDEN uint32_t mtlab_stack_id(struct mtlab_buf *b, const void *frame);
/* MTLAB_UNWIND_CHECK: the DWARF walk's stack that a memo hit stands for, against libgcc's. */
HIDDEN void mtlab_check_repeat(void);


/* mtlab's DWARF unwinder (cfi.c): the walk from `frame`, innermost first;
 * -1 where it is not built (not x86-64). */
HIDDEN int mtlab_cfi_walk(uintptr_t *pcs, int max, const void *frame, int *repeat, uint32_t *seen, uintptr_t self_lo,
                          uintptr_t self_hi); /* *repeat: the thread's last walk again (same pcs); passed in as
                                                * nonzero, the caller needs no pcs then (it has the id).
                                                * *seen: nonzero, a walk seen before (mtlab_cfi_seen) again,
                                                * and this its id; no pcs then */
/* The id of the walk the latest mtlab_cfi_walk made (when it walked): a later
 * walk from the same start whose words all hold is answered with it. */
HIDDEN void mtlab_cfi_seen(uint32_t id);
HIDDEN void mtlab_cfi_seen_reset(void); /* the fork child's ids start afresh: none seen */
/* The thread's last walk's stack words as side-by-side pairs: `base` the lower
 * address of each, `words` the two words read there. In code built with frame
 * pointers every level reads a saved rbp and the return address above it, so
 * the frame-pointer memo's check (mtlab_memo_hit) proves a repeat of the walk.
 * Their count, or -1 where the words do not pair up (or more than `max`). */
HIDDEN int mtlab_cfi_last_pairs(uintptr_t *base, uintptr_t *words, int max);
HIDDEN int mtlab_cfi_last_pcs(uintptr_t *pcs, int max); /* the last walk's stack; -1: none */
HIDDEN void mtlab_cfi_thread_exit(void); /* releases the thread's rule cache */

/* arena.c: glibc's thread arenas and their heaps' extents. */
#define MTLAB_GLIBC_HEAP_MAX (64ull << 20) /* a thread arena's heaps are aligned to this */
#define MTLAB_ARENA_TOP 96                 /* offsetof(struct malloc_state, top), glibc >= 2.27 */
#define MTLAB_ARENA_SYSTEM_MEM 2184        /* offsetof(struct malloc_state, system_mem) */
/* 0: no arena checked yet, 1: malloc_state reads as expected, -1: it does not (arena.c does nothing). */
HIDDEN extern _Atomic int mtlab_arena_layout;
static inline uint64_t mtlab_arena_word(uint64_t ar, unsigned off) {
    return atomic_load_explicit((_Atomic uint64_t *)(ar + off), memory_order_relaxed);
}
/* Told of each heap whose extent changed since the trace last heard: size 0 = unmapped. */
typedef void (*mtlab_arena_emit)(void *ctx, uint64_t base, uint64_t size);
HIDDEN void mtlab_arena_sync(uint64_t ar, mtlab_arena_emit emit, void *ctx);
HIDDEN void mtlab_arena_sync_all(mtlab_arena_emit emit, void *ctx);         /* every arena seen so far */
HIDDEN void mtlab_arena_fork_child(void);
HIDDEN void mtlab_arenas_final(void); /* shims.c: at the end of the trace, every arena as it is */
HIDDEN void mtlab_cfi_init(void);        /* the first snapshot of the loaded objects */
extern HIDDEN _Atomic uint32_t mtlab_cfi_gen; /* bumped by every dlclose */

/* Where the memo's levels past the walk's own point, up to a multiple of
 * MTLAB_MEMO_STEP (stack.c: mtlab_memo_pad): 16 zero bytes, stored as zero
 * words, so the check's loop runs whole steps with no remainder to handle. */
#define MTLAB_MEMO_STEP 4
extern HIDDEN const uintptr_t mtlab_memo_zero[2];
HIDDEN void mtlab_memo_pad(struct mtlab_stack_memo *m); /* after the memo's levels were filled */

/* Would a frame-pointer (or DWARF) walk from `frame` give the memo's stack again? */
static inline __attribute__((always_inline)) int mtlab_memo_hit(uintptr_t frame) {
    const struct mtlab_stack_memo *m = &mtlab_tls.memo;
    if (m->fp[0] != frame || m->id == 0) return 0;
    if (m->gen != atomic_load_explicit(&mtlab_cfi_gen, memory_order_relaxed)) return 0;
    /* levels is a multiple of MTLAB_MEMO_STEP: the pad compares equal. */
    uint32_t levels = m->levels;
#if defined(__SSE2__)
    /* A frame's two words against their copy in one 16-byte compare; the
     * loads do not depend on each other. */
    __m128i diff = _mm_setzero_si128();
    const __m128i *w = (const __m128i *)m->words;
    for (const uintptr_t *f = m->fp, *end = m->fp + levels; f < end; f += MTLAB_MEMO_STEP, w += MTLAB_MEMO_STEP) {
        __m128i d0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)f[0]), _mm_load_si128(&w[0]));
        __m128i d1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)f[1]), _mm_load_si128(&w[1]));
        __m128i d2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)f[2]), _mm_load_si128(&w[2]));
        __m128i d3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)f[3]), _mm_load_si128(&w[3]));
        diff = _mm_or_si128(diff, _mm_or_si128(_mm_or_si128(d0, d1), _mm_or_si128(d2, d3)));
    }
    return _mm_movemask_epi8(_mm_cmpeq_epi8(diff, _mm_setzero_si128())) == 0xffff;
#else
    uintptr_t diff = 0;
    for (uint32_t i = 0; i < levels; i++) {
        const uintptr_t *f = (const uintptr_t *)m->fp[i];
        diff |= (f[0] ^ m->words[2 * i]) | (f[1] ^ m->words[2 * i + 1]);
    }
    return diff == 0;
#endif
}

/* The id of the stack from `frame`: the memo when it holds, else a walk. */
static inline uint32_t mtlab_stack_id_at(struct mtlab_buf *b, const void *frame) {
    if ((mtlab_cfg.unwind == MTLAB_UNWIND_FP || mtlab_cfg.unwind == MTLAB_UNWIND_DWARF) && mtlab_memo_hit((uintptr_t)frame)) {
        if (UNLIKELY(mtlab_cfg.unwind_check)) mtlab_check_repeat();
        return mtlab_tls.memo.id;
    }
    return mtlab_stack_id(b, frame);
}
/* A stack id (< 2^21: at most 3 varint bytes) as its varint: the bytes in
 * the low 24 bits, their count in the top 8, so that an event writes it
 * with one 4-byte store (the byte past it is overwritten by the next field
 * or lies past the event, in the room every append reserves). */
static inline uint32_t mtlab_stack_code(uint32_t id) {
    if (id < 0x80) return id | 1u << 24;
    if (id < 0x4000) return (id & 0x7f) | 0x80 | (id >> 7) << 8 | 2u << 24;
    return (id & 0x7f) | 0x80 | ((id >> 7 & 0x7f) | 0x80) << 8 | (id >> 14 & 0x7f) << 16 | 3u << 24;
}
/* As mtlab_stack_id_at, as its code: a memo hit costs no encoding. */
static inline __attribute__((always_inline)) uint32_t mtlab_stack_code_at(struct mtlab_buf *b, const void *frame) {
    if ((mtlab_cfg.unwind == MTLAB_UNWIND_FP || mtlab_cfg.unwind == MTLAB_UNWIND_DWARF) && mtlab_memo_hit((uintptr_t)frame)) {
        if (UNLIKELY(mtlab_cfg.unwind_check)) mtlab_check_repeat();
        return mtlab_tls.memo.code;
    }
    return mtlab_stack_code(mtlab_stack_id(b, frame));
}
HIDDEN void mtlab_stack_table_init(void);
HIDDEN void mtlab_stack_thread_exit(void); /* releases the thread's recent-stack ids */
HIDDEN void mtlab_stack_table_reset(void);

/* ---- raw syscalls and small helpers (sys.c): no libc state, no malloc ---- */
HIDDEN long mtlab_sys6(long n, long a, long b, long c, long d, long e, long f); /* any call, -errno */
HIDDEN long mtlab_sys_write(int fd, const void *p, size_t n);
HIDDEN long mtlab_sys_pwrite(int fd, const void *p, size_t n, uint64_t off);
HIDDEN int mtlab_sys_open(const char *path, int flags, int mode);
HIDDEN int mtlab_sys_ftruncate(int fd, uint64_t len);
HIDDEN long mtlab_sys_read(int fd, void *p, size_t n);
HIDDEN void mtlab_sys_close(int fd);
HIDDEN int mtlab_sys_unlink(const char *path);
/* Every blockable signal blocked, the old mask saved: 1 when done. */
HIDDEN int mtlab_sys_block_signals(uint64_t *old);
HIDDEN void mtlab_sys_restore_signals(const uint64_t *old);
HIDDEN int mtlab_sys_tgkill(uint32_t pid, uint32_t tid, int sig);
HIDDEN void mtlab_sys_sleep_ns(uint64_t ns); /* never fails the caller; EINTR ends it early */
HIDDEN uint64_t mtlab_sys_max_rss_kib(void); /* this process's peak RSS so far */
struct stat;
struct rlimit;
HIDDEN int mtlab_sys_fcntl(int fd, int cmd, long arg);
HIDDEN int mtlab_sys_fstat(int fd, struct stat *st);
HIDDEN int mtlab_sys_lstat(const char *path, struct stat *st); /* the name itself, not a link's target */
HIDDEN uint32_t mtlab_sys_geteuid(void);
HIDDEN int mtlab_sys_getrlimit(int resource, struct rlimit *rl);
HIDDEN int mtlab_sys_setrlimit(int resource, const struct rlimit *rl);
HIDDEN void *mtlab_sys_mmap(size_t len);
HIDDEN void *mtlab_sys_mmap_shared(size_t len, int fd);
HIDDEN void mtlab_sys_munmap(void *p, size_t len);
HIDDEN int mtlab_sys_mprotect(void *p, size_t len, int prot); /* 0 or -errno */
HIDDEN uint32_t mtlab_gettid(void);
HIDDEN uint32_t mtlab_sys_getpid(void);
/* The process this state belongs to (a vfork child shares it but is not it). */
extern HIDDEN uint32_t mtlab_pid;
HIDDEN uint64_t mtlab_realtime_ns(void);
HIDDEN size_t mtlab_strlen(const char *s);
HIDDEN char *mtlab_append(char *dst, const char *end, const char *src);
HIDDEN char *mtlab_append_u64(char *dst, const char *end, uint64_t v);

static inline uint64_t mtlab_tsc(void) {
#if defined(__x86_64__) || defined(__i386__)
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
#error "mtlab needs a cycle counter: x86_64 or aarch64"
#endif
}

/* xorshift64* step of a per-thread generator state (never 0). */
static inline uint64_t mtlab_xorshift(uint64_t *state) {
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* splitmix64's finaliser: distinct inputs give distinct, unrelated outputs. */
static inline uint64_t mtlab_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Full trace: is this call's real call timed? One call in mtlab_cfg.time_gap
 * on average, each call independently (the gaps are geometric draws per
 * thread, timing.c), so no pattern of calls lines up with the timed ones.
 * An untimed call costs one decrement; with time_gap 1 every call is timed. */
HIDDEN int mtlab_time_draw(struct mtlab_tls *t);
HIDDEN void mtlab_time_redraw(struct mtlab_tls *t, uint64_t stamp);
/* A thread's timing generator, seeded from its first traced call's time
 * stamp and its thread id (crates/mtlab/src/trace/draws.rs replays it). */
static inline uint64_t mtlab_time_seed(uint64_t stamp, uint32_t tid) {
    return mtlab_mix64(stamp ^ ((uint64_t)tid * 0x9e3779b97f4a7c15ull)) | 1;
}
/* The next gap is drawn after the timed call (mtlab_time_after), not before
 * it: the draw's floating-point work, still in flight when the counter is
 * read, made timed frees one counter step (26 cycles) slower at the median. */
#define MTLAB_TIME_REDRAW (1ll << 62)
static inline __attribute__((always_inline)) int mtlab_time_this(struct mtlab_tls *t) {
    if (LIKELY(--t->time_left > 0)) return 0;
    if (LIKELY(mtlab_cfg.time_gap <= 1)) return 1;
    if (UNLIKELY(t->time_rng == 0)) return mtlab_time_draw(t);
    t->time_left = MTLAB_TIME_REDRAW;
    return 1;
}
/* After a call's event was written at `stamp`: draw the next gap if it is
 * due (the call was timed, or was the thread's first). */
static inline __attribute__((always_inline)) void mtlab_time_after(struct mtlab_tls *t, uint64_t stamp) {
    if (UNLIKELY(t->time_left > MTLAB_TIME_REDRAW / 2)) mtlab_time_redraw(t, stamp);
}
/* The shims' call of it (`timed`: the call was timed). The attach build
 * seeds at a thread's first call from the counter and draws after timed
 * calls only, as before the draws were replayed: a draw after each thread's
 * first call left an address of the library on the threads' stacks, which
 * kept it loaded at detach. Its traces' draws are not replayed. */
#ifdef MTLAB_ATTACH
#define MTLAB_TIME_AFTER(t, timed, stamp) \
    do {                                  \
        if (timed) mtlab_time_after(t, stamp); \
    } while (0)
#else
#define MTLAB_TIME_AFTER(t, timed, stamp) mtlab_time_after(t, stamp)
#endif

/* The cycles field of a timed call. In a sampled-timing trace 0 means "not
 * timed", so a timed call read as 0 cycles (a coarse counter) is written as 1. */
static inline uint64_t mtlab_timed_cycles(uint64_t t0, uint64_t t1) {
    uint64_t c = t1 - t0;
    return c ? c : mtlab_cfg.time_gap > 1;
}

/* Adds `d` to a counter only the calling thread writes (a buffer's busy and
 * gen), which other threads read: one read-modify-write instruction, not
 * atomic (nobody else writes it), ordered after every store before it. */
static inline __attribute__((always_inline)) void mtlab_owner_add(_Atomic uint32_t *c, int32_t d) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("addl %1, %0" : "+m"(*(uint32_t *)c) : "ri"(d) : "memory");
#else
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + (uint32_t)d, memory_order_release);
#endif
}

/* ---- encoding (inline: the hot path) ---- */
static inline uint8_t *mtlab_put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}
static inline uint8_t *mtlab_put_svarint(uint8_t *p, int64_t v) {
    return mtlab_put_varint(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}
static inline uint8_t *mtlab_put_ptr(struct mtlab_buf *b, uint8_t *p, uint64_t ptr) {
    int64_t d = (int64_t)(ptr - (uint64_t)b->prev_ptr);
    b->prev_ptr = (int64_t)ptr;
    return mtlab_put_svarint(p, d);
}

/* Writes an event's common fields, the stack id as mtlab_stack_code gives
 * it; the caller made room for the event. */
static inline uint8_t *mtlab_begin_event_code(struct mtlab_buf *b, unsigned kind, unsigned flags, uint64_t tsc,
                                              uint64_t cycles, uint32_t stack_code) {
    if (tsc < b->prev_tsc) tsc = b->prev_tsc; /* per-thread time never goes back */
    if (b->n_events == 0) {
        b->first_tsc = b->prev_tsc = tsc;
        b->flush_by = tsc + mtlab_cfg.flush_age;
        if (UNLIKELY(mtlab_watermark != NULL)) mtlab_progress_started(b);
    }
    uint8_t *p = b->data + MTLAB_BUF_HEAD + atomic_load_explicit(&b->len, memory_order_relaxed);
    *p++ = (uint8_t)(kind | flags);
    p = mtlab_put_varint(p, tsc - b->prev_tsc);
    p = mtlab_put_varint(p, cycles);
    __builtin_memcpy(p, &stack_code, 4);
    p += stack_code >> 24;
    b->prev_tsc = tsc;
    return p;
}
/* Writes an event's common fields; the caller made room for it. */
static inline uint8_t *mtlab_begin_event(struct mtlab_buf *b, unsigned kind, unsigned flags, uint64_t tsc,
                                         uint64_t cycles, uint32_t stack) {
    return mtlab_begin_event_code(b, kind, flags, tsc, cycles, mtlab_stack_code(stack));
}

static inline void mtlab_commit_event(struct mtlab_buf *b, uint8_t *p) {
    b->n_events++;
    atomic_store_explicit(&b->len, (uint32_t)(p - (b->data + MTLAB_BUF_HEAD)), memory_order_release);
}

#endif
