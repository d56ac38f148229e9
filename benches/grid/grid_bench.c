/*
 * grid_bench: one (MPI, transport, ranks) run of the engine-choice grid (issue 3).
 *
 * For every point (batch per rank B) x (mean sample size m), on a dataset spread over
 * all ranks (sample sizes uniform in [m/2, 3m/2]) and with the SAME id stream (measured
 * step k of every variant fetches the same ids), it measures:
 *
 *   onesided    mdl_fetch_batch, MDL_BACKEND_ONESIDED forced
 *   collective  mdl_fetch_batch, MDL_BACKEND_COLLECTIVE forced
 *   auto        mdl_fetch_batch, MDL_BACKEND_AUTO, on a loader of its own that is never
 *               forced (fresh per point by default: registered and calibrated as a
 *               training run would be; --auto-loader shared keeps one per sample size)
 *   node        AUTO as above on a loader made with MDL_NODE_LOCAL=on: samples of the
 *               rank's MPI node are copied out of shared memory, the rest go through
 *               the engine AUTO picks (one node: every sample; two hosts: a mixed step)
 *
 * Every variant reads its own copy of the dataset (a loader, or a raw window, each):
 * variants that shared one would find the samples of the step in the caches whenever
 * they ran after the other, and AUTO, alone on its loader, never would (that made AUTO
 * look ~4% slower than the same engine forced). By default the raw windows and the
 * loaders are made anew for every point, so that all variants run on data of the same
 * age (--auto-loader shared: once per sample size).
 *   ddstore     DDStore's loop in raw MPI: MPI_Win_lock(SHARED) / MPI_Get /
 *               MPI_Win_unlock per sample (local ones too), window from MPI_Win_allocate
 *   floor_rma   MPI_Win_lock_all, one MPI_Get per remote sample (local ones memcpy'd),
 *               one MPI_Win_flush_all, MPI_Win_unlock_all
 *   floor_a2a   MPI_Alltoall of request counts, MPI_Alltoallv of the ids, owners pack,
 *               MPI_Alltoallv of the bytes (local samples memcpy'd; no unpack into
 *               request order)
 *
 * Method: onesided, collective, auto, floor_rma and floor_a2a run interleaved, step by
 * step in turn on the same ids, in a random order drawn anew every step (so that load
 * from other jobs on this shared machine, and the state one variant leaves behind in
 * caches and the transport, hit them alike): a fresh warm-up of --warmup steps of each, then N measured steps of each,
 * N adaptive so that the group takes about --budget seconds (clamped to [--nmin,
 * --nmax]) and never more than --limit seconds (down to 1 step, without warm-up when
 * the step is predicted above the limit from the previous batch size). The DDStore-style loop runs afterwards in a block
 * of its own with --dd-budget / --dd-limit, and a point whose single step is predicted
 * above --skip-over seconds is not run and reported as empty. Step time = the slowest
 * rank's (MPI_Allreduce MAX per step, ranks lined up by a barrier outside the clock);
 * reported: the median over the measured steps, in microseconds.
 *
 * AUTO's choices: the onesided/collective step counts of mdl_stats_json before and
 * after the measured steps. pred_onesided/pred_collective: the raw cost model
 * (src/estimator/model.rs) with the AUTO loader's calibrated parameters, applied to the
 * features of the measured steps (without online correction): what AUTO would pick
 * from calibration alone.
 *
 * --wait yield (default for MPICH with more ranks than cores): the raw-MPI floors use
 * nonblocking calls (MPI_Rget, MPI_Ialltoall(v)) completed by an MPI_Test + sched_yield
 * loop, as the library does, because MPICH's blocking calls busy-poll and are ~1000x
 * slower oversubscribed. The DDStore loop stays blocking (there is no nonblocking unlock).
 *
 * Output (rank 0): one CSV row per point, flushed as it is measured (--csv FILE, or
 * stdout); progress on stderr. Every variant's first measured step is verified byte
 * for byte outside the clock (column bad). The last two columns let the model be
 * replayed without MPI (benches/grid/replay_fixture.py, the estimator's unit test):
 * model_terms, the model's terms averaged over the predicted batches (one-sided: 1,
 * gets, bytes, bytes served; collective: rounds, samples, bytes, bytes served), and
 * model_params, the AUTO loader's calibrated a_os;g_os;b_os;c_os;a_coll;s_coll;b_coll;c_coll.
 * (Files from before c_coll have 7 terms and 7 parameters: the collective's per-byte
 * term was b_coll * max(bytes, served); replay_fixture.py reads both layouts.)
 * rtt_us (after them, so that older files keep their columns): the round trip between
 * ranks 0 and 1 before the point, empty at one rank; see round_trip_us() for what it
 * can and cannot say.
 * mean_onesided, mean_collective, mean_auto (last): the mean step in microseconds, what
 * the steps cost together; on a busy machine a point's steps are bimodal (between the
 * scheduler's slices or a slice later) and its median sits in either mode by chance.
 *
 * Usage: mpirun -n P grid_bench --mpi openmpi --transport shm [--batches 1,4,16,64,256,1024]
 *        [--sizes 256,2048,16384] [--samples-per-rank 4000] [--samples-per-rank-large 1000]
 *        [--large-from 16384] [--budget 1] [--limit 6] [--dd-budget 0.25] [--dd-limit 3]
 *        [--skip-over 30] [--warmup 2]
 *        [--nmin 5] [--nmax 200] [--seed 7] [--wait auto|block|yield]
 *        [--auto-loader fresh|shared] [--csv FILE] [--header]
 */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mdloader.h"
#include "bench_common.h"

enum { V_OS, V_COLL, V_AUTO, V_NODE, V_DD, V_FRMA, V_FA2A, NV };

static int g_rank, g_P, g_yield;

/* ---------------------------------------------------------------- helpers */

