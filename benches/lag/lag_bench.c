/*
 * Sampler steps agreed ahead against steps that wait for their agreement, side by
 * side in one run, with AUTO and both engines forced (the oracle).
 *
 * Eight loaders over the same data, built with different MDL_AGREEMENT_LAG and backends
 * (the variable is read at mdl_init): AUTO with lag 0, AUTO with lag L, and the
 * one-sided and collective engines forced, with lag L; the same ids as a user's
 * sampler would hand them over (AUTO): the whole epoch given to mdl_epoch_begin_ids
 * (lag L), or one blocking mdl_fetch_batch per step; and each forced engine a second
 * time, whose ratio to the first is the noise floor of any comparison between two
 * loaders on that engine here (on MPICH the collective engine's two loaders differed
 * by up to 1.1 where the one-sided engine's did by 1.01). Their epochs are interleaved (loader by loader, round after round,
 * in an order shuffled per round), so that every loader sees the same machine. Between two
 * batches each rank "computes" for a random time of mean C us and spread J us (a
 * training step whose length varies across ranks): this is where waiting for the
 * slowest rank costs, and what agreeing ahead avoids.
 *
 * Reported per (batch size, loader): the median time the caller waits in
 * mdl_next_batch (the slowest rank's, per step), and AUTO's engine steps. AUTO "right"
 * means within 10% of the faster forced engine, as in benches/grid. A last line per
 * batch size on stderr: that ratio, and each engine's two forced loaders' ratio.
 *
 *   mpicc -O2 -Iinclude -Ibenches benches/lag/lag_bench.c -o lag_bench \
 *       -Ltarget/openmpi/release -lmdloader -Wl,-rpath,$PWD/target/openmpi/release
 *   mpirun -n 2 ./lag_bench [--lag 2] [--compute-us 200] [--jitter-us 100] [--rounds 15] [--prefetch 0]
 *                           [--compute busy|sleep]
 *
 * CSV on rank 0's stdout: batch,loader,wait_us_median,onesided_steps,collective_steps,
 * probe_excess_ms (AUTO's probes' time over the preferred engine's prediction, slowest
 * rank), engine_ms (every engine step's slowest-rank time: the library's fetch time
 * the probe budget is a fraction of).
 */
#define _POSIX_C_SOURCE 200809L
#include "mdloader.h"
#include "bench_common.h"
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum { LOADERS = 8, AUTO_L = 1, ONESIDED = 2, COLLECTIVE = 3, GIVEN = 4, FETCH = 5, ONESIDED_AGAIN = 6, COLLECTIVE_AGAIN = 7 };
static const char *NAMES[LOADERS] = {"auto-lag0",  "auto-lagL",      "onesided-lagL",      "collective-lagL",
                                     "given-lagL", "fetch-per-step", "onesided-lagL-again", "collective-lagL-again"};

static const uint64_t PER_RANK = 8192;

/* How far apart two medians are: the larger over the smaller. */
static double apart(double a, double b) { return a > b ? a / b : b / a; }
static uint64_t size_of(uint64_t g) { return 1024 + mix64(g) % 2048; } /* 1-3 KB, mean 2 KB */

static void busy_wait_us(double us)
{
    double until = MPI_Wtime() + us * 1e-6;
    while (MPI_Wtime() < until) {
    }
}

/* A training step's compute: on this rank's core (--compute busy, the default), or
   elsewhere (--compute sleep: an accelerator's kernel while the host thread sleeps,
   which leaves the core to the loader's threads; with more ranks than cores the busy
   loops measure the scheduler more than the loader). */
static void compute_for_us(double us, int sleeping)
{
    if (!sleeping) {
        busy_wait_us(us);
        return;
    }
    struct timespec t = {.tv_sec = 0, .tv_nsec = (long)(us * 1e3)};
    nanosleep(&t, NULL);
}

/* The loaders' order in one round: a shuffle of its own (seeded by the round alone, so
   the same on every rank, whose collective calls must match), so that no loader always
   runs first after the batch size changed, or right after the same neighbour. */
static void shuffled_loaders(uint64_t seed, int *order)
{
    for (int l = 0; l < LOADERS; l++)
        order[l] = l;
    uint64_t state = mix64(seed + 0x5eed);
    for (int l = LOADERS - 1; l > 0; l--) {
        state = mix64(state);
        int k = (int)(state % (uint64_t)(l + 1)), t = order[l];
        order[l] = order[k], order[k] = t;
    }
}

/* The engines' step counts from mdl_stats_json: the first "steps" after each key. */
static uint64_t steps_of(const char *json, const char *engine)
{
    char key[32];
    snprintf(key, sizeof key, "\"%s\": {\"steps\": ", engine);
    const char *at = strstr(json, key);
    return at ? strtoull(at + strlen(key), NULL, 10) : 0;
}

