/*
 * The sampler's steps agreed ahead (MDL_AGREEMENT_LAG), checked on every rank with the
 * MPI profiling interface: this program defines the collectives the library may call,
 * counts the calls made inside mdl_next_batch, and forwards them to PMPI_*.
 *  - a one-sided sampler step makes no collective call but starting one nonblocking
 *    agreement (MPI_Iallreduce): no blocking collective, no count exchange;
 *  - the agreements run ahead: after the caller has taken k batches, min(k + L, steps)
 *    agreements have started;
 *  - a rank that arrives late does not hold the others up: while the last rank sleeps
 *    before taking a batch, the others take theirs (with L >= 1), whereas with L = 0
 *    they wait for it (so the check can fail);
 *  - every byte of every batch is right, with AUTO and both engines;
 *  - mdl_stats_json_job: one text for the job on every rank, errors agreed.
 *
 * Run with MDL_AGREEMENT_LAG set (the test reads it to know L; default 2).
 * Usage: lag_test. Prints PASS/FAIL lines on rank 0; exit status 0 when all passed.
 */
#define _POSIX_C_SOURCE 200809L
#include "mdloader.h"
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

/* ---- counting the library's collectives -------------------------------------------- */

/* Counted while the test says so: on the caller's thread inside mdl_next_batch only
   (mdl_epoch_begin agrees with a blocking collective of its own, once per epoch), on
   the library's prefetch thread always (it only runs steps); hence atomic. */
static atomic_int g_counting;
static pthread_t g_caller;
static _Thread_local int t_in_next;
static atomic_long g_forbidden; /* collectives a sampler step must not make: blocking
                                   agreements, barriers, count exchanges (blocking or not) */
static atomic_long g_exchange;  /* the collective engine's data exchange (MPI_(I)alltoallv) */
static atomic_long g_iallreduce; /* agreements started (and blocking ones waited for by a
                                    test loop, as MDL_TIMEOUT makes them: one per step
                                    exactly is the check) */

static int counted(void)
{
    return atomic_load(&g_counting) && (t_in_next || !pthread_equal(pthread_self(), g_caller));
}
#define COUNT(counter) ((void)(counted() && atomic_fetch_add(&(counter), 1)))

int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c)
{
    COUNT(g_forbidden);
    return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Barrier(MPI_Comm c)
{
    COUNT(g_forbidden);
    return PMPI_Barrier(c);
}
int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c)
{
    COUNT(g_forbidden);
    return PMPI_Bcast(b, n, t, root, c);
}
int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c, MPI_Request *q)
{
    COUNT(g_forbidden);
    return PMPI_Ibcast(b, n, t, root, c, q);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c)
{
    COUNT(g_forbidden);
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Iallgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c,
                   MPI_Request *q)
{
    COUNT(g_forbidden);
    return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}
int MPI_Allgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int *rc, const int *rd, MPI_Datatype rt,
                   MPI_Comm c)
{
    COUNT(g_forbidden);
    return PMPI_Allgatherv(s, sn, st, r, rc, rd, rt, c);
}
int MPI_Iallgatherv(const void *s, int sn, MPI_Datatype st, void *r, const int *rc, const int *rd, MPI_Datatype rt,
                    MPI_Comm c, MPI_Request *q)
{
    COUNT(g_forbidden);
    return PMPI_Iallgatherv(s, sn, st, r, rc, rd, rt, c, q);
}
int MPI_Alltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c)
{
    COUNT(g_forbidden);
    return PMPI_Alltoall(s, sn, st, r, rn, rt, c);
}
int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c,
                  MPI_Request *q)
{
    COUNT(g_forbidden);
    return PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q);
}
int MPI_Ibarrier(MPI_Comm c, MPI_Request *q)
{
    COUNT(g_forbidden);
    return PMPI_Ibarrier(c, q);
}
int MPI_Alltoallv(const void *s, const int *sc, const int *sd, MPI_Datatype st, void *r, const int *rc,
                  const int *rd, MPI_Datatype rt, MPI_Comm c)
{
    COUNT(g_exchange);
    return PMPI_Alltoallv(s, sc, sd, st, r, rc, rd, rt, c);
}
int MPI_Ialltoallv(const void *s, const int *sc, const int *sd, MPI_Datatype st, void *r, const int *rc,
                   const int *rd, MPI_Datatype rt, MPI_Comm c, MPI_Request *q)
{
    COUNT(g_exchange);
    return PMPI_Ialltoallv(s, sc, sd, st, r, rc, rd, rt, c, q);
}
int MPI_Iallreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *q)
{
    COUNT(g_iallreduce);
    return PMPI_Iallreduce(s, r, n, t, op, c, q);
}

/* ---- the dataset ---------------------------------------------------------------------- */

static const uint64_t N = 600;
static uint64_t size_of(uint64_t g) { return 8 + (g * 53) % 400; }
static uint8_t byte_of(uint64_t g, uint64_t k) { return (uint8_t)((g * 29 + k * 7) & 0xff); }
static uint64_t first_id(int r) { return N * (uint64_t)r / (uint64_t)g_size; }