static void die(const char *what)
{
    fprintf(stderr, "[rank %d] %s\n", g_rank, what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

static void lib_check(mdl_status st, const char *what)
{
    if (st == MDL_OK)
        return;
    char msg[512] = "";
    mdl_last_error(msg, sizeof msg);
    fprintf(stderr, "[rank %d] %s: %s (%s)\n", g_rank, what, mdl_status_string(st), msg);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Complete requests: MPI_Waitall, or a test-and-yield loop (--wait yield). */
static void wait_all(int n, MPI_Request *r)
{
    if (n <= 0)
        return;
    if (!g_yield) {
        MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
        return;
    }
    for (;;) {
        int done = 0;
        MPI_Testall(n, r, &done, MPI_STATUSES_IGNORE);
        if (done)
            return;
        sched_yield();
    }
}

/* Barrier and all-reduce outside the clock: always nonblocking + yield, so that
   oversubscribed MPICH ranks do not spin against each other between steps. */
static void sync_all(void)
{
    MPI_Request r;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    int save = g_yield;
    g_yield = 1;
    wait_all(1, &r);
    g_yield = save;
}

static void allreduce(const void *in, void *out, int n, MPI_Datatype t, MPI_Op op)
{
    MPI_Request r;
    MPI_Iallreduce(in, out, n, t, op, MPI_COMM_WORLD, &r);
    int save = g_yield;
    g_yield = 1;
    wait_all(1, &r);
    g_yield = save;
}

/* A hint of the machine's state at a point: the mean round trip of an 8-byte message
   between ranks 0 and 1 (the best of 3 runs of 100), in microseconds; NAN with one
   rank. On a virtual machine it changes while a job runs (0.3 us or 1.3 us between this
   project's two cores, for minutes), and MPICH's shared-memory gets, which are served
   by the target, slowed about 3x with it (tests/c/repro/mpich_get_modes.c). One sample
   before the point: the state can change during it. It reads the machine only with
   no more ranks than cores and --wait block; oversubscribed, or with --wait yield, it
   mostly measures the scheduler, so compare it only within one combination. The other
   ranks wait in the barrier. */
static double round_trip_us(void)
{
    enum { TRIPS = 100, RUNS = 3 };
    if (g_P < 2)
        return NAN;
    double best = INFINITY;
    char msg[8] = {0};
    for (int run = 0; run < RUNS; run++) {
        sync_all();
        double t0 = MPI_Wtime();
        for (int i = 0; i < TRIPS && g_rank < 2; i++) {
            MPI_Request r;
            if (g_rank == 0) {
                MPI_Isend(msg, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, &r);
                wait_all(1, &r);
                MPI_Irecv(msg, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, &r);
                wait_all(1, &r);
            } else {
                MPI_Irecv(msg, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &r);
                wait_all(1, &r);
                MPI_Isend(msg, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, &r);
                wait_all(1, &r);
            }
        }
        double mean = (MPI_Wtime() - t0) / TRIPS * 1e6;
        best = mean < best ? mean : best;
    }
    return best;
}

/* ---------------------------------------------------------------- dataset */

/* Uniform in [m/2, 3m/2]: mean m. */
static uint64_t size_of(uint64_t seed, uint64_t m, uint64_t g)
{
    uint64_t h = mix64(g * 2 + 1 + seed * 0x9E3779B97F4A7C15ull + m);
    return m / 2 + h % (m + 1);
}

/* ---------------------------------------------------------------- options */

typedef struct opts {
    const char *mpi, *transport, *csv, *wait, *auto_loader;
    uint64_t batches[16], sizes[8];
    int nb, ns;
    uint64_t per_rank, per_rank_large, large_from, seed;
    double budget, limit, dd_budget, dd_limit, skip_over;
    int warmup, nmin, nmax, header;
} opts;

static int parse_list(const char *v, uint64_t *out, int cap)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    int n = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (n == cap)
            return -1;
        char *end;
        out[n] = strtoull(t, &end, 10);
        if (*end || !out[n])
            return -1;
        n++;
    }
    return n ? n : -1;
}

static int parse_args(int argc, char **argv, opts *o)
{
    static const uint64_t B[] = {1, 4, 16, 64, 256, 1024}, S[] = {256, 2048, 16384};
    memset(o, 0, sizeof *o);
    o->mpi = "unknown", o->transport = "unknown", o->wait = "auto", o->auto_loader = "fresh";
    memcpy(o->batches, B, sizeof B), o->nb = 6;
    memcpy(o->sizes, S, sizeof S), o->ns = 3;
    o->per_rank = 4000, o->per_rank_large = 1000, o->large_from = 16384, o->seed = 7;
    o->budget = 1.0, o->limit = 6.0, o->dd_budget = 0.25, o->dd_limit = 3.0, o->skip_over = 30.0;
    o->warmup = 2, o->nmin = 5, o->nmax = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--header")) {
            o->header = 1;
            continue;
        }
        if (i + 1 >= argc)
            return -1;
        const char *v = argv[++i];
        if (!strcmp(a, "--mpi"))
            o->mpi = v;
        else if (!strcmp(a, "--transport"))
            o->transport = v;
        else if (!strcmp(a, "--csv"))
            o->csv = v;
        else if (!strcmp(a, "--wait"))
            o->wait = v;
        else if (!strcmp(a, "--auto-loader"))
            o->auto_loader = v;
        else if (!strcmp(a, "--batches")) {
            if ((o->nb = parse_list(v, o->batches, 16)) < 0)
                return -1;
        } else if (!strcmp(a, "--sizes")) {
            if ((o->ns = parse_list(v, o->sizes, 8)) < 0)
                return -1;
        } else if (!strcmp(a, "--samples-per-rank"))
            o->per_rank = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--samples-per-rank-large"))
            o->per_rank_large = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--large-from"))
            o->large_from = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--seed"))
            o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--budget"))
            o->budget = atof(v);
        else if (!strcmp(a, "--limit"))
            o->limit = atof(v);
        else if (!strcmp(a, "--dd-budget"))
            o->dd_budget = atof(v);
        else if (!strcmp(a, "--dd-limit"))
            o->dd_limit = atof(v);
        else if (!strcmp(a, "--skip-over"))
            o->skip_over = atof(v);
        else if (!strcmp(a, "--warmup"))
            o->warmup = atoi(v);
        else if (!strcmp(a, "--nmin"))
            o->nmin = atoi(v);
        else if (!strcmp(a, "--nmax"))
            o->nmax = atoi(v);
        else
            return -1;
    }
    if (!o->per_rank || !o->per_rank_large || o->nmin < 1 || o->nmax < o->nmin || o->warmup < 0)
        return -1;
    if (strcmp(o->auto_loader, "fresh") && strcmp(o->auto_loader, "shared"))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- stats JSON */

