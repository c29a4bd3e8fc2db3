/*
 * writer.c — the trace file: naming, header, and lock-free record output.
 *
 * Each record is written with one pwrite at an offset reserved by an atomic
 * add, so threads never wait for each other. A failed or short write (disk
 * full) turns the reserved range into PADDING-free damage control: the
 * record header is rewritten as an unknown type covering the range, which
 * readers skip, and the events are counted as dropped.
 *
 * Naming: the process started by `mtlab record` writes FILE; every other
 * traced process (fork children, exec'd programs) writes FILE.d/PID, or
 * FILE.d/PID.N when an earlier image of the same pid already wrote FILE.d/PID.
 * The file is created on the first write, so a fork child that only execs
 * leaves no empty trace behind.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define REC_SKIP 0x7fff /* unknown type: readers skip the damaged range */

static _Atomic int file_state; /* 0 closed, 1 opening, 2 open, 3 failed */
static _Atomic uint32_t opener;  /* the thread that set state 1 (see wait_for_opener) */
static int fd = -1;
int mtlab_trace_fd(void) { return fd; }
static _Atomic uint64_t file_off;
static int is_root;
/* The watermark page (mtlab_trace.h): set in the root process when
 * `mtlab record` passed one, published to only while this process writes
 * the root file itself; under `record --live`, in any other traced image, a
 * page it made itself (mtlab_watermark_own). A fork child never writes into
 * the page it inherited: it is unmapped there. */
_Atomic uint64_t *mtlab_watermark; /* internal.h: read inline before any progress call */
#define watermark mtlab_watermark
static int owns_root_file;
static int own_page; /* the page was made by this image: it describes whatever file it opens */
static uint64_t file_dev, file_ino; /* of the trace file, checked before each write */

void mtlab_watermark_attach(long wfd) {
    struct stat st;
    if (wfd < 0 || wfd > 0x7fffffff || mtlab_sys_fstat((int)wfd, &st) != 0) return;
    /* Only a memfd of the expected size, carrying the magic: the number may
     * belong to something else if the environment was passed on. */
    if (!S_ISREG(st.st_mode) || st.st_size != MTLAB_WATERMARK_SIZE || st.st_nlink != 0) return;
    void *m = mtlab_sys_mmap_shared(MTLAB_WATERMARK_SIZE, (int)wfd);
    if (!m) return;
    if (((const uint64_t *)m)[MTLAB_WATERMARK_OFF_MAGIC / 8] != MTLAB_WATERMARK_MAGIC) {
        mtlab_sys_munmap(m, MTLAB_WATERMARK_SIZE);
        return;
    }
    watermark = (_Atomic uint64_t *)m;
    mtlab_sys_close((int)wfd); /* the program must not see an extra descriptor */
}

/* `record --live`, a traced image other than the root's first: a page of
 * its own, handed to `record` over the broker's socket (which names this
 * pid), so that its trace is read while it is written, as the root's is. No
 * page (no memfd, no broker): its trace is read when the run ends. Called
 * while the process is single-threaded (constructor, fork child), before
 * the trace is opened, so that every buffer's first event is published. */
void mtlab_watermark_own(void) {
    long f = mtlab_sys6(SYS_memfd_create, (long)"mtlab-watermark", MFD_CLOEXEC, 0, 0, 0, 0);
    if (f < 0) return;
    void *m = mtlab_sys_ftruncate((int)f, MTLAB_WATERMARK_SIZE) == 0 ? mtlab_sys_mmap_shared(MTLAB_WATERMARK_SIZE, (int)f) : NULL;
    if (m) {
        _Atomic uint64_t *w = (_Atomic uint64_t *)m;
        atomic_store(w + MTLAB_WATERMARK_OFF_MAGIC / 8, MTLAB_WATERMARK_MAGIC);
        atomic_store(w + MTLAB_WATERMARK_OFF_PROGRESS_WANTED / 8, 1);
        atomic_store(w + MTLAB_WATERMARK_OFF_PID / 8, mtlab_sys_getpid());
        if (mtlab_broker_send_page((int)f) == 0) {
            watermark = w;
            own_page = 1;
        } else {
            mtlab_sys_munmap(m, MTLAB_WATERMARK_SIZE);
        }
    }
    mtlab_sys_close((int)f);
}

#ifdef MTLAB_ATTACH
/* `record --pid PID --live`: the attached process cannot inherit record's
 * page, so it makes one and keeps its descriptor open while attached;
 * record, the tracer, opens it through /proc/PID/fd/N, which works from the
 * host for a process in its own mount and PID namespace too (the process
 * could not reach record's descriptor: its /proc is its own namespace's, or
 * absent). It is the root page (record reads the file it named), with the
 * per-buffer progress wanted from the first chunk on. Returns the
 * descriptor, or -1 (no memfd: the session is refused). */
