/*
 * latency_pipeline.c — a realistic latency workload: market data in ->
 * strategy -> order out, three stages joined by blocking Unix-domain
 * SOCK_STREAM socketpairs, as threads of one process (--mode threads, the
 * default) or as forked processes (--mode processes).
 *
 *   feed      generates MESSAGES market-data messages (binary header + a
 *             FIX-like text body) at RATE messages/s, paced by sleeping to
 *             15 µs before each send time and busy-waiting the rest
 *             on CLOCK_MONOTONIC against a fixed schedule; each message is
 *             stamped with CLOCK_MONOTONIC ns immediately before its write.
 *             Symbols are drawn with a skewed distribution (a few hot, many
 *             cold). The feed itself does not allocate per message.
 *   strategy  parses each message into heap objects: an order-book update
 *             node of 48 + 16 * levels bytes (48..512), a strdup'd symbol
 *             string per node, and for about 1 message in 128 a 4..64 KiB
 *             book snapshot (filled, checksummed, kept until the symbol's next
 *             snapshot). Each symbol keeps its last HISTORY nodes (the oldest
 *             is freed when a new one arrives; a snapshot frees the whole
 *             history); symbols sit in an LRU list and one idle for more than
 *             4 * SYMBOLS messages is dropped with everything it owns. Every
 *             message reads back recent history (a VWAP over up to 8 nodes)
 *             and a line of the snapshot. For about 1 message in ORDER_EVERY
 *             (a hash of seed and sequence number, so deterministic) it
 *             mallocs an order, serialises it into the order socket and
 *             frees it.
 *   gateway   receives orders, records tick-to-trade latency = now - feed
 *             timestamp of the message that caused the order, and keeps the
 *             last 1024 orders as heap records (FIFO).
 *
 * feed_to_strategy_ns is now - feed timestamp when the strategy has the whole
 * message in hand (before parsing), for every message. Latencies go into
 * log-linear histograms (64 sub-buckets per power of two, relative error
 * under 1/64; mean, min and max exact) in memory shared by the stages, so
 * memory use is bounded whatever MESSAGES is. Messages with a sequence
 * number below WARMUP are processed but not recorded.
 *
 * "mallocs" counts the allocations the stages make themselves (malloc and
 * strdup calls, setup included), not allocations libc makes on its own.
 *
 * Output: one JSON line on stdout. Exit code 2 on bad arguments, 1 on
 * failure.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

#include "hist.h"
#include <unistd.h>

#define PROG "mtlab-latency-pipeline"

static inline uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause" ::: "memory");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

static void die(const char *what) {
    fprintf(stderr, PROG ": %s\n", what);
    exit(1);
}

static void die_errno(const char *what) {
    fprintf(stderr, PROG ": %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- deterministic PRNG (splitmix64) ---- */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint64_t rng_next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    return mix64(*s);
}

/* "trimmed_mean" leaves out the slowest 1 %: on a small shared machine those
 * are scheduling delays of milliseconds that swamp what is measured. */
static void print_hist(const char *key, const struct hist *h) {
    printf("\"%s\":{\"count\":%llu,\"mean\":%.1f,\"trimmed_mean\":%.1f,\"min\":%llu,\"p50\":%llu,\"p99\":%llu,"
           "\"p999\":%llu,\"max\":%llu}",
           key, (unsigned long long)h->count, h->count ? (double)h->sum / (double)h->count : 0.0, hist_trimmed_mean(h, 0.99),
           (unsigned long long)(h->count ? h->min : 0), (unsigned long long)hist_quantile(h, 0.50),
           (unsigned long long)hist_quantile(h, 0.99), (unsigned long long)hist_quantile(h, 0.999),
           (unsigned long long)h->max);
}

/* ---- configuration ---- */
static long n_messages = 200000;
static long rate = 50000; /* messages/s; 0 = as fast as possible */
static uint64_t seed = 1;
static long order_every = 20;
static long n_symbols = 256;
static long history = 32;
static long warmup = 0;
static int mode_processes;

