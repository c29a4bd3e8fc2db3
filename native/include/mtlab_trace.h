/*
 * mtlab_trace.h — the trace file format: the one contract between the C
 * preload library (writer) and the Rust decoder (reader).
 *
 * docs/trace-format.md is the normative prose; this header holds the
 * numbers. Change both together and bump MTLAB_TRACE_VERSION when a reader
 * of the old version would misread the new layout.
 *
 * Layout: a file header, then records. Every multi-byte integer is
 * little-endian. "varint" is unsigned LEB128; "svarint" is zigzag + LEB128.
 */
#ifndef MTLAB_TRACE_H
#define MTLAB_TRACE_H

#include <stdint.h>

#define MTLAB_TRACE_MAGIC "MTLABTR\0" /* 8 bytes */
#define MTLAB_TRACE_VERSION 2u /* what the preload writes; mtlab's rewrites are version 3 (checksums) */

/* File header: magic[8], u32 version, u32 text_len, then text_len bytes of
 * "key=value\n" lines (see docs/trace-format.md for the keys). */
#define MTLAB_FILE_HEADER_FIXED 16u

/* Record header: u32 payload_len, u16 type, u16 flags, then the payload. */
#define MTLAB_RECORD_HEADER 8u
#define MTLAB_RECORD_FLAG_ZSTD 0x1u /* zstd frame (EVENTS: after the 24-byte chunk header) */
#define MTLAB_RECORD_FLAG_COLUMNS 0x2u /* EVENTS, with ZSTD: events in the column layout (written by mtlab after the run) */
/* EVENTS, raw (version 2): flushed while the process had only ever had one
 * thread, so no other thread's event falls within the chunk's time: mtlab's
 * rewrite may round its time stamps (docs/trace-format.md, *Solo chunks*). */
#define MTLAB_RECORD_FLAG_SOLO 0x8u

/* The watermark page: a memfd `mtlab record` passes to the traced program
 * (MTLAB_WATERMARK_FD) so it can rewrite the root trace's finished part while
 * the program runs. u64 at offset 0: the file offset below which every
 * reserved byte has been written; u64 at offset 8: the magic.
 *
 * Per-buffer progress (full trace, root process, when the reader set the u64
 * at OFF_PROGRESS_WANTED: PROGRESS_HORIZON, or PROGRESS_SLOTS_ONLY), so that a
 * reader of the file while it is written (`record --live`) knows which times
 * are complete, and `record` can copy a quiet thread's buffer while the
 * process runs (kept for a death by a signal, which writes no buffer): u64 at OFF_PROGRESS_USED: slots handed out (more than PROGRESS_SLOTS: some
 * buffers have none, and the reader cannot know); from OFF_PROGRESS, one
 * slot of 4 u64 per event buffer: a sequence number (odd while the owner
 * writes the slot), the thread id, PENDING: the first time stamp of the
 * oldest event of the buffer that may not be below the watermark yet (0:
 * none), LAST: the first time stamp of its latest written chunk, with bit 63
 * set while the buffer holds no event.
 *
 * Under `record --live` every other traced process image (fork child, exec'd
 * image: MTLAB_LIVE=1) makes a page of its own with the same layout, sends it
 * to `record` over the broker's socket (broker.c; the kernel names the
 * sender's pid) and writes in it the pid (u64 at OFF_PID) and, once its
 * trace is open, the file's device (OFF_FILE_DEV), the header's start_tsc
 * (OFF_START_TSC: an inode number freed by a removed file may be reused at
 * once) and then its inode (OFF_FILE_INO, 0 until then): how `record` tells
 * which ROOT.d/PID[.N] the page describes.
 *
 * From OFF_PROGRESS_BUFS, one u64 per
 * slot: the address of the slot's buffer in the process (written once,
 * before the slot's first publication), so that the reader can copy the
 * events of a thread that stopped making calls (`record --live`,
 * live/bufcopy.rs) at the buffer offsets below, under the owner's
 * busy/gen seqlock. */
