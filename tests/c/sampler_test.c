/*
 * The built-in sampler (mdl_epoch_begin / mdl_next_batch / mdl_epoch_seek /
 * mdl_set_prefetch), checked on every rank:
 *  - the epoch's order is the documented permutation (pinned values, whatever the
 *    MPI, the rank count or the engine);
 *  - every sample exactly once per epoch with drop_last, DistributedSampler's
 *    padding counts without it, and every byte of every batch right;
 *  - identical id sequences for every engine and prefetch depth;
 *  - mdl_epoch_seek resumes exactly where an uninterrupted run would be;
 *  - misuse fails on every rank without a hang: mdl_fetch_batch during an epoch,
 *    arguments differing across ranks, mdl_set_backend while prefetching.
 *
 * Usage: sampler_test [--samples N] (default 1000; the pinned values need 1000)
 * Prints PASS/FAIL lines on rank 0; exit status 0 when everything passed.
 */
#include "mdloader.h"
#include "check.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t g_n = 1000;

/* The dataset: sample g has (g * 37) % 300 bytes, byte k is (g * 131 + k) & 0xff;
   rank r holds ids [first(r), first(r + 1)), an uneven split. */
static uint64_t first_id(int r)
{
    return r == g_size ? g_n : (g_n * (uint64_t)r * (uint64_t)r) / ((uint64_t)g_size * (uint64_t)g_size);
}
static uint64_t size_of(uint64_t g) { return (g * 37) % 300; }
static uint8_t byte_of(uint64_t g, uint64_t k) { return (uint8_t)((g * 131 + k) & 0xff); }


static uint64_t mix(uint64_t h, uint64_t x)
{
    h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h;
}

typedef struct run_result {
    uint64_t steps, samples, hash; /* hash of this rank's id sequence */
    int bytes_ok;
    uint64_t *count; /* per global id: how often this rank got it */
    int misaligned;  /* batches whose data did not start on a page (documented) */
} run_result;

/* Runs the current epoch to its end from where it stands. */
static mdl_status drain(mdl_loader *h, run_result *res)
{
    for (;;) {
        const uint64_t *ids, *offs;
        const void *data;
        size_t n;
        mdl_status st = mdl_next_batch(h, &ids, &data, &offs, &n);
        if (st != MDL_OK)
            return st;
        if (n == 0)
            return MDL_OK;
        res->steps++;
        res->misaligned += (uintptr_t)data % 4096 != 0;
        for (size_t k = 0; k < n; k++) {
            const uint8_t *p = (const uint8_t *)data + offs[k];
            uint64_t len = offs[k + 1] - offs[k];
            if (len != size_of(ids[k]))
                res->bytes_ok = 0;
            for (uint64_t b = 0; b < len && res->bytes_ok; b++)
                if (p[b] != byte_of(ids[k], b))
                    res->bytes_ok = 0;
            res->hash = mix(res->hash, ids[k]);
            if (res->count)
                res->count[ids[k]]++;
            res->samples++;
        }
    }
}

static run_result run_epoch(mdl_loader *h, mdl_backend b, uint32_t depth, uint64_t seed, uint64_t epoch,
                            uint64_t batch, int shuffle, int drop_last, uint64_t *count)
{
    run_result res = {0, 0, 0, 1, count, 0};
    mdl_status st = mdl_set_backend(h, b);
    if (st == MDL_OK)
        st = mdl_set_prefetch(h, depth);
    if (st == MDL_OK)
        st = mdl_epoch_begin(h, seed, epoch, batch, shuffle, drop_last);
    if (st == MDL_OK)
        st = drain(h, &res);
    if (st != MDL_OK) {
        char msg[512];
        mdl_last_error(msg, sizeof msg);
        fprintf(stderr, "[rank %d] epoch failed: %s (%s)\n", g_rank, mdl_status_string(st), msg);
        res.bytes_ok = 0;
    }
    return res;
}


