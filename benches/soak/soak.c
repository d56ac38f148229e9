/*
 * soak: many fetch steps with backend AUTO and random batches, watching each rank's
 * resident memory for growth (a leak per step shows up as steady growth).
 *
 * Every rank registers its shard of the synthetic dataset of tests/c/common.h, then
 * runs --steps fetches of random batches (0 .. --max-batch ids per rank, uniform over
 * all ids, repeats allowed). Every --every steps each rank reads VmRSS from
 * /proc/self/status; rank 0 prints a table row with every rank's value. One step in
 * --verify-every is checked byte by byte. At the end: the growth from the first
 * sample to the last, per rank, in percent; exit status 1 if any rank grew by more
 * than --max-growth percent (default 5), 2 if a fetch failed or a byte was wrong.
 *
 * The first sample is taken after the first --every steps, not before the first
 * fetch: the loader's buffers and the estimator's history legitimately grow to their
 * working size during the first steps.
 *
 * Usage: soak [--steps N] [--every N] [--max-batch B] [--base N] [--seed S]
 *             [--verify-every N] [--max-growth PERCENT]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "mdloader.h"

/* This process's resident set in kB (VmRSS), or 0 if unreadable. */
static uint64_t rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    int rank, size, provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t steps = 1000000, every = 100000, max_batch = 32, base = 2000, seed = 1, verify_every = 1000,
             max_growth = 5;
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        int has = i + 1 < argc;
        if (has && !tc_parse_u64(argv[i + 1], &v)) {
            if (!strcmp(argv[i], "--steps")) { steps = v; i++; continue; }
            if (!strcmp(argv[i], "--every") && v > 0) { every = v; i++; continue; }
            if (!strcmp(argv[i], "--max-batch")) { max_batch = v; i++; continue; }
            if (!strcmp(argv[i], "--base") && v > 0) { base = v; i++; continue; }
            if (!strcmp(argv[i], "--seed")) { seed = v; i++; continue; }
            if (!strcmp(argv[i], "--verify-every") && v > 0) { verify_every = v; i++; continue; }
            if (!strcmp(argv[i], "--max-growth")) { max_growth = v; i++; continue; }
        }
        if (rank == 0)
            fprintf(stderr, "usage: %s [--steps N] [--every N] [--max-batch B] [--base N] [--seed S] "
                            "[--verify-every N] [--max-growth PERCENT]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }

    tc_dataset ds;
    mdl_loader *h = NULL;
    uint8_t *data = NULL;
    uint64_t *off = NULL;
    if (tc_dataset_init(&ds, size, base, seed, 1) != 0 || mdl_init(MPI_COMM_WORLD, &h) != MDL_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    uint64_t n_local = tc_build_shard(&ds, rank, &data, &off);
    if (n_local == UINT64_MAX || mdl_register_shard(h, data, off, n_local) != MDL_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    free(data);
    free(off);
    mdl_set_backend(h, MDL_BACKEND_AUTO);

    uint64_t total = tc_total(&ds);
    uint64_t *ids = malloc(sizeof(uint64_t) * (max_batch + 1));
    uint64_t *offs = malloc(sizeof(uint64_t) * (max_batch + 2));
    uint64_t cap = max_batch * 12000 + 1;
    uint8_t *out = malloc(cap);
    uint64_t n_samples = steps / every + 1;
    uint64_t *samples = calloc(n_samples * (uint64_t)size, sizeof(uint64_t));
    uint64_t *mine = calloc(n_samples, sizeof(uint64_t));
    if (!ids || !offs || !out || !samples || !mine)
        MPI_Abort(MPI_COMM_WORLD, 2);
    tc_rng rng = tc_rng_make(seed, (uint64_t)rank + 1);
    int bad = 0;
    uint64_t taken = 0;
    uint64_t rss0 = rss_kb();
    if (rank == 0) {
        printf("soak: %d ranks, %llu steps, batches of 0..%llu ids, backend AUTO, %llu samples in all, RSS every %llu steps\n",
               size, (unsigned long long)steps, (unsigned long long)max_batch, (unsigned long long)total,
               (unsigned long long)every);
        printf("%10s", "step");
        for (int r = 0; r < size; r++)
            printf("  rank%d_rss_kB", r);
        printf("\n");
        fflush(stdout);
    }
    double t0 = MPI_Wtime();
    for (uint64_t s = 1; s <= steps && !bad; s++) {
        size_t n = (size_t)tc_below(&rng, max_batch + 1);
        for (size_t i = 0; i < n; i++)
            ids[i] = tc_below(&rng, total);
        mdl_status st = mdl_fetch_batch(h, ids, n, out, cap, offs);
        if (st != MDL_OK) {
            char msg[512] = "";
            mdl_last_error(msg, sizeof msg);
            fprintf(stderr, "[rank %d] step %llu: mdl_fetch_batch returned %d: %s\n", rank, (unsigned long long)s,
                    (int)st, msg);
            bad = 1;
        } else if (s % verify_every == 0) {
            for (size_t k = 0; k < n; k++)
                if (tc_verify_sample(&ds, ids[k], out + offs[k], offs[k + 1] - offs[k]) >= 0) {
                    fprintf(stderr, "[rank %d] step %llu: sample %zu (id %llu) wrong\n", rank, (unsigned long long)s,
                            k, (unsigned long long)ids[k]);
                    bad = 1;
                    break;
                }
        }
        if (s % every == 0) {
            int any_bad = 0;
            MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            bad = any_bad;
            uint64_t kb = rss_kb();
            mine[taken] = kb;
            MPI_Gather(&kb, 1, MPI_UINT64_T, samples + taken * (uint64_t)size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                printf("%10llu", (unsigned long long)s);
                for (int r = 0; r < size; r++)
                    printf("  %12llu", (unsigned long long)samples[taken * (uint64_t)size + (uint64_t)r]);
                printf("\n");
                fflush(stdout);
            }
            taken++;
        }
    }
    double secs = MPI_Wtime() - t0;
    int failed_growth = 0;
    if (rank == 0) {
        printf("soak: %.1f s, %.1f us per step; RSS before the first fetch: rank 0 %llu kB\n", secs,
               steps ? secs / (double)steps * 1e6 : 0.0, (unsigned long long)rss0);
        if (taken >= 2) {
            for (int r = 0; r < size; r++) {
                double a = (double)samples[(uint64_t)r], b = (double)samples[(taken - 1) * (uint64_t)size + (uint64_t)r];
                double growth = a > 0 ? (b - a) / a * 100.0 : 0.0;
                printf("soak: rank %d RSS %.0f kB -> %.0f kB from step %llu to %llu: growth %+.2f%%\n", r, a, b,
                       (unsigned long long)every, (unsigned long long)(taken * every), growth);
                if (growth > (double)max_growth)
                    failed_growth = 1;
            }
        } else {
            printf("soak: fewer than 2 samples (steps < 2 * every): no growth measured\n");
        }
        printf("soak: %s\n", bad ? "FAIL (a fetch failed or returned wrong bytes)"
                             : failed_growth ? "FAIL (RSS grew by more than the limit)" : "PASS");
        fflush(stdout);
    }
    MPI_Bcast(&failed_growth, 1, MPI_INT, 0, MPI_COMM_WORLD);
    mdl_finalize(&h);
    tc_dataset_free(&ds);
    free(ids);
    free(offs);
    free(out);
    free(samples);
    free(mine);
    MPI_Finalize();
    return bad ? 2 : failed_growth ? 1 : 0;
}
