/*
 * node_local_test: the node-local path (MDL_NODE_LOCAL=on), through the C API.
 *
 * The test works out for itself which ranks share a node, the way the library is
 * documented to: MPI's shared-memory node (MPI_Comm_split_type), split further by
 * MDL_NODE_KEY (tests/node_key.sh sets it per rank to emulate hosts on one machine;
 * under network namespaces MPI's own split already tells the hosts apart). From that
 * it knows, for every batch, which bytes must come through the node-local path and
 * which through an engine, and checks the library's statistics against it:
 *
 *  node    batches of samples held on the rank's own node only, under each backend:
 *          every byte checked, all node peers' bytes counted as node-local, nothing
 *          remote, and no engine runs in any step (no rank has a remote sample);
 *  mixed   random batches over the whole job (own, node and other nodes' samples,
 *          zero-length samples, repeats), under each backend: byte-exact and
 *          identical to a second loader with MDL_NODE_LOCAL=off fetching the same
 *          batches; node-local and remote bytes exactly as expected; an engine runs
 *          exactly in the steps where some rank has a remote sample;
 *  job     mdl_stats_json_job's node-local bytes are the sum of every rank's;
 *  sampler an epoch of the built-in sampler (steps agreed ahead): every byte checked,
 *          every sample seen once, node-local bytes as expected.
 *
 * --no-sharing: the MPI is expected not to share memory (say Open MPI with only its pt2pt
 * one-sided component): the library must fall back, on every rank, to the engines for
 * every other rank's sample, and the same checks run with every rank a node of its own.
 *
 * Usage: node_local_test [--iters N] [--seed S] [--no-sharing]. PASS/FAIL lines on rank 0.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "mdloader.h"
#include "check.h"
#include "common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tc_dataset g_d;
static int *g_node_of; /* lowest world rank of each rank's node */

/* The counters this test follows, from mdl_stats_json. */
typedef struct counters {
    double node_bytes, remote_bytes, engine_free, onesided, collective;
} counters;

static counters read_counters(const mdl_loader *h)
{
    size_t len = mdl_stats_json(h, NULL, 0);
    char *js = malloc(len + 1);
    mdl_stats_json(h, js, len + 1);
    counters c = {tc_json_number(js, "\"node_local\": {", "bytes"), tc_json_number(js, NULL, "bytes_remote"),
                  tc_json_number(js, NULL, "engine_free_steps"), tc_json_number(js, "\"onesided\": {", "steps"),
                  tc_json_number(js, "\"collective\": {", "steps")};
    free(js);
    return c;
}

/* This rank's node as the library sees it: MPI's shared-memory node split by
   MDL_NODE_KEY, or this rank alone when memory cannot be shared. */
static void find_nodes(int sharing)
{
    MPI_Comm hw, node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, g_rank, MPI_INFO_NULL, &hw);
    const char *key = getenv("MDL_NODE_KEY");
    MPI_Comm_split(hw, key ? atoi(key) : 0, g_rank, &node);
    int leader = g_rank;
    if (sharing)
        MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
    g_node_of = malloc((size_t)g_size * sizeof *g_node_of);
    MPI_Allgather(&leader, 1, MPI_INT, g_node_of, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Comm_free(&node);
    MPI_Comm_free(&hw);
}

static int same_node(int a, int b) { return g_node_of[a] == g_node_of[b]; }

/* The job's total of a per-rank amount, for the messages. */
static double job_sum(double v)
{
    double sum = 0;
    MPI_Allreduce(&v, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum;
}

/* Bytes of ids held by node peers (not this rank) and by other nodes. */
static void expected(const uint64_t *ids, size_t n, uint64_t *node, uint64_t *remote)
{
    *node = *remote = 0;
    for (size_t k = 0; k < n; k++) {
        int owner = tc_owner(&g_d, ids[k]);
        uint64_t len = tc_size_of(&g_d, ids[k]);
        if (owner == g_rank)
            continue;
        if (same_node(owner, g_rank))
            *node += len;
        else
            *remote += len;
    }
}

/* Whether the n samples at out/offs are exactly ids[]. */
static int verify(const uint64_t *ids, size_t n, const uint8_t *out, const uint64_t *offs)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t len = offs[k + 1] - offs[k];
        if (len != tc_size_of(&g_d, ids[k]) || tc_verify_sample(&g_d, ids[k], out + offs[k], len) >= 0) {
            fprintf(stderr, "rank %d: sample ids[%zu] = %llu wrong\n", g_rank, k, (unsigned long long)ids[k]);
            return 0;
        }
    }
    return 1;
}