#define MAX_SYMBOLS 17576 /* 26^3: 3..5 letters keep names unique */
#define MAX_LEVELS 29
#define MAX_MSG 4096
#define SNAPSHOT_ONE_IN 128
#define SNAPSHOT_MIN 4096
#define SNAPSHOT_MAX 65536
#define GATEWAY_KEEP 1024
#define VWAP_DEPTH 8

enum { STAGE_FEED, STAGE_STRATEGY, STAGE_GATEWAY, NSTAGES };
static const char *stage_names[NSTAGES] = {"feed", "strategy", "gateway"};

/* Results, in memory shared across fork; each field has one writer. */
struct shared {
    pthread_barrier_t go;
    struct hist feed_to_strategy; /* written by the strategy */
    struct hist tick_to_trade;    /* written by the gateway */
    uint64_t mallocs[NSTAGES];
    uint64_t sent, feed_late;          /* feed */
    uint64_t received, orders_sent;    /* strategy */
    uint64_t orders_received;          /* gateway */
};

static struct shared *sh;
static int md_fd[2], order_fd[2]; /* [0]: feed/strategy side, [1]: the other */

/* ---- counted allocation ---- */
static __thread uint64_t n_mallocs;

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) die("out of memory");
    n_mallocs++;
    return p;
}

static char *xstrdup(const char *s) {
    char *p = strdup(s);
    if (!p) die("out of memory");
    n_mallocs++;
    return p;
}

/* ---- socket I/O ---- */
struct wire_hdr {
    uint32_t len; /* whole message, header included */
    uint32_t type;
    uint64_t seq;
    uint64_t ts_ns; /* feed timestamp */
};

enum { MSG_UPDATE = 'X', MSG_SNAPSHOT = 'W', MSG_ORDER = 'D' };

static void write_full(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            die_errno("write");
        }
        p += k;
        n -= (size_t)k;
    }
}

struct reader {
    int fd;
    size_t r, w;
    char buf[1 << 16];
};

/* Pointer to n contiguous unread bytes, reading more as needed; NULL at a
 * clean end of stream. Valid until the next call. */
static const char *rd_need(struct reader *rd, size_t n) {
    if (rd->w - rd->r >= n) return rd->buf + rd->r;
    if (rd->r) {
        memmove(rd->buf, rd->buf + rd->r, rd->w - rd->r);
        rd->w -= rd->r;
        rd->r = 0;
    }
    while (rd->w < n) {
        ssize_t k = read(rd->fd, rd->buf + rd->w, sizeof rd->buf - rd->w);
        if (k < 0) {
            if (errno == EINTR) continue;
            die_errno("read");
        }
        if (k == 0) {
            if (rd->w == 0) return NULL;
            die("stream ends inside a message");
        }
        rd->w += (size_t)k;
    }
    return rd->buf;
}

/* Next message's header and body, or 0 at end of stream. */
static int rd_message(struct reader *rd, struct wire_hdr *h, const char **body, size_t *body_len) {
    const char *p = rd_need(rd, sizeof *h);
    if (!p) return 0;
    memcpy(h, p, sizeof *h);
    if (h->len < sizeof *h || h->len > MAX_MSG) die("bad message length");
    p = rd_need(rd, h->len);
    *body = p + sizeof *h;
    *body_len = h->len - sizeof *h;
    rd->r += h->len;
    return 1;
}

/* ---- text helpers ---- */
static char *put_i64(char *p, int64_t v) {
    char tmp[24];
    int n = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do tmp[n++] = (char)('0' + u % 10), u /= 10;
    while (u);
    if (v < 0) *p++ = '-';
    while (n) *p++ = tmp[--n];
    return p;
}

static char *put_field(char *p, int tag, int64_t v) {
    p = put_i64(p, tag);
    *p++ = '=';
    p = put_i64(p, v);
    *p++ = '|';
    return p;
}

static char *put_str_field(char *p, int tag, const char *s) {
    p = put_i64(p, tag);
    *p++ = '=';
    size_t n = strlen(s);
    memcpy(p, s, n);
    p += n;
    *p++ = '|';
    return p;
}

