/*
 * init.c — start and end of tracing in a process: configuration from the
 * environment set by `mtlab record`, fork handling, and the final flush.
 *
 * Environment (read once, here, never in a shim):
 *   MTLAB_OUT     trace path; without it the library stays inactive
 *   MTLAB_PARENT  pid of `mtlab record`: its direct child writes MTLAB_OUT
 *   MTLAB_WATERMARK_FD  (root only) memfd of the watermark page, see mtlab_trace.h
 *   MTLAB_LIVE    1: `record --live`; every other traced image makes a watermark
 *                 page of its own and sends it over the broker's socket
 *   MTLAB_BROKER_FD  socket to `mtlab record`, which makes trace files for
 *                 processes that cannot (broker.c)
 *   MTLAB_STACKS  fp (default) | none
 *   MTLAB_DEPTH   frames per stack (default 64, at most 256)
 *   MTLAB_FOLLOW  1 (default): children are traced too; 0: only this process
 *   MTLAB_FREE_STACKS 1: walk the stack for free as well (default 0: id 0)
 *   MTLAB_TSC_HZ  TSC frequency measured by `mtlab record`
 *   MTLAB_UNWIND  fp (default) | dwarf | libgcc | libunwind
 *   MTLAB_UNWIND_CHECK  1: dwarf stacks also taken by libgcc and compared (tests)
 *   MTLAB_TIME_SAMPLE  full trace: time one call in N on average (default 1:
 *                 every call; `mtlab record` passes its --time)
 *   MTLAB_SAMPLE  mean sampling interval in bytes: sampling mode (no full trace)
 *   MTLAB_INACTIVE 1: sampling mode starts switched off
 *   MTLAB_SAMPLE_SEED  fixed seed for the sampler (tests); 0: from the TSC
 *   MTLAB_SIGNAL  signal that toggles the sampler / requests a dump
 *   MTLAB_GOT     0: no GOT routing in sampling mode (default 1, see got.c)
 *   MTLAB_CTL_THREAD 0: no control thread in sampling mode; `mtlab ctl` then
 *                 signals (for programs that must stay single-threaded)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

HIDDEN struct mtlab_config mtlab_cfg;
HIDDEN _Atomic int mtlab_state;
HIDDEN struct mtlab_counters mtlab_counters;
#ifdef MTLAB_ATTACH
HIDDEN _Atomic uint32_t mtlab_threads_beyond_first = 1; /* the process runs already: its threads are unknown */
#else
HIDDEN _Atomic uint32_t mtlab_threads_beyond_first;
#endif
HIDDEN uint32_t mtlab_pid;

/* Settings come from the environment `mtlab record` set; attached, from the
 * text `mtlab record --pid` passed to mtlab_attach_begin (the running
 * program's environment is its own). */
static const char *conf(const char *name) {
#ifdef MTLAB_ATTACH
    return mtlab_attach_conf(name);
#else
    return getenv(name);
#endif
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = conf(name);
    if (!v || !*v) return dflt;
    uint64_t x = 0;
    for (; *v >= '0' && *v <= '9'; v++) x = x * 10 + (uint64_t)(*v - '0');
    return x;
}