/* The number after "key": at or after p (first occurrence). */
static double json_num(const char *p, const char *key)
{
    char q[64];
    snprintf(q, sizeof q, "\"%s\":", key);
    const char *at = strstr(p, q);
    return at ? strtod(at + strlen(q), NULL) : NAN;
}

typedef struct lstats {
    double os_steps, coll_steps, probes, switches, unsure, surprise_probes;
    double noise[2]; /* the calibration's, one-sided and collective */
    double params[8]; /* a_os g_os b_os c_os a_coll s_coll b_coll c_coll */
} lstats;

static lstats read_stats(mdl_loader *h)
{
    static char buf[8192];
    mdl_stats_json(h, buf, sizeof buf);
    lstats s;
    const char *os = strstr(buf, "\"onesided\":"), *co = strstr(buf, "\"collective\":");
    const char *cal = strstr(buf, "\"calibration\":");
    s.os_steps = os ? json_num(os, "steps") : NAN;
    s.coll_steps = co ? json_num(co, "steps") : NAN;
    s.probes = json_num(buf, "probes");
    s.switches = json_num(buf, "switches");
    s.unsure = json_num(buf, "unsure_decisions");
    s.surprise_probes = json_num(buf, "surprise_probes");
    s.noise[0] = cal ? json_num(cal, "noise_onesided") : NAN;
    s.noise[1] = cal ? json_num(cal, "noise_collective") : NAN;
    static const char *names[8] = {"a_os", "g_os", "b_os", "c_os", "a_coll", "s_coll", "b_coll", "c_coll"};
    for (int i = 0; i < 8; i++)
        s.params[i] = cal ? json_num(cal, names[i]) : NAN;
    return s;
}

/* The share of this rank's bytes from other ranks that the node-local path copied. */
static double node_fraction_of(mdl_loader *h)
{
    static char buf[8192];
    mdl_stats_json(h, buf, sizeof buf);
    const char *node = strstr(buf, "\"node_local\":");
    double node_bytes = node ? json_num(node, "bytes") : 0, remote = json_num(buf, "bytes_remote");
    return node_bytes + remote > 0 ? node_bytes / (node_bytes + remote) : NAN;
}

/* ---------------------------------------------------------------- one point */

typedef struct ctx {
    const opts *o;
    uint64_t N, total, m;       /* samples per rank, all samples, mean size */
    uint64_t *gsize, *gdisp;    /* per global id */
    uint8_t *wbase[2];          /* my shard, in the raw windows: [0] RMA floor, [1] a2a floor */
    MPI_Win win[2];
    mdl_loader *onesided, *collective, *shared_auto; /* loaders with the engine forced */
    mdl_loader *node;                                 /* AUTO with MDL_NODE_LOCAL=on */
    uint64_t *shard_off;        /* N + 1 offsets of my shard */
    uint64_t B;
    /* per-step scratch */
    uint64_t *ids, *peer, *outoff, *liboff;
    uint8_t *out;
    uint64_t out_cap;
    int *owner;
    /* a2a floor */
    int *pos, *ids_to, *ids_to_d, *ids_from, *ids_from_d, *b_to, *b_to_d, *b_from, *b_from_d;
    uint64_t *req, *asked;
    uint8_t *sbuf, *rbuf;
    uint64_t sbuf_cap, rbuf_cap, asked_cap;
    MPI_Request *reqs;
    double *tl, *tg;
    int tcap;
} ctx;

static void ensure(void **p, uint64_t *cap, uint64_t need)
{
    if (need <= *cap)
        return;
    free(*p);
    *cap = need + need / 4 + 64;
    *p = xmalloc(*cap);
}

/* Ids of step s and everything the variants need, outside the clock. */
static void prepare(ctx *c, uint64_t s)
{
    const int me = g_rank, P = g_P;
    const uint64_t B = c->B, N = c->N;
    batch_ids(c->o->seed, me, B, s, c->total, c->ids);
    c->outoff[0] = 0;
    for (int p = 0; p < P; p++)
        c->ids_to[p] = c->b_from[p] = c->ids_from[p] = c->b_to[p] = 0;
    for (uint64_t k = 0; k < B; k++) {
        uint64_t g = c->ids[k];
        c->owner[k] = (int)(g / N);
        c->outoff[k + 1] = c->outoff[k] + c->gsize[g];
        if (c->owner[k] != me) {
            c->ids_to[c->owner[k]]++;
            c->b_from[c->owner[k]] += (int)c->gsize[g];
        }
    }
    ensure((void **)&c->out, &c->out_cap, c->outoff[B]);
    /* requests grouped by owner, request order within an owner */
    int acc = 0, bacc = 0;
    for (int p = 0; p < P; p++) {
        c->ids_to_d[p] = acc;
        c->b_from_d[p] = bacc;
        acc += c->ids_to[p];
        bacc += c->b_from[p];
    }
    for (int p = 0; p < P; p++)
        c->pos[p] = c->ids_to_d[p];
    for (uint64_t k = 0; k < B; k++)
        if (c->owner[k] != me)
            c->req[c->pos[c->owner[k]]++] = c->ids[k];
    ensure((void **)&c->rbuf, &c->rbuf_cap, (uint64_t)bacc);
    /* what peers will ask me (for buffer sizes only) */
    uint64_t asked = 0, serve = 0;
    for (int p = 0; p < P; p++) {
        if (p == me)
            continue;
        batch_ids(c->o->seed, p, B, s, c->total, c->peer);
        for (uint64_t k = 0; k < B; k++)
            if (c->peer[k] / N == (uint64_t)me)
                asked++, serve += c->gsize[c->peer[k]];
    }
    ensure((void **)&c->sbuf, &c->sbuf_cap, serve);
    ensure((void **)&c->asked, &c->asked_cap, asked * sizeof(uint64_t)); /* bytes */
}

