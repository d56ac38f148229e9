/*
 * The library's whole life at one simulated scale, every byte verified: mdl_init,
 * mdl_register_shard, fetch steps with each engine forced and with AUTO over a grid of
 * batch sizes, a sampler epoch, a seek, mdl_finalize. Built with smpicc and run under
 * smpirun by benches/smpi/run.sh (README.md there); it also runs under a real mpirun.
 *
 *   [EPOCH_BATCH=<b>] [EPOCH_BACKEND=onesided|collective] [ENGINES=onesided,collective,auto]
 *       smpi_client <samples per rank> <sample bytes> <steps per point> <batch>...
 *
 * ENGINES (default all three) limits the engines stepped at every batch: under SMPI a
 * one-sided step of batch B at P ranks keeps P x B gets in flight and costs wall time
 * about as their square (README.md, "Cost"), so the largest points run the collective
 * engine alone. EPOCH_BATCH=0 skips the epoch and the seek (10-15 minutes of wall time
 * at 1024 ranks for what correct_epoch_p1024 already shows).
 *
 * Times are MPI_Wtime (simulated under SMPI), the slowest rank's. CSV on rank 0's
 * stdout, one kind per line:
 *   init,P,seconds               register,P,seconds
 *   step,P,backend,batch,bytes,median_ms,onesided_steps,collective_steps
 *   epoch,P,batch,steps,seconds,onesided_steps,collective_steps
 *   seek,P,step,samples          verified,P,bytes  (the last line: nothing failed)
 * Any wrong byte or failed call aborts the job with a message on stderr.
 */
#include "mdloader.h"
#include "bench_common.h"
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const uint64_t DATA_SEED = 39;
static int rank, ranks;