/* Runs STMT with TAG, VAL and VLEN set for each "tag=value|" field. */
#define FOR_FIELDS(body, len, TAG, VAL, VLEN, STMT)                              \
    do {                                                                          \
        const char *fp_ = (body), *fe_ = (body) + (len);                          \
        while (fp_ < fe_) {                                                       \
            int TAG = 0;                                                          \
            while (fp_ < fe_ && *fp_ >= '0' && *fp_ <= '9') TAG = TAG * 10 + (*fp_++ - '0'); \
            if (fp_ >= fe_ || *fp_ != '=') die("malformed field");                \
            const char *VAL = ++fp_;                                              \
            while (fp_ < fe_ && *fp_ != '|') fp_++;                               \
            if (fp_ >= fe_) die("unterminated field");                           \
            size_t VLEN = (size_t)(fp_ - VAL);                                    \
            fp_++;                                                                \
            STMT                                                                  \
        }                                                                         \
    } while (0)

static int64_t parse_i64(const char *s, size_t n) {
    int64_t v = 0;
    int neg = n && *s == '-';
    for (size_t i = (size_t)neg; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') die("malformed number");
        v = v * 10 + (s[i] - '0');
    }
    return neg ? -v : v;
}

static void copy_str(char *dst, size_t cap, const char *s, size_t n) {
    if (n >= cap) die("string field too long");
    memcpy(dst, s, n);
    dst[n] = 0;
}

/* Unique name of symbol idx: 3..5 letters, a dot, a venue. */
static void symbol_name(long idx, char *out) {
    static const char *venues[] = {"XNAS", "XNYS", "ARCX", "BATS"};
    uint64_t h = mix64(seed ^ ((uint64_t)idx * 0x9e3779b97f4a7c15ull));
    int len = 3 + (int)(h % 3);
    long v = idx;
    for (int k = len - 1; k >= 0; k--) out[k] = (char)('A' + v % 26), v /= 26;
    out[len] = '.';
    memcpy(out + len + 1, venues[(h >> 8) % 4], 5);
}

/* ---- feed ---- */
#define SPIN_NS 15000ull       /* spin the last 15 µs before a send */
#define SLEEP_AHEAD_NS 10000ull /* sleep only when that leaves 10 µs to spare */

static void feed_stage(void) {
    int fd = md_fd[0];
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake on time, not 50 µs late */
    uint64_t rng = mix64(seed ^ 0xfeedull);
    int64_t *mid = xmalloc((size_t)n_symbols * sizeof *mid);
    char (*names)[16] = xmalloc((size_t)n_symbols * sizeof *names);
    for (long i = 0; i < n_symbols; i++) {
        mid[i] = 1000 + (int64_t)(rng_next(&rng) % 90000);
        symbol_name(i, names[i]);
    }
    char msg[MAX_MSG];
    uint64_t late = 0;
    double interval = rate ? 1e9 / (double)rate : 0.0;
    pthread_barrier_wait(&sh->go);
    uint64_t t0 = now_ns();
    for (long i = 0; i < n_messages; i++) {
        /* Build the message before waiting for its slot. */
        uint64_t r = rng_next(&rng);
        double u = (double)(r >> 11) * 0x1.0p-53;
        long s = (long)((double)n_symbols * u * u);
        if (s >= n_symbols) s = n_symbols - 1;
        r = rng_next(&rng);
        mid[s] += (int64_t)(r % 5) - 2;
        if (mid[s] < 100) mid[s] = 100;
        int snapshot = (r >> 8) % SNAPSHOT_ONE_IN == 0;
        char *p = msg + sizeof(struct wire_hdr);
        p = put_str_field(p, 35, snapshot ? "W" : "X");
        p = put_str_field(p, 55, names[s]);
        p = put_field(p, 270, mid[s]);
        if (snapshot) {
            p = put_field(p, 9001, SNAPSHOT_MIN + (int64_t)((r >> 16) % (SNAPSHOT_MAX - SNAPSHOT_MIN + 1)));
        } else {
            int nlev = (int)((r >> 16) % (MAX_LEVELS + 1));
            p = put_field(p, 268, nlev);
            for (int k = 0; k < nlev; k++) {
                uint64_t q = rng_next(&rng);
                int side = k & 1;
                p = put_field(p, 269, side);
                p = put_field(p, 270, side ? mid[s] + 1 + k / 2 : mid[s] - 1 - k / 2);
                p = put_field(p, 271, 1 + (int64_t)(q % 1000));
            }
        }
        struct wire_hdr h = {(uint32_t)(p - msg), snapshot ? MSG_SNAPSHOT : MSG_UPDATE, (uint64_t)i, 0};
        uint64_t t = now_ns();
        if (rate) {
            uint64_t target = t0 + (uint64_t)((double)i * interval);
            /* Sleep through most of a long wait so the other stages keep the
             * CPU (a small machine has fewer cores than stages), then spin the
             * last stretch for an exact send time. */
            if (target > t + SLEEP_AHEAD_NS + SPIN_NS) {
                uint64_t wake = target - SPIN_NS;
                struct timespec ts = {(time_t)(wake / 1000000000ull), (long)(wake % 1000000000ull)};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                t = now_ns();
            }
            while (t < target) {
                cpu_relax();
                t = now_ns();
            }
            if ((double)(t - target) > interval) late++;
        }
        h.ts_ns = t;
        memcpy(msg, &h, sizeof h);
        write_full(fd, msg, h.len);
    }
    close(fd);
    sh->sent = (uint64_t)n_messages;
    sh->feed_late = late;
    free(names);
    free(mid);
}

