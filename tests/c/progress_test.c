/*
 * progress_test: a rank that leaves the library and waits outside MPI must not leave a
 * peer's one-sided get waiting for it.
 *
 * The pattern of a training loop beside another library's collective (DDP's gloo):
 * rank 1 fetches samples of rank 0 with the one-sided engine; rank 0, which fetches
 * nothing, returns from mdl_fetch_batch at once and then waits, making no MPI call,
 * until rank 1 says (through a file: not MPI) that its fetch is done. MPICH serves a
 * get only while its target is in MPI, so without the library's progress thread
 * (MDL_PROGRESS) this waits for ever; rank 0 gives up after --give-up seconds (default
 * 60) and the test fails. Needs MPI_THREAD_MULTIPLE; two ranks.
 *
 * --funneled: MPI_THREAD_FUNNELED (Open MPI's pt2pt one-sided component refuses
 * MULTIPLE), where no progress thread can run; the library must then end one-sided
 * steps in a barrier, so that rank 0 leaves only once the last rank's gets are
 * served. Any number of ranks >= 2: the last rank fetches from rank 0 (on another
 * host where ranks are split by host), the others fetch nothing.
 *
 * --threads-stopped: mdl_before_mpi_finalize() before mdl_init, which leaves no
 * progress thread to a loader made afterwards; it must then end its one-sided steps
 * in a barrier, as without MPI_THREAD_MULTIPLE (it used to count on a thread that
 * stopped at its first turn, and rank 0 waited for ever on MPICH).
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common.h"
#include "mdloader.h"

enum { SAMPLES = 64, BYTES = 4096, BATCH = 32 };

static uint8_t byte_of(uint64_t id, uint64_t k)
{
    return (uint8_t)(tc_mix64(id * 7919u + k / 8) >> (8 * (k % 8)));
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    int funneled = 0, threads_stopped = 0;
    double give_up = 60;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--funneled"))
            funneled = 1;
        else if (!strcmp(argv[i], "--threads-stopped"))
            threads_stopped = 1;
        else if (!strcmp(argv[i], "--give-up") && i + 1 < argc)
            give_up = atof(argv[++i]);
    int wanted = funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, provided;
    MPI_Init_thread(&argc, &argv, wanted, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (funneled ? g_size < 2 || provided < MPI_THREAD_FUNNELED : g_size != 2 || provided != MPI_THREAD_MULTIPLE) {
        if (g_rank == 0)
            printf("progress_test: needs %s ranks and thread level %d (got %d ranks, level %d)\n",
                   funneled ? ">= 2" : "2", wanted, g_size, provided);
        MPI_Finalize();
        return 1;
    }
    /* Gets within the node, as between nodes: the engines, not node-local copies
     * (kept where the launcher set it: emulated hosts make their gets between hosts). */
    setenv("MDL_NODE_LOCAL", "off", 0);
    int fetcher = g_size - 1;
    uint8_t *data = malloc(SAMPLES * BYTES);
    uint64_t offsets[SAMPLES + 1];
    tc_uniform_shard((uint64_t)g_rank * SAMPLES, SAMPLES, BYTES, byte_of, data, offsets);
    if (threads_stopped)
        mdl_before_mpi_finalize();
    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK, "mdl_init");
    check(mdl_register_shard(h, data, offsets, SAMPLES) == MDL_OK, "mdl_register_shard");
    check(mdl_set_backend(h, MDL_BACKEND_ONESIDED) == MDL_OK, "mdl_set_backend(onesided)");

    /* The handshake outside MPI: a file the fetcher creates when its fetch is done. */
    long pid = (long)getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    char done_file[128];
    snprintf(done_file, sizeof done_file, "/tmp/mdl-progress-test-%ld", pid);
    remove(done_file);
    MPI_Barrier(MPI_COMM_WORLD);

    uint64_t ids[BATCH], out_offsets[BATCH + 1];
    static uint8_t out[BATCH * BYTES];
    for (int i = 0; i < BATCH; i++)
        ids[i] = (uint64_t)(i * 2); /* rank 0's samples */
    size_t n = g_rank == fetcher ? BATCH : 0;
    int ok = 1, waited_out = 0;
    double took = 0;
    mdl_status st = mdl_fetch_batch(h, ids, n, out, sizeof out, out_offsets);
    ok &= st == MDL_OK;
    if (g_rank == fetcher) {
        for (size_t i = 0; i < n && ok; i++)
            for (uint64_t k = 0; k < BYTES; k++)
                ok &= out[out_offsets[i] + k] == byte_of(ids[i], k);
        FILE *f = fopen(done_file, "w");
        ok &= f != NULL;
        if (f)
            fclose(f);
    } else if (g_rank == 0) {
        /* Outside the library and outside MPI, as a rank in gloo's all-reduce (the
         * other ranks, bystanders, go on to mdl_finalize). */
        double start = now();
        while (access(done_file, F_OK) != 0 && now() - start < give_up) {
            struct timespec pause = {0, 1000000};
            nanosleep(&pause, NULL);
        }
        took = now() - start;
        waited_out = access(done_file, F_OK) != 0;
        remove(done_file);
    }
    check(ok, "the last rank's one-sided fetch from rank 0 is byte-exact");
    if (g_rank == 0 && waited_out)
        fprintf(stderr, "rank 0: the last rank's fetch from it did not finish in %.0f s while rank 0 stayed out of MPI\n",
                give_up);
    check(!waited_out, funneled || threads_stopped
                           ? "a get completes before its target leaves the step (the closing barrier)"
                           : "a get completes while its target waits outside MPI (the progress thread)");
    if (g_rank == 0)
        printf("progress_test: rank 0 waited %.3f s outside MPI for the last rank's fetch: %s\n", took,
               g_failed ? "FAILED" : "all checks passed");
    mdl_finalize(&h);
    free(data);
    MPI_Finalize();
    return g_failed != 0;
}
