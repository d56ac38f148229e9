/*
 * mdl_epoch_begin_ids: an epoch of the caller's own batches (a framework's sampler),
 * run as the built-in sampler's: steps agreed ahead, prefetch, seek.
 *
 * Every rank draws its own order (ids of every rank's shard, repeats allowed, batches
 * of 1 .. MAX_BATCH ids) with the same number of steps, and checks each batch's
 * ids and bytes, with each engine and with prefetch 0 and 2. Then: a seek; refused
 * begins (steps that differ across ranks, an id out of range, an empty batch, offsets
 * that decrease or do not start at 0, a NULL array) fail on every rank and leave the running epoch where it was;
 * mdl_fetch_batch is refused during such an epoch. A batch too large for one rank's
 * memory (an address-space limit set after the begin) fails its step on every rank.
 *
 * Usage: given_order_test [--funneled]   (any number of ranks)
 */
#include "mdloader.h"
#include "check.h"
#include "common.h"
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

enum { STEPS = 23, MAX_BATCH = 40 };

/* The dataset: sample g has (g * 37) % 300 bytes, byte k is (g * 131 + k) & 0xff;
   rank r holds ids [first(r), first(r + 1)), an uneven split. */
static const uint64_t g_n = 997;
static uint64_t first_id(int r)
{
    return r == g_size ? g_n : (g_n * (uint64_t)r * (uint64_t)r) / ((uint64_t)g_size * (uint64_t)g_size);
}
static uint64_t size_of(uint64_t g) { return (g * 37) % 300; }
static uint8_t byte_of(uint64_t g, uint64_t k) { return (uint8_t)((g * 131 + k) & 0xff); }

/* This rank's order for `round`: STEPS batches of 1 .. MAX_BATCH ids each. */
typedef struct order {
    uint64_t ids[STEPS * MAX_BATCH];
    uint64_t bounds[STEPS + 1];
} order;

static void draw_order(order *o, uint64_t round)
{
    tc_rng rng = tc_rng_make(round, (uint64_t)g_rank);
    o->bounds[0] = 0;
    for (int s = 0; s < STEPS; s++) {
        uint64_t n = 1 + tc_below(&rng, MAX_BATCH);
        for (uint64_t k = 0; k < n; k++)
            o->ids[o->bounds[s] + k] = tc_below(&rng, g_n);
        o->bounds[s + 1] = o->bounds[s] + n;
    }
}

static void say_error(const char *what, mdl_status st)
{
    char msg[512];
    mdl_last_error(msg, sizeof msg);
    fprintf(stderr, "[rank %d] %s: %s (%s)\n", g_rank, what, mdl_status_string(st), msg);
}

/* Takes the epoch's batches from step `from` to its end; whether each is step s's of
   `o`, byte for byte, and the end comes after the last step. */
static int batches_are(mdl_loader *h, const order *o, int from)
{
    int ok = 1;
    for (int s = from;; s++) {
        const uint64_t *ids, *offs;
        const void *data;
        size_t n = 99;
        mdl_status st = mdl_next_batch(h, &ids, &data, &offs, &n);
        if (st != MDL_OK) {
            say_error("mdl_next_batch", st);
            return 0;
        }
        if (s == STEPS)
            return ok && n == 0;
        uint64_t want = o->bounds[s + 1] - o->bounds[s];
        if (n != want || (n && memcmp(ids, o->ids + o->bounds[s], n * sizeof *ids))) {
            fprintf(stderr, "[rank %d] step %d: %zu ids, wanted %llu\n", g_rank, s, n, (unsigned long long)want);
            ok = 0;
            continue;
        }
        for (size_t k = 0; k < n && ok; k++) {
            const uint8_t *p = (const uint8_t *)data + offs[k];
            ok = offs[k + 1] - offs[k] == size_of(ids[k]);
            for (uint64_t b = 0; ok && b < size_of(ids[k]); b++)
                ok = p[b] == byte_of(ids[k], b);
        }
    }
}

/* A begin that must fail on every rank: `bad` on `culprit`, the good order elsewhere.
   The culprit must get `its`, the others MDL_ERR_REMOTE (or `its` where a difference
   is everyone's fault). */