/* One step of variant v on the prepared ids; returns this rank's seconds. */
static double run_step(ctx *c, int v, mdl_loader *h)
{
    const int me = g_rank, P = g_P;
    const uint64_t B = c->B;
    sync_all();
    double t0 = MPI_Wtime();
    switch (v) {
    case V_OS:
    case V_COLL:
    case V_AUTO:
    case V_NODE:
        lib_check(mdl_fetch_batch(h, c->ids, B, c->out, c->out_cap, c->liboff), "mdl_fetch_batch");
        break;
    case V_DD:
        for (uint64_t k = 0; k < B; k++) {
            int cnt = (int)(c->outoff[k + 1] - c->outoff[k]);
            MPI_Win_lock(MPI_LOCK_SHARED, c->owner[k], 0, c->win[0]);
            MPI_Get(c->out + c->outoff[k], cnt, MPI_BYTE, c->owner[k], (MPI_Aint)c->gdisp[c->ids[k]], cnt, MPI_BYTE,
                    c->win[0]);
            MPI_Win_unlock(c->owner[k], c->win[0]);
        }
        break;
    case V_FRMA: {
        int nr = 0;
        MPI_Win_lock_all(MPI_MODE_NOCHECK, c->win[0]);
        for (uint64_t k = 0; k < B; k++) {
            int cnt = (int)(c->outoff[k + 1] - c->outoff[k]);
            uint64_t g = c->ids[k];
            if (c->owner[k] == me)
                memcpy(c->out + c->outoff[k], c->wbase[0] + c->gdisp[g], (size_t)cnt);
            else if (g_yield)
                MPI_Rget(c->out + c->outoff[k], cnt, MPI_BYTE, c->owner[k], (MPI_Aint)c->gdisp[g], cnt, MPI_BYTE,
                         c->win[0], &c->reqs[nr++]);
            else
                MPI_Get(c->out + c->outoff[k], cnt, MPI_BYTE, c->owner[k], (MPI_Aint)c->gdisp[g], cnt, MPI_BYTE,
                        c->win[0]);
        }
        if (g_yield)
            wait_all(nr, c->reqs);
        else
            MPI_Win_flush_all(c->win[0]);
        MPI_Win_unlock_all(c->win[0]);
        break;
    }
    case V_FA2A: {
        MPI_Request r;
        MPI_Ialltoall(c->ids_to, 1, MPI_INT, c->ids_from, 1, MPI_INT, MPI_COMM_WORLD, &r);
        wait_all(1, &r);
        int acc = 0;
        for (int p = 0; p < P; p++)
            c->ids_from_d[p] = acc, acc += c->ids_from[p];
        MPI_Ialltoallv(c->req, c->ids_to, c->ids_to_d, MPI_UINT64_T, c->asked, c->ids_from, c->ids_from_d,
                       MPI_UINT64_T, MPI_COMM_WORLD, &r);
        wait_all(1, &r);
        /* owners pack */
        uint64_t at = 0;
        int n = 0;
        for (int p = 0; p < P; p++) {
            c->b_to_d[p] = (int)at;
            for (int i = 0; i < c->ids_from[p]; i++, n++) {
                uint64_t g = c->asked[n];
                memcpy(c->sbuf + at, c->wbase[1] + c->gdisp[g], c->gsize[g]);
                at += c->gsize[g];
            }
            c->b_to[p] = (int)(at - (uint64_t)c->b_to_d[p]);
        }
        MPI_Ialltoallv(c->sbuf, c->b_to, c->b_to_d, MPI_BYTE, c->rbuf, c->b_from, c->b_from_d, MPI_BYTE,
                       MPI_COMM_WORLD, &r);
        /* local samples straight into the output while the exchange runs */
        for (uint64_t k = 0; k < B; k++)
            if (c->owner[k] == me)
                memcpy(c->out + c->outoff[k], c->wbase[1] + c->gdisp[c->ids[k]], c->outoff[k + 1] - c->outoff[k]);
        wait_all(1, &r);
        break;
    }
    }
    return MPI_Wtime() - t0;
}

/* Wrong samples delivered by the step just run (outside the clock). */
static long check_step(ctx *c, int v)
{
    const int me = g_rank;
    long bad = 0;
    uint64_t seed = c->o->seed;
    if (v == V_FA2A) {
        uint64_t *pos = xmalloc(sizeof(uint64_t) * (size_t)g_P);
        for (int p = 0; p < g_P; p++)
            pos[p] = (uint64_t)c->b_from_d[p];
        for (uint64_t k = 0; k < c->B; k++) {
            uint64_t g = c->ids[k];
            const uint8_t *src = c->owner[k] == me ? c->out + c->outoff[k] : c->rbuf + pos[c->owner[k]];
            if (!verify(seed, g, src, c->gsize[g]))
                bad++;
            if (c->owner[k] != me)
                pos[c->owner[k]] += c->gsize[g];
        }
        free(pos);
    } else {
        const uint64_t *oo = v <= V_NODE ? c->liboff : c->outoff;
        for (uint64_t k = 0; k < c->B; k++) {
            uint64_t g = c->ids[k];
            if (oo[k + 1] - oo[k] != c->gsize[g] || !verify(seed, g, c->out + oo[k], c->gsize[g]))
                bad++;
        }
    }
    memset(c->out, 0, c->outoff[c->B]);
    return bad;
}

typedef struct result {
    double med;   /* microseconds; NAN if not run */
    double mean;  /* microseconds: what the steps cost together (a busy machine's steps are
                     bimodal, and a median sits in either mode) */
    int n, warm;
    long bad;
} result;

static void ensure_times(ctx *c, int n)
{
    if (n <= c->tcap)
        return;
    free(c->tl);
    free(c->tg);
    c->tcap = n + 64;
    c->tl = xmalloc(sizeof(double) * (size_t)c->tcap);
    c->tg = xmalloc(sizeof(double) * (size_t)c->tcap);
}

/* The DDStore-style loop alone: warm-up, choice of N, measured steps. pred: expected
   step seconds (from the previous batch of this size), or <= 0 when unknown. */
