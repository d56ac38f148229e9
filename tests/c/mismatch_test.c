/*
 * mismatch_test: ranks that make different collective calls on one loader are told so,
 * naming the calls, on every rank (MDL_ERR_CALL_MISMATCH), instead of reading each
 * other's values or failing with an MPI error; nothing is done, so the loader works
 * on (the ranks fetch, then finalize together). And a rank whose peers never come (they wait in a collective of their
 * own) is ended by the watchdog instead of hanging.
 *
 * Cases (--case NAME; default: every "pair" case in turn, each on a loader of its own):
 *   fetch-finalize   rank 0 fetches once more; the others finalize (a loop left early)
 *   stats-fetch      rank 0 asks for the job's statistics; the others fetch
 *   epoch-fetch      rank 0 begins a sampler epoch; the others fetch
 *   epoch-fetch-after-an-epoch  the same after an epoch taken whole (rank 0 counting
 *                    its batches, the others asking for the end)
 *   step-begin       rank 0 leaves a sampler epoch early and begins the next one; the
 *                    others take their next step (see step_begin)
 *   fetch-allreduce  rank 0 fetches once more; the others wait in an MPI_Allreduce of
 *                    their own on MPI_COMM_WORLD (run with a short MDL_WATCHDOG or
 *                    MDL_TIMEOUT: the job must end, with a message naming the call; the
 *                    runner checks that the job ended and what it said)
 *
 * Each pair case prints "PASS name" / "FAIL name" on rank 0 (agreed over all ranks);
 * why a rank failed goes to stderr. A watchdog of the test's own (SIGALRM) turns a hang
 * into "TIMEOUT in case X" and exit code 3.
 *
 * Usage: mismatch_test [--case NAME] [--base N]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "alarm.h"
#include "common.h"
#include "mdloader.h"

static int g_rank, g_size, g_passed, g_failed;
static uint64_t g_base = 200;

/* A registered loader over the test dataset. */
static mdl_loader *open_loader(tc_dataset *d)
{
    mdl_loader *h = NULL;
    uint8_t *data = NULL;
    uint64_t *offsets = NULL;
    uint64_t n = tc_build_shard(d, g_rank, &data, &offsets);
    if (mdl_init(MPI_COMM_WORLD, &h) != MDL_OK || mdl_register_shard(h, data, offsets, n) != MDL_OK) {
        char why[512];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "[rank %d] setting up the loader failed: %s\n", g_rank, why);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    free(data);
    free(offsets);
    return h;
}

/* One fetch of a few samples spread over the ranks, every byte verified when it
   succeeds. */
static mdl_status fetch_some(mdl_loader *h, tc_dataset *d)
{
    uint64_t ids[4];
    uint64_t total = tc_total(d);
    for (int k = 0; k < 4; k++)
        ids[k] = (uint64_t)(g_rank + 1) * 7919u * (uint64_t)(k + 1) % total;
    uint64_t out_offsets[5];
    static uint8_t out[1 << 20];
    mdl_status got = mdl_fetch_batch(h, ids, 4, out, sizeof out, out_offsets);
    for (int k = 0; got == MDL_OK && k < 4; k++) {
        uint64_t len = out_offsets[k + 1] - out_offsets[k];
        if (tc_verify_sample(d, ids[k], out + out_offsets[k], len) >= 0) {
            fprintf(stderr, "[rank %d] sample %llu differs\n", g_rank, (unsigned long long)ids[k]);
            return MDL_ERR_PANIC; /* any code the caller does not expect */
        }
    }
    return got;
}

/* This rank's verdict: the status and that the message names both calls. */
static int judged(const char *what, mdl_status got, const char *mine, const char *theirs)
{
    char why[1024];
    mdl_last_error(why, sizeof why);
    int ok = got == MDL_ERR_CALL_MISMATCH && strstr(why, mine) && strstr(why, theirs) &&
             strstr(why, "different calls");
    if (!ok)
        fprintf(stderr, "[rank %d] %s: got %s (%s), expected MDL_ERR_CALL_MISMATCH naming %s and %s\n", g_rank,
                what, mdl_status_string(got), why, mine, theirs);
    return ok;
}

