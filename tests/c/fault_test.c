/*
 * One job's life under an injected allocation failure (tests/run_fault_tests.sh):
 * mdl_init, mdl_register_shard, a few mdl_fetch_batch steps, a sampler epoch with
 * prefetch, mdl_finalize, every fetched byte checked. The library is built with the
 * `fault-injection` feature and one rank runs with MDL_FAULT_ALLOC_AT=k, which makes
 * its k-th fallible allocation fail.
 *
 * What must hold whatever k is: no rank hangs or aborts, and either every call
 * succeeds with correct bytes on every rank, or the first call that fails fails on
 * every rank (the same call). Each rank prints one line for the runner:
 *   RESULT ok                       every call succeeded, every byte right
 *   RESULT error <call> <status>    the first call that failed (a number: see CALLS)
 *   RESULT wrong <call>             a call succeeded with wrong bytes
 * to standard output and, with MDL_FAULT_RESULTS=<prefix>, to the file <prefix>.<rank>
 * (a launcher's merged output can cut one rank's line into another's), then finalizes
 * (collectively, after a failure as after success).
 *
 * Usage: fault_test <onesided|collective|auto>
 */
#include "mdloader.h"
#include "common.h"
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FETCH_STEPS 6
#define BATCH 24

static int g_rank, g_size;

/* The calls in the order the job makes them; a failure is reported by its index. */
enum { CALL_INIT, CALL_BACKEND, CALL_REGISTER, CALL_FETCH, CALL_PREFETCH, CALL_EPOCH, CALL_NEXT, CALL_FINALIZE };

/* This rank's RESULT line (see above). */
static void result(const char *fmt, ...)
{
    char line[128];
    va_list args;
    va_start(args, fmt);
    vsnprintf(line, sizeof line, fmt, args);
    va_end(args);
    printf("RESULT %s\n", line);
    const char *prefix = getenv("MDL_FAULT_RESULTS");
    if (prefix == NULL)
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", prefix, g_rank);
    FILE *f = fopen(path, "w");
    if (f != NULL) {
        fprintf(f, "RESULT %s\n", line);
        fclose(f);
    }
}

static int report_error(int call, mdl_status st)
{
    char msg[256];
    mdl_last_error(msg, sizeof msg);
    result("error %d %d", call, (int)st);
    fprintf(stderr, "rank %d: call %d failed: %s (%s)\n", g_rank, call, mdl_status_string(st), msg);
    return 1;
}

static int check_batch(const tc_dataset *d, const uint64_t *ids, const void *data, const uint64_t *offs, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t len = offs[k + 1] - offs[k];
        if (len != tc_size_of(d, ids[k]) || tc_verify_sample(d, ids[k], (const uint8_t *)data + offs[k], len) >= 0)
            return 0;
    }
    return 1;
}

/* Runs the job's calls up to the first failure; returns the RESULT printed. */
static int run(mdl_loader *h, const tc_dataset *d, mdl_backend backend)
{
    mdl_status st = mdl_set_backend(h, backend);
    if (st != MDL_OK)
        return report_error(CALL_BACKEND, st);
    uint8_t *data = NULL;
    uint64_t *offsets = NULL;
    uint64_t n_local = tc_build_shard(d, g_rank, &data, &offsets);
    if (n_local == UINT64_MAX)
        MPI_Abort(MPI_COMM_WORLD, 2); /* the test's own memory, not the library's */
    st = mdl_register_shard(h, data, offsets, n_local);
    free(data);
    free(offsets);
    if (st != MDL_OK)
        return report_error(CALL_REGISTER, st);

    uint64_t total = tc_total(d), ids[BATCH], out_offsets[BATCH + 1];
    static uint8_t out[BATCH * 12000];
    tc_rng rng = tc_rng_make(7, (uint64_t)g_rank);
    for (int step = 0; step < FETCH_STEPS; step++) {
        size_t n = 1 + (size_t)tc_below(&rng, BATCH);
        for (size_t k = 0; k < n; k++)
            ids[k] = tc_below(&rng, total);
        st = mdl_fetch_batch(h, ids, n, out, sizeof out, out_offsets);
        if (st != MDL_OK)
            return report_error(CALL_FETCH, st);
        if (!check_batch(d, ids, out, out_offsets, n)) {
            result("wrong %d", CALL_FETCH);
            return 1;
        }
    }

    st = mdl_set_prefetch(h, 2);
    if (st != MDL_OK)
        return report_error(CALL_PREFETCH, st);
    st = mdl_epoch_begin(h, 3, 0, BATCH, 1, 0);
    if (st != MDL_OK)
        return report_error(CALL_EPOCH, st);
    for (;;) {
        const uint64_t *bids, *boffs;
        const void *bdata;
        size_t n;
        st = mdl_next_batch(h, &bids, &bdata, &boffs, &n);
        if (st != MDL_OK)
            return report_error(CALL_NEXT, st);
        if (n == 0)
            break;
        if (!check_batch(d, bids, bdata, boffs, n)) {
            result("wrong %d", CALL_NEXT);
            return 1;
        }
    }
    result("ok");
    return 0;
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mdl_backend backend = MDL_BACKEND_AUTO;
    if (argc > 1 && strcmp(argv[1], "onesided") == 0)
        backend = MDL_BACKEND_ONESIDED;
    else if (argc > 1 && strcmp(argv[1], "collective") == 0)
        backend = MDL_BACKEND_COLLECTIVE;
    tc_dataset d;
    if (tc_dataset_init(&d, g_size, 60, 11, 1) != 0)
        MPI_Abort(MPI_COMM_WORLD, 2);

    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (st != MDL_OK)
        report_error(CALL_INIT, st);
    else
        run(h, &d, backend);
    fflush(stdout);
    st = mdl_finalize(&h);
    if (st != MDL_OK)
        fprintf(stderr, "rank %d: mdl_finalize: %s\n", g_rank, mdl_status_string(st));
    tc_dataset_free(&d);
    MPI_Finalize();
    return 0;
}