static result measure_dd(ctx *c, double pred)
{
    const int v = V_DD;
    mdl_loader *h = NULL;
    const opts *o = c->o;
    result r = {NAN, NAN, 0, 0, 0};
    if (v == V_DD && pred > o->skip_over)
        return r; /* not run: a single DDStore-style step is predicted too long */
    int W = o->warmup;
    if (pred > o->dd_limit)
        W = 0;
    else if (pred > o->dd_limit / 3 && W > 1)
        W = 1;
    ensure_times(c, W > 0 ? W : 1);
    for (int w = 0; w < W; w++) {
        prepare(c, (uint64_t)w);
        c->tl[w] = run_step(c, v, h);
    }
    double est = pred;
    if (W > 0) {
        allreduce(c->tl, c->tg, W, MPI_DOUBLE, MPI_MAX);
        est = c->tg[0];
        for (int w = 1; w < W; w++)
            est = fmin(est, c->tg[w]);
    }
    int N = est > 0 ? (int)(o->dd_budget / est) : o->nmax;
    if (N < o->nmin)
        N = o->nmin;
    if (N > o->nmax)
        N = o->nmax;
    if (est > 0 && N * est > o->dd_limit) {
        N = (int)(o->dd_limit / est);
        if (N < 1)
            N = 1;
    }
    ensure_times(c, N > g_P ? N : g_P);
    for (int k = 0; k < N; k++) {
        prepare(c, 1000 + (uint64_t)k);
        c->tl[k] = run_step(c, v, h);
        if (k == 0)
            r.bad = check_step(c, v);
    }
    allreduce(c->tl, c->tg, N, MPI_DOUBLE, MPI_MAX);
    r.med = median(c->tg, N) * 1e6;
    r.n = N;
    r.warm = W;
    return r;
}

/* The variants measured together, step by step in turn (same ids, same moment), so
   that a burst of load from other jobs on the machine hits them all alike. */
static const int GROUP[] = {V_OS, V_COLL, V_AUTO, V_NODE, V_FRMA, V_FA2A};
enum { NG = sizeof GROUP / sizeof GROUP[0] };

/* The loader variant v runs on. */
static mdl_loader *loader_of(ctx *c, int v, mdl_loader *au)
{
    return v == V_AUTO ? au : v == V_NODE ? c->node : v == V_OS ? c->onesided : v == V_COLL ? c->collective : NULL;
}

/* The order of the group at step s: a permutation drawn from s, the same on every rank
   (a rotation would keep every variant right behind the same other one). */
static void group_order(uint64_t s, int *order)
{
    for (int g = 0; g < NG; g++)
        order[g] = g;
    if (getenv("GRID_FIXED_ORDER"))
        return;
    uint64_t st = mix64(s * 0x9E3779B97F4A7C15ull + 12345);
    for (int g = NG - 1; g > 0; g--) {
        st = mix64(st);
        int j = (int)(st % (uint64_t)(g + 1)), t = order[g];
        order[g] = order[j], order[j] = t;
    }
}

/* Interleaved warm-up and measured steps of the group: each forced engine on its
   loader, AUTO on its own loader `au` (which sees only its own steps), floors on their
   raw windows. pred: expected seconds of one step of the whole group (<= 0: unknown). */
static void measure_group(ctx *c, mdl_loader *au, double pred, result *res, lstats *before, lstats *after)
{
    const opts *o = c->o;
    int W = o->warmup;
    if (pred > o->limit)
        W = 0;
    else if (pred > o->limit / 3 && W > 1)
        W = 1;
    ensure_times(c, NG * (W > 0 ? W : 1));
    for (int w = 0; w < W; w++) {
        prepare(c, (uint64_t)w);
        int order[NG];
        group_order((uint64_t)w, order);
        for (int j = 0; j < NG; j++) {
            int g = order[j], v = GROUP[g];
            c->tl[w * NG + g] = run_step(c, v, loader_of(c, v, au));
        }
    }
    double est = pred;
    if (W > 0) {
        allreduce(c->tl, c->tg, NG * W, MPI_DOUBLE, MPI_MAX);
        est = 0;
        for (int g = 0; g < NG; g++) {
            double m = c->tg[g];
            for (int w = 1; w < W; w++)
                m = fmin(m, c->tg[w * NG + g]);
            est += m;
        }
    }
    int N = est > 0 ? (int)(o->budget / est) : o->nmax;
    if (N < o->nmin)
        N = o->nmin;
    if (N > o->nmax)
        N = o->nmax;
    if (est > 0 && N * est > o->limit) {
        N = (int)(o->limit / est);
        if (N < 1)
            N = 1;
    }
    ensure_times(c, NG * N > g_P ? NG * N : g_P);
    *before = read_stats(au);
    long bad[NG] = {0};
    for (int k = 0; k < N; k++) {
        prepare(c, 1000 + (uint64_t)k);
        int order[NG];
        group_order(1000 + (uint64_t)k, order);
        for (int j = 0; j < NG; j++) {
            int g = order[j], v = GROUP[g];
            c->tl[k * NG + g] = run_step(c, v, loader_of(c, v, au));
            if (k == 0)
                bad[g] = check_step(c, v);
        }
    }
    *after = read_stats(au);
    allreduce(c->tl, c->tg, NG * N, MPI_DOUBLE, MPI_MAX);
    double *col = xmalloc(sizeof(double) * (size_t)N);
    for (int g = 0; g < NG; g++) {
        for (int k = 0; k < N; k++)
            col[k] = c->tg[k * NG + g];
        double sum = 0;
        for (int k = 0; k < N; k++)
            sum += col[k];
        res[GROUP[g]].mean = sum / N * 1e6;
        res[GROUP[g]].med = median(col, N) * 1e6;
        res[GROUP[g]].n = N;
        res[GROUP[g]].warm = W;
        res[GROUP[g]].bad = bad[g];
    }
    free(col);
}

typedef struct auto_rec {
    lstats before, after;
} auto_rec;


/* Mean raw-model predictions (seconds) over measured steps 0..K-1 (features as the
   library computes them: maxima over ranks, served bytes = column sums). */
