/*
 * Prefetch benchmark: how much of the loading time stays exposed when the sampler's
 * batches are fetched ahead (mdl_set_prefetch) while the caller "computes".
 *
 * For each prefetch depth (0, 1, 2) and each simulated compute time per step (0, 0.5x
 * and 2x the fetch time measured without prefetch), an epoch of the built-in sampler
 * runs; each step the caller waits for mdl_next_batch (the exposed loading time), then
 * computes. The compute is a sleep by default (a GPU step: the CPU is free) or a busy
 * loop with --busy (a CPU step: the prefetch thread competes for the core).
 *
 * Reported: the median exposed time per step and its ratio to the fetch time. With
 * compute >= fetch time, prefetch should hide nearly all of it.
 *
 *   mpirun -n 2 prefetch_bench [--samples-per-rank N] [--batch B] [--steps S] [--busy]
 * Needs MPI_THREAD_MULTIPLE (otherwise the library runs without prefetch and says so).
 */
#define _POSIX_C_SOURCE 200809L
#include "mdloader.h"
#include "bench_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void compute(double seconds, int busy)
{
    if (seconds <= 0)
        return;
    if (busy) {
        double end = MPI_Wtime() + seconds;
        while (MPI_Wtime() < end)
            ;
        return;
    }
    struct timespec ts = {(time_t)seconds, (long)((seconds - (double)(time_t)seconds) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Runs one epoch; returns the median over ranks-max of the exposed time per step. */
static double run(mdl_loader *h, uint32_t depth, uint64_t epoch, uint64_t batch, int steps, double compute_s, int busy)
{
    if (mdl_set_prefetch(h, depth) != MDL_OK || mdl_epoch_begin(h, 7, epoch, batch, 1, 1) != MDL_OK) {
        char why[256];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "epoch_begin failed: %s\n", why);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double *exposed = malloc(sizeof(double) * (size_t)steps);
    int n_steps = 0;
    for (int s = 0; s < steps; s++) {
        const uint64_t *ids, *offs;
        const void *data;
        size_t n;
        double t0 = MPI_Wtime();
        mdl_status st = mdl_next_batch(h, &ids, &data, &offs, &n);
        double waited = MPI_Wtime() - t0, slowest;
        if (st != MDL_OK || n == 0)
            break;
        /* The step is as slow as its slowest rank (outside the clock). */
        MPI_Allreduce(&waited, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        exposed[n_steps++] = slowest;
        compute(compute_s, busy);
    }
    double m = median(exposed + 2, n_steps - 2); /* the first steps fill the pipeline */
    free(exposed);
    return m;
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t per_rank = 20000, batch = 256;
    int steps = 60, busy = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--samples-per-rank") && i + 1 < argc)
            per_rank = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--busy"))
            busy = 1;
    }
    /* Samples of 1-3 KB, mean 2 KB. */
    uint64_t *offsets = malloc((per_rank + 1) * sizeof *offsets);
    offsets[0] = 0;
    for (uint64_t i = 0; i < per_rank; i++)
        offsets[i + 1] = offsets[i] + 1024 + (i * 2654435761u + (uint64_t)rank) % 2048;
    uint8_t *data = calloc(offsets[per_rank], 1);
    mdl_loader *h = NULL;
    if (mdl_init(MPI_COMM_WORLD, &h) != MDL_OK || mdl_register_shard(h, data, offsets, per_rank) != MDL_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    if (steps * batch > per_rank)
        steps = (int)(per_rank / batch);

    run(h, 0, 0, batch, steps, 0.0, busy); /* warm-up: first touch, estimator probes */
    double fetch = run(h, 0, 0, batch, steps, 0.0, busy);
    if (rank == 0) {
        printf("prefetch benchmark: %d ranks, batch %llu per rank, mean sample 2 KB, %s compute, thread level %s\n",
               size, (unsigned long long)batch, busy ? "busy-loop" : "sleeping",
               provided == MPI_THREAD_MULTIPLE ? "MULTIPLE" : "below MULTIPLE (no prefetch)");
        printf("fetch time without prefetch: %.1f us per step (median, slowest rank)\n\n", fetch * 1e6);
        printf("| compute / fetch | prefetch | exposed loading (us) | exposed / fetch |\n");
        printf("|----------------:|---------:|---------------------:|----------------:|\n");
    }
    static const double factors[] = {0.0, 0.5, 2.0};
    uint64_t epoch = 1;
    for (int f = 0; f < 3; f++)
        for (uint32_t depth = 0; depth <= 2; depth++) {
            double exposed = run(h, depth, epoch++, batch, steps, factors[f] * fetch, busy);
            if (rank == 0)
                printf("| %15.1f | %8u | %20.1f | %14.0f%% |\n", factors[f], depth, exposed * 1e6,
                       100.0 * exposed / fetch);
        }
    mdl_finalize(&h);
    free(data);
    free(offsets);
    MPI_Finalize();
    return 0;
}