static int attach_page_fd = -1;
int mtlab_watermark_make_attached(void) {
    long f = mtlab_sys6(SYS_memfd_create, (long)"mtlab-watermark", MFD_CLOEXEC, 0, 0, 0, 0);
    if (f < 0) return -1;
    void *m = mtlab_sys_ftruncate((int)f, MTLAB_WATERMARK_SIZE) == 0 ? mtlab_sys_mmap_shared(MTLAB_WATERMARK_SIZE, (int)f) : NULL;
    if (!m) {
        mtlab_sys_close((int)f);
        return -1;
    }
    _Atomic uint64_t *w = (_Atomic uint64_t *)m;
    atomic_store(w + MTLAB_WATERMARK_OFF_MAGIC / 8, MTLAB_WATERMARK_MAGIC);
    atomic_store(w + MTLAB_WATERMARK_OFF_PROGRESS_WANTED / 8, 1);
    atomic_store(w + MTLAB_WATERMARK_OFF_PID / 8, mtlab_sys_getpid());
    watermark = w;
    attach_page_fd = (int)f;
    return (int)f;
}
#endif

/* The page says which file it describes (`record` matches it by inode). */
static void page_names_file(void) {
    if (!watermark || !own_page) return;
    atomic_store(watermark + MTLAB_WATERMARK_OFF_FILE_DEV / 8, file_dev);
    atomic_store(watermark + MTLAB_WATERMARK_OFF_START_TSC / 8, mtlab_cfg.start_tsc);
    atomic_store_explicit(watermark + MTLAB_WATERMARK_OFF_FILE_INO / 8, file_ino, memory_order_release);
}

static void publish_watermark(uint64_t w) {
    uint64_t cur = atomic_load_explicit(watermark, memory_order_relaxed);
    while (cur < w && !atomic_compare_exchange_weak_explicit(watermark, &cur, w, memory_order_release,
                                                             memory_order_relaxed)) {
    }
}

void mtlab_set_root(int root) { is_root = root; }

/* ---- per-buffer progress (mtlab_trace.h): what a reader of the file while
 * it is written may analyse. A buffer's events not yet in a chunk below the
 * watermark are the ones a reader could meet late: their oldest first time
 * stamp is published, and the reader analyses only what comes before every
 * buffer's. Called by the buffer's owner, once per chunk; full trace only
 * (in sampling mode other threads flush buffers too). */
struct progress_slot {
    _Atomic uint64_t seq, tid, pending, last;
};
#define PROGRESS_EMPTY (1ull << 63)

int mtlab_progress_wanted(void) {
    return watermark && (is_root || own_page) && mtlab_cfg.sample_interval == 0 &&
           atomic_load_explicit(watermark + MTLAB_WATERMARK_OFF_PROGRESS_WANTED / 8, memory_order_relaxed);
}

int mtlab_horizon_wanted(void) {
    return mtlab_progress_wanted() &&
           atomic_load_explicit(watermark + MTLAB_WATERMARK_OFF_PROGRESS_WANTED / 8, memory_order_relaxed) ==
               MTLAB_PROGRESS_HORIZON;
}

static struct progress_slot *progress_slot(struct mtlab_buf *b) {
    if (!mtlab_progress_wanted()) return NULL;
    if (b->progress == 0) {
        _Atomic uint64_t *used = watermark + MTLAB_WATERMARK_OFF_PROGRESS_USED / 8;
        uint64_t i = atomic_fetch_add(used, 1);
        b->progress = i < MTLAB_WATERMARK_PROGRESS_SLOTS ? (int32_t)i + 1 : -1;
        /* Where the reader may copy this buffer from; published by the
         * slot's first seq store (release). A slot stays with its buffer,
         * which is never unmapped (a later owner thread reuses both). */
        if (b->progress > 0)
            atomic_store_explicit(watermark + MTLAB_WATERMARK_OFF_PROGRESS_BUFS / 8 + i, (uint64_t)(uintptr_t)b,
                                  memory_order_relaxed);
    }
    if (b->progress < 0) return NULL;
    return (struct progress_slot *)((char *)watermark + MTLAB_WATERMARK_OFF_PROGRESS) + (b->progress - 1);
}

/* A seqlock with one writer: the reader retries while `seq` is odd or moved.
 * `buffered`: the first time stamp of the events in the buffer (0: none). */
static void progress_publish(struct progress_slot *s, struct mtlab_buf *b, uint64_t buffered, uint64_t last) {
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&s->tid, b->tid, memory_order_relaxed);
    atomic_store_explicit(&s->pending, b->pending_tsc ? b->pending_tsc : buffered, memory_order_relaxed);
    atomic_store_explicit(&s->last, last, memory_order_relaxed);
    atomic_store_explicit(&s->seq, seq + 2, memory_order_release);
}

/* Its written chunks are below the watermark: none of them is pending. */
static void progress_covered(struct mtlab_buf *b) {
    if (b->pending_tsc && atomic_load_explicit(watermark, memory_order_acquire) >= b->flushed_end) b->pending_tsc = 0;
}

void mtlab_progress_started(struct mtlab_buf *b) {
    struct progress_slot *s = progress_slot(b);
    if (!s) return;
    progress_covered(b);
    progress_publish(s, b, b->first_tsc, b->last_first);
}

