/*
 * hist.h — a log-linear histogram (64 sub-buckets per power of two: exact
 * below 128, within 1/64 above), fixed size so nothing is allocated while
 * measuring. Shared by the C workloads.
 */
#ifndef MTLAB_BENCH_HIST_H
#define MTLAB_BENCH_HIST_H

#include <stdint.h>
#include <string.h>

#define SUB_BITS 6
#define SUB (1u << SUB_BITS)
#define NBUCKETS (SUB + (64 - SUB_BITS) * SUB)

struct hist {
    uint64_t count, sum, min, max;
    uint64_t b[NBUCKETS];
};

static inline unsigned bucket_of(uint64_t v) {
    if (v < SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return SUB + (e - SUB_BITS) * SUB + (unsigned)((v >> (e - SUB_BITS)) & (SUB - 1));
}

/* Middle of bucket i's value range. */
static inline uint64_t bucket_mid(unsigned i) {
    if (i < 2 * SUB) return i;
    unsigned e = (i - SUB) / SUB + SUB_BITS, sub = (i - SUB) % SUB;
    uint64_t low = (uint64_t)(SUB + sub) << (e - SUB_BITS);
    return low + ((1ull << (e - SUB_BITS)) - 1) / 2;
}

static inline void hist_add(struct hist *h, uint64_t v) {
    h->count++;
    h->sum += v;
    if (v < h->min) h->min = v;
    if (v > h->max) h->max = v;
    h->b[bucket_of(v)]++;
}

static inline void hist_reset(struct hist *h) {
    memset(h, 0, sizeof *h);
    h->min = UINT64_MAX;
}

static inline void hist_merge(struct hist *into, const struct hist *h) {
    into->count += h->count;
    into->sum += h->sum;
    if (h->min < into->min) into->min = h->min;
    if (h->max > into->max) into->max = h->max;
    for (unsigned i = 0; i < NBUCKETS; i++) into->b[i] += h->b[i];
}

static inline uint64_t hist_quantile(const struct hist *h, double q) {
    if (!h->count) return 0;
    uint64_t rank = (uint64_t)(q * (double)h->count);
    if ((double)rank < q * (double)h->count) rank++;
    if (rank < 1) rank = 1;
    uint64_t seen = 0;
    for (unsigned i = 0; i < NBUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t v = bucket_mid(i);
            if (v < h->min) v = h->min;
            if (v > h->max) v = h->max;
            return v;
        }
    }
    return h->max;
}

/* Mean of the samples up to quantile q: drops the rare descheduled calls
 * (tens of millions of cycles) that swamp a plain mean. Buckets above 127
 * cycles contribute their midpoints (within 1 %). */
static inline double hist_trimmed_mean(const struct hist *h, double q) {
    uint64_t keep = (uint64_t)(q * (double)h->count), seen = 0;
    double sum = 0;
    for (unsigned i = 0; i < NBUCKETS && seen < keep; i++) {
        uint64_t n = h->b[i] < keep - seen ? h->b[i] : keep - seen;
        sum += (double)n * (double)bucket_mid(i);
        seen += n;
    }
    return seen ? sum / (double)seen : 0.0;
}

#endif
