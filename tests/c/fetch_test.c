/*
 * fetch_test: correctness of mdl_fetch_batch under random batches, with every engine.
 *
 * Each rank registers its shard of the synthetic dataset (common.h), then runs random
 * batches (random n per rank including 0, random ids with repeats, local and remote,
 * empty-shard and boundary ids, zero-length samples) and fetches every batch three
 * times: backend ONESIDED, COLLECTIVE and AUTO (all ranks set the same). Every byte and
 * every out_offsets entry is checked against the generator, the three results must be
 * byte-identical, and guard bytes after out_cap / after out_offsets[n] must be untouched.
 *
 * Phases (all run by default):
 *   world    mdl_init(MPI_COMM_WORLD); then 6 "large" steps of up to 4 x --large ids
 *            per rank (default 5000; 0 skips them)
 *   sub      mdl_init on an MPI_Comm_split sub-communicator (rank order reversed, the
 *            caller frees its comm right after mdl_init), interleaved step by step
 *            with a second world loader whose dataset has a different seed, so
 *            cross-talk between two live loaders would show up as wrong bytes
 *   fortran  mdl_init_f(MPI_Comm_c2f(dup of world))
 *
 * Usage: fetch_test [--iters N] [--seed S] [--base N] [--max-batch B] [--large B] [--no-big]
 *                   [--phases world,sub,fortran] [--engines onesided,collective,auto]
 *                   [--max-errors N] [--trace] [--step-timeout SECONDS]
 *
 * Output: one line per result on rank 0 ("PASS ..." / "FAIL ..."); per-rank details of
 * failures on stderr. Pass/fail is agreed with MPI_Allreduce so every rank exits with
 * the same code and the job ends cleanly.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mdloader.h"

#define N_ENGINES 3
#define GUARD 64
#define GUARD_BYTE 0xA5u
#define OFF_SENTINEL 0xFEEDFACECAFEBEEFull

static const mdl_backend ENGINES[N_ENGINES] = {MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE,
                                               MDL_BACKEND_AUTO};
static const char *ENGINE_NAMES[N_ENGINES] = {"onesided", "collective", "auto"};
/* Which engines run (--engines); all by default. The first enabled one is the
   reference the others are compared with. */
static int g_use[N_ENGINES] = {1, 1, 1};

static int g_wrank = 0;
static long g_max_errors = 20;
static int g_trace = 0; /* --trace: one stderr line per fetch, to locate a hang */

/* Watchdog: re-armed at every step; if one step takes longer than g_step_timeout
   seconds, every rank prints where it is stuck and exits 3, instead of the whole job
   waiting for the runner's timeout. */
static unsigned g_step_timeout = 120;
static const char *volatile g_where = "startup";
static volatile unsigned long long g_iter = 0;
static volatile int g_engine = -1;