/* The number after `field` in the object that follows `object` in mdl_stats_json. */
static double number_in(const char *json, const char *object, const char *field)
{
    const char *at = strstr(json, object);
    at = at ? strstr(at, field) : NULL;
    return at ? strtod(at + strlen(field), NULL) : 0.0;
}

/* What AUTO's probes cost over the preferred engine, and every engine step's time
   (slowest rank, as the estimator learned them), seconds so far. */
static void probe_cost(mdl_loader *h, double *excess, double *engines)
{
    char json[4096];
    mdl_stats_json(h, json, sizeof json);
    *excess = number_in(json, "\"probe_cost\"", "\"excess_seconds\": ");
    *engines = number_in(json, "\"onesided\": {", "\"measured_slowest_seconds\": ") +
               number_in(json, "\"collective\": {", "\"measured_slowest_seconds\": ");
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* 15 rounds: with 5, two loaders forcing the same engine differed by up to 1.23
       (benches/lag/README.md, "The noise floor"). */
    long lag = 2, rounds = 15, prefetch = 0;
    double compute_us = 200, jitter_us = 100;
    int sleeping = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--lag"))
            lag = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--compute-us"))
            compute_us = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--jitter-us"))
            jitter_us = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds"))
            rounds = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--prefetch"))
            prefetch = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--compute"))
            sleeping = !strcmp(argv[i + 1], "sleep");
    }

    uint64_t first = PER_RANK * (uint64_t)rank;
    uint64_t *offsets = malloc((PER_RANK + 1) * sizeof *offsets);
    offsets[0] = 0;
    for (uint64_t i = 0; i < PER_RANK; i++)
        offsets[i + 1] = offsets[i] + size_of(first + i);
    uint8_t *data = malloc(offsets[PER_RANK]);
    for (uint64_t i = 0; i < PER_RANK; i++)
        fill(7, first + i, data + offsets[i], size_of(first + i));

    mdl_loader *h[LOADERS];
    static const mdl_backend backends[LOADERS] = {MDL_BACKEND_AUTO, MDL_BACKEND_AUTO, MDL_BACKEND_ONESIDED,
                                                  MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO, MDL_BACKEND_AUTO,
                                                  MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE};
    /* The engines are what is measured: on one machine the default node-local path would
       copy every sample and run no engine. */
    setenv("MDL_NODE_LOCAL", "off", 1);
    for (int l = 0; l < LOADERS; l++) {
        char value[16];
        snprintf(value, sizeof value, "%ld", l == 0 ? 0 : lag);
        setenv("MDL_AGREEMENT_LAG", value, 1);
        if (mdl_init(MPI_COMM_WORLD, &h[l]) != MDL_OK || mdl_register_shard(h[l], data, offsets, PER_RANK) != MDL_OK ||
            mdl_set_backend(h[l], backends[l]) != MDL_OK || mdl_set_prefetch(h[l], (uint32_t)prefetch) != MDL_OK) {
            fprintf(stderr, "rank %d: setting up loader %s failed\n", rank, NAMES[l]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    if (rank == 0) {
        fprintf(stderr, "lag_bench: %d ranks, lag %ld, prefetch %ld, compute %.0f +- %.0f us (%s), %ld rounds\n", size,
                lag, prefetch, compute_us, jitter_us, sleeping ? "sleep" : "busy", rounds);
        printf("batch,loader,wait_us_median,onesided_steps,collective_steps,probe_excess_ms,engine_ms\n");
    }

    static const uint64_t batches[] = {16, 64, 256};
    uint64_t rng = mix64((uint64_t)rank + 99);
    int bad = 0;
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++) {
        uint64_t B = batches[bi];
        uint64_t steps_per_epoch = PER_RANK / B; /* drop_last: the same per rank */
        long max = rounds * (long)steps_per_epoch;
        double *waits[LOADERS];
        int n[LOADERS] = {0};
        uint64_t before[LOADERS][2];
        double cost_before[LOADERS][2];
        for (int l = 0; l < LOADERS; l++) {
            waits[l] = malloc((size_t)max * sizeof(double));
            char json[4096];
            mdl_stats_json(h[l], json, sizeof json);
            before[l][0] = steps_of(json, "onesided");
            before[l][1] = steps_of(json, "collective");
            probe_cost(h[l], &cost_before[l][0], &cost_before[l][1]);
        }
        /* The built-in sampler's ids, as a user's sampler would hand them over. */
        uint64_t *order = malloc(PER_RANK * sizeof *order), *bounds = malloc((steps_per_epoch + 1) * sizeof *bounds);
        uint64_t *fetched_offsets = malloc((B + 1) * sizeof *fetched_offsets);
        uint8_t *fetched = malloc(B * 3072);
        for (long r = 0; r < rounds; r++) {
            int order_of_loaders[LOADERS];
            shuffled_loaders((uint64_t)bi * 1000 + (uint64_t)r, order_of_loaders);
            for (int k = 0; k < LOADERS; k++) {
                const int l = order_of_loaders[k];
                if (l == GIVEN || l == FETCH) {
                    for (uint64_t s = 0; s <= steps_per_epoch; s++)
                        bounds[s] = s * B;
                    for (uint64_t s = 0; s < steps_per_epoch; s++) {
                        size_t m;
                        mdl_epoch_ids(PER_RANK * (uint64_t)size, (uint64_t)size, (uint64_t)rank, 11, (uint64_t)r, B, 1, 1,
                                      s, order + s * B, B, &m);
                    }
                }
                if (l == GIVEN)
                    mdl_epoch_begin_ids(h[l], order, bounds, steps_per_epoch);
                else if (l != FETCH)
                    mdl_epoch_begin(h[l], 11, (uint64_t)r, B, 1, 1);
                for (uint64_t s = 0;; s++) {
                    const uint64_t *ids, *offs;
                    const void *out;
                    size_t got;
                    double t0 = MPI_Wtime();
                    mdl_status st;
                    if (l == FETCH) {
                        got = s < steps_per_epoch ? B : 0;
                        ids = order + s * B;
                        st = got ? mdl_fetch_batch(h[l], ids, got, fetched, B * 3072, fetched_offsets) : MDL_OK;
                        out = fetched;
                        offs = fetched_offsets;
                    } else {
                        st = mdl_next_batch(h[l], &ids, &out, &offs, &got);
                    }
                    double waited = MPI_Wtime() - t0;
                    if (st != MDL_OK) {
                        fprintf(stderr, "rank %d: %s: %s\n", rank, NAMES[l], mdl_status_string(st));
                        MPI_Abort(MPI_COMM_WORLD, 1);
                    }
                    if (got == 0)
                        break;
                    for (size_t k = 0; k < got; k++)
                        bad += !verify(7, ids[k], (const uint8_t *)out + offs[k], offs[k + 1] - offs[k]);
                    waits[l][n[l]++] = waited;
                    rng = mix64(rng);
                    compute_for_us(compute_us + jitter_us * ((double)(rng % 2001) / 1000.0 - 1.0), sleeping);
                }
            }
        }
        free(order);
        free(bounds);
        free(fetched_offsets);
        free(fetched);
        double medians[LOADERS];
        for (int l = 0; l < LOADERS; l++) {
            /* The slowest rank's wait, per step, then the median over steps. */
            double *slowest = malloc((size_t)n[l] * sizeof(double));
            MPI_Allreduce(waits[l], slowest, n[l], MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            char json[4096];
            mdl_stats_json(h[l], json, sizeof json);
            uint64_t os = steps_of(json, "onesided") - before[l][0];
            uint64_t co = steps_of(json, "collective") - before[l][1];
            double med = median(slowest, n[l]) * 1e6;
            double excess, engines;
            probe_cost(h[l], &excess, &engines);
            excess = (excess - cost_before[l][0]) * 1e3;
            engines = (engines - cost_before[l][1]) * 1e3;
            if (rank == 0) {
                printf("%llu,%s,%.1f,%llu,%llu,%.3f,%.3f\n", (unsigned long long)B, NAMES[l], med, (unsigned long long)os,
                       (unsigned long long)co, excess, engines);
                fprintf(stderr,
                        "B %4llu %-16s wait %8.1f us  (one-sided %llu, collective %llu steps; probes +%.2f ms of %.1f ms)\n",
                        (unsigned long long)B, NAMES[l], med, (unsigned long long)os, (unsigned long long)co, excess,
                        engines);
            }
            medians[l] = med;
            free(slowest);
            free(waits[l]);
        }
        if (rank == 0) {
            double best = medians[ONESIDED] < medians[COLLECTIVE] ? medians[ONESIDED] : medians[COLLECTIVE];
            fprintf(stderr,
                    "B %4llu AUTO / the better forced engine %.2f; the same forced engine twice: one-sided %.2f, "
                    "collective %.2f\n",
                    (unsigned long long)B, medians[AUTO_L] / best, apart(medians[ONESIDED], medians[ONESIDED_AGAIN]),
                    apart(medians[COLLECTIVE], medians[COLLECTIVE_AGAIN]));
        }
    }
    int all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all_bad)
        fprintf(stderr, "lag_bench: %d samples with wrong bytes\n", all_bad);
    for (int l = 0; l < LOADERS; l++)
        mdl_finalize(&h[l]);
    free(data);
    free(offsets);
    MPI_Finalize();
    return all_bad != 0;
}