static void report(const char *name, int ok)
{
    int all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("%s %s\n", all ? "PASS" : "FAIL", name);
    if (all)
        g_passed++;
    else
        g_failed++;
}

/* Rank 0 makes `odd`, the others `usual`: every rank must be told, with nothing done,
   so that the loader works on: every rank fetches (and verifies), then finalizes. */
typedef mdl_status (*call_fn)(mdl_loader **h, tc_dataset *d);

static mdl_status do_fetch(mdl_loader **h, tc_dataset *d) { return fetch_some(*h, d); }
static mdl_status do_finalize(mdl_loader **h, tc_dataset *d)
{
    (void)d;
    return mdl_finalize(h);
}
static mdl_status do_stats(mdl_loader **h, tc_dataset *d)
{
    (void)d;
    char buf[4096];
    size_t needed = 0;
    return mdl_stats_json_job(*h, buf, sizeof buf, &needed);
}
static mdl_status do_epoch(mdl_loader **h, tc_dataset *d)
{
    (void)d;
    return mdl_epoch_begin(*h, 1, 0, 8, 1, 0);
}

/* Every rank takes a whole sampler epoch, rank 0 counting its batches instead of
   asking for the end (n == 0), as a loop over a known length does. */
static int whole_epoch(mdl_loader *h, tc_dataset *d, uint64_t epoch)
{
    const uint64_t batch = 4, ranks = (uint64_t)g_size;
    uint64_t steps = ((tc_total(d) + ranks - 1) / ranks + batch - 1) / batch;
    const uint64_t *ids;
    const void *data;
    const uint64_t *offsets;
    size_t n;
    int ok = mdl_epoch_begin(h, 1, epoch, batch, 1, 0) == MDL_OK;
    for (uint64_t s = 0; ok && s < steps; s++)
        ok &= mdl_next_batch(h, &ids, &data, &offsets, &n) == MDL_OK && n > 0;
    if (ok && g_rank != 0)
        ok &= mdl_next_batch(h, &ids, &data, &offsets, &n) == MDL_OK && n == 0;
    return ok;
}

static void pair_case(const char *name, tc_dataset *d, int after_an_epoch, call_fn odd, const char *odd_name,
                      call_fn usual, const char *usual_name)
{
    tc_alarm_case = name;
    alarm(120);
    mdl_loader *h = open_loader(d);
    /* A few healthy steps first: the mismatch meets a loader in use; with
       after_an_epoch, an epoch taken whole too (a begin that meets another call then
       has an ended epoch to resume, which it must not, the others being elsewhere). */
    int ok = 1;
    for (int s = 0; s < 3; s++)
        ok &= fetch_some(h, d) == MDL_OK;
    if (after_an_epoch) {
        ok &= whole_epoch(h, d, 0);
        /* Rank 0 did not ask for the end: its fetch must not be refused alone. */
        ok &= fetch_some(h, d) == MDL_OK;
    }
    mdl_status got = g_rank == 0 ? odd(&h, d) : usual(&h, d);
    const char *mine = g_rank == 0 ? odd_name : usual_name;
    const char *theirs = g_rank == 0 ? usual_name : odd_name;
    ok &= judged(name, got, mine, theirs);
    if (h == NULL) {
        fprintf(stderr, "[rank %d] %s: the handle was freed by a finalize that did not happen\n", g_rank, name);
        ok = 0;
    } else {
        mdl_status again = fetch_some(h, d);
        if (again != MDL_OK) {
            fprintf(stderr, "[rank %d] %s: a fetch after the mismatch gave %s\n", g_rank, name,
                    mdl_status_string(again));
            ok = 0;
        }
        if (mdl_finalize(&h) != MDL_OK || h != NULL) {
            fprintf(stderr, "[rank %d] %s: finalize after the mismatch failed\n", g_rank, name);
            ok = 0;
        }
    }
    alarm(0);
    report(name, ok);
}