static void on_alarm(int sig)
{
    (void)sig;
    char line[256];
    size_t k = 0;
    tc_sig_puts(line, &k, sizeof line, "[rank ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_wrank);
    tc_sig_puts(line, &k, sizeof line, "] TIMEOUT (hang) in ");
    tc_sig_puts(line, &k, sizeof line, g_where);
    tc_sig_puts(line, &k, sizeof line, " iter ");
    tc_sig_putu(line, &k, sizeof line, g_iter);
    if (g_engine >= 0) {
        tc_sig_puts(line, &k, sizeof line, " engine ");
        tc_sig_puts(line, &k, sizeof line, ENGINE_NAMES[g_engine]);
    }
    line[k++] = '\n';
    ssize_t w = write(2, line, k);
    (void)w;
    _exit(3);
}

static void watchdog(const char *where, unsigned long long iter, int engine)
{
    g_where = where;
    g_iter = iter;
    g_engine = engine;
    alarm(g_step_timeout);
}

typedef struct opts {
    uint64_t iters;
    uint64_t seed;
    uint64_t base;
    uint64_t max_batch;
    uint64_t large; /* max_batch of the "large" steps (0: none) */
    int big;
    int ph_world, ph_sub, ph_fortran;
} opts;

/* One live loader and everything needed to drive and check it. */
typedef struct ctx {
    const char *name;
    mdl_loader *h;
    MPI_Comm comm; /* our own dup, used only for the test's own agreement reductions */
    int rank, nranks;
    tc_dataset ds;
    tc_rng rng;
    uint64_t max_batch;
    /* scratch, grown on demand */
    uint64_t *ids;
    size_t ids_cap;
    uint8_t *buf[N_ENGINES];
    uint64_t buf_cap[N_ENGINES];
    uint64_t *offs[N_ENGINES];
    size_t offs_cap[N_ENGINES];
    /* statistics, this rank */
    long errors;
    uint64_t steps, fetches, samples, bytes, remote, empty_batches;
} ctx;

/* One fprintf per message so that lines from different ranks do not interleave. */
#define FAILF(c, ...)                                                                    \
    do {                                                                                 \
        (c)->errors++;                                                                   \
        if ((c)->errors <= g_max_errors) {                                               \
            char msg_[1024];                                                             \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                    \
            fprintf(stderr, "[rank %d] %s: %s\n", g_wrank, (c)->name, msg_);             \
        }                                                                                \
    } while (0)

static void die_oom(void)
{
    fprintf(stderr, "[rank %d] out of memory in the test itself\n", g_wrank);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        die_oom();
    return q;
}

static const char *st_name(mdl_status s)
{
    const char *t = mdl_status_string(s);
    return t ? t : "(null)";
}

static void last_error_text(char *buf, size_t len)
{
    buf[0] = '\0';
    mdl_last_error(buf, len);
}

/* Creates the loader, registers this rank's shard and checks the global index. The
   caller's shard copy is scribbled over and freed right after registration: the
   contract says the data is copied, so nothing may still point at it. */
static int ctx_open(ctx *c, const char *name, mdl_loader *h, MPI_Comm comm, const opts *o,
                    uint64_t seed)
{
    memset(c, 0, sizeof(*c));
    c->name = name;
    watchdog(name, 0, -1); /* registration */
    c->h = h;
    MPI_Comm_dup(comm, &c->comm);
    MPI_Comm_rank(c->comm, &c->rank);
    MPI_Comm_size(c->comm, &c->nranks);
    if (tc_dataset_init(&c->ds, c->nranks, o->base, seed, o->big) != 0)
        die_oom();
    c->rng = tc_rng_make(seed, (uint64_t)c->rank + 1000u * (uint64_t)c->nranks);
    c->max_batch = o->max_batch;

    uint8_t *data = NULL;
    uint64_t *offsets = NULL;
    uint64_t n = tc_build_shard(&c->ds, c->rank, &data, &offsets);
    if (n == UINT64_MAX)
        die_oom();
    mdl_status st = mdl_register_shard(c->h, data, offsets, n);
    if (st != MDL_OK) {
        char msg[512];
        last_error_text(msg, sizeof msg);
        FAILF(c, "mdl_register_shard -> %s (%s)", st_name(st), msg);
    }
    memset(data, 0x5A, offsets[n]);
    for (uint64_t i = 0; i <= n; i++)
        offsets[i] = UINT64_MAX / 3;
    free(data);
    free(offsets);
    return st == MDL_OK;
}

static void ctx_close(ctx *c)
{
    mdl_status st = mdl_finalize(&c->h);
    if (st != MDL_OK)
        FAILF(c, "mdl_finalize -> %s", st_name(st));
    if (c->h != NULL)
        FAILF(c, "mdl_finalize did not set the handle to NULL");
    free(c->ids);
    for (int e = 0; e < N_ENGINES; e++) {
        free(c->buf[e]);
        free(c->offs[e]);
    }
    tc_dataset_free(&c->ds);
    MPI_Comm_free(&c->comm);
}

/* mdl_num_samples and mdl_sample_size for every id: both are local lookups. */
static void check_index(ctx *c)
{
    uint64_t total = tc_total(&c->ds), got = 0;
    mdl_status st = mdl_num_samples(c->h, &got);
    if (st != MDL_OK || got != total)
        FAILF(c, "mdl_num_samples -> %s, %llu (expected %llu)", st_name(st),
              (unsigned long long)got, (unsigned long long)total);
    for (uint64_t g = 0; g < total; g++) {
        uint64_t sz = UINT64_MAX;
        st = mdl_sample_size(c->h, g, &sz);
        if (st != MDL_OK || sz != tc_size_of(&c->ds, g)) {
            FAILF(c, "mdl_sample_size(%llu) -> %s, %llu (expected %llu)", (unsigned long long)g,
                  st_name(st), (unsigned long long)sz, (unsigned long long)tc_size_of(&c->ds, g));
            if (c->errors > g_max_errors)
                break;
        }
    }
}

/* A random id from rank r's shard, or a uniform one if that shard is empty. */
static uint64_t id_on_rank(ctx *c, int r)
{
    uint64_t n = c->ds.first[r + 1] - c->ds.first[r];
    if (n == 0)
        return tc_below(&c->rng, tc_total(&c->ds));
    return c->ds.first[r] + tc_below(&c->rng, n);
}

/* An id chosen to be awkward: shard boundaries (around the empty shard too), the ends
   of the id space, or a zero-length sample. */
static uint64_t edge_id(ctx *c)
{
    uint64_t total = tc_total(&c->ds);
    switch (tc_below(&c->rng, 4)) {
    case 0: {
        int r = (int)tc_below(&c->rng, (uint64_t)c->nranks);
        uint64_t f = c->ds.first[r];
        return f < total ? f : total - 1;
    }
    case 1: {
        int r = (int)tc_below(&c->rng, (uint64_t)c->nranks);
        uint64_t l = c->ds.first[r + 1];
        return l > 0 ? l - 1 : 0;
    }
    case 2:
        return tc_below(&c->rng, 2) ? 0 : total - 1;
    default:
        for (int tries = 0; tries < 64; tries++) {
            uint64_t g = tc_below(&c->rng, total);
            if (tc_size_of(&c->ds, g) == 0)
                return g;
        }
        return tc_below(&c->rng, total);
    }
}

/* Fills c->ids with this step's batch and returns n. */
static size_t make_batch(ctx *c, uint64_t iter)
{
    uint64_t total = tc_total(&c->ds);
    /* Every 50th step all ranks fetch nothing: the all-empty collective must work too.
       Depends only on iter, so all ranks agree without talking. */
    if (total == 0 || iter % 50 == 49)
        return 0;
    uint64_t roll = tc_below(&c->rng, 100), n;
    if (roll < 10)
        n = 0;
    else if (roll < 15)
        n = 1;
    else if (roll < 92)
        n = 1 + tc_below(&c->rng, c->max_batch);
    else
        n = c->max_batch + tc_below(&c->rng, 3 * c->max_batch + 1);
    if (n > c->ids_cap) {
        c->ids = xrealloc(c->ids, sizeof(uint64_t) * n);
        c->ids_cap = n;
    }
    uint64_t hot[4];
    for (int i = 0; i < 4; i++)
        hot[i] = tc_below(&c->rng, total);
    int peer = (int)tc_below(&c->rng, (uint64_t)c->nranks);
    int mode = (int)tc_below(&c->rng, 6);
    for (uint64_t i = 0; i < n; i++) {
        int m = mode == 5 ? (int)tc_below(&c->rng, 5) : mode;
        uint64_t g;
        switch (m) {
        case 0: g = tc_below(&c->rng, total); break;        /* uniform */
        case 1: g = id_on_rank(c, c->rank); break;           /* local hits */
        case 2: g = hot[tc_below(&c->rng, 4)]; break;        /* heavy repeats */
        case 3: g = id_on_rank(c, peer); break;              /* one owner only */
        default: g = edge_id(c); break;                      /* boundaries, zero-length */
        }
        c->ids[i] = g;
    }
    return (size_t)n;
}

static void ensure_buffers(ctx *c, int e, uint64_t cap, size_t n)
{
    if (cap + GUARD > c->buf_cap[e]) {
        c->buf[e] = xrealloc(c->buf[e], (size_t)(cap + GUARD));
        c->buf_cap[e] = cap + GUARD;
    }
    if (n + 2 > c->offs_cap[e]) {
        c->offs[e] = xrealloc(c->offs[e], sizeof(uint64_t) * (n + 2));
        c->offs_cap[e] = n + 2;
    }
}

/* Checks one fetch result against the generator. Returns 1 if fully correct. */
static int check_result(ctx *c, uint64_t iter, int e, const uint64_t *ids, size_t n,
                        const uint8_t *out, uint64_t cap, const uint64_t *offs, uint64_t need)
{
    const char *en = ENGINE_NAMES[e];
    if (offs[0] != 0) {
        FAILF(c, "iter %llu %s n=%zu: out_offsets[0]=%llu", (unsigned long long)iter, en, n,
              (unsigned long long)offs[0]);
        return 0;
    }
    for (size_t k = 0; k < n; k++) {
        uint64_t sz = tc_size_of(&c->ds, ids[k]);
        if (offs[k + 1] < offs[k] || offs[k + 1] - offs[k] != sz || offs[k + 1] > cap) {
            FAILF(c, "iter %llu %s n=%zu: out_offsets[%zu..%zu]=%llu..%llu but id %llu has size %llu",
                  (unsigned long long)iter, en, n, k, k + 1, (unsigned long long)offs[k],
                  (unsigned long long)offs[k + 1], (unsigned long long)ids[k],
                  (unsigned long long)sz);
            return 0;
        }
        int64_t bad = tc_verify_sample(&c->ds, ids[k], out + offs[k], sz);
        if (bad >= 0) {
            int owner = tc_owner(&c->ds, ids[k]);
            FAILF(c, "iter %llu %s n=%zu: sample k=%zu id=%llu (owner %d, size %llu) wrong at byte %lld",
                  (unsigned long long)iter, en, n, k, (unsigned long long)ids[k], owner,
                  (unsigned long long)sz, (long long)bad);
            return 0;
        }
    }
    if (offs[n] != need) {
        FAILF(c, "iter %llu %s: out_offsets[n]=%llu, expected %llu", (unsigned long long)iter, en,
              (unsigned long long)offs[n], (unsigned long long)need);
        return 0;
    }
    if (offs[n + 1] != OFF_SENTINEL) {
        FAILF(c, "iter %llu %s n=%zu: out_offsets[n+1] overwritten", (unsigned long long)iter, en, n);
        return 0;
    }
    if (out) {
        for (uint64_t i = cap; i < cap + GUARD; i++)
            if (out[i] != GUARD_BYTE) {
                FAILF(c, "iter %llu %s: wrote past out_cap=%llu (byte %llu)", (unsigned long long)iter,
                      en, (unsigned long long)cap, (unsigned long long)(i - cap));
                return 0;
            }
    }
    return 1;
}

/* One random batch fetched with every engine, checked and cross-compared. */
static void step(ctx *c, uint64_t iter)
{
    size_t n = make_batch(c, iter);
    uint64_t need = tc_batch_bytes(&c->ds, c->ids, n);
    /* Capacity: exact half the time (the boundary case), otherwise with slack. */
    uint64_t cap = need + (tc_below(&c->rng, 2) ? 0 : 1 + tc_below(&c->rng, 4096));
    /* (NULL, 0) is a valid empty array: sometimes pass NULL ids / NULL out when empty. */
    int null_ids = n == 0 && tc_below(&c->rng, 2);
    int null_out = need == 0 && tc_below(&c->rng, 2);
    if (null_out)
        cap = 0;
    int ok[N_ENGINES] = {0}, ref = -1;

    c->steps++;
    if (n == 0)
        c->empty_batches++;
    for (size_t k = 0; k < n; k++)
        if (tc_owner(&c->ds, c->ids[k]) != c->rank)
            c->remote++;

    for (int e = 0; e < N_ENGINES; e++) {
        if (!g_use[e])
            continue;
        if (ref < 0)
            ref = e;
        ensure_buffers(c, e, cap, n);
        memset(c->buf[e], GUARD_BYTE, (size_t)(cap + GUARD));
        for (size_t k = 0; k < n + 2; k++)
            c->offs[e][k] = OFF_SENTINEL;
        watchdog(c->name, iter, e);
        mdl_status st = mdl_set_backend(c->h, ENGINES[e]);
        if (st != MDL_OK)
            FAILF(c, "mdl_set_backend(%s) -> %s", ENGINE_NAMES[e], st_name(st));
        uint8_t *out = null_out ? NULL : c->buf[e];
        if (g_trace) {
            /* How many samples this rank asks of each owner: enough to rebuild the
               communication pattern of the step that hangs. */
            char line[1024];
            int len = snprintf(line, sizeof line, "[rank %d] %s iter %llu %s n=%zu need=%llu cap=%llu per-owner:",
                               g_wrank, c->name, (unsigned long long)iter, ENGINE_NAMES[e], n,
                               (unsigned long long)need, (unsigned long long)cap);
            for (int r = 0; r < c->nranks && len < (int)sizeof line - 16; r++) {
                uint64_t cnt = 0;
                for (size_t k = 0; k < n; k++)
                    cnt += tc_owner(&c->ds, c->ids[k]) == r;
                len += snprintf(line + len, sizeof line - (size_t)len, " %llu", (unsigned long long)cnt);
            }
            fprintf(stderr, "%s\n", line);
        }
        st = mdl_fetch_batch(c->h, null_ids ? NULL : c->ids, n, out, cap, c->offs[e]);
        c->fetches++;
        if (st != MDL_OK) {
            char msg[512];
            last_error_text(msg, sizeof msg);
            FAILF(c, "iter %llu %s n=%zu need=%llu cap=%llu: mdl_fetch_batch -> %s (%s)",
                  (unsigned long long)iter, ENGINE_NAMES[e], n, (unsigned long long)need,
                  (unsigned long long)cap, st_name(st), msg);
            continue;
        }
        ok[e] = check_result(c, iter, e, c->ids, n, out ? out : c->buf[e], cap, c->offs[e], need);
        if (ok[e]) {
            c->samples += n;
            c->bytes += need;
        }
    }
    /* Byte-identical across engines (implied by the checks above, but this is the
       property the contract promises, so test it directly). */
    for (int e = ref + 1; ref >= 0 && e < N_ENGINES; e++) {
        if (!g_use[e] || !ok[ref] || !ok[e])
            continue;
        if (memcmp(c->offs[ref], c->offs[e], sizeof(uint64_t) * (n + 1)) != 0 ||
            (need && memcmp(c->buf[ref], c->buf[e], (size_t)need) != 0))
            FAILF(c, "iter %llu: %s and %s results differ", (unsigned long long)iter, ENGINE_NAMES[ref],
                  ENGINE_NAMES[e]);
    }
}

/* Agrees on the outcome of a group of checks across all ranks of WORLD and prints one
   line on rank 0. Returns 1 if every rank passed. */
static int report(const char *label, ctx **cs, int ncs, long extra_errors)
{
    long err = extra_errors;
    uint64_t loc[4] = {0, 0, 0, 0}, glob[4];
    for (int i = 0; i < ncs; i++) {
        err += cs[i]->errors;
        loc[0] += cs[i]->fetches;
        loc[1] += cs[i]->samples;
        loc[2] += cs[i]->bytes;
        loc[3] += cs[i]->remote;
    }
    long gerr = 0;
    watchdog(label, 0, -1);
    MPI_Allreduce(&err, &gerr, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(loc, glob, 4, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (g_wrank == 0) {
        if (gerr == 0 && glob[0] == 0)
            printf("PASS %s\n", label);
        else if (gerr == 0)
            printf("PASS %s: %llu fetches, %llu samples (%llu remote), %.1f MB verified\n", label,
                   (unsigned long long)glob[0], (unsigned long long)glob[1],
                   (unsigned long long)glob[3], (double)glob[2] / 1e6);
        else
            printf("FAIL %s: %ld errors over all ranks (details on stderr)\n", label, gerr);
        fflush(stdout);
    }
    return gerr == 0;
}

static void reset_stats(ctx *c)
{
    c->errors = 0;
    c->fetches = c->samples = c->bytes = c->remote = c->steps = c->empty_batches = 0;
}

static int parse_phases(const char *s, opts *o)
{
    o->ph_world = strstr(s, "world") != NULL;
    o->ph_sub = strstr(s, "sub") != NULL;
    o->ph_fortran = strstr(s, "fortran") != NULL;
    return o->ph_world || o->ph_sub || o->ph_fortran ? 0 : -1;
}

static int parse_args(int argc, char **argv, opts *o)
{
    o->iters = 1000;
    o->seed = 1;
    o->base = 1000;
    o->max_batch = 64;
    o->large = 5000;
    o->big = 1;
    o->ph_world = o->ph_sub = o->ph_fortran = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        uint64_t v = 0;
        int has = i + 1 < argc;
        if (!strcmp(a, "--no-big"))
            o->big = 0;
        else if (!strcmp(a, "--trace"))
            g_trace = 1;
        else if (!strcmp(a, "--step-timeout") && has && !tc_parse_u64(argv[++i], &v))
            g_step_timeout = (unsigned)v;
        else if (!strcmp(a, "--iters") && has && !tc_parse_u64(argv[++i], &v))
            o->iters = v;
        else if (!strcmp(a, "--seed") && has && !tc_parse_u64(argv[++i], &v))
            o->seed = v;
        else if (!strcmp(a, "--base") && has && !tc_parse_u64(argv[++i], &v) && v > 0)
            o->base = v;
        else if (!strcmp(a, "--max-batch") && has && !tc_parse_u64(argv[++i], &v) && v > 0)
            o->max_batch = v;
        else if (!strcmp(a, "--large") && has && !tc_parse_u64(argv[++i], &v))
            o->large = v;
        else if (!strcmp(a, "--max-errors") && has && !tc_parse_u64(argv[++i], &v))
            g_max_errors = (long)v;
        else if (!strcmp(a, "--phases") && has && !parse_phases(argv[++i], o))
            ;
        else if (!strcmp(a, "--engines") && has) {
            const char *l = argv[++i];
            for (int e = 0; e < N_ENGINES; e++)
                g_use[e] = strstr(l, ENGINE_NAMES[e]) != NULL;
            if (!g_use[0] && !g_use[1] && !g_use[2])
                return -1;
        }
        else {
            if (g_wrank == 0)
                fprintf(stderr,
                        "usage: %s [--iters N] [--seed S] [--base N] [--max-batch B] [--large B] [--no-big]\n"
                        "          [--phases world,sub,fortran] [--engines onesided,collective,auto]\n"
                        "          [--max-errors N] [--trace] [--step-timeout SECONDS]\n",
                        argv[0]);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    int provided = 0, wsize = 1, all_ok = 1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    opts o;
    if (parse_args(argc, argv, &o) != 0) {
        MPI_Finalize();
        return 2;
    }
    {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGALRM, &sa, NULL);
    }
    /* Registration, index checks and reports are collective too: watch them as well. */
    watchdog("setup", 0, -1);
    if (g_wrank == 0) {
        printf("fetch_test: %d ranks, iters=%llu seed=%llu base=%llu max_batch=%llu large=%llu big=%d\n",
               wsize, (unsigned long long)o.iters, (unsigned long long)o.seed, (unsigned long long)o.base,
               (unsigned long long)o.max_batch, (unsigned long long)o.large, o.big);
        fflush(stdout);
    }

    /* ---- world ---- */
    if (o.ph_world) {
        mdl_loader *h = NULL;
        mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
        long init_err = st != MDL_OK || h == NULL;
        long ginit = 0;
        MPI_Allreduce(&init_err, &ginit, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (ginit) {
            if (g_wrank == 0)
                printf("FAIL world/init: mdl_init(MPI_COMM_WORLD) failed on %ld ranks\n", ginit);
            all_ok = 0;
        } else {
            ctx c;
            ctx *cp = &c;
            ctx_open(&c, "world", h, MPI_COMM_WORLD, &o, o.seed);
            check_index(&c);
            all_ok &= report("world/register+index", &cp, 1, 0);
            reset_stats(&c);
            for (uint64_t it = 0; it < o.iters; it++)
                step(&c, it);
            char label[128];
            snprintf(label, sizeof label, "world/random-batches %s%s%s%s%s", g_use[0] ? "onesided" : "",
                     g_use[0] && (g_use[1] || g_use[2]) ? "=" : "", g_use[1] ? "collective" : "",
                     g_use[1] && g_use[2] ? "=" : "", g_use[2] ? "auto" : "");
            all_ok &= report(label, &cp, 1, 0);
            if (o.large) {
                /* A few batches of thousands of ids per rank (tens of MB): long plans,
                   many rounds, large counts, at the default message cap too. */
                reset_stats(&c);
                c.max_batch = o.large;
                for (uint64_t it = 0; it < 6; it++)
                    step(&c, o.iters + it);
                c.max_batch = o.max_batch;
                all_ok &= report("world/large-batches (up to 4 x --large ids per rank)", &cp, 1, 0);
            }
            reset_stats(&c);
            ctx_close(&c);
            all_ok &= report("world/finalize", &cp, 1, 0);
        }
    }

    /* ---- sub-communicator, interleaved with a second world loader ---- */
    if (o.ph_sub) {
        MPI_Comm sub;
        /* key = -rank reverses the order, so sub-rank != world-rank order: the library
           must number shards by its communicator, not by MPI_COMM_WORLD. */
        MPI_Comm_split(MPI_COMM_WORLD, g_wrank % 2, -g_wrank, &sub);
        mdl_loader *hs = NULL, *hw = NULL;
        mdl_status st1 = mdl_init(sub, &hs);
        /* The library duplicates the communicator: freeing ours now must be harmless. */
        MPI_Comm sub_for_ctx;
        MPI_Comm_dup(sub, &sub_for_ctx);
        MPI_Comm_free(&sub);
        mdl_status st2 = mdl_init(MPI_COMM_WORLD, &hw);
        long bad = (st1 != MDL_OK || hs == NULL) + (st2 != MDL_OK || hw == NULL), gbad = 0;
        MPI_Allreduce(&bad, &gbad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (gbad) {
            if (g_wrank == 0)
                printf("FAIL sub/init: mdl_init failed (%ld failures over all ranks)\n", gbad);
            all_ok = 0;
        } else {
            ctx cs, cw;
            ctx *both[2] = {&cs, &cw};
            /* The two halves register one after the other, not at the same time: in
               Open MPI 4.1, MPI_Win_allocate on disjoint communicators from one
               MPI_Comm_split can collide (osc/rdma names its shared-memory file after
               the communicator's CID, which such communicators share; open-mpi/ompi
               #9492) and intermittently fails with MPI_ERR_WIN. Not MDLoader's bug,
               and a real user must do the same. */
            for (int color = 0; color < 2; color++) {
                if (g_wrank % 2 == color)
                    ctx_open(&cs, "sub", hs, sub_for_ctx, &o, o.seed + 101);
                MPI_Barrier(MPI_COMM_WORLD);
            }
            ctx_open(&cw, "world2", hw, MPI_COMM_WORLD, &o, o.seed + 202);
            check_index(&cs);
            check_index(&cw);
            all_ok &= report("sub/register+index (split comm + world, two live loaders)", both, 2, 0);
            reset_stats(&cs);
            reset_stats(&cw);
            uint64_t n = o.iters / 2 ? o.iters / 2 : 1;
            for (uint64_t it = 0; it < n; it++) {
                step(&cs, it);
                step(&cw, it);
            }
            all_ok &= report("sub/random-batches interleaved with world loader", both, 2, 0);
            reset_stats(&cs);
            reset_stats(&cw);
            ctx_close(&cs);
            ctx_close(&cw);
            all_ok &= report("sub/finalize", both, 2, 0);
        }
        MPI_Comm_free(&sub_for_ctx);
    }

    /* ---- Fortran handle ---- */
    if (o.ph_fortran) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        MPI_Fint f = MPI_Comm_c2f(dup);
        mdl_loader *h = NULL;
        mdl_status st = mdl_init_f(f, &h);
        long bad = st != MDL_OK || h == NULL, gbad = 0;
        MPI_Allreduce(&bad, &gbad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        if (gbad) {
            if (g_wrank == 0)
                printf("FAIL fortran/init: mdl_init_f failed on %ld ranks\n", gbad);
            all_ok = 0;
        } else {
            ctx c;
            ctx *cp = &c;
            ctx_open(&c, "fortran", h, dup, &o, o.seed + 303);
            MPI_Comm_free(&dup);
            check_index(&c);
            uint64_t n = o.iters / 4 ? o.iters / 4 : 1;
            for (uint64_t it = 0; it < n; it++)
                step(&c, it);
            ctx_close(&c);
            all_ok &= report("fortran/mdl_init_f(MPI_Comm_c2f) random batches", &cp, 1, 0);
        }
        if (dup != MPI_COMM_NULL)
            MPI_Comm_free(&dup);
    }

    watchdog("final agreement", 0, -1);
    int loc = all_ok, glob = 0;
    MPI_Allreduce(&loc, &glob, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (g_wrank == 0) {
        printf(glob ? "fetch_test: all checks passed\n" : "fetch_test: FAILED\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return glob ? 0 : 1;
}