void mtlab_progress_flushed(struct mtlab_buf *b, uint64_t first_tsc) {
    struct progress_slot *s = progress_slot(b);
    if (!s) return;
    if (!b->pending_tsc) b->pending_tsc = first_tsc;
    b->last_first = first_tsc;
    /* At least the chunk's end: the watermark at or past it covers the chunk. */
    b->flushed_end = atomic_load(&file_off);
    progress_covered(b);
    progress_publish(s, b, 0, first_tsc | PROGRESS_EMPTY);
}

static char *escape_into(char *p, const char *end, const char *s, size_t n, char sep_from, const char *sep_to) {
    for (size_t i = 0; i < n && p < end - 2; i++) {
        char c = s[i];
        if (c == sep_from) p = mtlab_append(p, end, sep_to);
        else if (c == '\n') p = mtlab_append(p, end, "\\n");
        else if (c == '\\') p = mtlab_append(p, end, "\\\\");
        else *p++ = c;
    }
    return p;
}

static char *kv_u64(char *p, const char *end, const char *key, uint64_t v) {
    p = mtlab_append(p, end, key);
    p = mtlab_append(p, end, "=");
    p = mtlab_append_u64(p, end, v);
    return mtlab_append(p, end, "\n");
}

static char *kv_str(char *p, const char *end, const char *key, const char *v) {
    p = mtlab_append(p, end, key);
    p = mtlab_append(p, end, "=");
    p = escape_into(p, end, v, mtlab_strlen(v), 0, "");
    return mtlab_append(p, end, "\n");
}

/* /proc, opened when tracing starts: a process that chroots (a daemon, or
 * the workers it forks) still reads its own maps, command line and
 * executable through it — "self" is looked up per caller — and its trace
 * keeps its frames' names. */
static int proc_fd = -1;
static int move_high(int f);

/* At 898, below the broker's 899 (`mtlab record` puts it there) and the
 * trace's 900 and above, where a program that lowered its descriptor limit
 * has exactly room for the trace. */
#define PROC_FD 898

void mtlab_proc_open(void) {
    int f = mtlab_sys_open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
    if (f < 0) return;
    if (mtlab_sys_fcntl(PROC_FD, F_GETFD, 0) == -9 /* EBADF: free */ &&
        mtlab_sys6(SYS_dup3, f, PROC_FD, O_CLOEXEC, 0, 0, 0) == PROC_FD) {
        mtlab_sys_close(f);
        f = PROC_FD;
    } else {
        f = move_high(f);
    }
    proc_fd = f;
}

int mtlab_open_self(const char *name) {
    char rel[64] = "self/";
    char *p = mtlab_append(rel + 5, rel + sizeof rel - 1, name);
    *p = 0;
    if (proc_fd >= 0) {
        int f = (int)mtlab_sys6(SYS_openat, proc_fd, (long)rel, O_RDONLY | O_CLOEXEC, 0, 0, 0);
        if (f >= 0) return f;
    }
    char abs[64] = "/proc/";
    p = mtlab_append(abs + 6, abs + sizeof abs - 1, rel);
    *p = 0;
    return mtlab_sys_open(abs, O_RDONLY | O_CLOEXEC, 0);
}

static long readlink_self(const char *name, char *buf, size_t cap) {
    char rel[64] = "self/";
    char *p = mtlab_append(rel + 5, rel + sizeof rel - 1, name);
    *p = 0;
    long r = proc_fd >= 0 ? mtlab_sys6(SYS_readlinkat, proc_fd, (long)rel, (long)buf, (long)cap, 0, 0) : -1;
    if (r < 0) {
        char abs[64] = "/proc/";
        p = mtlab_append(abs + 6, abs + sizeof abs - 1, rel);
        *p = 0;
        r = readlink(abs, buf, cap);
    }
    return r;
}

/* /proc/self/NAME read whole (up to `cap` bytes). */
static size_t read_self(const char *name, char *buf, size_t cap) {
    int f = mtlab_open_self(name);
    if (f < 0) return 0;
    size_t n = 0;
    long r;
    while (n < cap && (r = mtlab_sys_read(f, buf + n, cap - n)) > 0) n += (size_t)r;
    mtlab_sys_close(f);
    return n;
}

/* Writes `a` then `b` as one record at `off`; returns the bytes that landed. */
static size_t write_record_at(const void *a, size_t alen, const void *b, size_t blen, uint64_t off) {
    size_t done = 0, len = alen + blen;
    while (done < len) {
        const uint8_t *from = done < alen ? (const uint8_t *)a + done : (const uint8_t *)b + (done - alen);
        size_t n = done < alen ? alen - done : len - done;
        long r = mtlab_sys_pwrite(fd, from, n, off + done);
        if (r == -4 /* EINTR */) continue;
        if (r <= 0) break;
        done += (size_t)r;
    }
    return done;
}

/* A record header of `type` whose payload runs `plen` bytes. */
static void record_header(uint8_t hdr[MTLAB_RECORD_HEADER], uint16_t type, uint32_t plen) {
    uint16_t flags = 0;
    memcpy(hdr, &plen, 4);
    memcpy(hdr + 4, &type, 2);
    memcpy(hdr + 6, &flags, 2);
}

