/*
 * replica_test: replica groups (mdl_init_replicated), through the C API.
 *
 * Every group registers the same dataset (N samples of varied sizes, zero-length ones
 * among them), each rank the part mdl_replica_part gives it, except that every byte of a
 * sample is marked with its group's number: the library checks the copies' lengths, not
 * their bytes, so a fetched sample tells which group's copy it came from. Checks:
 *
 *  info     mdl_replica_info against the split the test works out itself (consecutive
 *           ranks, or MPI's node split by MDL_NODE_KEY for group_size 0), and
 *           mdl_replica_part covering the copy exactly once in every group;
 *  fetch    random batches over the whole copy under each backend: byte-exact, and
 *           every byte from the rank's own group;
 *  sampler  an epoch of the built-in sampler (inline and with prefetch 2): every byte
 *           from the own group, and every sample seen exactly once across the whole
 *           job (all groups together), as without groups;
 *  errors   each fails on every rank, never hangs, and leaves no loader behind: a
 *           group_size that does not divide the ranks, a negative one, one that
 *           differs across ranks, a group holding one sample more, a group whose
 *           lengths differ (same count).
 *
 * Usage: replica_test GROUP_SIZE [--seed S]. PASS/FAIL lines on rank 0; exit 1 on a failure.
 */
#include "mdloader.h"
#include "check.h"
#include "common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_SAMPLES = 1200, ITERS = 30, MAX_BATCH = 64 };

static uint64_t g_seed = 1;

/* Sample id's length: 0..300 bytes, about one in 16 empty. */
static uint64_t sample_len(uint64_t id, uint64_t extra_at)
{
    uint64_t h = tc_mix64(id ^ (g_seed << 32));
    uint64_t len = (h & 15) == 0 ? 0 : 1 + (h >> 8) % 300;
    return len + (id == extra_at);
}

static uint8_t sample_byte(uint64_t id, uint64_t k, int group)
{
    return (uint8_t)(tc_mix64(id * 1000003u + k) ^ (uint64_t)group);
}

/* Registers this rank's part of a copy of n samples, marked with `group`; `extra_at`
 * makes that sample one byte longer (for the mismatch case). */
static mdl_status register_part(mdl_loader *h, uint64_t n, int group, uint64_t extra_at)
{
    uint64_t first = 0, count = 0;
    if (mdl_replica_part(h, n, &first, &count) != MDL_OK)
        return MDL_ERR_STATE;
    uint64_t *offsets = malloc((count + 1) * sizeof *offsets);
    offsets[0] = 0;
    for (uint64_t i = 0; i < count; i++)
        offsets[i + 1] = offsets[i] + sample_len(first + i, extra_at);
    uint8_t *data = malloc(offsets[count] + 1);
    for (uint64_t i = 0; i < count; i++)
        for (uint64_t k = 0; k < offsets[i + 1] - offsets[i]; k++)
            data[offsets[i] + k] = sample_byte(first + i, k, group);
    mdl_status st = mdl_register_shard(h, data, offsets, count);
    free(data);
    free(offsets);
    return st;
}

/* Whether samples ids[0..n) in out/offs are exactly this group's copy. */
static int batch_is_own_copy(const uint64_t *ids, size_t n, const uint8_t *out, const uint64_t *offs, int group)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t len = offs[i + 1] - offs[i];
        if (len != sample_len(ids[i], UINT64_MAX))
            return 0;
        for (uint64_t k = 0; k < len; k++)
            if (out[offs[i] + k] != sample_byte(ids[i], k, group))
                return 0;
    }
    return 1;
}

/* The group the test expects for group_size (0: by node, as the library documents). */
static void expected_group(int group_size, int *group, int *groups, int *rank_in, int *size_of)
{
    MPI_Comm split;
    if (group_size > 0) {
        MPI_Comm_split(MPI_COMM_WORLD, g_rank / group_size, g_rank, &split);
    } else {
        MPI_Comm hw;
        const char *key = getenv("MDL_NODE_KEY");
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &hw);
        MPI_Comm_split(hw, key ? atoi(key) : 0, g_rank, &split);
        MPI_Comm_free(&hw);
    }
    MPI_Comm_rank(split, rank_in);
    MPI_Comm_size(split, size_of);
    int lead = *rank_in == 0, *leads = malloc((size_t)g_size * sizeof *leads), lowest = g_rank;
    MPI_Allreduce(MPI_IN_PLACE, &lowest, 1, MPI_INT, MPI_MIN, split);
    MPI_Allgather(&lead, 1, MPI_INT, leads, 1, MPI_INT, MPI_COMM_WORLD);
    *groups = *group = 0;
    for (int r = 0; r < g_size; r++) {
        *groups += leads[r];
        *group += leads[r] && r < lowest;
    }
    free(leads);
    MPI_Comm_free(&split);
}