int main(int argc, char **argv)
{
    /* --funneled: this rank asks for MPI_THREAD_FUNNELED only (an MPMD launch gives the
       ranks different thread levels: the library must then fetch without prefetch on
       every rank, as the header promises). The test expects what the lowest level
       allows. */
    int provided, funneled = 0;
    for (int i = 1; i < argc; i++)
        funneled |= !strcmp(argv[i], "--funneled");
    MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    MPI_Allreduce(MPI_IN_PLACE, &provided, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--samples"))
            g_n = strtoull(argv[++i], NULL, 10);
    if (g_rank == 0)
        printf("sampler_test: %d ranks, %llu samples, thread level %s\n", g_size, (unsigned long long)g_n,
               provided == MPI_THREAD_MULTIPLE ? "MULTIPLE (prefetch on a thread)" : "below MULTIPLE (no prefetch)");

    /* This rank's shard. */
    uint64_t lo = first_id(g_rank), hi = first_id(g_rank + 1), n_local = hi - lo;
    uint64_t *offsets;
    uint8_t *data;
    build_shard(lo, n_local, size_of, byte_of, &offsets, &data);

    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK && mdl_register_shard(h, data, offsets, n_local) == MDL_OK,
          "init + register");

    /* The documented permutation, through the C API: with batch 1 and no padding,
       rank r's k-th sample is position r + k * P of the order. */
    if (g_n == 1000) {
        static const uint64_t pinned[8] = {323, 698, 341, 780, 723, 929, 760, 87};
        uint64_t mine[8] = {0}, all[8] = {0};
        mdl_set_prefetch(h, 0);
        mdl_status st = mdl_epoch_begin(h, 12345, 7, 1, 1, 0);
        for (uint64_t step = 0; st == MDL_OK; step++) {
            const uint64_t *ids, *offs;
            const void *d;
            size_t n;
            st = mdl_next_batch(h, &ids, &d, &offs, &n);
            if (st != MDL_OK || n == 0)
                break;
            uint64_t pos = (uint64_t)g_rank + step * (uint64_t)g_size;
            if (pos < 8)
                mine[pos] = ids[0];
        }
        MPI_Allreduce(mine, all, 8, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
        check(st == MDL_OK && !memcmp(all, pinned, sizeof pinned), "pinned permutation (seed 12345, epoch 7, N 1000)");
    }

    /* mdl_epoch_ids, which needs no loader, gives what mdl_next_batch gives at every
       step (with and without drop_last), the pinned order with one rank, and refuses
       bad arguments. */
    int ids_same = 1;
    for (int drop = 0; drop <= 1; drop++) {
        mdl_set_prefetch(h, 0);
        mdl_status st = mdl_epoch_begin(h, 42, 3, 5, 1, drop);
        for (uint64_t step = 0; st == MDL_OK; step++) {
            const uint64_t *ids, *offs;
            const void *d;
            size_t n = 0, m = 99;
            uint64_t got[5];
            st = mdl_next_batch(h, &ids, &d, &offs, &n);
            mdl_status by_ids = mdl_epoch_ids(g_n, (uint64_t)g_size, (uint64_t)g_rank, 42, 3, 5, 1, drop, step, got, 5, &m);
            if (st != MDL_OK || by_ids != MDL_OK || m != n || (n && memcmp(got, ids, n * sizeof *ids)))
                ids_same = 0;
            if (n == 0)
                break;
        }
        ids_same &= st == MDL_OK;
    }
    check(ids_same, "mdl_epoch_ids: the ids of mdl_next_batch at every step, with and without drop_last");
    if (g_n == 1000) {
        static const uint64_t pinned[8] = {323, 698, 341, 780, 723, 929, 760, 87};
        uint64_t got[8];
        size_t m = 0;
        check(mdl_epoch_ids(1000, 1, 0, 12345, 7, 8, 1, 0, 0, got, 8, &m) == MDL_OK && m == 8 &&
                  !memcmp(got, pinned, sizeof pinned),
              "mdl_epoch_ids: the pinned permutation at one rank");
    }
    {
        uint64_t got[4];
        size_t m = 0;
        int refused = mdl_epoch_ids(10, 0, 0, 0, 0, 1, 1, 0, 0, got, 4, &m) == MDL_ERR_INVALID_ARG &&
                      mdl_epoch_ids(10, 2, 2, 0, 0, 1, 1, 0, 0, got, 4, &m) == MDL_ERR_INVALID_ARG &&
                      mdl_epoch_ids(10, 2, 0, 0, 0, 0, 1, 0, 0, got, 4, &m) == MDL_ERR_INVALID_ARG &&
                      mdl_epoch_ids(10, 1, 0, 0, 0, 4, 1, 0, 0, NULL, 4, &m) == MDL_ERR_NULL_ARG &&
                      mdl_epoch_ids(10, 1, 0, 0, 0, 4, 1, 0, 0, got, 4, NULL) == MDL_ERR_NULL_ARG &&
                      mdl_epoch_ids(10, 1, 0, 0, 0, 8, 1, 0, 0, got, 4, &m) == MDL_ERR_BUFFER_TOO_SMALL && m == 8 &&
                      mdl_epoch_ids(10, 1, 0, 0, 0, 8, 1, 0, 2, NULL, 0, &m) == MDL_OK && m == 0;
        check(refused, "mdl_epoch_ids: bad arguments refused, a small buffer says the count needed");
    }

    /* (batch, shuffle, drop_last) cases, every engine and prefetch depth. */
    static const struct { uint64_t batch; int shuffle, drop_last; } cases[] = {
        {16, 1, 1}, {16, 1, 0}, {7, 0, 0}, {1000, 1, 0}, {3, 1, 1},
    };
    static const mdl_backend engines[] = {MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO};
    uint64_t *count = calloc(g_n, sizeof *count), *total = calloc(g_n, sizeof *total);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint64_t batch = cases[c].batch;
        int shuffle = cases[c].shuffle, drop = cases[c].drop_last;
        uint64_t per_rank = drop ? g_n / (uint64_t)g_size : (g_n + (uint64_t)g_size - 1) / (uint64_t)g_size;
        uint64_t ref_hash = 0;
        int all_same = 1, all_bytes = 1, counts_ok = 1, steps_ok = 1, misaligned = 0;
        for (size_t e = 0; e < 3; e++)
            for (uint32_t depth = 0; depth <= 2; depth++) {
                memset(count, 0, g_n * sizeof *count);
                run_result r = run_epoch(h, engines[e], depth, 99, c, batch, shuffle, drop, count);
                if (e == 0 && depth == 0)
                    ref_hash = r.hash;
                all_same &= r.hash == ref_hash;
                all_bytes &= r.bytes_ok;
                misaligned += r.misaligned;
                steps_ok &= r.samples == per_rank && r.steps == (per_rank + batch - 1) / batch;
                MPI_Allreduce(count, total, (int)g_n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
                uint64_t sum = 0, max = 0;
                for (uint64_t g = 0; g < g_n; g++) {
                    sum += total[g];
                    max = total[g] > max ? total[g] : max;
                    if (!drop && total[g] == 0)
                        counts_ok = 0; /* padding wraps around: nothing is left out */
                }
                counts_ok &= sum == per_rank * (uint64_t)g_size && max <= (drop ? 1 : (per_rank * g_size + g_n - 1) / g_n);
            }
        char what[200];
        snprintf(what, sizeof what, "batch %llu shuffle %d drop_last %d: %llu per rank, ids identical for 3 engines x prefetch 0-2",
                 (unsigned long long)batch, shuffle, drop, (unsigned long long)per_rank);
        check(all_same && steps_ok, what);
        snprintf(what, sizeof what, "batch %llu shuffle %d drop_last %d: every byte right, each sample %s",
                 (unsigned long long)batch, shuffle, drop, drop ? "at most once" : "at least once (padding)");
        check(all_bytes && counts_ok, what);
        snprintf(what, sizeof what, "batch %llu shuffle %d drop_last %d: every batch's data starts on a page (%d did not)",
                 (unsigned long long)batch, shuffle, drop, misaligned);
        check(misaligned == 0, what);
    }

    /* Seek: an interrupted run resumed at step s gives the uninterrupted run's tail. */
    for (uint32_t depth = 0; depth <= 2; depth += 2) {
        run_result whole = {0, 0, 0, 1, NULL, 0}, tail = {0, 0, 0, 1, NULL, 0};
        mdl_set_prefetch(h, depth);
        mdl_epoch_begin(h, 5, 1, 10, 1, 0);
        uint64_t skip = 3;
        for (uint64_t s = 0; s < skip; s++) { /* the uninterrupted run's head */
            const uint64_t *ids, *offs;
            const void *d;
            size_t n;
            mdl_next_batch(h, &ids, &d, &offs, &n);
        }
        drain(h, &whole);
        mdl_epoch_begin(h, 5, 1, 10, 1, 0);
        const uint64_t *ids, *offs;
        const void *d;
        size_t n;
        mdl_next_batch(h, &ids, &d, &offs, &n); /* one step, then "restart from a checkpoint" */
        mdl_status st = mdl_epoch_seek(h, skip);
        if (st == MDL_OK)
            st = drain(h, &tail);
        char what[100];
        snprintf(what, sizeof what, "mdl_epoch_seek(%llu) reproduces the uninterrupted run (prefetch %u)",
                 (unsigned long long)skip, depth);
        check(st == MDL_OK && tail.hash == whole.hash && tail.steps == whole.steps && tail.bytes_ok, what);

        /* A refused seek leaves the epoch where it was. */
        run_result after = {0, 0, 0, 1, NULL, 0};
        mdl_epoch_begin(h, 5, 1, 10, 1, 0);
        for (uint64_t s = 0; s < skip; s++)
            mdl_next_batch(h, &ids, &d, &offs, &n);
        st = mdl_epoch_seek(h, 1u << 30);
        mdl_status drained = drain(h, &after);
        snprintf(what, sizeof what, "a refused seek (past the end) leaves the epoch in place (prefetch %u)", depth);
        check(st == MDL_ERR_INVALID_ARG && drained == MDL_OK && after.hash == whole.hash && after.steps == whole.steps,
              what);

        /* A refused begin (batch size 0 on the last rank) leaves the epoch where it was. */
        run_result kept = {0, 0, 0, 1, NULL, 0};
        mdl_epoch_begin(h, 5, 1, 10, 1, 0);
        for (uint64_t s = 0; s < skip; s++)
            mdl_next_batch(h, &ids, &d, &offs, &n);
        st = mdl_epoch_begin(h, 6, 0, g_rank == g_size - 1 ? 0 : 10, 1, 0);
        drained = drain(h, &kept);
        snprintf(what, sizeof what, "a refused mdl_epoch_begin leaves the epoch in place (prefetch %u)", depth);
        check(st != MDL_OK && drained == MDL_OK && kept.hash == whole.hash && kept.steps == whole.steps, what);
    }

    /* Misuse, each failing on every rank without a hang, and the loader usable after. */
    mdl_set_prefetch(h, 1);
    mdl_epoch_begin(h, 1, 1, 8, 1, 0);
    uint64_t id = 0, off[2];
    uint8_t buf[512];
    check(mdl_fetch_batch(h, &id, 1, buf, sizeof buf, off) == MDL_ERR_STATE, "mdl_fetch_batch during an epoch: MDL_ERR_STATE");
    if (provided == MPI_THREAD_MULTIPLE)
        check(mdl_set_backend(h, MDL_BACKEND_COLLECTIVE) == MDL_ERR_STATE,
              "mdl_set_backend while prefetching: MDL_ERR_STATE");
    run_result rest = {0, 0, 0, 1, NULL, 0};
    check(drain(h, &rest) == MDL_OK && rest.bytes_ok, "the epoch goes on after refused calls");
    check(mdl_fetch_batch(h, &id, 1, buf, sizeof buf, off) == MDL_OK, "mdl_fetch_batch after the epoch ended");
    mdl_status st = mdl_epoch_begin(h, 1, 1, g_rank == g_size - 1 ? 9 : 8, 1, 0);
    check(g_size == 1 ? st == MDL_OK : st == MDL_ERR_INVALID_ARG, "batch_size differing on one rank: MDL_ERR_INVALID_ARG everywhere");
    st = mdl_epoch_seek(h, 1u << 30);
    check(st == MDL_ERR_INVALID_ARG || (g_size > 1 && st == MDL_ERR_STATE), "seek past the end: refused on every rank");
    check(mdl_epoch_begin(h, 1, 1, 0, 1, 0) == MDL_ERR_INVALID_ARG, "batch_size 0: MDL_ERR_INVALID_ARG");
    /* Refused begins and seeks leave the epoch in progress (at one rank the batch-9 one)
       where it was: finish it before the next. */
    run_result leftover = {0, 0, 0, 1, NULL, 0};
    check(drain(h, &leftover) == MDL_OK, "the epoch left in place by refused calls ends normally");
    run_result again = run_epoch(h, MDL_BACKEND_AUTO, 1, 1, 2, 32, 1, 1, NULL);
    check(again.bytes_ok && same_on_all_ranks(again.steps), "a new epoch works after the errors");
    /* Finalize with an epoch in flight: the prefetch thread stops cleanly. */
    mdl_epoch_begin(h, 1, 3, 4, 1, 0);
    const uint64_t *ids;
    const void *d;
    const uint64_t *offs;
    size_t n;
    mdl_next_batch(h, &ids, &d, &offs, &n);
    check(mdl_finalize(&h) == MDL_OK && h == NULL, "finalize during a prefetching epoch");

    free(count);
    free(total);
    free(data);
    free(offsets);
    if (g_rank == 0)
        printf("sampler_test: %s\n", g_failed ? "FAILED" : "all checks passed");
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