/* ---- strategy ---- */
struct level {
    int64_t px, qty;
};

struct node { /* 48 bytes + levels */
    uint64_t seq;
    uint64_t ts_ns;
    int64_t mid;
    char *symbol;
    int32_t nlevels;
    int32_t side_mask;
    int64_t notional;
    struct level lv[];
};
_Static_assert(sizeof(struct node) == 48, "update node header is 48 bytes");

struct sym {
    struct sym *hnext, *lru_prev, *lru_next;
    char *name;
    uint64_t hash, last_seq;
    char *snap;
    size_t snap_len;
    uint64_t snap_sum;
    uint64_t touch_acc;
    long head, count;
    struct node *ring[]; /* HISTORY slots */
};

struct parsed {
    int type;
    char sym[32];
    int64_t mid, snap_bytes;
    int nlevels;
    int side[MAX_LEVELS];
    struct level lv[MAX_LEVELS];
};

struct book {
    struct sym **buckets;
    size_t nbuckets;
    struct sym *lru_head, *lru_tail;
    long live;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    while (*s) h = (h ^ (unsigned char)*s++) * 0x100000001b3ull;
    return h;
}

static void lru_unlink(struct book *b, struct sym *s) {
    if (s->lru_prev) s->lru_prev->lru_next = s->lru_next;
    else b->lru_head = s->lru_next;
    if (s->lru_next) s->lru_next->lru_prev = s->lru_prev;
    else b->lru_tail = s->lru_prev;
    s->lru_prev = s->lru_next = NULL;
}

static void lru_push_front(struct book *b, struct sym *s) {
    s->lru_next = b->lru_head;
    s->lru_prev = NULL;
    if (b->lru_head) b->lru_head->lru_prev = s;
    else b->lru_tail = s;
    b->lru_head = s;
}

static void free_node(struct node *n) {
    free(n->symbol);
    free(n);
}

static void clear_history(struct sym *s) {
    for (long i = 0; i < s->count; i++) {
        long slot = (s->head - 1 - i + 2 * history) % history;
        free_node(s->ring[slot]);
        s->ring[slot] = NULL;
    }
    s->count = 0;
    s->head = 0;
}

static struct sym *lookup(struct book *b, const char *name) {
    uint64_t h = hash_str(name);
    struct sym **slot = &b->buckets[h & (b->nbuckets - 1)];
    for (struct sym *s = *slot; s; s = s->hnext)
        if (s->hash == h && !strcmp(s->name, name)) return s;
    struct sym *s = xmalloc(sizeof *s + (size_t)history * sizeof s->ring[0]);
    memset(s, 0, sizeof *s);
    s->name = xstrdup(name);
    s->hash = h;
    s->hnext = *slot;
    *slot = s;
    lru_push_front(b, s);
    b->live++;
    return s;
}

