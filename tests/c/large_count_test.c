/*
 * large_count_test: a collective step that moves more than 2^31 - 1 bytes to one rank
 * or from one rank, beyond what MPI_Alltoallv's int counts and displacements can say.
 *
 * Each rank holds SAMPLES samples of SAMPLE_MIB MiB; REPEATS of them (ids may repeat)
 * make about 2.3 GiB. Modes:
 *   --gather (default): rank 0 fetches REPEATS samples spread over the other ranks;
 *     at 3 ranks no single part exceeds int, only rank 0's total and displacements do,
 *     while the owners' own counts all fit (every rank must still take the same MPI
 *     call); every other rank fetches one sample of rank 0;
 *   --scatter: every other rank fetches REPEATS / (P - 1) samples of rank 0, which
 *     sends more than 2^31 - 1 bytes in all (at 3 ranks, in parts that fit int).
 * The collective engine, node-local path off:
 *   - without MDL_MAX_MESSAGE_BYTES (no limit) the step takes exactly one exchange
 *     (MPI_Alltoallw with a derived type per peer);
 *   - with MDL_MAX_MESSAGE_BYTES=2147483647 and --expect-rounds it takes several.
 * --first-fetch-fails: one rank's first MPI_Type_commit fails (the runner preloads
 *   tests/c/shims/failing_type_commit.c): the first fetch must fail on every rank (that
 *   rank MDL_ERR_MPI, the others MDL_ERR_REMOTE), and the same fetch then succeed.
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
    int expect_rounds = 0, scatter = 0, first_fetch_fails = 0;
    for (int i = 1; i < argc; i++) {
        expect_rounds |= !strcmp(argv[i], "--expect-rounds");
        scatter |= !strcmp(argv[i], "--scatter");
        first_fetch_fails |= !strcmp(argv[i], "--first-fetch-fails");
    }
    check(g_size >= 2, "large_count_test runs on 2 or more ranks");

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

    /* Global id of sample k of rank r: r * SAMPLES + k. */
    int others = g_size - 1;
    size_t n;
    uint64_t ids[REPEATS], out_offsets[REPEATS + 1];
    if (scatter) {
        n = g_rank == 0 ? 1 : (size_t)(REPEATS / others);
        for (size_t i = 0; i < n; i++)
            ids[i] = g_rank == 0 ? SAMPLES + i % SAMPLES : i % SAMPLES;
    } else {
        n = g_rank == 0 ? REPEATS : 1;
        for (size_t i = 0; i < n; i++)
            ids[i] = g_rank == 0 ? (uint64_t)(1 + i % (size_t)others) * SAMPLES + i % SAMPLES : i % SAMPLES;
    }
    size_t cap = n * SAMPLE;
    uint8_t *out = malloc(cap);
    check(out != NULL, "an output buffer");
    if (first_fetch_fails) {
        int failed = mdl_fetch_batch(h, ids, n, out, cap, out_offsets);
        const char *shim_rank = getenv("MDL_SHIM_RANK");
        int expected = shim_rank && atoi(shim_rank) == g_rank ? MDL_ERR_MPI : MDL_ERR_REMOTE;
        if (failed != expected) {
            char why[512];
            mdl_last_error(why, sizeof why);
            fprintf(stderr, "[rank %d] first mdl_fetch_batch: %s (%s)\n", g_rank, mdl_status_string(failed), why);
        }
        check(failed == expected, "a datatype failing on one rank fails the step on every rank");
    }
    char json[8192];
    check(mdl_stats_json(h, json, sizeof json) < sizeof json, "mdl_stats_json");
    double before = tc_json_number(json, NULL, "exchange_rounds");
    int rc = mdl_fetch_batch(h, ids, n, out, cap, out_offsets);
    if (rc != MDL_OK) {
        char why[512];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "[rank %d] mdl_fetch_batch: %s\n", g_rank, why);
    }
    check(rc == MDL_OK, "mdl_fetch_batch of a step beyond int counts");

    /* Each distinct sample once as the reference, then every copy of it compared. */
    uint8_t *expected = malloc(SAMPLE);
    check(expected != NULL, "a reference sample");
    uint64_t wrong = 0;
    for (uint64_t id = 0; id < (uint64_t)g_size * SAMPLES && rc == MDL_OK; id++) {
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
        printf("large_count_test (%s, %d ranks): %.2f GiB through rank 0 in %d exchange(s), every byte right\n",
               scatter ? "scatter" : "gather", g_size, (double)REPEATS * SAMPLE / (1 << 30), exchanges);
    check(mdl_finalize(&h) == MDL_OK, "mdl_finalize");
    free(expected);
    free(out);
    free(shard);
    MPI_Finalize();
    return g_failed != 0;
}