static int batch_ok(const uint64_t *ids, const void *data, const uint64_t *offs, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        const uint8_t *p = (const uint8_t *)data + offs[k];
        if (offs[k + 1] - offs[k] != size_of(ids[k]))
            return 0;
        for (uint64_t b = 0; b < size_of(ids[k]); b++)
            if (p[b] != byte_of(ids[k], b))
                return 0;
    }
    return 1;
}

/* Takes one batch; returns n (0 at the end), or -1 on an error. */
static long next(mdl_loader *h, int *bytes_ok)
{
    const uint64_t *ids, *offs;
    const void *data;
    size_t n;
    t_in_next = 1;
    mdl_status st = mdl_next_batch(h, &ids, &data, &offs, &n);
    t_in_next = 0;
    if (st != MDL_OK)
        return -1;
    *bytes_ok &= batch_ok(ids, data, offs, n);
    return (long)n;
}

/* The integer after `key` in a JSON text (0 when absent). */
static uint64_t json_u64(const char *json, const char *key)
{
    const char *at = strstr(json, key);
    return at ? strtoull(at + strlen(key), NULL, 10) : 0;
}

/* Whether `text` is the same on every rank (its length and a hash). */
static int same_text_on_all_ranks(const char *text)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *c = text; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    int same_hash = same_on_all_ranks((double)(h >> 12)); /* both on every rank */
    int same_length = same_on_all_ranks((double)strlen(text));
    return same_hash && same_length;
}

/* Counting runs from before mdl_epoch_begin (its prefetch thread may start steps
   before it returns) to the end of the epoch. */