static void drop_symbol(struct book *b, struct sym *s) {
    struct sym **pp = &b->buckets[s->hash & (b->nbuckets - 1)];
    while (*pp != s) pp = &(*pp)->hnext;
    *pp = s->hnext;
    lru_unlink(b, s);
    clear_history(s);
    free(s->snap);
    free(s->name);
    free(s);
    b->live--;
}

static void parse_md(const char *body, size_t len, struct parsed *m) {
    m->type = 0;
    m->sym[0] = 0;
    m->mid = m->snap_bytes = 0;
    m->nlevels = 0;
    int k = -1;
    FOR_FIELDS(body, len, tag, val, vlen, {
        switch (tag) {
        case 35: m->type = vlen ? val[0] : 0; break;
        case 55: copy_str(m->sym, sizeof m->sym, val, vlen); break;
        case 268: break; /* count, implied by the 269 groups */
        case 269:
            if (++k >= MAX_LEVELS) die("too many levels");
            m->side[k] = (int)parse_i64(val, vlen);
            m->lv[k].px = m->lv[k].qty = 0;
            break;
        case 270:
            if (k < 0) m->mid = parse_i64(val, vlen);
            else m->lv[k].px = parse_i64(val, vlen);
            break;
        case 271:
            if (k < 0) die("quantity outside a level");
            m->lv[k].qty = parse_i64(val, vlen);
            break;
        case 9001: m->snap_bytes = parse_i64(val, vlen); break;
        default: die("unknown market-data tag");
        }
    });
    m->nlevels = k + 1;
    if (!m->sym[0] || (m->type != 'X' && m->type != 'W')) die("incomplete market-data message");
}

static void apply_snapshot(struct sym *s, const struct parsed *m) {
    if (m->snap_bytes < SNAPSHOT_MIN || m->snap_bytes > SNAPSHOT_MAX) die("bad snapshot size");
    size_t n = (size_t)m->snap_bytes;
    char *buf = xmalloc(n);
    /* Rebuild the book image: price/quantity pairs, then check it. */
    struct level *lv = (struct level *)buf;
    size_t nl = n / sizeof *lv;
    for (size_t i = 0; i < nl; i++) {
        int64_t off = (int64_t)(i / 2) + 1;
        lv[i].px = m->mid + (i % 2 ? off : -off);
        lv[i].qty = (int64_t)((i * 2654435761u) % 997);
    }
    memset(buf + nl * sizeof *lv, 0, n - nl * sizeof *lv);
    uint64_t sum = 0;
    for (size_t i = 0; i < nl; i++) sum += (uint64_t)(lv[i].px * lv[i].qty);
    clear_history(s);
    free(s->snap);
    s->snap = buf;
    s->snap_len = n;
    s->snap_sum = sum;
}

static int64_t apply_update(struct sym *s, const struct parsed *m, const struct wire_hdr *h) {
    struct node *nd = xmalloc(sizeof *nd + (size_t)m->nlevels * sizeof nd->lv[0]);
    nd->seq = h->seq;
    nd->ts_ns = h->ts_ns;
    nd->mid = m->mid;
    nd->symbol = xstrdup(m->sym);
    nd->nlevels = m->nlevels;
    nd->side_mask = 0;
    nd->notional = 0;
    for (int k = 0; k < m->nlevels; k++) {
        nd->lv[k] = m->lv[k];
        nd->side_mask |= (m->side[k] & 1) << (k & 31);
        nd->notional += m->lv[k].px * m->lv[k].qty;
    }
    if (s->count == history) free_node(s->ring[s->head]);
    else s->count++;
    s->ring[s->head] = nd;
    s->head = (s->head + 1) % history;

    /* Read back: VWAP over recent updates, and a line of the snapshot. */
    int64_t pq = 0, q = 0;
    long depth = s->count < VWAP_DEPTH ? s->count : VWAP_DEPTH;
    for (long i = 0; i < depth; i++) {
        const struct node *o = s->ring[(s->head - 1 - i + 2 * history) % history];
        if (o->symbol[0] != m->sym[0]) die("history corrupted");
        for (int k = 0; k < o->nlevels; k++) {
            pq += o->lv[k].px * o->lv[k].qty;
            q += o->lv[k].qty;
        }
        if (!o->nlevels) pq += o->mid, q += 1;
    }
    int64_t vwap = q ? pq / q : m->mid;
    if (s->snap) s->touch_acc += (unsigned char)s->snap[(h->seq * 64) % s->snap_len];
    return vwap;
}