/* A record that could not be written in full becomes a range readers skip. */
static void mark_skip(uint64_t off, size_t len, size_t done) {
    if (done < MTLAB_RECORD_HEADER) return;
    uint8_t hdr[MTLAB_RECORD_HEADER];
    record_header(hdr, REC_SKIP, (uint32_t)(len - MTLAB_RECORD_HEADER));
    mtlab_sys_pwrite(fd, hdr, sizeof hdr, off);
}

/* A full disk. `full_at` is the lowest offset of a record that could not be
 * written in full. From then on no record is started but STATS and END, and a
 * record that lands above `full_at` counts as dropped: at exit the file is cut
 * at `full_at` (which also frees the failed records' blocks) and STATS and END
 * are written there, so the file reads cleanly to its end and carries the
 * count. A record above the cut that landed before a lower failure was noted
 * counted as written; the reader finds those from END's `events_written`. */
static _Atomic uint64_t full_at = UINT64_MAX;
/* A record was refused because it would have crossed RLIMIT_FSIZE (STATS
 * `size_limited`: the loss then has a cause the user can name). */
static _Atomic int size_limited;
static uint64_t end_used; /* STATS/END: written by the exiting thread alone */
static int cut_done;
/* The header is written whole, or nothing else may be (a reader would take a
 * later record for the header's text). */
static _Atomic int header_ok;
static int writing_header; /* set by the opening thread alone */

static void note_full(uint64_t off) {
    uint64_t cur = atomic_load(&full_at);
    while (off < cur && !atomic_compare_exchange_weak(&full_at, &cur, off)) {
    }
}

static int write_at_cut(const void *a, size_t alen, const void *b, size_t blen) {
    size_t len = alen + blen;
    uint64_t at = atomic_load(&full_at);
    if (!cut_done) {
        mtlab_sys_ftruncate(fd, at);
        cut_done = 1;
    }
    if (write_record_at(a, alen, b, blen, at + end_used) != len) {
        mtlab_sys_ftruncate(fd, at + end_used);
        return -1;
    }
    end_used += len;
    return 0;
}

/* Writes in flight, so the END record waits for them; after `closing` no
 * new record but END may start. */
static _Atomic int inflight, closing;
#define TAIL_ROOM 4096u /* kept below RLIMIT_FSIZE for the closing records */

/* RLIMIT_FSIZE now (0: none): writing past it would raise SIGXFSZ. Read
 * before each record (one system call per 64 KiB chunk), because the
 * program may lower it at any time. */
static uint64_t fsize_limit(void) {
    struct rlimit rl;
    return mtlab_sys_getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? rl.rlim_cur : 0;
}
static char path[4200];
static atomic_int reopening;

/* Whether `fd` still names our trace file: the program may close it or get
 * the number back for a file of its own. */
static int fd_still_ours(void) {
    struct stat st;
    return mtlab_sys_fstat(fd, &st) == 0 && (uint64_t)st.st_dev == file_dev && (uint64_t)st.st_ino == file_ino;
}

/* After the program closed every descriptor (close_range, closefrom) or put
 * a file of its own at our number: opens the same file again (same device
 * and inode) at a new high number. The old number is the program's now and
 * is left alone. One thread reopens; others lose only their current write. */
/* Reopens the trace seen so far: counted for STATS. After a reopen that
 * failed (the file was removed or replaced), no write tries again: each try
 * would cost an open on the program's every flush, for nothing. */
static _Atomic uint64_t reopens;
static _Atomic int reopen_gave_up;

/* The trace's descriptor lives at 900 or above, out of the way of the
 * program's own numbers. A program may have lowered RLIMIT_NOFILE below
 * that (before a fork or an exec): then no new descriptor may be numbered
 * there, and a trace at the lowest free number would take one of the few the
 * program counts on (its next open gets 4, not 3; at its limit, one open
 * fails). While the hard limit allows, the soft limit is raised for the
 * moment of the open and put back (a fork child and a new image do this
 * before the program's code runs again); a descriptor above the soft limit
 * stays valid. Otherwise the trace takes the highest free number below the
 * limit, where a program counting up from 3 meets it last. */
struct nofile_raise {
    struct rlimit was;
    int raised;
};
#define FD_HIGH 900

static void nofile_raise(struct nofile_raise *r) {
    r->raised = 0;
    if (mtlab_sys_getrlimit(RLIMIT_NOFILE, &r->was) != 0 || r->was.rlim_cur == RLIM_INFINITY || r->was.rlim_cur > FD_HIGH)
        return;
    if (r->was.rlim_max != RLIM_INFINITY && r->was.rlim_max <= FD_HIGH) return;
    struct rlimit up = {FD_HIGH + 1, r->was.rlim_max};
    r->raised = mtlab_sys_setrlimit(RLIMIT_NOFILE, &up) == 0;
}

static void nofile_restore(const struct nofile_raise *r) {
    if (r->raised) mtlab_sys_setrlimit(RLIMIT_NOFILE, &r->was);
}

