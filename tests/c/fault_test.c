/*
 * One job's life under an injected allocation failure (tests/run_fault_tests.sh):
 * mdl_init, mdl_register_shard, a few mdl_fetch_batch steps, a sampler epoch with
 * prefetch, mdl_finalize, every fetched byte checked. The library is built with the
 * `test-hooks` feature and one rank runs with MDL_FAULT_ALLOC_AT=k, which makes
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
 * Usage: fault_test <onesided|collective|auto> [--fold]
 *
 * --fold (run without the request matrix, MDL_MATRIX_MAX_RANKS=0): the test sets
 * MDL_MAX_MESSAGE_BYTES itself, the same on every rank, so that one more fetch step
 * exceeds the per-rank budget (MDL_MAX_MESSAGE_BYTES / P) on every rank, fits one round
 * (the engine folds it into one exchange, which "exchange_rounds" must show), and asks
 * each rank for one sample over the budget, which goes by a get.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
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
enum { CALL_INIT, CALL_BACKEND, CALL_REGISTER, CALL_FETCH, CALL_FOLD, CALL_PREFETCH, CALL_EPOCH, CALL_NEXT, CALL_FINALIZE };

/* The --fold step: rank r asks owner_of_fold(r) for its largest sample and for small
   ones (at most half the budget each) until they exceed the budget. */
enum { FOLD_MAX = 64 };
typedef struct fold_step {
    uint64_t ids[FOLD_MAX];
    size_t n;
} fold_step;

static int owner_of_fold(const tc_dataset *d, int r)
{
    return r != 0 ? 0 : d->nranks - 1;
}

static uint64_t largest_of(const tc_dataset *d, int owner, uint64_t *id)
{
    uint64_t most = 0;
    for (uint64_t g = d->first[owner]; g < d->first[owner + 1]; g++)
        if (tc_size_of(d, g) > most)
            most = tc_size_of(d, g), *id = g;
    return most;
}

/* The message limit for --fold: P times a budget just under half the smaller of the
   two owners' largest samples. A rank's remote bytes (its small samples, at most 1.5
   budgets, and its large one, over 2) then exceed the limit (3 budgets at 3 ranks, the
   runner's job size; not at more ranks) while its exchanged bytes fit: the receive
   buffer must be reserved for the latter. */
static uint64_t fold_limit(const tc_dataset *d)
{
    uint64_t id, a = largest_of(d, 0, &id), b = largest_of(d, d->nranks - 1, &id);
    return ((a < b ? a : b) - 1) / 2 * (uint64_t)d->nranks;
}

static void fold_batch(const tc_dataset *d, uint64_t limit, fold_step *f)
{
    int owner = owner_of_fold(d, g_rank);
    uint64_t budget = limit / (uint64_t)d->nranks, bytes = 0;
    largest_of(d, owner, &f->ids[0]);
    f->n = 1;
    for (uint64_t g = d->first[owner]; g < d->first[owner + 1] && bytes <= budget && f->n < FOLD_MAX; g++) {
        uint64_t len = tc_size_of(d, g);
        if (len > 0 && len <= budget / 2)
            f->ids[f->n++] = g, bytes += len;
    }
}

static double exchange_rounds(const mdl_loader *h)
{
    char json[8192];
    if (mdl_stats_json(h, json, sizeof json) >= sizeof json)
        return -1;
    return tc_json_number(json, NULL, "exchange_rounds");
}

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
static int run(mdl_loader *h, const tc_dataset *d, mdl_backend backend, uint64_t fold)
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
    /* First, while the exchange's buffers are new (they only grow). */
    if (fold) {
        fold_step f;
        fold_batch(d, fold, &f);
        double before = exchange_rounds(h);
        st = mdl_fetch_batch(h, f.ids, f.n, out, sizeof out, out_offsets);
        if (st != MDL_OK)
            return report_error(CALL_FOLD, st);
        if (!check_batch(d, f.ids, out, out_offsets, f.n) || exchange_rounds(h) - before != 1) {
            result("wrong %d", CALL_FOLD);
            return 1;
        }
    }

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
    uint64_t fold = 0;
    if (argc > 2 && strcmp(argv[2], "--fold") == 0) {
        if (g_size != 3) {
            fprintf(stderr, "fault_test --fold needs 3 ranks\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        char limit[32];
        fold = fold_limit(&d);
        snprintf(limit, sizeof limit, "%llu", (unsigned long long)fold);
        setenv("MDL_MAX_MESSAGE_BYTES", limit, 1);
    }

    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (st != MDL_OK)
        report_error(CALL_INIT, st);
    else
        run(h, &d, backend, fold);
    fflush(stdout);
    st = mdl_finalize(&h);
    if (st != MDL_OK)
        fprintf(stderr, "rank %d: mdl_finalize: %s\n", g_rank, mdl_status_string(st));
    tc_dataset_free(&d);
    MPI_Finalize();
    return 0;
}
