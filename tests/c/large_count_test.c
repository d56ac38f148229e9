/*
 * large_count_test: a collective step that moves more than 2^31 - 1 bytes to one rank
 * and from another, beyond what MPI_Alltoallv's int counts and displacements can say.
 *
 * Two ranks, each holding SAMPLES samples of SAMPLE_MIB MiB. Rank 0 fetches a batch of
 * REPEATS ids of rank 1's samples (ids may repeat), about 2.3 GiB; rank 1 fetches one
 * sample of rank 0. The collective engine, node-local path off:
 *   - without MDL_MAX_MESSAGE_BYTES (no limit) the step must take exactly one exchange
 *     (the large parts go through MPI_Alltoallw with a derived type per peer);
 *   - with MDL_MAX_MESSAGE_BYTES=2147483647 (--expect-rounds) it takes several.
 * Every fetched byte is checked. Needs about 7 GiB (the runner checks MemAvailable).
 */
#include "mdloader.h"
#include "check.h"
#include "common.h"
#include <mpi.h>

enum { SAMPLES = 4, SAMPLE_MIB = 64, REPEATS = 36 };
#define SAMPLE ((uint64_t)SAMPLE_MIB << 20)

/* Byte k of sample g: a hash of (g, 4 KiB block) plus k, so that a block moved to
   the wrong place, or a slip of one byte, is caught. */
static void fill_sample(uint64_t g, uint8_t *to)
{
    for (uint64_t block = 0; block < SAMPLE >> 12; block++) {
        uint64_t h = tc_mix64(g * 0x10000 + block);
        for (uint64_t k = block << 12; k < (block + 1) << 12; k++)
            to[k] = (uint8_t)(h + k);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int expect_rounds = argc > 1 && !strcmp(argv[1], "--expect-rounds");
    check(g_size == 2, "large_count_test runs on 2 ranks");

    uint8_t *shard = malloc(SAMPLES * SAMPLE);
    check(shard != NULL, "a shard of 256 MiB");
    uint64_t offsets[SAMPLES + 1];
    for (int i = 0; i <= SAMPLES; i++)
        offsets[i] = (uint64_t)i * SAMPLE;
    for (int i = 0; i < SAMPLES; i++)
        fill_sample((uint64_t)g_rank * SAMPLES + (uint64_t)i, shard + offsets[i]);

    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK, "mdl_init");
    check(mdl_set_backend(h, MDL_BACKEND_COLLECTIVE) == MDL_OK, "mdl_set_backend");
    check(mdl_register_shard(h, shard, offsets, SAMPLES) == MDL_OK, "mdl_register_shard");

    /* Rank 0 asks for rank 1's samples over and over; rank 1 for one of rank 0's. */
    size_t n = g_rank == 0 ? REPEATS : 1;
    uint64_t ids[REPEATS], out_offsets[REPEATS + 1];
    for (size_t i = 0; i < n; i++)
        ids[i] = g_rank == 0 ? SAMPLES + i % SAMPLES : i % SAMPLES;
    size_t cap = n * SAMPLE;
    uint8_t *out = malloc(cap);
    check(out != NULL, "an output buffer of 2.3 GiB");
    char json[8192];
    check(mdl_stats_json(h, json, sizeof json) < sizeof json, "mdl_stats_json");
    double before = tc_json_number(json, NULL, "exchange_rounds");
    int rc = mdl_fetch_batch(h, ids, n, out, cap, out_offsets);
    if (rc != MDL_OK) {
        char why[512];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "[rank %d] mdl_fetch_batch: %s\n", g_rank, why);
    }
    check(rc == MDL_OK, "mdl_fetch_batch of more than 2^31 bytes");

    /* Each distinct sample once as the reference, then every copy of it compared. */
    uint8_t *expected = malloc(SAMPLE);
    check(expected != NULL, "a reference sample");
    uint64_t wrong = 0;
    for (uint64_t id = 0; id < 2 * SAMPLES && rc == MDL_OK; id++) {
        int filled = 0;
        for (size_t i = 0; i < n; i++) {
            if (ids[i] != id)
                continue;
            if (!filled)
                fill_sample(id, expected), filled = 1;
            wrong += out_offsets[i] != i * SAMPLE || memcmp(out + out_offsets[i], expected, SAMPLE) != 0;
        }
    }
    check(wrong == 0, "every fetched sample is right");
    check(mdl_stats_json(h, json, sizeof json) < sizeof json, "mdl_stats_json");
    int exchanges = (int)(tc_json_number(json, NULL, "exchange_rounds") - before);
    if (expect_rounds) {
        check(exchanges >= 2, "with MDL_MAX_MESSAGE_BYTES=2^31-1 the step takes several exchanges");
    } else {
        if (exchanges != 1)
            fprintf(stderr, "[rank %d] %d exchanges\n", g_rank, exchanges);
        check(exchanges == 1, "without a limit the step takes one exchange");
    }
    if (g_rank == 0 && !g_failed)
        printf("large_count_test: %.2f GiB fetched in %d exchange(s), every byte right\n",
               (double)cap / (1 << 30), exchanges);
    check(mdl_finalize(&h) == MDL_OK, "mdl_finalize");
    free(expected);
    free(out);
    free(shard);
    MPI_Finalize();
    return g_failed != 0;
}
