/*
 * Deterministic synthetic dataset shared by the C tests.
 *
 * Every quantity here is a pure function of (rank, nranks, parameters, global id), so any
 * rank can compute any other rank's shard layout and verify any fetched byte without
 * communicating. That is what lets the tests check results byte by byte on every rank
 * and lets a failing rank say exactly which sample and byte went wrong.
 *
 * Layout (P = number of ranks in the loader's communicator):
 *   - P == 1: the single rank holds `base` samples.
 *   - rank 0 holds 4*base + 3 samples: one shard much bigger than the others, so per-peer
 *     traffic is skewed;
 *   - rank 1 holds 0 samples when P >= 3: an empty shard is legal and must not confuse
 *     the owner lookup (two consecutive ranks share the same first id);
 *   - other ranks hold base/2 + something rank dependent, so no two shards line up.
 * Global ids are assigned in rank order, as the contract says.
 *
 * Sample sizes: about 8% zero-length, a few tiny (1..16 bytes), a few exactly at the
 * 3000-byte top, the rest uniform in 0..3000; optionally (big != 0) 0.5% "big" samples of
 * 4097..12000 bytes, larger than the smallest MDL_MAX_MESSAGE_BYTES the tests use, so a
 * single sample has to be split across messages.
 *
 * Byte k of sample g is taken from a 64-bit hash of (seed, g, k/8): offsets that slip by
 * even one byte, or data from the wrong sample, are caught.
 *
 * Header-only (static inline) so each test stays a single translation unit.
 */
#ifndef MDL_TESTS_COMMON_H
#define MDL_TESTS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 finaliser: cheap, and every input bit affects every output bit. */
static inline uint64_t tc_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Small deterministic PRNG (splitmix64 stream) for batch generation. */
typedef struct tc_rng {
    uint64_t s;
} tc_rng;

static inline tc_rng tc_rng_make(uint64_t seed, uint64_t stream)
{
    tc_rng r = {tc_mix64(seed * 0x2545F4914F6CDD1Dull + tc_mix64(stream + 1))};
    return r;
}

static inline uint64_t tc_next(tc_rng *r)
{
    r->s += 0x9E3779B97F4A7C15ull;
    return tc_mix64(r->s);
}

/* Uniform in [0, n); n == 0 returns 0. The modulo bias is irrelevant for tests. */
static inline uint64_t tc_below(tc_rng *r, uint64_t n)
{
    return n ? tc_next(r) % n : 0;
}

typedef struct tc_dataset {
    int nranks;
    uint64_t base;   /* scale: samples on an "ordinary" rank */
    uint64_t seed;   /* changes sizes and contents; distinct loaders use distinct seeds */
    int big;         /* include rare samples larger than 4 KiB */
    uint64_t *first; /* nranks + 1 entries: first[r] = first global id of rank r */
} tc_dataset;

static inline uint64_t tc_n_local(const tc_dataset *d, int r)
{
    if (d->nranks == 1)
        return d->base;
    if (r == 0)
        return 4 * d->base + 3;
    if (r == 1 && d->nranks >= 3)
        return 0;
    return d->base / 2 + ((uint64_t)r * 7919u) % (d->base + 1);
}

/* Returns 0 on success, -1 on allocation failure. */
static inline int tc_dataset_init(tc_dataset *d, int nranks, uint64_t base, uint64_t seed, int big)
{
    d->nranks = nranks;
    d->base = base;
    d->seed = seed;
    d->big = big;
    d->first = malloc(sizeof(uint64_t) * ((size_t)nranks + 1));
    if (!d->first)
        return -1;
    d->first[0] = 0;
    for (int r = 0; r < nranks; r++)
        d->first[r + 1] = d->first[r] + tc_n_local(d, r);
    return 0;
}

static inline void tc_dataset_free(tc_dataset *d)
{
    free(d->first);
    d->first = NULL;
}

static inline uint64_t tc_total(const tc_dataset *d)
{
    return d->first[d->nranks];
}