/* The model's terms averaged over the K batches (the model is linear in them):
   one-sided 1, gets, bytes, bytes served; collective rounds, samples, bytes, bytes
   served, as features_of in src/estimator/model.rs. */
enum { MODEL_TERMS = 8 };

static void model_predict(ctx *c, const double *prm, double *pos, double *pcoll, double *terms)
{
    const int P = g_P, me = g_rank, K = 16;
    const uint64_t B = c->B, N = c->N;
    double *loc = xmalloc(sizeof(double) * (size_t)K * (3 + (size_t)P));
    double *glo = xmalloc(sizeof(double) * (size_t)K * (3 + (size_t)P));
    double *sum = xmalloc(sizeof(double) * (size_t)K * (3 + (size_t)P));
    for (int k = 0; k < K; k++) {
        double *row = loc + (size_t)k * (3 + (size_t)P);
        memset(row, 0, sizeof(double) * (3 + (size_t)P));
        batch_ids(c->o->seed, me, B, 1000 + (uint64_t)k, c->total, c->ids);
        int prev_owner = -1;
        uint64_t prev_end = 0;
        for (uint64_t j = 0; j < B; j++) {
            uint64_t g = c->ids[j];
            int ow = (int)(g / N);
            if (ow == me) {
                prev_owner = -1;
                continue;
            }
            /* coalescing: adjacent in the owner's window and in the output */
            if (!(prev_owner == ow && prev_end == c->gdisp[g]))
                row[0] += 1; /* gets */
            row[1] += 1;     /* remote samples */
            row[2] += (double)c->gsize[g];
            row[3 + ow] += (double)c->gsize[g];
            prev_owner = ow;
            prev_end = c->gdisp[g] + c->gsize[g];
        }
    }
    allreduce(loc, glo, K * (3 + P), MPI_DOUBLE, MPI_MAX);
    allreduce(loc, sum, K * (3 + P), MPI_DOUBLE, MPI_SUM);
    double so = 0, sc = 0;
    for (int t = 0; t < MODEL_TERMS; t++)
        terms[t] = 0;
    for (int k = 0; k < K; k++) {
        const double *mx = glo + (size_t)k * (3 + (size_t)P), *sm = sum + (size_t)k * (3 + (size_t)P);
        double G = mx[0], S = mx[1], Bb = mx[2], IN = 0;
        for (int p = 0; p < P; p++)
            IN = fmax(IN, sm[3 + p]);
        so += prm[0] + prm[1] * G + prm[2] * Bb + prm[3] * IN;
        sc += (S > 0 ? 1.0 : 0.0) * prm[4] + prm[5] * S + prm[6] * Bb + prm[7] * IN;
        const double row[MODEL_TERMS] = {1, G, Bb, IN, S > 0 ? 1.0 : 0.0, S, Bb, IN};
        for (int t = 0; t < MODEL_TERMS; t++)
            terms[t] += row[t] / K;
    }
    *pos = so / K;
    *pcoll = sc / K;
    free(loc);
    free(glo);
    free(sum);
}

static mdl_loader *new_loader(ctx *c, mdl_backend backend)
{
    mdl_loader *h = NULL;
    /* Every loader but the node variant's reads its whole batch through the engines. */
    if (!getenv("MDL_NODE_LOCAL"))
        setenv("MDL_NODE_LOCAL", "off", 1);
    /* The grid measures the engines in lockstep, with no other library's collective
       beside them: under MPI_THREAD_FUNNELED (no progress thread) the library's default
       would end every engine step in a barrier against that deadlock, a cost of the
       safety, not of the engines (2-3 us a step here, plus the ranks' skew). Set
       MDL_PROGRESS=auto to measure with it. */
    if (!getenv("MDL_PROGRESS"))
        setenv("MDL_PROGRESS", "off", 1);
    lib_check(mdl_init(MPI_COMM_WORLD, &h), "mdl_init");
    lib_check(mdl_register_shard(h, c->wbase[0], c->shard_off, c->N), "mdl_register_shard");
    lib_check(mdl_set_backend(h, backend), "mdl_set_backend");
    return h;
}

static void fmt_params(char *buf, size_t len, const double *p)
{
    snprintf(buf, len, "a_os=%.3g g_os=%.3g b_os=%.3g c_os=%.3g a_coll=%.3g s_coll=%.3g b_coll=%.3g c_coll=%.3g", p[0],
             p[1], p[2], p[3], p[4], p[5], p[6], p[7]);
}

/* The data of a point: the raw windows (filled), the forced engines' loaders and, with
   --auto-loader shared, the AUTO loader. Made fresh for every point by default, so that
   the forced engines, AUTO and the floors all run on windows of the same age (a loader
   made just before is measurably slower for a while than one used for minutes: about 15%
   at 16 KB samples, Open MPI shared memory). */
static void open_data(ctx *c, uint64_t mybytes)
{
    const opts *o = c->o;
    const int me = g_rank;
    /* Rounded up to 64 bytes, as the library does: MPICH 4.0.2's shared-memory windows
       return wrong bytes from a rank whose predecessor's window is not a multiple of
       16 bytes (src/mpi/window.rs). */
    for (int w = 0; w < 2; w++)
        MPI_Win_allocate((MPI_Aint)((mybytes + 63) / 64 * 64), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &c->wbase[w],
                         &c->win[w]);
    const uint64_t g0 = (uint64_t)me * c->N;
    c->shard_off = xmalloc(sizeof(uint64_t) * (c->N + 1));
    c->shard_off[0] = 0;
    for (uint64_t i = 0; i < c->N; i++) {
        fill(o->seed, g0 + i, c->wbase[0] + c->gdisp[g0 + i], c->gsize[g0 + i]);
        c->shard_off[i + 1] = c->shard_off[i] + c->gsize[g0 + i];
    }
    memcpy(c->wbase[1], c->wbase[0], mybytes);
    sync_all();
    c->onesided = new_loader(c, MDL_BACKEND_ONESIDED);
    c->collective = new_loader(c, MDL_BACKEND_COLLECTIVE);
    /* The setting is agreed at mdl_init: every rank sets it alike. */
    setenv("MDL_NODE_LOCAL", "on", 1);
    c->node = new_loader(c, MDL_BACKEND_AUTO);
    setenv("MDL_NODE_LOCAL", "off", 1);
    if (!strcmp(o->auto_loader, "shared"))
        c->shared_auto = new_loader(c, MDL_BACKEND_AUTO);
}