/* `f` moved to a high number (see above); `f` itself when none is free. */
static int move_high(int f) {
    int high = mtlab_sys_fcntl(f, F_DUPFD_CLOEXEC, FD_HIGH);
    if (high < 0) {
        struct rlimit rl;
        if (mtlab_sys_getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur <= FD_HIGH)
            for (long n = (long)rl.rlim_cur - 1; high < 0 && n > f; n--) high = mtlab_sys_fcntl(f, F_DUPFD_CLOEXEC, n);
    }
    if (high < 0) return f;
    mtlab_sys_close(f);
    return high;
}

static int reopen_trace(void) {
    int expected = 0;
    if (!path[0] || atomic_load(&reopen_gave_up) || !atomic_compare_exchange_strong(&reopening, &expected, 1)) return 0;
    int ok = 0;
    struct nofile_raise raise;
    nofile_raise(&raise);
    int f = mtlab_sys_open(path, O_WRONLY | O_CLOEXEC, 0);
    if (f >= 0) {
        struct stat st;
        if (mtlab_sys_fstat(f, &st) == 0 && (uint64_t)st.st_dev == file_dev && (uint64_t)st.st_ino == file_ino) {
            fd = move_high(f);
            ok = 1;
            atomic_fetch_add(&reopens, 1);
        } else {
            mtlab_sys_close(f);
        }
    }
    nofile_restore(&raise);
    if (!ok) atomic_store(&reopen_gave_up, 1);
    atomic_store(&reopening, 0);
    return ok;
}

/* Write only while the descriptor is our trace file, reopening it if need be. */
static int fd_is_ours(void) { return fd_still_ours() || reopen_trace(); }

/* Reserves `len` bytes and writes them; -1 (nothing written) when closing,
 * past the file-size limit, after a full disk (but STATS and END), or when the
 * descriptor is no longer ours. */
static int reserve_and_write_at(const void *a, size_t alen, const void *b, size_t blen, int is_end) {
    atomic_fetch_add(&inflight, 1);
    int ret = -1;
    size_t len = alen + blen;
    if (!atomic_load(&header_ok) && !writing_header) {
        /* no header: nothing may follow */
    } else if (atomic_load(&full_at) != UINT64_MAX) {
        if (is_end && fd_is_ours()) ret = write_at_cut(a, alen, b, blen);
    } else if (!atomic_load(&closing) || is_end) {
        uint64_t off;
        int reserved_room = 1;
        uint64_t limit = fsize_limit();
        if (limit) {
            /* Nothing may be written past RLIMIT_FSIZE, and the last
             * TAIL_ROOM bytes below it are kept for STATS and END, so that
             * a file cut short by the limit still says how many events it
             * lost. A reservation that does not fit takes no room. */
            uint64_t cap = is_end ? limit : limit > TAIL_ROOM ? limit - TAIL_ROOM : 0;
            off = atomic_load(&file_off);
            do {
                if (off + len > cap) {
                    reserved_room = 0;
                    atomic_store_explicit(&size_limited, 1, memory_order_relaxed);
                    break;
                }
            } while (!atomic_compare_exchange_weak(&file_off, &off, off + len));
        } else {
            off = atomic_fetch_add(&file_off, len);
        }
        if (reserved_room && fd_is_ours()) {
            size_t done = write_record_at(a, alen, b, blen, off);
            if (done == len) {
                ret = atomic_load(&full_at) < off ? -1 : 0; /* cut away at the end */
            } else {
                mark_skip(off, len, done);
                note_full(off);
            }
        }
    }
    /* Every reservation up to `reserved` is written once no other write is
     * in flight: each writer counts itself in before it reserves. After a
     * full disk, nothing from the failed record on: STATS and END may yet be
     * written there. */
    uint64_t reserved = atomic_load(&file_off);
    if (atomic_fetch_sub(&inflight, 1) == 1 && watermark && (owns_root_file || own_page)) {
        uint64_t full = atomic_load(&full_at); /* after every earlier writer counted out */
        publish_watermark(full < reserved ? full : reserved);
    }
    return ret;
}

static int reserve_and_write(const void *data, size_t len) { return reserve_and_write_at(data, len, NULL, 0, 0); }

void mtlab_writer_closing(void) {
    atomic_store(&closing, 1);
    /* Threads still running may be in the middle of a write: give them up to
     * ~50 ms (they never block on anything of ours). */
    for (int i = 0; i < 50000 && atomic_load(&inflight) > 0; i++) {
        mtlab_sys_sleep_ns(1000);
    }
}

void mtlab_writer_path(char *out, size_t cap) {
    size_t n = mtlab_strlen(path);
    if (n >= cap) n = cap - 1;
    __builtin_memcpy(out, path, n);
    out[n] = 0;
}

/* The trace family's names, the only place the C side spells them (the
 * Rust side's are in crates/mtlab/src/platform/names.rs, `child_trace`):
 * ROOT for the root process, ROOT.d/PID for another, ROOT.d/PID.K (K >= 1)
 * for a later image of a pid whose ROOT.d/PID is taken. Written into `out`,
 * NUL-terminated. */