static void fail(const char *what, int status)
{
    char msg[512];
    mdl_last_error(msg, sizeof msg);
    fprintf(stderr, "rank %d: %s failed: %s (%s)\n", rank, what, mdl_status_string(status), msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#define CHECK(call)                                                                                          \
    do {                                                                                                     \
        int s_ = (call);                                                                                     \
        if (s_ != MDL_OK)                                                                                    \
            fail(#call, s_);                                                                                 \
    } while (0)

static double slowest(double seconds)
{
    double max;
    MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

/* Steps this rank ran with one engine ("onesided", "collective"), from its statistics. */
static uint64_t stat(const struct mdl_loader *h, const char *key)
{
    static char json[8192];
    char needle[64];
    mdl_stats_json(h, json, sizeof json);
    snprintf(needle, sizeof needle, "\"%s\": {\"steps\": ", key);
    const char *at = strstr(json, needle);
    return at ? strtoull(at + strlen(needle), NULL, 10) : 0;
}

static void verify_batch(const uint64_t *ids, size_t n, const uint8_t *data, const uint64_t *offsets, uint64_t size)
{
    for (size_t k = 0; k < n; k++)
        if (offsets[k + 1] - offsets[k] != size || !verify(DATA_SEED, ids[k], data + offsets[k], size)) {
            fprintf(stderr, "rank %d: sample %llu wrong\n", rank, (unsigned long long)ids[k]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
}

/* ENGINES: a comma-separated list of engine names; unset or empty means all. */
static int engine_wanted(const char *name)
{
    const char *list = getenv("ENGINES");
    if (!list || !*list)
        return 1;
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n == len && !strncmp(p, name, n))
            return 1;
        p += n + (end != NULL);
    }
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    if (argc < 5) {
        if (rank == 0)
            fprintf(stderr, "usage: %s <samples per rank> <sample bytes> <steps> <batch>...\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    uint64_t per_rank = strtoull(argv[1], NULL, 10), size = strtoull(argv[2], NULL, 10);
    int steps = atoi(argv[3]);
    uint64_t total = per_rank * (uint64_t)ranks, verified = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    struct mdl_loader *h = NULL;
    CHECK(mdl_init(MPI_COMM_WORLD, &h));
    double init = slowest(MPI_Wtime() - t);

    uint8_t *shard = malloc(per_rank * size);
    uint64_t *offsets = malloc((per_rank + 1) * sizeof *offsets);
    for (uint64_t i = 0; i <= per_rank; i++)
        offsets[i] = i * size;
    for (uint64_t i = 0; i < per_rank; i++)
        fill(DATA_SEED, (uint64_t)rank * per_rank + i, shard + i * size, size);
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    CHECK(mdl_register_shard(h, shard, offsets, per_rank));
    double reg = slowest(MPI_Wtime() - t);
    free(shard);
    if (rank == 0)
        printf("init,%d,%.6g\nregister,%d,%.6g\n", ranks, init, ranks, reg);
    fflush(stdout); /* a long run shows how far it got */

    static const struct { mdl_backend b; const char *name; } BACKENDS[] = {
        {MDL_BACKEND_ONESIDED, "onesided"}, {MDL_BACKEND_COLLECTIVE, "collective"}, {MDL_BACKEND_AUTO, "auto"}};
    double *times = malloc(steps * sizeof *times);
    for (int a = 4; a < argc; a++) {
        uint64_t batch = strtoull(argv[a], NULL, 10);
        uint64_t *ids = malloc(batch * sizeof *ids), *out_offsets = malloc((batch + 1) * sizeof *out_offsets);
        uint8_t *out = aligned_alloc(4096, (batch * size + 4095) / 4096 * 4096);
        for (size_t k = 0; k < sizeof BACKENDS / sizeof *BACKENDS; k++) {
            if (!engine_wanted(BACKENDS[k].name))
                continue;
            CHECK(mdl_set_backend(h, BACKENDS[k].b));
            uint64_t one0 = stat(h, "onesided"), coll0 = stat(h, "collective");
            for (int s = 0; s < steps; s++) {
                batch_ids(DATA_SEED, rank, batch, (uint64_t)s + 1000 * k, total, ids);
                MPI_Barrier(MPI_COMM_WORLD);
                t = MPI_Wtime();
                CHECK(mdl_fetch_batch(h, ids, batch, out, batch * size, out_offsets));
                times[s] = slowest(MPI_Wtime() - t);
                verify_batch(ids, batch, out, out_offsets, size);
                verified += batch * size;
            }
            qsort(times, steps, sizeof *times, cmp_double);
            if (rank == 0)
                printf("step,%d,%s,%llu,%llu,%.6g,%llu,%llu\n", ranks, BACKENDS[k].name, (unsigned long long)batch,
                       (unsigned long long)size, times[steps / 2] * 1e3, (unsigned long long)(stat(h, "onesided") - one0),
                       (unsigned long long)(stat(h, "collective") - coll0));
            fflush(stdout);
        }
        free(ids);
        free(out_offsets);
        free(out);
    }

    /* A sampler epoch (AUTO unless EPOCH_BACKEND), checked against mdl_epoch_ids, then a seek back to its
       middle step, which must give that step again. */
    /* EPOCH_BATCH (environment) sets its batch size; default the first batch size. */
    const char *epoch_batch = getenv("EPOCH_BATCH");
    uint64_t batch = strtoull(epoch_batch && *epoch_batch ? epoch_batch : argv[4], NULL, 10);
    if (batch == 0)
        goto finalize;
    uint64_t *expect = malloc(batch * sizeof *expect);
    const uint64_t *ids, *offs;
    const void *data;
    size_t n, want;
    /* EPOCH_BACKEND=onesided|collective forces the epoch's engine; default AUTO. */
    const char *epoch_backend = getenv("EPOCH_BACKEND");
    mdl_backend eb = MDL_BACKEND_AUTO;
    for (size_t k = 0; epoch_backend && k < sizeof BACKENDS / sizeof *BACKENDS; k++)
        if (!strcmp(epoch_backend, BACKENDS[k].name))
            eb = BACKENDS[k].b;
    CHECK(mdl_set_backend(h, eb));
    uint64_t one0 = stat(h, "onesided"), coll0 = stat(h, "collective");
    CHECK(mdl_epoch_begin(h, DATA_SEED, 1, batch, 1, 0));
    MPI_Barrier(MPI_COMM_WORLD);
    t = MPI_Wtime();
    uint64_t step = 0;
    for (;; step++) {
        CHECK(mdl_next_batch(h, &ids, &data, &offs, &n));
        CHECK(mdl_epoch_ids(total, ranks, rank, DATA_SEED, 1, batch, 1, 0, step, expect, batch, &want));
        if (n != want || memcmp(ids, expect, n * sizeof *ids)) {
            fprintf(stderr, "rank %d: epoch step %llu has other ids than mdl_epoch_ids\n", rank, (unsigned long long)step);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        if (n == 0)
            break;
        verify_batch(ids, n, data, offs, size);
        verified += n * size;
    }
    double epoch = slowest(MPI_Wtime() - t);
    if (rank == 0)
        printf("epoch,%d,%llu,%llu,%.6g,%llu,%llu\n", ranks, (unsigned long long)batch, (unsigned long long)step, epoch,
               (unsigned long long)(stat(h, "onesided") - one0), (unsigned long long)(stat(h, "collective") - coll0));
    fflush(stdout);
    uint64_t middle = step / 2;
    CHECK(mdl_epoch_seek(h, middle));
    CHECK(mdl_next_batch(h, &ids, &data, &offs, &n));
    CHECK(mdl_epoch_ids(total, ranks, rank, DATA_SEED, 1, batch, 1, 0, middle, expect, batch, &want));
    if (n != want || memcmp(ids, expect, n * sizeof *ids)) {
        fprintf(stderr, "rank %d: the step after seek differs from mdl_epoch_ids\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    verify_batch(ids, n, data, offs, size);
    verified += n * size;
    if (rank == 0)
        printf("seek,%d,%llu,%zu\n", ranks, (unsigned long long)middle, n);
    fflush(stdout);
    free(expect);

finalize:
    CHECK(mdl_finalize(&h));
    unsigned long long all = 0, mine = verified;
    MPI_Reduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("verified,%d,%llu\n", ranks, all);
    free(times);
    free(offsets);
    MPI_Finalize();
    return 0;
}