#define MTLAB_WATERMARK_SIZE 20480u
#define MTLAB_WATERMARK_MAGIC 0x004d57424c41544dull /* "MTLABWM\0" */
#define MTLAB_WATERMARK_OFF_MAGIC 8u
#define MTLAB_WATERMARK_OFF_PROGRESS_USED 16u
#define MTLAB_WATERMARK_OFF_PROGRESS_WANTED 24u
/* `record --live`: the reader analyses up to the horizon, so a thread that
 * starts another writes its buffer first (it may wait for it long). */
#define MTLAB_PROGRESS_HORIZON 1u
/* `record`: the slots only, for its copies of quiet threads' buffers. */
#define MTLAB_PROGRESS_SLOTS_ONLY 2u
#define MTLAB_WATERMARK_OFF_PID 32u
#define MTLAB_WATERMARK_OFF_FILE_DEV 40u
#define MTLAB_WATERMARK_OFF_FILE_INO 48u
#define MTLAB_WATERMARK_OFF_START_TSC 56u
#define MTLAB_WATERMARK_OFF_PROGRESS 64u
#define MTLAB_WATERMARK_PROGRESS_SLOTS 510u /* (OFF_PROGRESS_BUFS - OFF_PROGRESS) / 32 */
#define MTLAB_WATERMARK_OFF_PROGRESS_BUFS 16384u
/* A buffer as the preload keeps it (struct mtlab_buf, internal.h; checked
 * there): the owner's thread id (u32), events (u32), first and last time
 * stamps (u64), the event bytes (u32), busy and gen (u32: busy non-zero
 * while the owner appends or flushes, gen bumped after each), and where the
 * events start (after room for the record and chunk headers). */
#define MTLAB_BUF_OFF_TID 16u
#define MTLAB_BUF_OFF_N_EVENTS 20u
#define MTLAB_BUF_OFF_FIRST_TSC 24u
#define MTLAB_BUF_OFF_PREV_TSC 32u
#define MTLAB_BUF_OFF_LEN 48u
#define MTLAB_BUF_OFF_BUSY 56u
#define MTLAB_BUF_OFF_GEN 60u
#define MTLAB_BUF_OFF_EVENTS 136u

enum mtlab_record_type {
    MTLAB_REC_EVENTS = 1,  /* one thread's chunk of events */
    MTLAB_REC_MAPS = 2,    /* text of /proc/self/maps at that moment */
    MTLAB_REC_END = 3,     /* clean end: totals written at exit */
    MTLAB_REC_RUNINFO = 4, /* appended by `mtlab record` after the run */
    MTLAB_REC_STATS = 5,   /* "key=value\n" text: the writer's own costs, at exit */
    MTLAB_REC_ALLOCSTATS = 6, /* "key=value\n" text: the heap manager's own figures,
                                 read after `mtlab ctl dump` (tsc=, dump=, allocator_*) */
};

/* EVENTS payload: u32 tid, u32 n_events, u64 first_tsc, u64 last_tsc,
 * then the events. Each event starts with one byte: kind in the low 5 bits,
 * flags in the high 3. All but STACK_DEF then carry
 *   varint ts_delta   (tsc minus the previous event's tsc in this chunk;
 *                      the first is relative to first_tsc)
 *   varint cycles     (tsc cycles spent inside the real call)
 *   varint stack_id   (0 = no stack)
 * and then the kind's own fields below. "ptr" fields are svarint deltas
 * from the previous ptr field of the chunk (starting at 0). */
#define MTLAB_EVENTS_HEADER 24u
#define MTLAB_KIND_MASK 0x1fu