static void copy(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static void detect_allocator(void) {
    Dl_info info;
    const char *path = "";
    if (mtlab_real.malloc && dladdr((void *)mtlab_real.malloc, &info) && info.dli_fname) path = info.dli_fname;
    copy(mtlab_cfg.allocator_path, sizeof mtlab_cfg.allocator_path, path);
    const char *name = "other";
    if (strstr(path, "jemalloc")) name = "jemalloc";
    else if (strstr(path, "tcmalloc")) name = "tcmalloc";
    else if (strstr(path, "mimalloc")) name = "mimalloc";
    else if (strstr(path, "/ld-musl-") || strstr(path, "/libc.musl-")) name = "musl"; /* musl's libc is its loader */
    else if (strstr(path, "/libc.so") || strstr(path, "/libc-")) name = "glibc";
    copy(mtlab_cfg.allocator, sizeof mtlab_cfg.allocator, name);
    mtlab_cfg.is_glibc = strcmp(name, "glibc") == 0;
}

void mtlab_fork_prepare(void) {
    MTLAB_GUARD_ENTER(&mtlab_tls);
    mtlab_tls.guard_sp = UINTPTR_MAX; /* held until the parent or child handler: never stale */
    if (mtlab_state == 1) mtlab_flush_own();
}

void mtlab_fork_parent(void) { mtlab_tls.guard--; }

static void start_clock(void) {
    mtlab_cfg.start_ns = mtlab_realtime_ns();
    mtlab_cfg.start_tsc = mtlab_tsc();
}

/* The new process's own tracing: its own file, clock, buffers and stacks. */
static void become_child(void) {
    if (mtlab_state == 1 && !mtlab_cfg.follow) {
        /* --no-follow: the child runs untraced, sampler included. */
        mtlab_state = MTLAB_OFF;
        if (mtlab_ctl) {
            signal((int)mtlab_ctl->signal, SIG_DFL);
            mtlab_sampler_detach();
            /* Nothing is recorded any more: the routed slots go straight to
             * the real functions (the shims would only pass through). */
            mtlab_got_fork_child();
            mtlab_got_route();
        }
    } else if (mtlab_state == 1) {
        mtlab_pid = mtlab_sys_getpid();
        start_clock();
        mtlab_writer_fork_child();
        mtlab_fork_child_reset();
        mtlab_stack_table_reset();
        mtlab_tls.arena_ar = 0;
        mtlab_tls.arenas_listed = 0;
        /* Its timing draws start afresh, seeded from its own first call (a
         * rewrite of its trace replays them from there). */
        mtlab_tls.time_rng = 0;
        mtlab_tls.time_left = 0;
        mtlab_arena_fork_child();
        /* The child's trace starts empty: its brk heap is the one it
         * inherited, as it is now (not as it was when the parent started). */
        mtlab_cfg.brk_init = (uint64_t)mtlab_real.sbrk(0);
        mtlab_init_brk(mtlab_cfg.brk_init);
        if (mtlab_cfg.live) mtlab_watermark_own(); /* before its file is opened, as its only thread runs */
        mtlab_write_maps(); /* the child's own file, opened before it can drop privileges */
        if (mtlab_ctl) mtlab_sampler_fork_child();
    }
}

void mtlab_fork_child(void) {
    become_child();
    mtlab_tls.guard--;
}

/* A process made by a raw fork or clone system call ran no fork handler: it
 * still has its parent's pid, file offsets and buffers. Seen at its first
 * flush; its buffer then mixes the parent's events before the fork with its
 * own after it, so they are dropped and counted. A vfork child (memory
 * shared with the parent, which waits) must not touch anything: kcmp tells
 * the two apart, and when it cannot, nothing is done (the old behaviour). */
static _Atomic uint64_t forks_unseen;

int mtlab_check_forked(uint32_t pid_now) {
    if (atomic_load(&mtlab_state) != MTLAB_TRACING) return 0;
    long same_vm = syscall(SYS_kcmp, (long)pid_now, (long)mtlab_pid, 1 /* KCMP_VM */, 0L, 0L);
    if (same_vm != 1 && same_vm != 2) return 0; /* 0: shared; <0: unknown */
    /* Called from inside an append (the buffer counts this thread busy):
     * the reset must leave that count as the append expects it. */
    struct mtlab_buf *own = mtlab_tls.buf;
    uint64_t lost = own ? own->n_events : 0;
    uint32_t busy = own ? atomic_load(&own->busy) : 0;
    become_child();
    if (own) atomic_store(&own->busy, busy);
    atomic_store(&forks_unseen, 1);
    atomic_fetch_add(&mtlab_counters.events_dropped, lost);
    return 1;
}

uint64_t mtlab_forks_unseen(void) { return atomic_load(&forks_unseen); }

extern int __cxa_atexit(void (*fn)(void *), void *arg, void *dso_handle);
static void mtlab_stop(void *unused);

/* Starts tracing once per process image: from the constructor, or earlier
 * from the first intercepted call when the constructor of a library the
 * program links (libstdc++, libselinux) allocates before mtlab's runs. */
static void mtlab_start(void) {
    static _Atomic int once;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&once, &expected, 1)) return;
    MTLAB_GUARD_ENTER(&mtlab_tls);
    mtlab_resolve();
    MTLAB_ATTACH_MARK(1);
    /* A path: not taken from the environment of a set-id program, whose
     * user did not choose where its privileged process writes. */
#ifdef MTLAB_ATTACH
    const char *out = conf("MTLAB_OUT");
#else
    const char *out = secure_getenv("MTLAB_OUT");