static void trace_name(char *out, char *end, uint32_t pid, uint64_t k, int root) {
    char *p = mtlab_append(out, end, mtlab_cfg.out_path);
    if (!root) {
        /* `record` made ROOT.d (platform/names.rs, tree_dir). */
        p = mtlab_append(p, end, ".d/");
        p = mtlab_append_u64(p, end, pid);
        if (k) {
            p = mtlab_append(p, end, ".");
            p = mtlab_append_u64(p, end, k);
        }
    }
    *p = 0;
}

/* Created new (nothing planted at the name is followed or truncated) and
 * private: a trace holds addresses (they undo ASLR), command lines and paths,
 * so it is 0600 as perf record's perf.data is. */
static int open_path(void) {
    char *end = path + sizeof path - 1;
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    uint32_t pid = (uint32_t)getpid();
    if (is_root) {
        trace_name(path, end, pid, 0, 1);
        int f = mtlab_sys_open(path, flags, 0600);
        if (f >= 0) {
            owns_root_file = 1;
            return f;
        }
    }
    /* A process that changed its user (a daemon's worker) would make a file
     * `record` refuses as another user's: `record` makes it instead. */
    if (mtlab_broker_preferred()) {
        int f = mtlab_broker_open(0, path, sizeof path);
        if (f >= 0) return f;
    }
    int err = -17 /* EEXIST: every name taken */;
    for (uint64_t k = 0; k < 1000; k++) {
        trace_name(path, end, pid, k, 0);
        int f = mtlab_sys_open(path, flags, 0600);
        if (f >= 0) return f;
        if (f != -17) {
            err = f;
            break;
        }
    }
    /* Not allowed to (privileges dropped), no such directory (chroot), no
     * room: `record` makes the file, or at least names this process as
     * untraced. */
    int f = mtlab_broker_open(-err, path, sizeof path);
    return f >= 0 ? f : err;
}

static void write_header(void) {
    static char text[16384];
    static char raw[8192];
    char *p = text, *end = text + sizeof text - 1;
    p = kv_u64(p, end, "pid", (uint64_t)getpid());
    p = kv_u64(p, end, "ppid", (uint64_t)getppid());
    size_t n = read_self("cmdline", raw, sizeof raw);
    if (n && raw[n - 1] == 0) n--;
    p = mtlab_append(p, end, "cmdline=");
    p = escape_into(p, end, raw, n, 0, "\x1f");
    p = mtlab_append(p, end, "\n");
    long r = readlink_self("exe", raw, sizeof raw - 1);
    raw[r > 0 ? r : 0] = 0;
    p = kv_str(p, end, "exe", raw);
    /* The file is opened at the first flush; events before it count from
     * the start of tracing, taken by the constructor or at fork. */
    p = kv_u64(p, end, "start_ns", mtlab_cfg.start_ns);
    p = kv_u64(p, end, "start_tsc", mtlab_cfg.start_tsc);
    p = kv_u64(p, end, "tsc_hz", mtlab_cfg.tsc_hz);
    p = kv_u64(p, end, "page_size", (uint64_t)sysconf(_SC_PAGESIZE));
    p = kv_str(p, end, "allocator", mtlab_cfg.allocator);
    p = kv_str(p, end, "allocator_path", mtlab_cfg.allocator_path);
    p = kv_str(p, end, "stacks", mtlab_cfg.stacks ? "fp" : "none");
    p = kv_u64(p, end, "max_depth", (uint64_t)mtlab_cfg.max_depth);
    p = kv_u64(p, end, "brk_start", mtlab_cfg.brk_start);
    p = kv_u64(p, end, "brk_init", mtlab_cfg.brk_init);
    p = kv_u64(p, end, "follow", (uint64_t)mtlab_cfg.follow);
    /* Above 1, an event's cycles 0 means its call was not timed. */
    p = kv_u64(p, end, "time_sample", mtlab_cfg.time_gap);
    p = kv_u64(p, end, "sample_interval", mtlab_cfg.sample_interval);
    p = kv_str(p, end, "unwind", mtlab_cfg.unwind == MTLAB_UNWIND_LIBGCC      ? "libgcc"
                                 : mtlab_cfg.unwind == MTLAB_UNWIND_LIBUNWIND ? "libunwind"
                                 : mtlab_cfg.unwind == MTLAB_UNWIND_DWARF     ? "dwarf"
                                                                              : "fp");
    p = kv_str(p, end, "mtlab_version", MTLAB_VERSION);
    uint32_t text_len = (uint32_t)(p - text);
    uint8_t fixed[MTLAB_FILE_HEADER_FIXED];
    uint32_t version = MTLAB_TRACE_VERSION;
    memcpy(fixed, MTLAB_TRACE_MAGIC, 8);
    memcpy(fixed + 8, &version, 4);
    memcpy(fixed + 12, &text_len, 4);
    /* The header may use the tail room; without all of it nothing follows.
     * One reservation for both parts: a file-size limit between the fixed
     * part and the text would leave half a header, which reads as damage. */
    writing_header = 1;
    if (reserve_and_write_at(fixed, sizeof fixed, text, text_len, 1) == 0) atomic_store(&header_ok, 1);
    writing_header = 0;
}

