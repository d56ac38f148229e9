/*
 * MDLoader in C, start to finish:
 *
 *   1. every rank registers its shard of samples (variable-sized byte records),
 *   2. every rank fetches random mini-batches of global ids, wherever they live,
 *   3. a bad request shows how errors come back (on every rank, no hang),
 *   4. finalize.
 *
 * Each sample's bytes are a function of its global id, so any rank can check any
 * sample it receives. Exit status 0 when every byte is right.
 *
 *   mpirun -n 2 ./c_example    (Open MPI as root: OMPI_ALLOW_RUN_AS_ROOT=1
 *   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; more ranks than cores: mpirun --oversubscribe)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "mdloader.h"

#define SAMPLES_PER_RANK 1000
#define BATCH 32
#define STEPS 20

/* Abort the job on an unexpected error, with the library's explanation. */
#define CHECK(call)                                                                     \
    do {                                                                                \
        mdl_status st_ = (call);                                                        \
        if (st_ != MDL_OK) {                                                            \
            char msg_[256];                                                             \
            mdl_last_error(msg_, sizeof msg_);                                          \
            fprintf(stderr, "%s failed: %s: %s\n", #call, mdl_status_string(st_), msg_); \
            MPI_Abort(MPI_COMM_WORLD, 2);                                               \
        }                                                                               \
    } while (0)

/* Sample g: 8 to 263 bytes, byte k is a function of (g, k). */
static uint64_t sample_len(uint64_t g) { return 8 + (g * 2654435761u) % 256; }
static uint8_t sample_byte(uint64_t g, uint64_t k) { return (uint8_t)(g * 31 + k * 7 + (g >> 8)); }

int main(int argc, char **argv)
{
    int rank, nranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    /* 1. This rank's shard: global ids first .. first + n - 1 (ids follow rank order). */
    uint64_t n = SAMPLES_PER_RANK, first = (uint64_t)rank * SAMPLES_PER_RANK;
    uint64_t *offsets = malloc((n + 1) * sizeof *offsets);
    offsets[0] = 0;
    for (uint64_t i = 0; i < n; i++)
        offsets[i + 1] = offsets[i] + sample_len(first + i);
    uint8_t *data = malloc(offsets[n]);
    for (uint64_t i = 0; i < n; i++)
        for (uint64_t k = 0; k < sample_len(first + i); k++)
            data[offsets[i] + k] = sample_byte(first + i, k);

    mdl_loader *loader = NULL;
    CHECK(mdl_init(MPI_COMM_WORLD, &loader));
    CHECK(mdl_register_shard(loader, data, offsets, n));
    free(data); /* the library keeps its own copy */
    free(offsets);

    uint64_t total;
    CHECK(mdl_num_samples(loader, &total));
    if (rank == 0)
        printf("%d ranks, %llu samples\n", nranks, (unsigned long long)total);

    /* 2. Random mini-batches. Size the buffer with mdl_sample_size (local, no MPI). */
    uint64_t ids[BATCH], out_offsets[BATCH + 1];
    uint8_t *out = NULL;
    long wrong = 0;
    srand(1234 + rank);
    for (int step = 0; step < STEPS; step++) {
        uint64_t need = 0;
        for (int k = 0; k < BATCH; k++) {
            uint64_t len;
            ids[k] = (uint64_t)rand() % total;
            CHECK(mdl_sample_size(loader, ids[k], &len));
            need += len;
        }
        out = realloc(out, need);
        CHECK(mdl_fetch_batch(loader, ids, BATCH, out, need, out_offsets));

        for (int k = 0; k < BATCH; k++) {
            uint64_t len = out_offsets[k + 1] - out_offsets[k];
            const uint8_t *s = out + out_offsets[k];
            int ok = len == sample_len(ids[k]);
            for (uint64_t b = 0; ok && b < len; b++)
                ok = s[b] == sample_byte(ids[k], b);
            wrong += !ok;
        }
    }

    /* 3. Errors. Rank 0 asks for an id that does not exist: it gets
       MDL_ERR_OUT_OF_RANGE, every other rank MDL_ERR_REMOTE, nobody hangs, and the
       loader remains usable. mdl_last_error says what happened. */
    uint64_t bad_id = rank == 0 ? total : 0;
    uint64_t bad_offsets[2];
    uint8_t tmp[512];
    mdl_status st = mdl_fetch_batch(loader, &bad_id, 1, tmp, sizeof tmp, bad_offsets);
    mdl_status expected = rank == 0 ? MDL_ERR_OUT_OF_RANGE : MDL_ERR_REMOTE;
    char msg[256];
    mdl_last_error(msg, sizeof msg);
    if (rank <= 1)
        printf("rank %d: deliberate bad fetch -> %s (%s)\n", rank, mdl_status_string(st), msg);
    if (st != expected) {
        fprintf(stderr, "rank %d: expected %s, got %s\n", rank, mdl_status_string(expected),
                mdl_status_string(st));
        wrong++;
    }

    /* 4. Done. Add up the verdict over all ranks before anybody leaves. */
    long wrong_all = 0;
    MPI_Allreduce(&wrong, &wrong_all, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("%d steps x %d samples per rank: %s\n", STEPS, BATCH,
               wrong_all ? "WRONG BYTES" : "every byte correct");

    free(out);
    CHECK(mdl_finalize(&loader));
    MPI_Finalize();
    return wrong_all ? 1 : 0;
}
