/*
 * rounds_test: how many exchanges the collective engine makes in a mdl_fetch_batch step
 * whose agreement carries no request matrix (MDL_MATRIX_MAX_RANKS=0, as above 32 ranks).
 * Such an agreement cannot show what each owner serves, so it cuts the step at the
 * per-rank budget, MDL_MAX_MESSAGE_BYTES / P; the engine then counts the whole step
 * and, where no rank sends or receives more than MDL_MAX_MESSAGE_BYTES, exchanges it
 * in one round.
 *
 * Run with MDL_NODE_LOCAL=off MDL_MATRIX_MAX_RANKS=0 MDL_MAX_MESSAGE_BYTES=<L> and
 * --limit <L>, at 2 or more ranks. Samples of SAMPLE bytes, every rank's batches drawn
 * from one seed, so each rank works out every rank's sends and receives:
 *   - batches of SMALL ids: more than L / P bytes for some rank, so the agreement
 *     alone would take two rounds or more; where every rank's sends and receives
 *     fit L (checked), the step must take exactly one exchange;
 *   - batches of LARGE ids, more than L for some rank: several exchanges.
 * Every fetched byte is checked ("exchange_rounds" of mdl_stats_json counts them).
 */
#include "mdloader.h"
#include "check.h"
#include "common.h"
#include <mpi.h>

enum { PER_RANK = 100, SAMPLE = 1000, STEPS = 12, SMALL = 24, LARGE = 60 };

static uint8_t byte_of(uint64_t g, uint64_t k) { return (uint8_t)((g * 131 + k * 7) & 0xff); }

static double exchange_rounds(mdl_loader *h)
{
    char json[8192];
    check(mdl_stats_json(h, json, sizeof json) < sizeof json, "mdl_stats_json");
    return tc_json_number(json, NULL, "exchange_rounds");
}

/* Rank r's batch of `n` ids in `step`: the same on every rank. */
static void batch_of(int r, int step, int n, uint64_t *ids)
{
    tc_rng rng = tc_rng_make(1000 + (uint64_t)step, (uint64_t)r);
    for (int i = 0; i < n; i++)
        ids[i] = tc_below(&rng, (uint64_t)PER_RANK * (uint64_t)g_size);
}

/* Whether no rank receives and no owner sends more than `limit` bytes in the step. */
static int fits_one_round(int step, int n, uint64_t limit)
{
    uint64_t *sent = calloc((size_t)g_size, sizeof *sent), ids[LARGE];
    int fits = 1;
    for (int r = 0; r < g_size; r++) {
        batch_of(r, step, n, ids);
        uint64_t received = 0;
        for (int i = 0; i < n; i++) {
            int owner = (int)(ids[i] / PER_RANK);
            if (owner != r) {
                received += SAMPLE;
                sent[owner] += SAMPLE;
            }
        }
        fits &= received <= limit;
    }
    for (int q = 0; q < g_size; q++)
        fits &= sent[q] <= limit;
    free(sent);
    return fits;
}

/* Runs STEPS steps of batches of `n` ids; returns the steps that took one exchange. */
static int run_phase(mdl_loader *h, int n, uint64_t limit, const char *name)
{
    uint64_t ids[LARGE], offsets[LARGE + 1];
    static uint8_t out[LARGE * SAMPLE];
    int single = 0;
    for (int step = 0; step < STEPS; step++) {
        batch_of(g_rank, step, n, ids);
        double before = exchange_rounds(h);
        check(mdl_fetch_batch(h, ids, (size_t)n, out, sizeof out, offsets) == MDL_OK, "mdl_fetch_batch");
        uint64_t wrong = 0;
        for (int i = 0; i < n; i++)
            for (uint64_t k = 0; k < SAMPLE; k++)
                wrong += out[offsets[i] + k] != byte_of(ids[i], k);
        check(wrong == 0, "every fetched byte is right");
        int rounds = (int)(exchange_rounds(h) - before);
        if (fits_one_round(step, n, limit)) {
            if (rounds != 1)
                fprintf(stderr, "[rank %d] %s step %d: %d exchanges where one round fits\n", g_rank, name, step, rounds);
            check(rounds == 1, "a step that fits the limit takes one exchange");
            single++;
        } else {
            if (rounds < 2)
                fprintf(stderr, "[rank %d] %s step %d: %d exchanges beyond the limit\n", g_rank, name, step, rounds);
            check(rounds >= 2, "a step beyond the limit takes several exchanges");
        }
    }
    return single;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    uint64_t limit = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--limit"))
            check(tc_parse_u64(argv[i + 1], &limit) == 0, "--limit <bytes>");
    check(limit > 0 && g_size >= 2, "usage: rounds_test --limit <MDL_MAX_MESSAGE_BYTES>, at 2 or more ranks");
    /* The per-rank budget must cut a SMALL batch (so that one round is the engine's
       doing, not the agreement's) and hold a sample (no sample goes by gets). */
    check(limit / (uint64_t)g_size < (SMALL / 2) * SAMPLE && limit / (uint64_t)g_size >= SAMPLE, "a limit that cuts SMALL batches");

    static uint8_t shard[PER_RANK * SAMPLE];
    uint64_t offsets[PER_RANK + 1];
    tc_uniform_shard((uint64_t)g_rank * PER_RANK, PER_RANK, SAMPLE, byte_of, shard, offsets);

    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK, "mdl_init");
    check(mdl_set_backend(h, MDL_BACKEND_COLLECTIVE) == MDL_OK, "mdl_set_backend");
    check(mdl_register_shard(h, shard, offsets, PER_RANK) == MDL_OK, "mdl_register_shard");
    int single = run_phase(h, SMALL, limit, "small");
    check(single > STEPS / 2, "most small steps fit one round (else the test shows nothing)");
    int large_single = run_phase(h, LARGE, limit, "large");
    check(large_single < STEPS, "some large step goes beyond the limit (else the test shows nothing)");
    if (g_rank == 0 && !g_failed)
        printf("rounds_test: %d of %d small steps in one exchange, %d of %d large ones beyond the limit\n", single, STEPS,
               STEPS - large_single, STEPS);
    check(mdl_finalize(&h) == MDL_OK, "mdl_finalize");
    MPI_Finalize();
    return g_failed != 0;
}