/* The thread opening the file (state 1), and the wait for it. That thread
 * may never finish: a signal handler may longjmp out of the open, or the
 * thread be cancelled asynchronously. Then the open is started again — by
 * this thread when it is the opener itself (it jumped out and came back),
 * or when the opener no longer exists. A live opener is waited for at most
 * ~2 s; the write is then given up (counted as dropped by the caller). */
static int ensure_open(void);

static int wait_for_opener(void) {
    for (int i = 0;; i++) {
        int s = atomic_load(&file_state);
        if (s != 1) return s == 2 ? 0 : -1;
        uint32_t who = atomic_load(&opener);
        int abandoned = who == mtlab_gettid() || (who && mtlab_sys_tgkill(mtlab_sys_getpid(), who, 0) == -3 /* ESRCH */);
        if (abandoned) {
            int one = 1;
            if (atomic_compare_exchange_strong(&file_state, &one, 0)) {
                if (fd >= 0 && fd_still_ours()) mtlab_sys_close(fd);
                fd = -1;
            }
            return ensure_open();
        }
        if (i >= 2000) return -1;
        mtlab_sys_sleep_ns(1000000);
    }
}

/* Opens the file on first use; 0 when it can be written. */
static int ensure_open(void) {
    int s = atomic_load_explicit(&file_state, memory_order_acquire);
    if (LIKELY(s == 2)) return 0;
    if (s == 3) return -1;
    int expected = 0;
    if (atomic_compare_exchange_strong(&file_state, &expected, 1)) {
        atomic_store(&opener, mtlab_gettid());
        struct nofile_raise raise;
        nofile_raise(&raise);
        int f = open_path();
        /* A high number: programs that reuse low descriptors rarely reach it. */
        if (f >= 0) f = move_high(f);
        nofile_restore(&raise);
        fd = f;
        if (fd < 0) {
            atomic_store(&file_state, 3);
            return -1;
        }
        struct stat st;
        if (mtlab_sys_fstat(fd, &st) == 0) {
            file_dev = (uint64_t)st.st_dev;
            file_ino = (uint64_t)st.st_ino;
        }
        page_names_file();
        atomic_store(&file_off, 0);
        write_header();
        atomic_store(&file_state, 2);
        mtlab_write_maps();
        return 0;
    }
    return wait_for_opener();
}

int mtlab_write_raw(const void *data, size_t len) {
    if (ensure_open() != 0) return -1;
    return reserve_and_write(data, len);
}

int mtlab_write_record(uint16_t type, const void *payload, uint32_t len) {
    /* Records outside the event buffers (maps before a dlclose, a dump's
     * heap figures) may be the first write of a process made by a raw clone:
     * the same check as a buffer's flush, so it never writes into its
     * parent's file. */
    uint32_t pid = mtlab_sys_getpid();
    if (UNLIKELY(pid != mtlab_pid)) mtlab_check_forked(pid);
    uint8_t hdr[MTLAB_RECORD_HEADER];
    record_header(hdr, type, len);
    if (ensure_open() != 0) return -1;
    /* One reservation for header and payload keeps the record contiguous. */
    return reserve_and_write_at(hdr, sizeof hdr, payload, len, type == MTLAB_REC_END || type == MTLAB_REC_STATS);
}

/* One buffer for maps text: at start, at exit and before a dlclose (a second
 * writer meanwhile skips, see below). */
static char maps[1 << 20];

void mtlab_write_maps(void) {
    /* One buffer: a second thread writing maps meanwhile (a dlclose) skips. */
    static _Atomic int busy;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&busy, &expected, 1)) return;
    size_t n = read_self("maps", maps, sizeof maps);
    if (n) mtlab_write_record(MTLAB_REC_MAPS, maps, (uint32_t)n);
    atomic_store(&busy, 0);
}

static uint64_t parse_hex(const char *p, const char **end) {
    uint64_t v = 0;
    for (;; p++) {
        char c = *p;
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) break;
        v = v * 16 + (uint64_t)d;
    }
    *end = p;
    return v;
}

int mtlab_find_mapping(const char *name, uint64_t *lo, uint64_t *hi) {
    size_t n = read_self("maps", maps, sizeof maps - 1);
    maps[n] = 0;
    size_t nl = mtlab_strlen(name);
    for (const char *line = maps; *line;) {
        const char *eol = line;
        while (*eol && *eol != '\n') eol++;
        if ((size_t)(eol - line) > nl && __builtin_memcmp(eol - nl, name, nl) == 0) {
            const char *e;
            *lo = parse_hex(line, &e);
            *hi = parse_hex(e + 1, &e);
            return 0;
        }
        line = *eol ? eol + 1 : eol;
    }
    return -1;
}

void mtlab_write_end(void) {
    uint64_t v[6] = {
        mtlab_tsc(),
        mtlab_realtime_ns(),
        atomic_load(&mtlab_counters.events_written),
        atomic_load(&mtlab_counters.events_dropped),
        atomic_load(&mtlab_counters.chunks_dropped),
        atomic_load(&mtlab_counters.stacks_overflowed),
    };
    mtlab_write_record(MTLAB_REC_END, v, sizeof v);
}