struct order {
    uint64_t id, seq, feed_ts;
    char *symbol;
    int64_t px, qty;
    int side;
    char clordid[24];
};

static void send_order(int fd, uint64_t id, const struct wire_hdr *h, const struct parsed *m, int64_t vwap) {
    struct order *o = xmalloc(sizeof *o);
    o->id = id;
    o->seq = h->seq;
    o->feed_ts = h->ts_ns;
    o->symbol = xstrdup(m->sym);
    o->side = vwap <= m->mid;
    o->px = o->side ? m->mid + 1 : m->mid - 1;
    o->qty = 100 * (int64_t)(1 + mix64(id) % 10);
    char *c = o->clordid;
    *c++ = 'S';
    c = put_i64(c, (int64_t)id);
    *c = 0;

    char buf[256];
    char *p = buf + sizeof(struct wire_hdr);
    p = put_str_field(p, 11, o->clordid);
    p = put_str_field(p, 55, o->symbol);
    p = put_field(p, 54, o->side);
    p = put_field(p, 44, o->px);
    p = put_field(p, 38, o->qty);
    struct wire_hdr oh = {(uint32_t)(p - buf), MSG_ORDER, o->seq, o->feed_ts};
    memcpy(buf, &oh, sizeof oh);
    write_full(fd, buf, oh.len);
    free(o->symbol);
    free(o);
}

static struct reader strategy_rd, gateway_rd;

static void strategy_stage(void) {
    struct reader *rd = &strategy_rd;
    rd->fd = md_fd[1];
    struct book b = {0};
    b.nbuckets = 1;
    while (b.nbuckets < 2 * (size_t)n_symbols) b.nbuckets <<= 1;
    b.buckets = xmalloc(b.nbuckets * sizeof *b.buckets);
    memset(b.buckets, 0, b.nbuckets * sizeof *b.buckets);
    uint64_t idle_limit = 4 * (uint64_t)n_symbols;
    uint64_t received = 0, orders = 0;
    static struct parsed m;
    struct wire_hdr h;
    const char *body;
    size_t len;
    pthread_barrier_wait(&sh->go);
    while (rd_message(rd, &h, &body, &len)) {
        uint64_t t = now_ns();
        if (h.seq >= (uint64_t)warmup) hist_add(&sh->feed_to_strategy, t > h.ts_ns ? t - h.ts_ns : 0);
        received++;
        parse_md(body, len, &m);
        struct sym *s = lookup(&b, m.sym);
        int64_t vwap = m.mid;
        if (m.type == MSG_SNAPSHOT) apply_snapshot(s, &m);
        else vwap = apply_update(s, &m, &h);
        s->last_seq = h.seq;
        if (b.lru_head != s) {
            lru_unlink(&b, s);
            lru_push_front(&b, s);
        }
        struct sym *cold = b.lru_tail;
        if (cold != s && h.seq - cold->last_seq > idle_limit) drop_symbol(&b, cold);
        if (mix64(seed ^ 0x6f72646572ull ^ (h.seq * 0x9e3779b97f4a7c15ull)) % (uint64_t)order_every == 0) {
            send_order(order_fd[0], orders, &h, &m, vwap);
            orders++;
        }
    }
    close(md_fd[1]);
    close(order_fd[0]);
    while (b.lru_head) drop_symbol(&b, b.lru_head);
    free(b.buckets);
    sh->received = received;
    sh->orders_sent = orders;
}

/* ---- gateway ---- */
struct ack {
    uint64_t seq, recv_ns;
    int64_t px, qty;
    int side;
    char *symbol;
    char clordid[24];
};