enum mtlab_event_kind {
    MTLAB_EV_STACK_DEF = 0,      /* varint id, varint depth, depth x svarint pc delta (no ts/cycles/stack) */
    MTLAB_EV_MALLOC = 1,         /* varint size, ptr result, varint usable_extra */
    MTLAB_EV_FREE = 2,           /* ptr (0: free(NULL), counted as a call) */
    MTLAB_EV_CALLOC = 3,         /* varint nmemb, varint size, ptr result, varint usable_extra */
    MTLAB_EV_REALLOC = 4,        /* ptr old, varint size, ptr result, varint usable_extra */
    MTLAB_EV_REALLOCARRAY = 5,   /* ptr old, varint nmemb, varint size, ptr result, varint usable_extra */
    MTLAB_EV_POSIX_MEMALIGN = 6, /* varint align, varint size, ptr result, varint ret, varint usable_extra */
    MTLAB_EV_ALIGNED_ALLOC = 7,  /* varint align, varint size, ptr result, varint usable_extra */
    MTLAB_EV_MEMALIGN = 8,       /* varint align, varint size, ptr result, varint usable_extra */
    MTLAB_EV_VALLOC = 9,         /* varint size, ptr result, varint usable_extra */
    MTLAB_EV_PVALLOC = 10,       /* varint size, ptr result, varint usable_extra */
    MTLAB_EV_MMAP = 11,          /* ptr hint, varint len, varint prot, varint flags, svarint fd, varint offset, ptr result */
    MTLAB_EV_MMAP64 = 12,        /* same fields as MMAP */
    MTLAB_EV_MUNMAP = 13,        /* ptr addr, varint len, svarint ret */
    MTLAB_EV_MREMAP = 14,        /* ptr old, varint old_len, varint new_len, varint flags, ptr result */
    MTLAB_EV_BRK = 15,           /* ptr addr, svarint ret, ptr break_after */
    MTLAB_EV_SBRK = 16,          /* svarint increment, ptr result, ptr break_after (increment 0: sbrk(0), counted as a call) */
    MTLAB_EV_BRK_SEEN = 17,      /* ptr break: the allocator moved the break (seen by polling) */
    MTLAB_EV_ARENA_HEAP = 18,    /* ptr base, varint size: a glibc non-main-arena heap's mapped extent */
    MTLAB_EV_SAMPLE = 19,        /* varint func (an MTLAB_EV_* allocation kind; for EV_NEW: | form << 5), varint size, ptr result, varint interval */
    MTLAB_EV_SAMPLE_FREE = 20,   /* ptr: a sampled block was freed (or moved by realloc) */
    MTLAB_EV_NEW = 21,           /* varint form, varint align, varint size, ptr result, varint usable_extra:
                                    C++ operator new in one of its forms (MTLAB_NEW_*); align 0 where the form takes none */
    MTLAB_EV_DELETE = 22,        /* varint form, ptr: C++ operator delete in one of its forms (MTLAB_DELETE_*) */
    MTLAB_EV_USABLE_SIZE = 23,   /* ptr, varint result: malloc_usable_size (a call that changes nothing) */
    MTLAB_EV_KIND_COUNT = 24,
};

/* Forms of operator new (EV_NEW's form; a SAMPLE of one carries
 * MTLAB_EV_NEW | form << 5 as its func). Bit 0: array; bit 1: nothrow;
 * bit 2: aligned. */
#define MTLAB_NEW_ARRAY 0x1u
#define MTLAB_NEW_NOTHROW 0x2u
#define MTLAB_NEW_ALIGNED 0x4u
#define MTLAB_NEW_FORMS 8u
/* Forms of operator delete (EV_DELETE's form): the same bits, and bit 3:
 * sized. (mangled: _ZdlPv, _ZdaPv, _ZdlPvRKSt9nothrow_t, ..., _ZdlPvmSt11align_val_t) */
#define MTLAB_DELETE_SIZED 0x8u
#define MTLAB_DELETE_FORMS 16u /* of which 12 exist: sized is never nothrow */

/* usable_extra = malloc_usable_size(result) - requested bytes (0 on failure). */

/* Event flags (high 3 bits of the kind byte). */
#define MTLAB_EVF_CHUNK_MMAPPED 0x20u /* glibc: the block is its own mmap'd chunk */
#define MTLAB_EVF_IN_ALLOCATOR 0x40u  /* mmap family: called from inside an allocator call */
#define MTLAB_EVF_FAILED 0x80u        /* the call failed (NULL / MAP_FAILED / -1) */

/* END payload: u64 end_tsc, u64 end_ns (CLOCK_REALTIME), u64 events_written,
 * u64 events_dropped, u64 chunks_dropped, u64 stacks_overflowed. */
#define MTLAB_END_PAYLOAD 48u

/* RUNINFO payload: "key=value\n" text (exit status, wall times, baseline). */

/* The sampler's control page, shared with `mtlab ctl` through
 * /dev/shm/mtlab-PID (MAP_SHARED). `state` is read on every allocation call. */