static int refused_everywhere(mdl_status st, int culprit, mdl_status its, int all_get_its)
{
    mdl_status want = (g_rank == culprit || all_get_its) ? its : MDL_ERR_REMOTE;
    if (st != want)
        say_error("refused begin", st);
    return st == want;
}

int main(int argc, char **argv)
{
    int provided, funneled = 0;
    for (int i = 1; i < argc; i++)
        funneled |= !strcmp(argv[i], "--funneled");
    MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    if (g_rank == 0)
        printf("given_order_test: %d ranks, %llu samples\n", g_size, (unsigned long long)g_n);

    uint64_t lo = first_id(g_rank), hi = first_id(g_rank + 1), n_local = hi - lo;
    uint64_t *offsets;
    uint8_t *data;
    build_shard(lo, n_local, size_of, byte_of, &offsets, &data);
    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK && mdl_register_shard(h, data, offsets, n_local) == MDL_OK,
          "init + register");

    static order o, bad;
    static const mdl_backend engines[] = {MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO};
    static const char *names[] = {"one-sided", "collective", "auto"};
    for (int e = 0; e < 3; e++) {
        for (uint32_t depth = 0; depth <= 2; depth += 2) {
            draw_order(&o, 10 * (uint64_t)e + depth);
            mdl_status st = mdl_set_backend(h, engines[e]);
            if (st == MDL_OK)
                st = mdl_set_prefetch(h, depth);
            if (st == MDL_OK)
                st = mdl_epoch_begin_ids(h, o.ids, o.bounds, STEPS);
            if (st != MDL_OK)
                say_error("mdl_epoch_begin_ids", st);
            char what[128];
            snprintf(what, sizeof what, "%s, prefetch %u: every rank's own batches, ids and bytes, then the end",
                     names[e], depth);
            check(st == MDL_OK && batches_are(h, &o, 0), what);
        }
    }
    mdl_set_backend(h, MDL_BACKEND_AUTO);
    mdl_set_prefetch(h, 2);

    /* A seek restarts the given order at a step; a refused begin leaves it there. */
    draw_order(&o, 77);
    int ok = mdl_epoch_begin_ids(h, o.ids, o.bounds, STEPS) == MDL_OK;
    const uint64_t *ids, *offs;
    const void *d;
    size_t n;
    for (int s = 0; ok && s < 3; s++)
        ok = mdl_next_batch(h, &ids, &d, &offs, &n) == MDL_OK;
    ok = ok && mdl_epoch_seek(h, 11) == MDL_OK;
    check(ok && batches_are(h, &o, 11), "mdl_epoch_seek(11) restarts the caller's order at step 11");

    ok = mdl_epoch_begin_ids(h, o.ids, o.bounds, STEPS) == MDL_OK;
    for (int s = 0; ok && s < 5; s++)
        ok = mdl_next_batch(h, &ids, &d, &offs, &n) == MDL_OK;
    int culprit = g_size - 1;
    bad = o;
    mdl_status st;
    int refused = 1;
    if (g_size > 1) {
        /* One rank with one step fewer: a difference, everyone's error. */
        st = mdl_epoch_begin_ids(h, bad.ids, bad.bounds, g_rank == culprit ? STEPS - 1 : STEPS);
        refused &= refused_everywhere(st, culprit, MDL_ERR_INVALID_ARG, 1);
    }
    /* An id past the last sample on one rank. */
    if (g_rank == culprit)
        bad.ids[bad.bounds[STEPS] - 1] = g_n;
    st = mdl_epoch_begin_ids(h, bad.ids, bad.bounds, STEPS);
    refused &= refused_everywhere(st, culprit, MDL_ERR_OUT_OF_RANGE, 0);
    bad = o;
    /* An empty batch, offsets that decrease, offsets that do not start at 0. */
    if (g_rank == culprit)
        bad.bounds[2] = bad.bounds[1];
    st = mdl_epoch_begin_ids(h, bad.ids, bad.bounds, STEPS);
    refused &= refused_everywhere(st, culprit, MDL_ERR_INVALID_ARG, 0);
    bad = o;
    if (g_rank == culprit)
        bad.bounds[2] = bad.bounds[3] + 1;
    st = mdl_epoch_begin_ids(h, bad.ids, bad.bounds, STEPS);
    refused &= refused_everywhere(st, culprit, MDL_ERR_INVALID_ARG, 0);
    bad = o;
    st = mdl_epoch_begin_ids(h, bad.ids, g_rank == culprit ? bad.bounds + 1 : bad.bounds, STEPS - (g_rank == culprit));
    refused &= refused_everywhere(st, culprit, MDL_ERR_INVALID_ARG, 0);
    /* NULL arrays. */
    st = mdl_epoch_begin_ids(h, g_rank == culprit ? NULL : o.ids, o.bounds, STEPS);
    refused &= refused_everywhere(st, culprit, MDL_ERR_NULL_ARG, 0);
    st = mdl_epoch_begin_ids(h, o.ids, g_rank == culprit ? NULL : o.bounds, STEPS);
    refused &= refused_everywhere(st, culprit, MDL_ERR_NULL_ARG, 0);
    check(refused, "refused begins (steps differ, id out of range, empty batch, offsets decrease or start past 0, NULL) fail on every rank");
    check(batches_are(h, &o, 5), "after the refused begins the running epoch goes on at step 5");

    /* mdl_fetch_batch is refused while such an epoch runs, and works after it. */
    ok = mdl_epoch_begin_ids(h, o.ids, o.bounds, STEPS) == MDL_OK;
    uint64_t one = lo < hi ? lo : 0, got_offsets[2];
    uint8_t buf[300];
    ok = ok && mdl_fetch_batch(h, &one, 1, buf, sizeof buf, got_offsets) == MDL_ERR_STATE;
    ok = ok && batches_are(h, &o, 0) && mdl_fetch_batch(h, &one, 1, buf, sizeof buf, got_offsets) == MDL_OK;
    check(ok, "mdl_fetch_batch refused during the epoch (MDL_ERR_STATE), usable after its end");

    /* One rank's batch of 20 M ids cannot be copied for its step (an address-space
       limit set after the begin copied the order): the step fails on every rank, that
       rank with MDL_ERR_NO_MEMORY, and the epoch ends; no abort. */
    for (uint32_t depth = 0; depth <= 2; depth += 2) {
        enum { HUGE_BATCH = 20000000 };
        int big = g_rank == g_size - 1;
        uint64_t *huge = big ? malloc(HUGE_BATCH * sizeof *huge) : NULL;
        uint64_t one_batch[2] = {0, big ? HUGE_BATCH : 1}, first = 0;
        for (uint64_t k = 0; huge && k < HUGE_BATCH; k++)
            huge[k] = k % g_n;
        mdl_set_prefetch(h, depth);
        ok = mdl_epoch_begin_ids(h, big ? huge : &first, one_batch, 1) == MDL_OK;
        struct rlimit before, tight;
        long pages = 0, resident;
        FILE *statm = fopen("/proc/self/statm", "r");
        int have = statm && fscanf(statm, "%ld %ld", &pages, &resident) == 2;
        if (statm)
            fclose(statm);
        getrlimit(RLIMIT_AS, &before);
        tight = before;
        tight.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
        if (big && have)
            setrlimit(RLIMIT_AS, &tight);
        st = mdl_next_batch(h, &ids, &d, &offs, &n);
        if (big && have)
            setrlimit(RLIMIT_AS, &before);
        ok = ok && st == (big ? MDL_ERR_NO_MEMORY : MDL_ERR_REMOTE);
        if (!ok)
            say_error("huge batch", st);
        ok = ok && mdl_next_batch(h, &ids, &d, &offs, &n) == MDL_OK && n == 0;
        free(huge);
        char what[128];
        snprintf(what, sizeof what, "prefetch %u: a batch too large for one rank fails its step everywhere, no abort", depth);
        check(ok, what);
    }
    mdl_set_prefetch(h, 2);

    /* No steps at all, on every rank: the epoch ends at once. */
    uint64_t zero = 0;
    ok = mdl_epoch_begin_ids(h, NULL, &zero, 0) == MDL_OK && mdl_next_batch(h, &ids, &d, &offs, &n) == MDL_OK && n == 0;
    check(ok, "an epoch of no steps ends at the first call");

    check(mdl_finalize(&h) == MDL_OK, "finalize");
    free(data);
    free(offsets);
    MPI_Finalize();
    if (g_rank == 0)
        printf("given_order_test: %s\n", g_failed ? "FAILED" : "all passed");
    return g_failed ? 1 : 0;
}