/* Rank 0 leaves a sampler epoch after its first step and begins the next epoch; the
   others take a second step. Run with MDL_WAIT=yield: an epoch's steps are agreed
   ahead by nonblocking reductions, which MPI matches with the begin's only when that
   one is nonblocking too (otherwise the watchdog ends the job). Rank 0's begin meets a
   step agreed ahead and is told at once, naming both calls; the others learn it at a
   later step, and agreements they started ahead are never matched: the job cannot go
   on, so rank 0 prints its verdict ("PASS step-begin") and ends it (MPI_Abort). */
static void step_begin(tc_dataset *d)
{
    tc_alarm_case = "step-begin";
    alarm(120);
    mdl_loader *h = open_loader(d);
    const uint64_t *ids;
    const void *data;
    const uint64_t *offsets;
    size_t n;
    int ok = mdl_epoch_begin(h, 1, 0, 4, 1, 0) == MDL_OK && mdl_next_batch(h, &ids, &data, &offsets, &n) == MDL_OK;
    if (g_rank == 0) {
        ok &= judged("step-begin", mdl_epoch_begin(h, 1, 1, 4, 1, 0), "mdl_epoch_begin", "an epoch's step");
        printf("%s step-begin\n", ok ? "PASS" : "FAIL");
        fflush(stdout);
        /* The verdict is the job's exit status too: MPICH's launcher, torn down by the
           abort, now and then drops the line just written (2 runs in 6 on a loaded
           2-core machine: no output, exit 5). */
        MPI_Abort(MPI_COMM_WORLD, ok ? 5 : 6);
    }
    for (;;)
        if (mdl_next_batch(h, &ids, &data, &offsets, &n) != MDL_OK || n == 0)
            break;
    pause(); /* until rank 0 ends the job */
}

/* Rank 0 fetches once more while the others wait in a collective of their own: only a
   deadline ends it (the library's watchdog, or MDL_TIMEOUT's error, then MPI_Abort). */
static void fetch_allreduce(tc_dataset *d)
{
    tc_alarm_case = "fetch-allreduce";
    mdl_loader *h = open_loader(d);
    for (int s = 0; s < 3; s++)
        fetch_some(h, d);
    if (g_rank == 0) {
        mdl_status got = fetch_some(h, d);
        char why[1024];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "[rank 0] fetch-allreduce: the fetch returned %s: %s\n", mdl_status_string(got), why);
        MPI_Abort(MPI_COMM_WORLD, 4);
    } else {
        int one = 1, sum = 0;
        MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    }
    fprintf(stderr, "[rank %d] fetch-allreduce: still running after the mismatch\n", g_rank);
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--base") && i + 1 < argc)
            tc_parse_u64(argv[++i], &g_base);
    }
    tc_alarm_install(g_rank);

    if (g_size < 2) {
        fprintf(stderr, "mismatch_test needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    tc_dataset d;
    if (tc_dataset_init(&d, g_size, g_base, 11, 0) != 0) {
        fprintf(stderr, "[rank %d] out of memory\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (only && !strcmp(only, "fetch-allreduce")) {
        fetch_allreduce(&d);
        MPI_Finalize();
        return 1; /* the job must have ended before */
    }
    if (only && !strcmp(only, "step-begin"))
        step_begin(&d);
    if (!only || !strcmp(only, "fetch-finalize"))
        pair_case("fetch-finalize", &d, 0, do_fetch, "mdl_fetch_batch", do_finalize, "mdl_finalize");
    if (!only || !strcmp(only, "stats-fetch"))
        pair_case("stats-fetch", &d, 0, do_stats, "mdl_stats_json_job", do_fetch, "mdl_fetch_batch");
    if (!only || !strcmp(only, "epoch-fetch"))
        pair_case("epoch-fetch", &d, 0, do_epoch, "mdl_epoch_begin", do_fetch, "mdl_fetch_batch");
    if (!only || !strcmp(only, "epoch-fetch-after-an-epoch"))
        pair_case("epoch-fetch-after-an-epoch", &d, 1, do_epoch, "mdl_epoch_begin", do_fetch, "mdl_fetch_batch");
    tc_dataset_free(&d);
    if (g_rank == 0)
        printf("%d passed, %d failed\n", g_passed, g_failed);
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