#endif
    if (!out || !*out) {
        mtlab_state = MTLAB_OFF;
        mtlab_tls.guard--;
        return;
    }
    copy(mtlab_cfg.out_path, sizeof mtlab_cfg.out_path, out);
    mtlab_pid = mtlab_sys_getpid();
    mtlab_proc_open();
    const char *stacks = conf("MTLAB_STACKS");
    mtlab_cfg.stacks = !(stacks && strcmp(stacks, "none") == 0);
    uint64_t depth = env_u64("MTLAB_DEPTH", 64);
    mtlab_cfg.max_depth = (int)(depth == 0 ? 1 : depth > MTLAB_MAX_DEPTH ? MTLAB_MAX_DEPTH : depth);
    mtlab_cfg.follow = env_u64("MTLAB_FOLLOW", 1) != 0;
    mtlab_cfg.free_stacks = env_u64("MTLAB_FREE_STACKS", 0) != 0;
    const char *unwind = conf("MTLAB_UNWIND");
    mtlab_cfg.unwind = !unwind                        ? MTLAB_UNWIND_FP
                       : strcmp(unwind, "libgcc") == 0    ? MTLAB_UNWIND_LIBGCC
                       : strcmp(unwind, "libunwind") == 0 ? MTLAB_UNWIND_LIBUNWIND
                       : strcmp(unwind, "dwarf") == 0     ? MTLAB_UNWIND_DWARF
                                                          : MTLAB_UNWIND_FP;
    mtlab_cfg.unwind_check = env_u64("MTLAB_UNWIND_CHECK", 0) != 0;
    if (mtlab_cfg.stacks && mtlab_unwind_init(mtlab_cfg.unwind) != 0) mtlab_cfg.unwind = MTLAB_UNWIND_FP;
    mtlab_cfg.sample_interval = env_u64("MTLAB_SAMPLE", 0);
    mtlab_cfg.time_gap = env_u64("MTLAB_TIME_SAMPLE", 1);
    if (mtlab_cfg.time_gap == 0) mtlab_cfg.time_gap = 1;
    mtlab_cfg.sample_seed = env_u64("MTLAB_SAMPLE_SEED", 0);
    mtlab_cfg.ctl_thread = env_u64("MTLAB_CTL_THREAD", 1) != 0;
    mtlab_cfg.tsc_hz = env_u64("MTLAB_TSC_HZ", 0);
    mtlab_cfg.flush_age = mtlab_cfg.tsc_hz ? mtlab_cfg.tsc_hz / 10 : 300000000ull;
    MTLAB_ATTACH_MARK(2);
#ifdef MTLAB_ATTACH
    /* The attached process writes the file named; its children and the
     * program's environment are left alone (MTLAB_FOLLOW is 0). */
    mtlab_set_root(1);
    /* `record --pid --live`: the page record reads the trace below, before the file is opened. */
    if (env_u64("MTLAB_LIVE", 0)) mtlab_attach_watermark_fd = mtlab_watermark_make_attached();
#else
    uint64_t record_pid = env_u64("MTLAB_PARENT", 0);
    int root = record_pid == (uint64_t)getppid();
    if (mtlab_cfg.follow) mtlab_broker_init(getenv("MTLAB_BROKER_FD"), (uint32_t)record_pid);
    mtlab_set_root(root);
    mtlab_cfg.live = env_u64("MTLAB_LIVE", 0) != 0;
    if (getenv("MTLAB_WATERMARK_FD")) {
        if (root) mtlab_watermark_attach((long)env_u64("MTLAB_WATERMARK_FD", 0));
        unsetenv("MTLAB_WATERMARK_FD"); /* for the root process alone */
    } else if (mtlab_cfg.live && mtlab_cfg.follow) {
        mtlab_watermark_own(); /* an exec'd image: before its trace is opened below */
    }
    if (!mtlab_cfg.follow) unsetenv("MTLAB_OUT"); /* children stay untraced */
    else mtlab_exec_keep_init(getenv("LD_PRELOAD"));
#endif
    detect_allocator();
    mtlab_allocator_stats_start();
    MTLAB_ATTACH_MARK(3);
    mtlab_cfg.brk_init = (uint64_t)mtlab_real.sbrk(0);
    uint64_t heap = 0, heap_end = 0;
    mtlab_find_mapping("[heap]", &heap, &heap_end);
    mtlab_cfg.brk_start = heap && heap <= mtlab_cfg.brk_init ? heap : mtlab_cfg.brk_init;
    uint64_t stack_lo, stack_hi;
    if (mtlab_find_mapping("[stack]", &stack_lo, &stack_hi) == 0) {
        /* The initial thread's stack may grow down to the stack limit; keep
         * below the 128 MiB gap the kernel leaves under it for mmap. */
        struct rlimit rl;
        uint64_t room = getrlimit(RLIMIT_STACK, &rl) == 0 ? (uint64_t)rl.rlim_cur : (8ull << 20);
        if (room < (8ull << 20)) room = 8ull << 20;
        if (room > (120ull << 20)) room = 120ull << 20;
        mtlab_set_main_stack(stack_hi - room, stack_hi);
    }
    /* With huge pages glibc aligns arena heaps differently: do not guess. */
    const char *tunables = getenv("GLIBC_TUNABLES");
    mtlab_cfg.no_arena_heaps = tunables && strstr(tunables, "malloc.hugetlb") != NULL;
    mtlab_init_brk(mtlab_cfg.brk_init);
    MTLAB_ATTACH_MARK(4);
    mtlab_stack_table_init();
    mtlab_thread_init_global();
    pthread_atfork(mtlab_fork_prepare, mtlab_fork_parent, mtlab_fork_child);
