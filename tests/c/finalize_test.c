/*
 * finalize_test: MPI's life cycle (docs/hardening.md, section 6).
 *
 *  - Before MPI_Init, mdl_init returns MDL_ERR_STATE.
 *  - A loader still open at MPI_Finalize (registered, fetched from, never finalized)
 *    is cleaned up inside MPI_Finalize: the job exits 0 on both MPIs (MPICH used to
 *    abort on the leaked window). Where MPI provides MPI_THREAD_MULTIPLE the loaders'
 *    progress threads are stopped first, by mdl_before_mpi_finalize, as the README
 *    asks. With --epoch, a second loader is left with an
 *    epoch in progress as well, prefetching --prefetch K steps ahead (default 2; needs
 *    MPI_THREAD_MULTIPLE). MPI forbids other threads to call MPI while MPI_Finalize
 *    runs, and a prefetch thread may still be fetching ahead: MPICH 4.0 then aborts
 *    now and then (UCX "worker->inprogress++ == 0"), so the runner uses --prefetch 0
 *    there, and the README tells users to end prefetching epochs before MPI_Finalize.
 *  - After MPI_Finalize every call on the leftover handle, or on a NULL handle, and
 *    mdl_init itself return MDL_ERR_STATE; mdl_finalize(&h) returns MDL_OK and sets
 *    h = NULL.
 *
 * After MPI_Finalize nothing can be agreed: each rank prints its own lines,
 * "[rank R] PASS name" / "[rank R] FAIL name", then "[rank R] N passed, M failed", and
 * exits non-zero on any failure (the runner checks the exit code). A watchdog (SIGALRM)
 * turns a hang into "TIMEOUT in ..." and exit code 3.
 *
 * Usage: finalize_test [--epoch] [--prefetch K] [--timeout SECONDS]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mdloader.h"

static int g_rank = -1, g_passed, g_failed;
static const char *volatile g_step = "startup";

static void on_alarm(int sig)
{
    (void)sig;
    char line[256];
    size_t k = 0;
    tc_sig_puts(line, &k, sizeof line, "[rank ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)(g_rank < 0 ? 0 : g_rank));
    tc_sig_puts(line, &k, sizeof line, "] TIMEOUT in ");
    tc_sig_puts(line, &k, sizeof line, g_step);
    line[k++] = '\n';
    ssize_t ignored = write(2, line, k);
    (void)ignored;
    _exit(3);
}

static void check(int ok, const char *what, const char *detail)
{
    if (ok)
        g_passed++;
    else
        g_failed++;
    printf("[rank %d] %s %s%s%s\n", g_rank, ok ? "PASS" : "FAIL", what, ok || !detail ? "" : ": ", ok || !detail ? "" : detail);
    fflush(stdout);
}

static void check_code(mdl_status got, mdl_status want, const char *what)
{
    char detail[1024] = "";
    if (got != want) {
        char msg[768] = "";
        mdl_last_error(msg, sizeof msg);
        snprintf(detail, sizeof detail, "returned %d (%s), expected %d (%s); last error \"%s\"", (int)got,
                 mdl_status_string(got), (int)want, mdl_status_string(want), msg);
    }
    check(got == want, what, detail);
}

int main(int argc, char **argv)
{
    int epoch = 0;
    unsigned timeout = 60, prefetch = 2;
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--epoch"))
            epoch = 1;
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v))
            timeout = (unsigned)v, i++;
        else if (!strcmp(argv[i], "--prefetch") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v))
            prefetch = (unsigned)v, i++;
        else {
            fprintf(stderr, "usage: %s [--epoch] [--prefetch K] [--timeout SECONDS]\n", argv[0]);
            return 2;
        }
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(timeout);

    /* Before MPI_Init: no MPI call may be made by the library but MPI_Initialized. */
    g_step = "mdl_init before MPI_Init";
    mdl_loader *early = NULL;
    mdl_status before = mdl_init(MPI_COMM_WORLD, &early);

    int provided = 0, size = 0;
    MPI_Init_thread(&argc, &argv, epoch ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_code(before, MDL_ERR_STATE, "mdl_init before MPI_Init -> MDL_ERR_STATE");
    check(early == NULL, "mdl_init before MPI_Init leaves *h NULL", NULL);

    /* A loader that is used and then left open. */
    g_step = "open, register, fetch";
    tc_dataset ds;
    tc_dataset_init(&ds, size, 300, 5, 1);
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    check_code(st, MDL_OK, "mdl_init");
    uint8_t *data = NULL;
    uint64_t *off = NULL;
    uint64_t n = tc_build_shard(&ds, g_rank, &data, &off);
    st = mdl_register_shard(h, data, off, n);
    check_code(st, MDL_OK, "mdl_register_shard");
    uint64_t ids[8], offs[9];
    tc_rng rng = tc_rng_make(5, (uint64_t)g_rank);
    for (int i = 0; i < 8; i++)
        ids[i] = tc_below(&rng, tc_total(&ds));
    uint64_t need = tc_batch_bytes(&ds, ids, 8);
    uint8_t *buf = malloc(need + 1);
    for (int b = 0; b < 2; b++) {
        /* Both engines, so that the window has been used by gets. */
        mdl_set_backend(h, b ? MDL_BACKEND_COLLECTIVE : MDL_BACKEND_ONESIDED);
        st = mdl_fetch_batch(h, ids, 8, buf, need, offs);
        int exact = st == MDL_OK;
        for (int k = 0; k < 8 && exact; k++)
            exact = tc_verify_sample(&ds, ids[k], buf + offs[k], offs[k + 1] - offs[k]) < 0;
        check(exact, b ? "collective fetch before MPI_Finalize is byte-exact" : "one-sided fetch before MPI_Finalize is byte-exact", NULL);
    }

    mdl_loader *h2 = NULL;
    if (epoch) {
        g_step = "second loader with a prefetching epoch";
        if (provided < MPI_THREAD_MULTIPLE) {
            printf("[rank %d] SKIP prefetching epoch at MPI_Finalize (MPI_THREAD_MULTIPLE not provided)\n", g_rank);
        } else {
            st = mdl_init(MPI_COMM_WORLD, &h2);
            check_code(st, MDL_OK, "second mdl_init");
            check_code(mdl_register_shard(h2, data, off, n), MDL_OK, "second mdl_register_shard");
            check_code(mdl_set_prefetch(h2, prefetch), MDL_OK, "mdl_set_prefetch");
            check_code(mdl_epoch_begin(h2, 1, 0, 8, 1, 0), MDL_OK, "mdl_epoch_begin");
            const uint64_t *bids, *boffs;
            const void *bdata;
            size_t bn;
            check_code(mdl_next_batch(h2, &bids, &bdata, &boffs, &bn), MDL_OK, "one mdl_next_batch, epoch left running");
        }
    }
    free(data);
    free(off);

    /* No mdl_finalize: MPI_Finalize must clean the loader(s) up. With
       MPI_THREAD_MULTIPLE the loaders run progress threads, which must not call MPI
       while MPI_Finalize runs: mdl_before_mpi_finalize stops them (MPICH 4.0 aborted
       in MPI_Finalize now and then without it). */
    g_step = "MPI_Finalize with open loaders";
    fflush(stdout);
    if (provided == MPI_THREAD_MULTIPLE)
        mdl_before_mpi_finalize();
    MPI_Finalize();
    check(1, "MPI_Finalize returned with loaders still open", NULL);

    g_step = "calls after MPI_Finalize";
    const uint64_t *bids, *boffs;
    const void *bdata;
    size_t bn;
    uint64_t x = 0;
    check_code(mdl_fetch_batch(h, ids, 8, buf, need, offs), MDL_ERR_STATE, "mdl_fetch_batch on the leftover handle");
    uint8_t one[1] = {7};
    uint64_t one_off[2] = {0, 1};
    check_code(mdl_register_shard(h, one, one_off, 1), MDL_ERR_STATE, "mdl_register_shard on the leftover handle");
    check_code(mdl_epoch_begin(h, 1, 0, 4, 1, 0), MDL_ERR_STATE, "mdl_epoch_begin on the leftover handle");
    check_code(mdl_next_batch(h, &bids, &bdata, &boffs, &bn), MDL_ERR_STATE, "mdl_next_batch on the leftover handle");
    check_code(mdl_epoch_seek(h, 0), MDL_ERR_STATE, "mdl_epoch_seek on the leftover handle");
    check_code(mdl_num_samples(h, &x), MDL_ERR_STATE, "mdl_num_samples on the leftover handle");
    check_code(mdl_fetch_batch(NULL, ids, 8, buf, need, offs), MDL_ERR_STATE, "mdl_fetch_batch on a NULL handle");
    check_code(mdl_register_shard(NULL, one, one_off, 1), MDL_ERR_STATE, "mdl_register_shard on a NULL handle");
    check_code(mdl_epoch_begin(NULL, 1, 0, 4, 1, 0), MDL_ERR_STATE, "mdl_epoch_begin on a NULL handle");
    mdl_loader *late = NULL;
    check_code(mdl_init(MPI_COMM_WORLD, &late), MDL_ERR_STATE, "mdl_init after MPI_Finalize");
    check(late == NULL, "mdl_init after MPI_Finalize leaves *h NULL", NULL);
    late = NULL;
    check_code(mdl_init_f(0, &late), MDL_ERR_STATE, "mdl_init_f after MPI_Finalize");
    if (h2) {
        check_code(mdl_next_batch(h2, &bids, &bdata, &boffs, &bn), MDL_ERR_STATE,
                   "mdl_next_batch on the leftover prefetching handle");
        check_code(mdl_finalize(&h2), MDL_OK, "mdl_finalize of the leftover prefetching handle");
        check(h2 == NULL, "mdl_finalize sets the prefetching handle to NULL", NULL);
    }
    g_step = "mdl_finalize after MPI_Finalize";
    check_code(mdl_finalize(&h), MDL_OK, "mdl_finalize of the leftover handle");
    check(h == NULL, "mdl_finalize sets the handle to NULL", NULL);
    check_code(mdl_finalize(&h), MDL_OK, "mdl_finalize(&NULL) after MPI_Finalize");
    free(buf);
    tc_dataset_free(&ds);
    printf("[rank %d] finalize_test: %d passed, %d failed\n", g_rank, g_passed, g_failed);
    fflush(stdout);
    return g_failed ? 1 : 0;
}