static mdl_loader *open_loader(const char *node_local)
{
    setenv("MDL_NODE_LOCAL", node_local, 1);
    mdl_loader *h = NULL;
    uint8_t *data = NULL;
    uint64_t *offsets = NULL;
    uint64_t n = tc_build_shard(&g_d, g_rank, &data, &offsets);
    if (mdl_init(MPI_COMM_WORLD, &h) != MDL_OK || mdl_register_shard(h, data, offsets, n) != MDL_OK) {
        char why[256];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "rank %d: loader with MDL_NODE_LOCAL=%s: %s\n", g_rank, node_local, why);
        mdl_finalize(&h);
    }
    free(data);
    free(offsets);
    return h;
}

#define MAX_BATCH 400

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    uint64_t iters = 60, seed = 1;
    int sharing = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-sharing"))
            sharing = 0;
        else if (i + 1 == argc)
            break;
        else if (!strcmp(argv[i], "--iters"))
            tc_parse_u64(argv[++i], &iters);
        else if (!strcmp(argv[i], "--seed"))
            tc_parse_u64(argv[++i], &seed);
    }
    find_nodes(sharing);
    if (tc_dataset_init(&g_d, g_size, 300, seed, 1) != 0)
        MPI_Abort(MPI_COMM_WORLD, 1);
    /* Peers of this node holding samples (common.h leaves rank 1 empty from 3 ranks). */
    int peers = 0, nodes = 0;
    for (int r = 0; r < g_size; r++) {
        peers += r != g_rank && same_node(r, g_rank) && tc_n_local(&g_d, r) > 0;
        nodes += g_node_of[r] == r;
    }
    uint64_t total = tc_total(&g_d);
    char what[256];

    mdl_loader *on = open_loader("on"), *off = open_loader("off");
    check(on && off, "a loader with MDL_NODE_LOCAL=on and one with off");
    if (!on || !off) {
        MPI_Finalize();
        return 1;
    }
    uint64_t *ids = malloc(MAX_BATCH * sizeof *ids);
    uint64_t *offs = malloc((MAX_BATCH + 1) * sizeof *offs), *offs2 = malloc((MAX_BATCH + 1) * sizeof *offs2);
    size_t cap = MAX_BATCH * 12000;
    uint8_t *out = malloc(cap), *out2 = malloc(cap);
    /* This node's ids (own and peers'), to draw node-only batches from. */
    uint64_t *mine = malloc(total * sizeof *mine), n_mine = 0;
    for (uint64_t g = 0; g < total; g++)
        if (same_node(tc_owner(&g_d, g), g_rank))
            mine[n_mine++] = g;

    static const mdl_backend backends[] = {MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO};
    static const char *names[] = {"onesided", "collective", "auto"};
    tc_rng rng = tc_rng_make(seed, (uint64_t)g_rank);
    for (int b = 0; b < 3; b++) {
        mdl_set_backend(on, backends[b]);
        mdl_set_backend(off, backends[b]);

        /* node: only samples of this rank's node. */
        counters before = read_counters(on);
        int ok = 1;
        uint64_t want_node = 0, got_samples = 0;
        for (uint64_t it = 0; it < iters; it++) {
            size_t n = n_mine ? (size_t)tc_below(&rng, MAX_BATCH + 1) : 0;
            for (size_t k = 0; k < n; k++)
                ids[k] = mine[tc_below(&rng, n_mine)];
            uint64_t node, remote;
            expected(ids, n, &node, &remote);
            want_node += node;
            got_samples += n;
            ok &= mdl_fetch_batch(on, ids, n, out, cap, offs) == MDL_OK && verify(ids, n, out, offs);
        }
        counters after = read_counters(on);
        snprintf(what, sizeof what, "node/%s: %llu batches of this node's samples byte-exact, %.0f node-local bytes (job) as expected, none remote",
                 names[b], (unsigned long long)iters, job_sum(after.node_bytes - before.node_bytes));
        check(ok && after.node_bytes - before.node_bytes == (double)want_node && after.remote_bytes == before.remote_bytes &&
                  (peers == 0 || want_node > 0),
              what);
        snprintf(what, sizeof what, "node/%s: no engine ran in any of the %llu steps", names[b], (unsigned long long)iters);
        check(after.engine_free - before.engine_free == (double)iters && after.onesided == before.onesided &&
                  after.collective == before.collective,
              what);

        /* mixed: anything, compared with the loader without the node-local path. */
        before = read_counters(on);
        ok = 1;
        int same = 1;
        uint64_t want_remote = 0, engine_steps = 0;
        want_node = 0;
        for (uint64_t it = 0; it < iters; it++) {
            size_t n = (size_t)tc_below(&rng, MAX_BATCH + 1);
            for (size_t k = 0; k < n; k++)
                ids[k] = tc_below(&rng, total);
            uint64_t node, remote;
            expected(ids, n, &node, &remote);
            want_node += node;
            want_remote += remote;
            /* An engine runs when any rank has a remote sample (not merely remote bytes:
               a zero-length sample of another node is no sample to move). */
            int has_remote = 0, any = 0;
            for (size_t k = 0; k < n; k++)
                has_remote |= tc_size_of(&g_d, ids[k]) > 0 && !same_node(tc_owner(&g_d, ids[k]), g_rank);
            MPI_Allreduce(&has_remote, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            engine_steps += any;
            ok &= mdl_fetch_batch(on, ids, n, out, cap, offs) == MDL_OK && verify(ids, n, out, offs);
            ok &= mdl_fetch_batch(off, ids, n, out2, cap, offs2) == MDL_OK;
            same &= !memcmp(offs, offs2, (n + 1) * sizeof *offs) && !memcmp(out, out2, offs[n]);
        }
        after = read_counters(on);
        snprintf(what, sizeof what,
                 "mixed/%s: %llu random batches byte-exact and identical with MDL_NODE_LOCAL=off; %.0f node-local and %.0f remote bytes (job) as expected",
                 names[b], (unsigned long long)iters, job_sum(after.node_bytes - before.node_bytes),
                 job_sum(after.remote_bytes - before.remote_bytes));
        check(ok && same && after.node_bytes - before.node_bytes == (double)want_node &&
                  after.remote_bytes - before.remote_bytes == (double)want_remote,
              what);
        double engines = (after.onesided - before.onesided) + (after.collective - before.collective);
        snprintf(what, sizeof what, "mixed/%s: an engine ran in exactly the %llu steps with a remote sample on some rank (%d nodes)",
                 names[b], (unsigned long long)engine_steps, nodes);
        check(engines == (double)engine_steps && after.engine_free - before.engine_free == (double)(iters - engine_steps) &&
                  (nodes == 1 || engine_steps > 0),
              what);
        snprintf(what, sizeof what, "mixed/%s: the same engine on every rank in every step (%.0f one-sided, %.0f collective)", names[b],
                 after.onesided - before.onesided, after.collective - before.collective);
        check(same_on_all_ranks(after.onesided) && same_on_all_ranks(after.collective), what);
    }
    mdl_set_backend(on, MDL_BACKEND_AUTO);

    /* The job's statistics: node-local bytes summed over the ranks. */
    {
        size_t needed = 0;
        mdl_stats_json_job(on, NULL, 0, &needed);
        char *js = malloc(needed + 1);
        int ok = mdl_stats_json_job(on, js, needed + 1, &needed) == MDL_OK;
        double job = ok ? tc_json_number(js, "\"node_local\": {", "bytes") : -1;
        double mine = read_counters(on).node_bytes;
        snprintf(what, sizeof what, "mdl_stats_json_job: %.0f node-local bytes, the sum of every rank's", job);
        check(ok && job == job_sum(mine), what);
        free(js);
    }

    /* sampler: an epoch, steps agreed ahead. */
    counters before = read_counters(on);
    unsigned char *seen = calloc(total, 1);
    int ok = mdl_epoch_begin(on, seed, 0, 64, 1, 1) == MDL_OK;
    uint64_t want_node = 0, steps = 0, fetched = 0;
    for (;;) {
        const uint64_t *bids, *boffs;
        const void *bdata;
        size_t n = 0;
        if (mdl_next_batch(on, &bids, &bdata, &boffs, &n) != MDL_OK) {
            ok = 0;
            break;
        }
        if (n == 0)
            break;
        steps++;
        ok &= verify(bids, n, bdata, boffs);
        uint64_t node, remote;
        expected(bids, n, &node, &remote);
        want_node += node;
        for (size_t k = 0; k < n; k++)
            seen[bids[k]] = 1;
        fetched += n;
    }
    MPI_Allreduce(MPI_IN_PLACE, seen, (int)total, MPI_UNSIGNED_CHAR, MPI_MAX, MPI_COMM_WORLD);
    uint64_t distinct = 0;
    for (uint64_t g = 0; g < total; g++)
        distinct += seen[g];
    MPI_Allreduce(MPI_IN_PLACE, &fetched, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    counters after = read_counters(on);
    snprintf(what, sizeof what, "sampler: an epoch of %llu steps byte-exact, %llu distinct samples of %llu fetched once each, %.0f node-local bytes (job) as expected",
             (unsigned long long)steps, (unsigned long long)distinct, (unsigned long long)fetched,
             job_sum(after.node_bytes - before.node_bytes));
    check(ok && steps > 0 && distinct == fetched && after.node_bytes - before.node_bytes == (double)want_node, what);

    check(mdl_finalize(&on) == MDL_OK && mdl_finalize(&off) == MDL_OK && !on && !off, "finalize both loaders");
    free(seen);
    free(mine);
    free(ids);
    free(offs);
    free(offs2);
    free(out);
    free(out2);
    free(g_node_of);
    tc_dataset_free(&g_d);
    if (g_rank == 0 && g_failed)
        printf("node_local_test: %d checks failed\n", g_failed);
    else if (g_rank == 0)
        printf("node_local_test: all checks passed\n");
    MPI_Finalize();
    return g_failed != 0;
}