void mtlab_write_stats(void) {
    static char text[2048];
    char *end = text + sizeof text - 1;
    char *p = mtlab_sampler_stats(text, end);
    /* Not from inside an allocator call this thread was making (a signal
     * handler that exits): the allocator's lock may be held by it. */
    if (!mtlab_tls.in_alloc) p = mtlab_allocator_stats_at_exit(p, end);
    p = mtlab_unwind_stats(p, end);
    p = mtlab_append(p, end, "guards_reset=");
    p = mtlab_append_u64(p, end, mtlab_guards_reset());
    p = mtlab_append(p, end, "\n");
    p = mtlab_append(p, end, "signal_calls_untraced=");
    p = mtlab_append_u64(p, end, mtlab_signal_calls_untraced());
    p = mtlab_append(p, end, "\n");
    p = mtlab_append(p, end, "shared_tls_calls=");
    p = mtlab_append_u64(p, end, mtlab_shared_tls_calls());
    p = mtlab_append(p, end, "\n");
    p = mtlab_append(p, end, "forked_without_handlers=");
    p = mtlab_append_u64(p, end, mtlab_forks_unseen());
    p = mtlab_append(p, end, "\n");
    p = mtlab_append(p, end, "stopped_by_seccomp=");
    p = mtlab_append_u64(p, end, (uint64_t)mtlab_stopped_by_seccomp());
    p = mtlab_append(p, end, "\n");
    p = mtlab_append(p, end, "trace_reopened=");
    p = mtlab_append_u64(p, end, atomic_load(&reopens));
    p = mtlab_append(p, end, "\n");
    /* Why events were dropped, where the writer knows: the user can act on these. */
    uint64_t full = atomic_load(&full_at);
    if (full != UINT64_MAX) {
        p = mtlab_append(p, end, "write_failed_at=");
        p = mtlab_append_u64(p, end, full);
        p = mtlab_append(p, end, "\n");
    }
    if (atomic_load(&size_limited)) p = mtlab_append(p, end, "size_limited=1\n");
    p = mtlab_append(p, end, "max_rss_kib=");
    p = mtlab_append_u64(p, end, mtlab_sys_max_rss_kib());
    p = mtlab_append(p, end, "\n");
    mtlab_write_record(MTLAB_REC_STATS, text, (uint32_t)(p - text));
}

/* Detach (attach build): the process keeps none of mtlab's descriptors. */
void mtlab_writer_release(void) {
    if (fd >= 0 && fd_still_ours()) mtlab_sys_close(fd);
    fd = -1;
#ifdef MTLAB_ATTACH
    /* The trace is finished (mtlab_attach_stop): nothing publishes to the page any more. */
    if (attach_page_fd >= 0) {
        _Atomic uint64_t *w = watermark;
        watermark = NULL;
        if (w) mtlab_sys_munmap((void *)w, MTLAB_WATERMARK_SIZE);
        mtlab_sys_close(attach_page_fd);
        attach_page_fd = -1;
    }
#endif
    if (proc_fd >= 0) mtlab_sys_close(proc_fd);
    proc_fd = -1;
}

/* A fork child writes its own file, opened on its first write. */
void mtlab_writer_fork_child(void) {
    owns_root_file = 0;
    /* The parent's page: its reader must never see the child's offsets. */
    if (watermark) mtlab_sys_munmap((void *)watermark, MTLAB_WATERMARK_SIZE);
    watermark = NULL;
    own_page = 0;
    atomic_store(&opener, 0);
    atomic_store(&reopens, 0);
    atomic_store(&reopen_gave_up, 0);
    atomic_store(&file_state, 0);
    atomic_store(&inflight, 0);
    atomic_store(&closing, 0);
    /* Only while it is still the trace: the program may have put a file of
     * its own at that number (dup2), which the child must keep. */
    if (fd >= 0 && fd_still_ours()) mtlab_sys_close(fd);
    fd = -1;
    path[0] = 0;
    is_root = 0;
    atomic_store(&file_off, 0);
    atomic_store(&full_at, UINT64_MAX);
    atomic_store(&size_limited, 0);
    end_used = 0;
    cut_done = 0;
    atomic_store(&header_ok, 0);
    atomic_store(&mtlab_counters.events_written, 0);
    atomic_store(&mtlab_counters.events_dropped, 0);
    atomic_store(&mtlab_counters.chunks_dropped, 0);
    atomic_store(&mtlab_counters.stacks_overflowed, 0);
}

/* Before exec: a file that holds no event yet (header and maps only) is
 * removed, so that a process that only execs leaves no file of its own and
 * the new image writes under the name this one had. If exec fails, the file
 * is opened again at the next write. The pid was checked by the caller. */
void mtlab_writer_before_exec(void) {
    if (atomic_load(&file_state) != 2 || atomic_load(&mtlab_counters.events_written) != 0) return;
    if (fd >= 0 && fd_still_ours()) {
        mtlab_sys_close(fd);
        mtlab_sys_unlink(path);
    }
    fd = -1;
    owns_root_file = 0;
    atomic_store(&file_off, 0);
    atomic_store(&header_ok, 0);
    atomic_store(&file_state, 0);
}