static void gateway_stage(void) {
    struct reader *rd = &gateway_rd;
    rd->fd = order_fd[1];
    struct ack **keep = xmalloc(GATEWAY_KEEP * sizeof *keep);
    memset(keep, 0, GATEWAY_KEEP * sizeof *keep);
    uint64_t n = 0;
    struct wire_hdr h;
    const char *body;
    size_t len;
    pthread_barrier_wait(&sh->go);
    while (rd_message(rd, &h, &body, &len)) {
        uint64_t t = now_ns();
        if (h.type != MSG_ORDER) die("gateway got a non-order message");
        if (h.seq >= (uint64_t)warmup) hist_add(&sh->tick_to_trade, t > h.ts_ns ? t - h.ts_ns : 0);
        struct ack *a = xmalloc(sizeof *a);
        char sym[32] = "";
        a->seq = h.seq;
        a->recv_ns = t;
        a->px = a->qty = 0;
        a->side = 0;
        a->clordid[0] = 0;
        FOR_FIELDS(body, len, tag, val, vlen, {
            switch (tag) {
            case 11: copy_str(a->clordid, sizeof a->clordid, val, vlen); break;
            case 55: copy_str(sym, sizeof sym, val, vlen); break;
            case 54: a->side = (int)parse_i64(val, vlen); break;
            case 44: a->px = parse_i64(val, vlen); break;
            case 38: a->qty = parse_i64(val, vlen); break;
            default: die("unknown order tag");
            }
        });
        if (!sym[0] || !a->clordid[0] || a->qty <= 0) die("incomplete order");
        a->symbol = xstrdup(sym);
        struct ack **slot = &keep[n % GATEWAY_KEEP];
        if (*slot) {
            free((*slot)->symbol);
            free(*slot);
        }
        *slot = a;
        n++;
    }
    close(order_fd[1]);
    for (int i = 0; i < GATEWAY_KEEP; i++) {
        if (keep[i]) {
            free(keep[i]->symbol);
            free(keep[i]);
        }
    }
    free(keep);
    sh->orders_received = n;
}

/* ---- driver ---- */
static void run_stage(int stage) {
    n_mallocs = 0;
    switch (stage) {
    case STAGE_FEED: feed_stage(); break;
    case STAGE_STRATEGY: strategy_stage(); break;
    default: gateway_stage(); break;
    }
    sh->mallocs[stage] = n_mallocs;
}

static void *stage_thread(void *arg) {
    run_stage((int)(intptr_t)arg);
    return NULL;
}

static void usage(void) {
    fprintf(stderr, "usage: " PROG " [--mode threads|processes] [--messages N] [--rate MSG_PER_S (0: unpaced)] "
                    "[--seed N] [--order-every K] [--symbols N] [--history N] [--warmup N]\n");
}

