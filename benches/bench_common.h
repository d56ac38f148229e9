/*
 * What the C benchmarks share: the synthetic dataset's bytes and id streams (so that any
 * rank can compute, and verify, any sample and any rank's batch without communicating)
 * and medians. Header-only; each benchmark keeps its own sample-size distribution.
 * (c_examples/demo.c has its own copy on purpose: it is a consumer project that builds
 * against the installed library alone.)
 */
#ifndef MDL_BENCH_COMMON_H
#define MDL_BENCH_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A "Name:   N kB" field of /proc/self/status or /proc/self/smaps_rollup, in kB (-1 if
   absent). */
static inline long proc_field_kb(const char *file, const char *name)
{
    FILE *f = fopen(file, "r");
    char line[256];
    long kb = -1;
    size_t len = strlen(name);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, name, len) && line[len] == ':')
            kb = atol(line + len + 1);
    if (f)
        fclose(f);
    return kb;
}

/* splitmix64's finaliser: a well-mixed 64-bit hash. */
static inline uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The n bytes of global sample g. */
static inline void fill(uint64_t seed, uint64_t g, uint8_t *p, uint64_t n)
{
    uint64_t key = mix64(g ^ mix64(seed));
    for (uint64_t k = 0; k < n; k += 8) {
        uint64_t w = mix64(key + (k >> 3));
        for (uint64_t j = 0; j < 8 && k + j < n; j++)
            p[k + j] = (uint8_t)(w >> (j * 8));
    }
}

/* Whether p holds the n bytes of global sample g. */
static inline int verify(uint64_t seed, uint64_t g, const uint8_t *p, uint64_t n)
{
    uint64_t key = mix64(g ^ mix64(seed));
    for (uint64_t k = 0; k < n; k += 8) {
        uint64_t w = mix64(key + (k >> 3));
        for (uint64_t j = 0; j < 8 && k + j < n; j++)
            if (p[k + j] != (uint8_t)(w >> (j * 8)))
                return 0;
    }
    return 1;
}

/* Rank r's B ids at step s, uniformly random over `total` samples. */
static inline void batch_ids(uint64_t seed, int r, uint64_t B, uint64_t s, uint64_t total, uint64_t *ids)
{
    uint64_t st = mix64(seed ^ mix64(B * 1000003u + s) ^ ((uint64_t)r << 40));
    for (uint64_t k = 0; k < B; k++) {
        st += 0x9E3779B97F4A7C15ull;
        ids[k] = mix64(st) % total;
    }
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v; NAN when empty. */
static inline double median(double *v, int n)
{
    if (n <= 0)
        return NAN;
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