#define MTLAB_CTL_MAGIC 0x4c544342414c544dull /* the bytes "MTLABCTL" read as a little-endian u64 */
#define MTLAB_CTL_VERSION 3u
#define MTLAB_CTL_SIZE 4096u
#define MTLAB_CTL_ON 0x1u     /* sampling mode is set up */
#define MTLAB_CTL_ACTIVE 0x2u /* sampling allocations now */
#define MTLAB_CTL_LIVE 0x4u   /* sampled blocks may be live: frees are checked */
/* sigqueue() value that marks the signal as a dump request (any other
 * sender of the signal toggles sampling). */
#define MTLAB_CTL_DUMP_VALUE 0x6d746c64u
/* sigqueue() value asking the process to re-apply GOT routing for the
 * page's current state (after `mtlab ctl start|stop`); never toggles. */
#define MTLAB_CTL_APPLY_VALUE 0x6d746c61u
/* `wake` (version 3): how `mtlab ctl` tells the process to act on the page.
 * MTLAB_CTL_WAKE_FUTEX: bump `ctl_seq` and FUTEX_WAKE it — mtlab's control
 * thread in the process, blocked on that word with every signal blocked,
 * applies the state, dumps, and sets `ctl_done` to it; no signal, so the
 * program's own system calls are never interrupted. MTLAB_CTL_WAKE_SIGNAL:
 * the thread could not be started, queue `signal` as in version 2.
 * 0: not set up yet (the process is starting): wait. */
#define MTLAB_CTL_WAKE_FUTEX 1u
#define MTLAB_CTL_WAKE_SIGNAL 2u
/* `routed` bits, written by the process after each routing. */
#define MTLAB_CTL_ROUTE_ON 0x1u    /* GOT routing in use: start/stop need the signal */
#define MTLAB_CTL_ROUTE_ALLOC 0x2u /* allocation calls of startup modules reach the shims */
#define MTLAB_CTL_ROUTE_FREE 0x4u  /* free/realloc calls of startup modules reach the shims */

struct mtlab_ctl_page {
    /* First cache line: read on every allocation call, written only by ctl. */
    uint64_t magic;
    uint32_t version;
    uint32_t pid;
    uint32_t state;        /* MTLAB_CTL_* bits; atomic */
    uint32_t signal;       /* the signal that toggles sampling / requests a dump */
    uint64_t interval;     /* mean sampling interval in bytes; atomic */
    uint8_t pad0[32];
    /* Second line: written while running. */
    uint64_t dump_seq;     /* bumped by `mtlab ctl dump` */
    uint64_t dump_done;    /* set to dump_seq once buffers are flushed */
    uint64_t samples;      /* samples taken so far */
    uint32_t routed;       /* MTLAB_CTL_ROUTE_* of the last routing; 0: none */
    uint32_t pad_routed;
    uint64_t stats_done;   /* set to dump_seq once the heap manager's figures are written */
    uint32_t ctl_seq;      /* bumped by `mtlab ctl` (a futex word, see MTLAB_CTL_WAKE_FUTEX) */
    uint32_t ctl_done;     /* set to ctl_seq by the control thread once it has acted */
    uint32_t wake;         /* MTLAB_CTL_WAKE_* */
    uint8_t pad1[12];
    char trace_path[3968]; /* the trace file this process writes */
};
#define MTLAB_CTL_OFF_STATE 16u
#define MTLAB_CTL_OFF_SIGNAL 20u
#define MTLAB_CTL_OFF_INTERVAL 24u
#define MTLAB_CTL_OFF_DUMP_SEQ 64u
#define MTLAB_CTL_OFF_DUMP_DONE 72u
#define MTLAB_CTL_OFF_SAMPLES 80u
#define MTLAB_CTL_OFF_ROUTED 88u
#define MTLAB_CTL_OFF_STATS_DONE 96u
#define MTLAB_CTL_OFF_CTL_SEQ 104u
#define MTLAB_CTL_OFF_CTL_DONE 108u
#define MTLAB_CTL_OFF_WAKE 112u
#define MTLAB_CTL_OFF_PATH 128u

#endif