static void start_counting(void)
{
    atomic_store(&g_forbidden, 0);
    atomic_store(&g_exchange, 0);
    atomic_store(&g_iallreduce, 0);
    atomic_store(&g_counting, 1);
}
static void stop_counting(void) { atomic_store(&g_counting, 0); }

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_caller = pthread_self();
    const char *lag_env = getenv("MDL_AGREEMENT_LAG");
    long lag = lag_env ? atol(lag_env) : 2;
    if (g_rank == 0)
        printf("lag_test: %d ranks, MDL_AGREEMENT_LAG = %ld\n", g_size, lag);

    uint64_t lo = first_id(g_rank), hi = first_id(g_rank + 1), n_local = hi - lo;
    uint64_t *offsets;
    uint8_t *data;
    build_shard(lo, n_local, size_of, byte_of, &offsets, &data);
    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK && mdl_register_shard(h, data, offsets, n_local) == MDL_OK,
          "init + register");

    /* One-sided, inline: the agreements run lag steps ahead, nothing else is called. */
    const uint64_t batch = 8;
    const long steps = (long)((N / (uint64_t)g_size + batch - 1) / batch); /* drop_last = 0: ceil */
    int bytes_ok = 1, ahead_ok = 1;
    mdl_set_backend(h, MDL_BACKEND_ONESIDED);
    mdl_set_prefetch(h, 0);
    start_counting();
    mdl_epoch_begin(h, 3, 0, batch, 1, 0);
    long taken = 0, n;
    while ((n = next(h, &bytes_ok)) > 0) {
        taken++;
        long expected = taken + lag < steps ? taken + lag : steps;
        if (atomic_load(&g_iallreduce) != expected) {
            fprintf(stderr, "[rank %d] after %ld batches: %ld agreements started, expected %ld\n", g_rank, taken,
                    atomic_load(&g_iallreduce), expected);
            ahead_ok = 0;
        }
    }
    stop_counting();
    char what[200];
    snprintf(what, sizeof what, "one-sided epoch of %ld steps: every byte right", steps);
    check(n == 0 && taken == steps && bytes_ok, what);
    snprintf(what, sizeof what, "one-sided steps: %ld blocking collectives or count exchanges, %ld data exchanges (expected 0, 0)",
             atomic_load(&g_forbidden), atomic_load(&g_exchange));
    check(atomic_load(&g_forbidden) == 0 && atomic_load(&g_exchange) == 0, what);
    snprintf(what, sizeof what, "agreements start %ld steps ahead (%ld in all, one per step)", lag, atomic_load(&g_iallreduce));
    check(ahead_ok && atomic_load(&g_iallreduce) == steps, what);

    /* A late rank does not hold the others up. */
    if (g_size > 1) {
        const double sleep_s = 1.0;
        mdl_epoch_begin(h, 4, 0, batch, 1, 0);
        bytes_ok = 1;
        int ok = next(h, &bytes_ok) > 0 && next(h, &bytes_ok) > 0;
        double waited = 0;
        if (g_rank == g_size - 1) {
            struct timespec nap = {(time_t)sleep_s, 0};
            nanosleep(&nap, NULL);
            ok &= next(h, &bytes_ok) > 0;
        } else {
            double t0 = MPI_Wtime();
            ok &= next(h, &bytes_ok) > 0;
            waited = MPI_Wtime() - t0;
        }
        while ((n = next(h, &bytes_ok)) > 0) {
        }
        ok &= n == 0 && bytes_ok;
        double longest = 0;
        MPI_Allreduce(&waited, &longest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (lag >= 1)
            snprintf(what, sizeof what, "lag %ld: while the last rank sleeps %.1f s, the others take a batch (longest wait %.3f s)",
                     lag, sleep_s, longest);
        else
            snprintf(what, sizeof what, "lag 0: while the last rank sleeps %.1f s, the others wait for it (longest wait %.3f s)",
                     sleep_s, longest);
        check(ok && (lag >= 1 ? longest < 0.5 * sleep_s : longest > 0.9 * sleep_s), what);
    }

    /* Every engine, inline and prefetching: every byte right, no blocking agreement. */
    static const mdl_backend engines[] = {MDL_BACKEND_AUTO, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_ONESIDED};
    static const char *names[] = {"auto", "collective", "onesided"};
    for (int e = 0; e < 3; e++)
        for (uint32_t depth = 0; depth <= 2; depth += 2) {
            mdl_set_backend(h, engines[e]);
            mdl_set_prefetch(h, depth);
            start_counting();
            mdl_epoch_begin(h, 5, (uint64_t)e, 16, 1, 0);
            bytes_ok = 1;
            taken = 0;
            while ((n = next(h, &bytes_ok)) > 0)
                taken++;
            stop_counting();
            /* Every collective of the epoch's steps, on either thread: one agreement a
               step, nothing else but the collective engine's data exchange. */
            snprintf(what, sizeof what, "%s, prefetch %u: %ld steps, every byte right, %ld agreements, "
                     "%ld blocking collectives or count exchanges", names[e], depth, taken,
                     atomic_load(&g_iallreduce), atomic_load(&g_forbidden));
            int same_steps = same_on_all_ranks((double)taken); /* every rank calls it */
            check(n == 0 && bytes_ok && atomic_load(&g_forbidden) == 0 && atomic_load(&g_iallreduce) == taken &&
                      same_steps, what);
        }

    /* The setting is checked: MDL_AGREEMENT_LAG set differently fails init everywhere
       (hardening_test covers it); here, a new epoch after a stopped one still works. */
    mdl_set_backend(h, MDL_BACKEND_AUTO);
    mdl_set_prefetch(h, 0);
    mdl_epoch_begin(h, 6, 0, 4, 1, 0);
    bytes_ok = 1;
    next(h, &bytes_ok); /* stop after one step, agreements still under way */
    mdl_epoch_begin(h, 6, 1, 4, 1, 0);
    taken = 0;
    while ((n = next(h, &bytes_ok)) > 0)
        taken++;
    check(n == 0 && bytes_ok && taken > 0, "an epoch stopped with agreements under way, then a whole epoch");

    /* The job's statistics: the same text on every rank, the samples summed over the
       ranks; refused during an epoch and with needed NULL on one rank, everywhere. */
    char mine[4096], job[4096];
    size_t needed = 0;
    mdl_stats_json(h, mine, sizeof mine);
    mdl_status st = mdl_stats_json_job(h, job, sizeof job, &needed);
    uint64_t my_samples = json_u64(mine, "\"samples\": "), sum = 0;
    MPI_Allreduce(&my_samples, &sum, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    uint64_t job_samples = json_u64(job, "\"samples\": ");
    snprintf(what, sizeof what, "mdl_stats_json_job: samples %llu = the ranks' sum %llu, same text on every rank",
             (unsigned long long)job_samples, (unsigned long long)sum);
    int same_text = same_text_on_all_ranks(job); /* every rank calls it */
    check(st == MDL_OK && needed == strlen(job) && job_samples == sum && sum > 0 && same_text, what);
    /* The estimator's counters are agreed: the job's are this rank's. */
    const char *counters[] = {"\"decisions\": ", "\"unsure_decisions\": ", "\"surprise_probes\": "};
    for (size_t i = 0; i < sizeof counters / sizeof *counters; i++) {
        snprintf(what, sizeof what, "mdl_stats_json_job: %s= mdl_stats_json's", counters[i]);
        check(strstr(job, counters[i]) && json_u64(job, counters[i]) == json_u64(mine, counters[i]), what);
    }
    st = mdl_stats_json_job(h, job, sizeof job, g_rank == g_size - 1 ? NULL : &needed);
    check(st == (g_rank == g_size - 1 ? MDL_ERR_NULL_ARG : MDL_ERR_REMOTE), "mdl_stats_json_job(needed NULL on the last rank): agreed error");
    mdl_epoch_begin(h, 7, 0, 4, 1, 0);
    st = mdl_stats_json_job(h, job, sizeof job, &needed);
    check(st == MDL_ERR_STATE, "mdl_stats_json_job during an epoch: MDL_ERR_STATE on every rank");
    while ((n = next(h, &bytes_ok)) > 0) {
    }

    check(mdl_finalize(&h) == MDL_OK, "finalize");
    free(data);
    free(offsets);
    if (g_rank == 0)
        printf("lag_test: %s\n", g_failed ? "FAILED" : "all checks passed");
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