static void close_data(ctx *c)
{
    lib_check(mdl_finalize(&c->onesided), "mdl_finalize");
    lib_check(mdl_finalize(&c->collective), "mdl_finalize");
    lib_check(mdl_finalize(&c->node), "mdl_finalize");
    if (c->shared_auto)
        lib_check(mdl_finalize(&c->shared_auto), "mdl_finalize");
    for (int w = 0; w < 2; w++)
        MPI_Win_free(&c->win[w]);
    free(c->shard_off);
    c->shard_off = NULL;
}

int main(int argc, char **argv)
{
    int provided;
    /* FUNNELED: Open MPI's osc pt2pt (TCP runs) refuses windows under THREAD_MULTIPLE. */
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_P);
    opts o;
    if (parse_args(argc, argv, &o)) {
        if (g_rank == 0)
            fprintf(stderr, "bad arguments; see the comment at the top of grid_bench.c\n");
        MPI_Finalize();
        return 2;
    }
    char libver[MPI_MAX_LIBRARY_VERSION_STRING];
    int lvlen = 0;
    MPI_Get_library_version(libver, &lvlen);
    int is_mpich = strstr(libver, "MPICH") != NULL;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (!strcmp(o.wait, "yield"))
        g_yield = 1;
    else if (!strcmp(o.wait, "block"))
        g_yield = 0;
    else
        g_yield = is_mpich && g_P > cores;
    const int P = g_P, me = g_rank;
    double t_start = MPI_Wtime();

    FILE *csv = stdout;
    if (me == 0 && o.csv && !(csv = fopen(o.csv, "a")))
        die("cannot open the CSV file");
    if (me == 0) {
        if (o.header)
            fprintf(csv, "mpi,transport,ranks,batch,sample,t_onesided,t_collective,t_auto,auto_onesided_steps,"
                         "auto_collective_steps,t_ddstore,t_floor_rma,t_floor_a2a,n_onesided,n_collective,n_auto,"
                         "n_ddstore,n_floor_rma,n_floor_a2a,auto_probes,auto_switches,pred_onesided,"
                         "pred_collective,mean_sample_bytes,samples_per_rank,wait,bad,t_node,n_node,"
                         "node_local_fraction,model_terms,model_params,rtt_us,auto_unsure,auto_surprise_probes,"
                         "noise_onesided,noise_collective,mean_onesided,mean_collective,mean_auto\n");
        fflush(csv);
        fprintf(stderr, "grid_bench: %s/%s, %d ranks (%ld cores), wait=%s, auto loader %s, budget %.2f s, limit %.1f s\n",
                o.mpi, o.transport, P, cores, g_yield ? "yield" : "block", o.auto_loader, o.budget, o.limit);
    }
    const int shared = !strcmp(o.auto_loader, "shared");

    for (int si = 0; si < o.ns; si++) {
        ctx c;
        memset(&c, 0, sizeof c);
        c.o = &o;
        c.m = o.sizes[si];
        c.N = c.m >= o.large_from ? o.per_rank_large : o.per_rank;
        c.total = c.N * (uint64_t)P;
        c.gsize = xmalloc(sizeof(uint64_t) * c.total);
        c.gdisp = xmalloc(sizeof(uint64_t) * c.total);
        uint64_t mybytes = 0;
        double mean = 0;
        for (int r = 0; r < P; r++) {
            uint64_t acc = 0;
            for (uint64_t i = 0; i < c.N; i++) {
                uint64_t g = (uint64_t)r * c.N + i;
                c.gsize[g] = size_of(o.seed, c.m, g);
                c.gdisp[g] = acc;
                acc += c.gsize[g];
                mean += (double)c.gsize[g];
            }
            if (r == me)
                mybytes = acc;
        }
        mean /= (double)c.total;
        if (shared)
            open_data(&c, mybytes);
        if (me == 0)
            fprintf(stderr, "  sample %llu B (mean %.0f), %llu per rank\n", (unsigned long long)c.m, mean,
                    (unsigned long long)c.N);
        double prev[NV];
        uint64_t prevB = 0;
        for (int v = 0; v < NV; v++)
            prev[v] = -1;

        for (int bi = 0; bi < o.nb; bi++) {
            const uint64_t B = c.B = o.batches[bi];
            double tp0 = MPI_Wtime();
            if (!shared)
                open_data(&c, mybytes);
            c.ids = xmalloc(sizeof(uint64_t) * B);
            c.peer = xmalloc(sizeof(uint64_t) * B);
            c.outoff = xmalloc(sizeof(uint64_t) * (B + 1));
            c.liboff = xmalloc(sizeof(uint64_t) * (B + 1));
            c.owner = xmalloc(sizeof(int) * B);
            c.req = xmalloc(sizeof(uint64_t) * B);
            c.reqs = xmalloc(sizeof(MPI_Request) * B);
            int *ints = xmalloc(sizeof(int) * 9 * (size_t)P);
            c.ids_to = ints, c.ids_to_d = ints + P, c.ids_from = ints + 2 * P, c.ids_from_d = ints + 3 * P;
            c.b_to = ints + 4 * P, c.b_to_d = ints + 5 * P, c.b_from = ints + 6 * P, c.b_from_d = ints + 7 * P;
            c.pos = ints + 8 * P;
            ensure_times(&c, 64 + P);

            result res[NV];
            auto_rec ar;
            memset(&ar, 0, sizeof ar);
            double pred_os = NAN, pred_coll = NAN, terms[MODEL_TERMS] = {0}, params[8] = {0};
            char pbuf[256] = "";
            const double rtt_us = round_trip_us();
            /* the interleaved group: forced engines, AUTO (own loader), floors */
            {
                double pred = 0;
                for (int g = 0; g < NG; g++)
                    pred = prev[GROUP[g]] > 0 && prevB && pred >= 0
                               ? pred + prev[GROUP[g]] * 1e-6 * (double)B / (double)prevB
                               : -1;
                mdl_loader *au = shared ? c.shared_auto : new_loader(&c, MDL_BACKEND_AUTO);
                lstats s = read_stats(au);
                model_predict(&c, s.params, &pred_os, &pred_coll, terms);
                memcpy(params, s.params, sizeof params);
                fmt_params(pbuf, sizeof pbuf, s.params);
                measure_group(&c, au, pred, res, &ar.before, &ar.after);
                if (!shared)
                    lib_check(mdl_finalize(&au), "mdl_finalize");
            }
            /* DDStore-style loop: a block of its own, capped in time */
            {
                double pred = prev[V_DD] > 0 && prevB ? prev[V_DD] * 1e-6 * (double)B / (double)prevB : -1;
                res[V_DD] = measure_dd(&c, pred);
            }
            const double node_fraction = node_fraction_of(c.node);
            long bad[NV], gbad[NV];
            for (int v = 0; v < NV; v++)
                bad[v] = res[v].bad;
            allreduce(bad, gbad, NV, MPI_LONG, MPI_SUM);
            long badsum = 0;
            for (int v = 0; v < NV; v++)
                badsum += gbad[v];
            if (me == 0) {
                double aos = ar.after.os_steps - ar.before.os_steps;
                double aco = ar.after.coll_steps - ar.before.coll_steps;
                fprintf(csv, "%s,%s,%d,%llu,%llu", o.mpi, o.transport, P, (unsigned long long)B,
                        (unsigned long long)c.m);
                for (int v = 0; v < NV; v++) {
                    if (v == V_NODE)
                        continue; /* at the end of the row: the older columns keep their places */
                    if (v == V_DD)
                        fprintf(csv, ",%.0f,%.0f", aos, aco);
                    if (isnan(res[v].med))
                        fprintf(csv, ",");
                    else
                        fprintf(csv, ",%.2f", res[v].med);
                }
                for (int v = 0; v < NV; v++)
                    if (v != V_NODE)
                        fprintf(csv, ",%d", res[v].n);
                fprintf(csv, ",%.0f,%.0f,%.2f,%.2f,%.1f,%llu,%s,%ld,%.2f,%d,%.3f", ar.after.probes - ar.before.probes,
                        ar.after.switches - ar.before.switches, pred_os * 1e6, pred_coll * 1e6, mean,
                        (unsigned long long)c.N, g_yield ? "yield" : "block", badsum, res[V_NODE].med, res[V_NODE].n,
                        node_fraction);
                /* What a replay of the model needs (src/estimator/model.rs's test): its terms
                   and the calibrated parameters, ';'-separated, full precision. */
                for (int t = 0; t < MODEL_TERMS; t++)
                    fprintf(csv, "%c%.17g", t ? ';' : ',', terms[t]);
                for (int t = 0; t < 8; t++)
                    fprintf(csv, "%c%.17g", t ? ';' : ',', params[t]);
                if (isnan(rtt_us))
                    fprintf(csv, ",");
                else
                    fprintf(csv, ",%.2f", rtt_us);
                /* What the estimator made of the calibration's noise (docs/estimator.md). */
                fprintf(csv, ",%.0f,%.0f,%.4f,%.4f", ar.after.unsure - ar.before.unsure,
                        ar.after.surprise_probes - ar.before.surprise_probes, ar.after.noise[0], ar.after.noise[1]);
                fprintf(csv, ",%.2f,%.2f,%.2f\n", res[V_OS].mean, res[V_COLL].mean, res[V_AUTO].mean);
                fflush(csv);
                fprintf(stderr,
                        "  %s/%s np=%d B=%4llu m=%5llu: os %.1f coll %.1f auto %.1f (os %.0f/coll %.0f) node %.1f "
                        "(%.0f%% node-local) dd %.1f frma %.1f fa2a %.1f | model os %.1f coll %.1f | n %d/%d/%d/%d | "
                        "rtt %.2f us | %.1f s%s\n",
                        o.mpi, o.transport, P, (unsigned long long)B, (unsigned long long)c.m, res[V_OS].med,
                        res[V_COLL].med, res[V_AUTO].med, aos, aco, res[V_NODE].med, 100 * node_fraction,
                        res[V_DD].med, res[V_FRMA].med, res[V_FA2A].med, pred_os * 1e6, pred_coll * 1e6,
                        res[V_OS].n, res[V_AUTO].n, res[V_NODE].n, res[V_DD].n, rtt_us, MPI_Wtime() - tp0,
                        badsum ? "  VERIFICATION FAILED" : "");
                if (bi == 0 || !shared) {
                    char fbuf[256];
                    lstats fs = read_stats(c.onesided);
                    fmt_params(fbuf, sizeof fbuf, fs.params);
                    fprintf(stderr, "    calibration: auto loader %s; one-sided loader %s\n", pbuf, fbuf);
                }
            }
            for (int v = 0; v < NV; v++)
                if (!isnan(res[v].med))
                    prev[v] = res[v].med;
            prevB = B;
            free(c.ids), free(c.peer), free(c.outoff), free(c.liboff), free(c.owner), free(c.req), free(c.reqs);
            free(ints);
            if (!shared)
                close_data(&c);
            if (badsum) {
                if (me == 0)
                    fprintf(stderr, "verification failed: wrong samples per variant os %ld coll %ld auto %ld node %ld "
                                    "dd %ld frma %ld fa2a %ld\n", gbad[V_OS], gbad[V_COLL], gbad[V_AUTO], gbad[V_NODE],
                            gbad[V_DD], gbad[V_FRMA], gbad[V_FA2A]);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        if (shared)
            close_data(&c);
        free(c.gsize), free(c.gdisp), free(c.out), free(c.sbuf), free(c.rbuf), free(c.asked);
        free(c.tl), free(c.tg);
    }
    if (me == 0) {
        fprintf(stderr, "grid_bench: done in %.1f s\n", MPI_Wtime() - t_start);
        if (csv != stdout)
            fclose(csv);
    }
    MPI_Finalize();
    return 0;
}
