/*
 * A check that all ranks agree on: fails everywhere if it fails on any rank, and is
 * reported once, on rank 0, as "PASS what" or "FAIL what". For the C tests that print
 * one line per check (sampler_test, estimator_test).
 */
#ifndef MDL_TEST_CHECK_H
#define MDL_TEST_CHECK_H
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int g_rank, g_size, g_failed;

static void check(int ok, const char *what)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all)
        g_failed++;
    if (g_rank == 0)
        printf("%s %s\n", all ? "PASS" : "FAIL", what);
    fflush(stdout);
}

/* Whether v is the same on every rank. */
static inline int same_on_all_ranks(double v)
{
    double lo, hi;
    MPI_Allreduce(&v, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}
/* This rank's shard of samples lo .. lo + n - 1 (global ids), sample g taking
   size_of(g) bytes, byte k being byte_of(g, k): offsets (n + 1) and data, malloc'd. */
static inline void build_shard(uint64_t lo, uint64_t n, uint64_t (*size_of)(uint64_t),
                               uint8_t (*byte_of)(uint64_t, uint64_t), uint64_t **offsets, uint8_t **data)
{
    uint64_t *o = malloc((n + 1) * sizeof *o);
    o[0] = 0;
    for (uint64_t i = 0; i < n; i++)
        o[i + 1] = o[i] + size_of(lo + i);
    uint8_t *d = malloc(o[n] + 1);
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t k = 0; k < size_of(lo + i); k++)
            d[o[i] + k] = byte_of(lo + i, k);
    *offsets = o;
    *data = d;
}
#endif