static void check_fetches(mdl_loader *h, int group, int backend, const char *name)
{
    uint64_t ids[MAX_BATCH], offs[MAX_BATCH + 1];
    uint8_t *out = malloc(MAX_BATCH * 301);
    tc_rng rng = tc_rng_make(g_seed, (uint64_t)g_rank * 7 + (uint64_t)backend);
    int ok = mdl_set_backend(h, (mdl_backend)backend) == MDL_OK;
    for (int it = 0; it < ITERS && ok; it++) {
        size_t n = (size_t)tc_below(&rng, MAX_BATCH + 1);
        for (size_t i = 0; i < n; i++)
            ids[i] = tc_below(&rng, N_SAMPLES);
        ok = mdl_fetch_batch(h, ids, n, out, MAX_BATCH * 301, offs) == MDL_OK &&
             batch_is_own_copy(ids, n, out, offs, group);
    }
    char what[96];
    snprintf(what, sizeof what, "fetch %s: random batches byte-exact, from the own group's copy", name);
    check(ok, what);
    free(out);
}

/* An epoch of the sampler: own group's bytes, and each sample once over the job. */
static void check_epoch(mdl_loader *h, int group, unsigned prefetch)
{
    int ok = mdl_set_prefetch(h, prefetch) == MDL_OK && mdl_epoch_begin(h, g_seed, 3, 16, 1, 0) == MDL_OK;
    int *seen = calloc(N_SAMPLES, sizeof *seen);
    for (;;) {
        const uint64_t *ids, *offs;
        const uint8_t *data;
        size_t n = 0;
        if (!ok || mdl_next_batch(h, &ids, (const void **)&data, &offs, &n) != MDL_OK) {
            ok = 0;
            break;
        }
        if (n == 0)
            break;
        ok = batch_is_own_copy(ids, n, data, offs, group);
        for (size_t i = 0; i < n; i++)
            seen[ids[i]]++;
    }
    MPI_Allreduce(MPI_IN_PLACE, seen, N_SAMPLES, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int once = 1;
    for (int i = 0; i < N_SAMPLES; i++)
        once &= seen[i] == 1;
    char what[120];
    snprintf(what, sizeof what, "sampler (prefetch %u): own group's bytes, every sample once across the job", prefetch);
    check(ok && once, what);
    free(seen);
}

/* A collective call that must fail on every rank, with MDL_ERR_INVALID_ARG on at least
 * one and nothing else than it or MDL_ERR_REMOTE anywhere, naming `needle` there. */
/* The "steps" of the engine named in rank's statistics (-1 when absent). */
static double engine_steps(mdl_loader *h, const char *engine)
{
    static char json[16384];
    char key[64];
    snprintf(key, sizeof key, "\"%s\": {", engine);
    size_t needed = mdl_stats_json(h, json, sizeof json); /* the JSON's length + 1 */
    const char *at = needed > 0 && needed <= sizeof json ? strstr(json, key) : NULL;
    at = at ? strstr(at, "\"steps\":") : NULL;
    return at ? strtod(at + strlen("\"steps\":"), NULL) : -1;
}

static int failed_everywhere(mdl_status st, const char *needle)
{
    char msg[512] = "";
    mdl_last_error(msg, sizeof msg);
    int mine = st == MDL_ERR_INVALID_ARG ? 2 : st == MDL_ERR_REMOTE ? 1 : 0;
    int named = st != MDL_ERR_INVALID_ARG || strstr(msg, needle) != NULL;
    if (!mine || !named)
        fprintf(stderr, "rank %d: status %d, \"%s\" (wanted \"%s\")\n", g_rank, (int)st, msg, needle);
    int worst = mine && named, best = mine;
    MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst == 1 && best == 2;
}

static void check_errors(int group_size, int group, int groups)
{
    mdl_loader *h = NULL;
    if (g_size > 2) {
        mdl_status st = mdl_init_replicated(MPI_COMM_WORLD, g_size - 1, &h);
        check(failed_everywhere(st, "does not divide") && h == NULL, "error: group_size not dividing the ranks");
    }
    mdl_status st = mdl_init_replicated(MPI_COMM_WORLD, g_rank == 0 ? -1 : group_size, &h);
    check(failed_everywhere(st, "group_size is -1") && h == NULL, "error: a negative group_size on one rank");
    if (g_size > 1) {
        st = mdl_init_replicated(MPI_COMM_WORLD, g_rank == 0 ? 1 : g_size, &h);
        check(failed_everywhere(st, "group_size") && h == NULL, "error: group_size differing across ranks");
    }
    if (groups < 2)
        return;
    /* The last group holds one sample more, then (same count) one sample a byte longer. */
    const struct {
        uint64_t n, extra_at;
        const char *needle, *what;
    } cases[] = {
        {N_SAMPLES + 1, UINT64_MAX, "the number of samples a replica group holds", "error: a group holding one sample more"},
        {N_SAMPLES, 7, "the sample lengths a replica group holds", "error: a group whose sample lengths differ"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int odd = group == groups - 1;
        int ok = mdl_init_replicated(MPI_COMM_WORLD, group_size, &h) == MDL_OK;
        st = register_part(h, odd ? cases[c].n : N_SAMPLES, group, odd ? cases[c].extra_at : UINT64_MAX);
        ok = failed_everywhere(st, cases[c].needle) && ok;
        /* Nothing was registered: the loader takes a correct shard after the refusal. */
        ok = register_part(h, N_SAMPLES, group, UINT64_MAX) == MDL_OK && ok;
        ok = mdl_finalize(&h) == MDL_OK && h == NULL && ok;
        check(ok, cases[c].what);
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (argc < 2) {
        if (g_rank == 0)
            fprintf(stderr, "usage: replica_test GROUP_SIZE [--seed S]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int group_size = atoi(argv[1]);
    if (argc > 3 && strcmp(argv[2], "--seed") == 0)
        tc_parse_u64(argv[3], &g_seed);

    int group, groups, rank_in, size_of;
    expected_group(group_size, &group, &groups, &rank_in, &size_of);
    mdl_loader *h = NULL;
    check(mdl_init_replicated(MPI_COMM_WORLD, group_size, &h) == MDL_OK, "mdl_init_replicated");
    uint32_t info[4] = {0};
    int ok = mdl_replica_info(h, &info[0], &info[1], &info[2], &info[3]) == MDL_OK;
    ok = ok && (int)info[0] == group && (int)info[1] == groups && (int)info[2] == rank_in && (int)info[3] == size_of;
    if (!ok)
        fprintf(stderr, "rank %d: replica info %u %u %u %u, expected %d %d %d %d\n", g_rank, info[0], info[1], info[2],
                info[3], group, groups, rank_in, size_of);
    char what[120];
    snprintf(what, sizeof what, "mdl_replica_info: %d groups of %d ranks (group_size %d)", groups, size_of, group_size);
    check(ok, what);

    /* The parts of each group tile the copy: sum of counts and a sum of firsts. */
    uint64_t first = 0, count = 0;
    ok = mdl_replica_part(h, N_SAMPLES, &first, &count) == MDL_OK;
    MPI_Comm grp;
    MPI_Comm_split(MPI_COMM_WORLD, group, g_rank, &grp);
    uint64_t *firsts = malloc((size_t)size_of * sizeof *firsts), *counts = malloc((size_t)size_of * sizeof *counts);
    MPI_Allgather(&first, 1, MPI_UINT64_T, firsts, 1, MPI_UINT64_T, grp);
    MPI_Allgather(&count, 1, MPI_UINT64_T, counts, 1, MPI_UINT64_T, grp);
    uint64_t next = 0;
    for (int r = 0; r < size_of; r++) {
        ok &= firsts[r] == next;
        next += counts[r];
    }
    ok &= next == N_SAMPLES;
    free(firsts);
    free(counts);
    MPI_Comm_free(&grp);
    check(ok, "mdl_replica_part: each group's parts cover the copy once, in rank order");

    /* A NULL out-pointer fails the local call and leaves the other outputs untouched. */
    uint64_t untouched = 77;
    uint32_t info_untouched[3] = {77, 77, 77};
    ok = mdl_replica_part(h, N_SAMPLES, &untouched, NULL) == MDL_ERR_NULL_ARG && untouched == 77;
    ok = ok && mdl_replica_info(h, &info_untouched[0], &info_untouched[1], &info_untouched[2], NULL) == MDL_ERR_NULL_ARG;
    ok = ok && info_untouched[0] == 77 && info_untouched[1] == 77 && info_untouched[2] == 77;
    check(ok, "mdl_replica_part / mdl_replica_info with a NULL output: MDL_ERR_NULL_ARG, nothing written");

    ok = register_part(h, N_SAMPLES, group, UINT64_MAX) == MDL_OK;
    uint64_t n = 0;
    ok = ok && mdl_num_samples(h, &n) == MDL_OK && n == N_SAMPLES;
    check(ok, "register each rank's part; mdl_num_samples is one copy's");

    check_fetches(h, group, MDL_BACKEND_ONESIDED, "onesided");
    check_fetches(h, group, MDL_BACKEND_COLLECTIVE, "collective");
    check_fetches(h, group, MDL_BACKEND_AUTO, "auto");
    check_epoch(h, group, 0);
    check_epoch(h, group, 2);
    /* AUTO decides over the whole job, and whether a step needs an engine at all is
       agreed over the whole job too: every rank ran each engine in the same steps (none
       at all where no step needed one, as with one group per node on one node). */
    double onesided = engine_steps(h, "onesided"), collective = engine_steps(h, "collective");
    check(onesided >= 0 && collective >= 0 && same_on_all_ranks(onesided) && same_on_all_ranks(collective),
          "every rank of every group ran the same engine in every step");
    check(mdl_finalize(&h) == MDL_OK && h == NULL, "mdl_finalize");

    check_errors(group_size, group, groups);

    if (g_rank == 0)
        printf("replica_test (group_size %d, %d ranks): %s\n", group_size, g_size,
               g_failed ? "FAILED" : "all checks passed");
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
