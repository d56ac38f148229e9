/*
 * idle_rank_test: a step in which one rank neither asks for nor serves anything.
 *
 * Rank 0 fetches nothing and nobody asks rank 0 for anything, while the other ranks
 * exchange samples among themselves; then a normal step follows where everybody fetches
 * from everybody. Repeated for each backend. Needs at least 3 ranks (with 2, an idle
 * rank 0 leaves rank 1 only local samples, so there is no exchange at all).
 *
 * Why a separate test: on such a rank every MPI_Ialltoallv of the collective engine has
 * empty send and receive buffers. If both get the same dummy address, Open MPI's libnbc
 * takes sendbuf == recvbuf for MPI_IN_PLACE, builds a different schedule on that rank
 * only, and the next nonblocking collective hangs on every rank (pure-MPI reproduction:
 * tests/c/repro/ialltoallv_aliased_empty_buffers.c). MPICH tolerates it. fetch_test
 * hits this by chance at 3-4 ranks; this test hits it on purpose and names it.
 *
 * Usage: idle_rank_test [--steps N] [--case-timeout SECONDS]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mdloader.h"

static const char *volatile g_case = "startup";

static void on_alarm(int sig)
{
    (void)sig;
    /* One write() of the whole line (async-signal-safe, and ranks do not interleave). */
    char line[256];
    static const char head[] = "TIMEOUT (hang) in case ";
    size_t k = 0;
    for (const char *p = head; *p && k < sizeof line - 2; p++)
        line[k++] = *p;
    for (const char *p = g_case; *p && k < sizeof line - 2; p++)
        line[k++] = *p;
    line[k++] = '\n';
    ssize_t w = write(2, line, k);
    (void)w;
    _exit(3);
}

/* Fetches ids and verifies them; returns the number of problems on this rank. */
static int fetch_verify(mdl_loader *h, const tc_dataset *ds, const uint64_t *ids, size_t n, int rank)
{
    uint64_t need = tc_batch_bytes(ds, ids, n);
    uint8_t *buf = malloc(need + 1);
    uint64_t *offs = malloc(sizeof(uint64_t) * (n + 1));
    int bad = 0;
    mdl_status st = mdl_fetch_batch(h, ids, n, buf, need, offs);
    if (st != MDL_OK) {
        char msg[512] = "";
        mdl_last_error(msg, sizeof msg);
        fprintf(stderr, "[rank %d] %s: mdl_fetch_batch -> %s (%s)\n", rank, g_case, mdl_status_string(st), msg);
        bad++;
    } else {
        for (size_t k = 0; k < n; k++)
            if (offs[k + 1] - offs[k] != tc_size_of(ds, ids[k]) ||
                tc_verify_sample(ds, ids[k], buf + offs[k], offs[k + 1] - offs[k]) >= 0) {
                fprintf(stderr, "[rank %d] %s: sample %zu (id %llu) wrong\n", rank, g_case, k,
                        (unsigned long long)ids[k]);
                bad++;
                break;
            }
    }
    free(buf);
    free(offs);
    return bad;
}

int main(int argc, char **argv)
{
    int provided, rank, P;
    unsigned steps = 4, tmo = 60;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--steps"))
            steps = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--case-timeout"))
            tmo = (unsigned)atoi(argv[i + 1]);
    }
    if (P < 3) {
        if (rank == 0)
            printf("SKIP idle_rank_test (needs at least 3 ranks)\nidle_rank_test: skipped\n");
        MPI_Finalize();
        return 0;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);

    tc_dataset ds;
    tc_dataset_init(&ds, P, 200, 5, 0);
    mdl_loader *h = NULL;
    uint8_t *data = NULL;
    uint64_t *off = NULL;
    uint64_t nloc = tc_build_shard(&ds, rank, &data, &off);
    if (nloc == UINT64_MAX || mdl_init(MPI_COMM_WORLD, &h) != MDL_OK || mdl_register_shard(h, data, off, nloc) != MDL_OK) {
        fprintf(stderr, "[rank %d] setup failed\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    free(data);
    free(off);

    /* Non-empty shards other than rank 0's: the samples the busy ranks trade. */
    int owners[256], nowners = 0;
    for (int r = 1; r < P && nowners < 256; r++)
        if (tc_n_local(&ds, r) > 0)
            owners[nowners++] = r;

    static const mdl_backend B[3] = {MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO};
    static const char *BN[3] = {"onesided", "collective", "auto"};
    tc_rng rng = tc_rng_make(11, (uint64_t)rank);
    int failed = 0;
    for (int b = 0; b < 3; b++) {
        char name[128];
        snprintf(name, sizeof name, "idle/%s: rank 0 idle, then a normal step, x%u", BN[b], steps);
        g_case = name;
        alarm(tmo);
        int bad = mdl_set_backend(h, B[b]) != MDL_OK;
        for (unsigned s = 0; s < steps; s++) {
            uint64_t ids[16];
            size_t n = 0;
            /* Idle step: rank 0 asks for nothing; the others ask only ranks >= 1. */
            if (rank != 0)
                for (n = 0; n < 8; n++) {
                    int r = owners[tc_below(&rng, (uint64_t)nowners)];
                    ids[n] = ds.first[r] + tc_below(&rng, tc_n_local(&ds, r));
                }
            bad += fetch_verify(h, &ds, ids, n, rank);
            /* Normal step: everybody asks everybody, rank 0's big shard included. */
            for (n = 0; n < 8; n++)
                ids[n] = tc_below(&rng, tc_total(&ds));
            bad += fetch_verify(h, &ds, ids, n, rank);
        }
        int gbad = 0;
        MPI_Allreduce(&bad, &gbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        alarm(0);
        if (rank == 0)
            printf("%s %s\n", gbad ? "FAIL" : "PASS", name);
        fflush(stdout);
        failed += gbad != 0;
    }
    g_case = "mdl_finalize";
    alarm(tmo);
    mdl_finalize(&h);
    tc_dataset_free(&ds);
    if (rank == 0)
        printf("idle_rank_test: %s\n", failed ? "FAILED" : "all checks passed");
    MPI_Finalize();
    return failed ? 1 : 0;
}