/* Owner of global id g (g < total). Binary search over first[]; skips empty shards. */
static inline int tc_owner(const tc_dataset *d, uint64_t g)
{
    int lo = 0, hi = d->nranks - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->first[mid] <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static inline uint64_t tc_size_of(const tc_dataset *d, uint64_t g)
{
    uint64_t h = tc_mix64(g ^ tc_mix64(d->seed));
    uint64_t cls = h % 1000;
    uint64_t v = h >> 20;
    if (cls < 80)
        return 0; /* zero-length samples are legal and easy to mishandle */
    if (cls < 120)
        return 1 + v % 16;
    if (cls < 150)
        return 3000;
    if (d->big && cls < 155)
        return 4097 + v % (12000 - 4097 + 1);
    return v % 3001;
}

/* Per-sample key: the content hash depends on (seed, g), so two datasets with different
   seeds never agree, which catches cross-talk between loaders. */
static inline uint64_t tc_sample_key(const tc_dataset *d, uint64_t g)
{
    return tc_mix64(tc_mix64(g) ^ (d->seed * 0xD6E8FEB86659FD93ull) ^ 0x5bd1e995u);
}

static inline uint8_t tc_byte_k(uint64_t key, uint64_t k)
{
    return (uint8_t)(tc_mix64(key + (k >> 3)) >> ((k & 7) * 8));
}

static inline void tc_fill_sample(const tc_dataset *d, uint64_t g, uint8_t *dst)
{
    uint64_t n = tc_size_of(d, g), key = tc_sample_key(d, g);
    for (uint64_t k = 0; k < n; k += 8) {
        uint64_t w = tc_mix64(key + (k >> 3));
        for (uint64_t j = 0; j < 8 && k + j < n; j++)
            dst[k + j] = (uint8_t)(w >> (j * 8));
    }
}

/* Returns -1 if the len bytes at p are exactly sample g (len must equal its size),
   otherwise the index of the first wrong byte (or len's mismatch as size). */
static inline int64_t tc_verify_sample(const tc_dataset *d, uint64_t g, const uint8_t *p, uint64_t len)
{
    uint64_t n = tc_size_of(d, g), key = tc_sample_key(d, g);
    if (len != n)
        return (int64_t)(len < n ? len : n);
    for (uint64_t k = 0; k < n; k += 8) {
        uint64_t w = tc_mix64(key + (k >> 3));
        for (uint64_t j = 0; j < 8 && k + j < n; j++)
            if (p[k + j] != (uint8_t)(w >> (j * 8)))
                return (int64_t)(k + j);
    }
    return -1;
}

/* Builds rank r's shard: *offsets gets n+1 entries, *data the bytes (at least 1 byte
   allocated so the pointer is never NULL unless allocation failed). Returns n, or
   UINT64_MAX on allocation failure. */
static inline uint64_t tc_build_shard(const tc_dataset *d, int r, uint8_t **data, uint64_t **offsets)
{
    uint64_t n = tc_n_local(d, r), g0 = d->first[r];
    uint64_t *off = malloc(sizeof(uint64_t) * (n + 1));
    if (!off)
        return UINT64_MAX;
    off[0] = 0;
    for (uint64_t i = 0; i < n; i++)
        off[i + 1] = off[i] + tc_size_of(d, g0 + i);
    uint8_t *buf = malloc(off[n] ? off[n] : 1);
    if (!buf) {
        free(off);
        return UINT64_MAX;
    }
    for (uint64_t i = 0; i < n; i++)
        tc_fill_sample(d, g0 + i, buf + off[i]);
    *data = buf;
    *offsets = off;
    return n;
}

/* A number from a JSON text (mdl_stats_json's): the value after the first "key": that
   follows `within` (NULL: the whole text); -1 when either is absent. */
static inline double tc_json_number(const char *json, const char *within, const char *key)
{
    const char *p = within ? strstr(json, within) : json;
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    p = p ? strstr(p, quoted) : NULL;
    return p ? strtod(p + strlen(quoted), NULL) : -1.0;
}

/* A shard of n samples of `bytes` bytes each, ids first .. first + n - 1: offsets gets
   n + 1 entries, byte k of sample g is byte_of(g, k). */
static inline void tc_uniform_shard(uint64_t first, uint64_t n, uint64_t bytes, uint8_t (*byte_of)(uint64_t, uint64_t),
                                    uint8_t *data, uint64_t *offsets)
{
    for (uint64_t i = 0; i <= n; i++)
        offsets[i] = i * bytes;
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t k = 0; k < bytes; k++)
            data[i * bytes + k] = byte_of(first + i, k);
}

/* Sum of the sizes of ids[0..n). */
static inline uint64_t tc_batch_bytes(const tc_dataset *d, const uint64_t *ids, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i < n; i++)
        s += tc_size_of(d, ids[i]);
    return s;
}

/* Parses "123", "4k", "2M" style unsigned integers for command-line options. */
static inline int tc_parse_u64(const char *s, uint64_t *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 0);
    if (end == s)
        return -1;
    if (*end == 'k' || *end == 'K')
        v *= 1000ull, end++;
    else if (*end == 'M' || *end == 'm')
        v *= 1000000ull, end++;
    if (*end != '\0')
        return -1;
    *out = v;
    return 0;
}

/* Async-signal-safe: appends text / a decimal number to line[*k] (bounded by cap). For
   watchdog handlers, which may only use write() and the like. */
static inline void tc_sig_puts(char *line, size_t *k, size_t cap, const char *t)
{
    while (*t && *k + 1 < cap)
        line[(*k)++] = *t++;
}

static inline void tc_sig_putu(char *line, size_t *k, size_t cap, unsigned long long v)
{
    char d[24];
    int n = 0;
    do {
        d[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && n < 23);
    while (n && *k + 1 < cap)
        line[(*k)++] = d[--n];
}

#endif /* MDL_TESTS_COMMON_H */