static long parse_num(const char *flag, const char *v, long min, long max) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == 0 || *end != 0 || errno || x < min || x > max) {
        fprintf(stderr, PROG ": %s needs an integer in [%ld, %ld], got '%s'\n", flag, min, max, v);
        usage();
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--mode") && has_value) {
            if (!strcmp(v, "threads")) mode_processes = 0;
            else if (!strcmp(v, "processes")) mode_processes = 1;
            else {
                fprintf(stderr, PROG ": --mode is threads or processes, got '%s'\n", v);
                usage();
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--messages")) n_messages = parse_num(a, v, 1, 1000000000000L), i++;
        else if (!strcmp(a, "--rate")) rate = parse_num(a, v, 0, 1000000000L), i++;
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            seed = strtoull(v, &end, 0);
            if (!*v || *end || errno || *v == '-') {
                fprintf(stderr, PROG ": --seed needs a non-negative integer, got '%s'\n", v);
                usage();
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--order-every")) order_every = parse_num(a, v, 1, 1000000000L), i++;
        else if (!strcmp(a, "--symbols")) n_symbols = parse_num(a, v, 1, MAX_SYMBOLS), i++;
        else if (!strcmp(a, "--history")) history = parse_num(a, v, 1, 1000000L), i++;
        else if (!strcmp(a, "--warmup")) warmup = parse_num(a, v, 0, 1000000000000L), i++;
        else {
            usage();
            return 2;
        }
    }

    signal(SIGPIPE, SIG_IGN); /* a dead peer shows up as EPIPE */
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) die_errno("mmap");
    memset(sh, 0, sizeof *sh);
    hist_reset(&sh->feed_to_strategy);
    hist_reset(&sh->tick_to_trade);
    pthread_barrierattr_t ba;
    pthread_barrierattr_init(&ba);
    if (pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED)) die("process-shared barrier unsupported");
    pthread_barrier_init(&sh->go, &ba, NSTAGES + 1);
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, md_fd) || socketpair(AF_UNIX, SOCK_STREAM, 0, order_fd))
        die_errno("socketpair");

    uint64_t t0, t1;
    if (!mode_processes) {
        pthread_t tid[NSTAGES];
        for (int s = 0; s < NSTAGES; s++)
            if (pthread_create(&tid[s], NULL, stage_thread, (void *)(intptr_t)s)) die("cannot create a thread");
        pthread_barrier_wait(&sh->go);
        t0 = now_ns();
        for (int s = 0; s < NSTAGES; s++) pthread_join(tid[s], NULL);
        t1 = now_ns();
    } else {
        pid_t pid[NSTAGES];
        fflush(stdout);
        fflush(stderr);
        for (int s = 0; s < NSTAGES; s++) {
            pid[s] = fork();
            if (pid[s] < 0) die_errno("fork");
            if (pid[s] == 0) {
                /* Keep only this stage's ends, so end of stream propagates. */
                if (s != STAGE_FEED) close(md_fd[0]);
                if (s != STAGE_STRATEGY) close(md_fd[1]), close(order_fd[0]);
                if (s != STAGE_GATEWAY) close(order_fd[1]);
                run_stage(s);
                exit(0); /* not _exit: a preloaded tracer flushes at exit */
            }
        }
        close(md_fd[0]);
        close(md_fd[1]);
        close(order_fd[0]);
        close(order_fd[1]);
        pthread_barrier_wait(&sh->go);
        t0 = now_ns();
        int failed = 0;
        for (int s = 0; s < NSTAGES; s++) {
            int st;
            while (waitpid(pid[s], &st, 0) < 0)
                if (errno != EINTR) die_errno("waitpid");
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                fprintf(stderr, PROG ": the %s stage failed (status 0x%x)\n", stage_names[s], st);
                failed = 1;
            }
        }
        t1 = now_ns();
        if (failed) return 1;
    }

    if (sh->received != sh->sent || sh->orders_received != sh->orders_sent)
        die("messages were lost between stages");
    printf("{\"workload\":\"latency-pipeline\",\"mode\":\"%s\",\"messages\":%ld,\"rate\":%ld,\"seed\":%llu,"
           "\"order_every\":%ld,\"symbols\":%ld,\"history\":%ld,\"warmup\":%ld,\"orders\":%llu,",
           mode_processes ? "processes" : "threads", n_messages, rate, (unsigned long long)seed, order_every,
           n_symbols, history, warmup, (unsigned long long)sh->orders_received);
    print_hist("latency_ns", &sh->tick_to_trade);
    printf(",");
    print_hist("feed_to_strategy_ns", &sh->feed_to_strategy);
    uint64_t total = 0;
    for (int s = 0; s < NSTAGES; s++) total += sh->mallocs[s];
    printf(",\"mallocs\":%llu,\"mallocs_by_stage\":{\"feed\":%llu,\"strategy\":%llu,\"gateway\":%llu},"
           "\"feed_late\":%llu,\"wall_ns\":%llu}\n",
           (unsigned long long)total, (unsigned long long)sh->mallocs[STAGE_FEED],
           (unsigned long long)sh->mallocs[STAGE_STRATEGY], (unsigned long long)sh->mallocs[STAGE_GATEWAY],
           (unsigned long long)sh->feed_late, (unsigned long long)(t1 - t0));
    return 0;
}