#ifdef MTLAB_ATTACH
    /* The program's SIGABRT disposition is not changed under it; with this
     * library's handle, the exit handler goes if the library is unloaded. */
    __cxa_atexit(mtlab_stop, NULL, &__dso_handle);
#else
    mtlab_catch_abort();
    /* The end of tracing as late as exit() allows: registered here, before
     * the C library registers the loader's finalizer (this runs from the
     * loader's initialization, ahead of the program's entry point), so it
     * runs after every library's destructor — their frees are seen and
     * are not reported as leaks. No DSO handle: a handler registered with
     * ours would run with our own destructors instead. */
    __cxa_atexit(mtlab_stop, NULL, NULL);
#endif
    start_clock();
    MTLAB_ATTACH_MARK(5);
    mtlab_state = MTLAB_TRACING;
    /* The file is opened now, before the program's code runs: a daemon that
     * drops privileges or chroots before its first flush keeps its trace,
     * and the control page (sampling mode) names it. */
    mtlab_write_maps();
    MTLAB_ATTACH_MARK(6);
    if (mtlab_cfg.sample_interval) {
        int sig = (int)env_u64("MTLAB_SIGNAL", (uint64_t)(SIGRTMIN + 7));
        if (env_u64("MTLAB_GOT", 1)) mtlab_got_scan(); /* MTLAB_GOT=0: every call through the shims */
        MTLAB_ATTACH_MARK(7);
        mtlab_sampler_init(mtlab_cfg.sample_interval, env_u64("MTLAB_INACTIVE", 0) == 0, sig);
        MTLAB_ATTACH_MARK(8);
#ifndef MTLAB_ATTACH
        mtlab_sampler_name_root(); /* the constructor runs on the initial thread */
#endif
    }
#ifdef MTLAB_ATTACH
    /* Attached, the GOT slots are the only way in: every call is routed to
     * the shims (in sampling mode as the control page says, above). */
    if (!mtlab_cfg.sample_interval) {
        mtlab_got_scan();
        MTLAB_ATTACH_MARK(7);
    }
    mtlab_got_attach_route(mtlab_cfg.sample_interval == 0);
    MTLAB_ATTACH_MARK(9);
#endif
    mtlab_tls.guard--;
}

#ifdef MTLAB_ATTACH
/* Attached: nothing before mtlab_attach_begin; once per load of the library
 * (a detach unloads it, the next attach loads a fresh copy). */
int mtlab_attach_start(void) {
    mtlab_start();
    return atomic_load(&mtlab_state) == MTLAB_TRACING ? 0 : -1;
}
void mtlab_attach_stop(void) { mtlab_stop(NULL); }
#else
__attribute__((constructor)) static void mtlab_constructor(void) { mtlab_start(); }
#endif

int mtlab_start_early(void) {
#ifdef MTLAB_ATTACH
    return atomic_load(&mtlab_state); /* started by mtlab_attach_begin alone */
#endif
    if (!mtlab_tls.guard && !mtlab_tls.in_alloc) mtlab_start();
    return atomic_load(&mtlab_state);
}

/* Runs from exit() after the program's atexit handlers and every library's
 * destructors (see mtlab_start), so late frees are still seen. */
static void mtlab_stop(void *unused) {
    (void)unused;
    if (mtlab_state != MTLAB_TRACING) return;
    /* A process made by a raw clone that never flushed ends here first. */
    MTLAB_GUARD_ENTER(&mtlab_tls);
    uint32_t pid = mtlab_sys_getpid();
    if (pid != mtlab_pid && !mtlab_check_forked(pid)) { /* a vfork child: the state is its parent's */
        mtlab_tls.guard--;
        return;
    }
    mtlab_sampler_stop();
    if (!mtlab_ctl) mtlab_arenas_final(); /* heaps glibc trimmed at threads' exits, seen by no call */
    mtlab_state = MTLAB_STOPPED;
    mtlab_flush_all();
    mtlab_write_maps();
    mtlab_writer_closing();
    mtlab_write_stats();
    mtlab_write_end();
    mtlab_tls.guard--;
}

/* Finishes the trace now and stops tracing, where the process is about to
 * end without exit handlers (_exit, _Exit: the events still in the buffers
 * would be lost) or to lose the system calls the writer needs (a seccomp
 * filter). Not from inside mtlab's own code (a signal handler that
 * interrupted it); mtlab_stop leaves a vfork child alone. */
void mtlab_finish_now(void) {
    if (mtlab_tls.guard) return;
    mtlab_stop(NULL);
}
