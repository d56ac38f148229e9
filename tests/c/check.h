/*
 * A check that all ranks agree on: fails everywhere if it fails on any rank, and is
 * reported once, on rank 0, as "PASS what" or "FAIL what". For the C tests that print
 * one line per check (sampler_test, estimator_test).
 */
#ifndef MDL_TEST_CHECK_H
#define MDL_TEST_CHECK_H
#include <mpi.h>
#include <stdio.h>

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
#endif
