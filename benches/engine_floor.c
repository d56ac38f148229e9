/*
 * engine_floor: how close are MDLoader's engines to what raw MPI can do?
 *
 * Per-step time of fetching a random mini-batch (batch per rank 16 and 256 by default,
 * samples ~2 KB mean) for five variants, all on the same data and the same id streams:
 *
 *   lib-onesided    mdl_fetch_batch with MDL_BACKEND_ONESIDED forced
 *   lib-collective  mdl_fetch_batch with MDL_BACKEND_COLLECTIVE forced
 *   ddstore         DDStore's access pattern in raw MPI: for every sample (local ones
 *                   too, as DDStore does) MPI_Win_lock(SHARED) / MPI_Get /
 *                   MPI_Win_unlock, on a window from MPI_Win_allocate holding the shard
 *   floor-gets      bare one-sided floor: MPI_Win_lock_all, one MPI_Get per remote
 *                   sample (local ones memcpy'd), one MPI_Win_flush_all, unlock_all
 *   floor-gets+agree  floor-gets preceded by one MPI_Allreduce(MAX) of 64 doubles: what
 *                   any design that agrees on something every step (as MDLoader does to
 *                   report errors and pick the engine on all ranks alike) pays at least
 *   floor-a2av      bare collective floor: one MPI_Alltoallv of exactly the per-peer
 *                   byte counts the batch needs (remote bytes only). Counts and packed
 *                   send buffers are prepared outside the clock: every rank can compute
 *                   every other rank's id stream, so no request exchange is needed.
 *                   The library's collective engine must also exchange requests and
 *                   pack, so this is a floor it cannot reach, only approach.
 *
 * Step time = the slowest rank's time for the operation (ranks lined up by a barrier
 * before each variant, outside the clock); reported: the median over steps after
 * warm-up, plus p10 / p90. Variants are interleaved step by step so that noise from
 * other jobs on the machine hits all of them alike, their order rotates every step (a
 * variant may leave work behind for the next one), and an untimed bare-gets round
 * starts each step (the first operation after the step's planning was measured to pay
 * ~15 us extra, raw MPI included).
 *
 * "ratio" compares each variant with the floor of its kind (onesided and ddstore vs
 * floor-gets, collective vs floor-a2av); "vs best" compares with the faster floor.
 *
 * Output on rank 0: CSV (stdout, or --csv FILE) and a markdown table (stdout, or
 * --md FILE). Every fetched byte is verified outside the clock unless --no-verify.
 *
 * Usage: mpirun -n 4 engine_floor [--samples-per-rank N] [--steps S] [--warmup W]
 *            [--batches 16,256] [--seed S] [--label TEXT] [--csv FILE] [--md FILE]
 *            [--variants lib-onesided,lib-collective,ddstore,floor-gets+agree] [--no-verify]
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdloader.h"
#include "bench_common.h"

enum { V_LIB_ONESIDED, V_LIB_COLLECTIVE, V_DDSTORE, V_FLOOR_GETS, V_GETS_AGREE, V_FLOOR_A2AV, NV };
static const char *VNAME[NV] = {"lib-onesided", "lib-collective", "ddstore",
                                "floor-gets",   "floor-gets+agree", "floor-a2av"};
static const int VFLOOR[NV] = {V_FLOOR_GETS, V_FLOOR_A2AV, V_FLOOR_GETS, V_FLOOR_GETS, V_FLOOR_GETS, V_FLOOR_A2AV};
static int g_use[NV] = {1, 1, 1, 1, 1, 1}; /* --variants; the two floors always run */

static int g_rank, g_P;

/* ---------- dataset (pure functions of the id, so any rank can verify anything) ---------- */

static double unit(uint64_t h)
{
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Log-normal, median 1800 B, sigma 0.45, clipped to [256, 8192]: mean about 2 KB. */
static uint64_t size_of(uint64_t seed, uint64_t g)
{
    uint64_t h1 = mix64(g * 2 + 1 + seed * 0x9E3779B97F4A7C15ull);
    uint64_t h2 = mix64(h1 ^ 0xA0761D6478BD642Full);
    double z = sqrt(-2.0 * log(unit(h1))) * cos(6.283185307179586 * unit(h2));
    double s = 1800.0 * exp(0.45 * z);
    return (uint64_t)(s < 256.0 ? 256.0 : s > 8192.0 ? 8192.0 : s);
}

/* ---------- options ---------- */

typedef struct opts {
    uint64_t per_rank, steps, warmup, seed;
    uint64_t batches[16];
    int nbatches;
    int verify;
    const char *label, *csv, *md;
} opts;

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (*end == 'k')
        x *= 1000ull, end++;
    if (*end)
        return -1;
    *v = x;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    o->per_rank = 20000;
    o->steps = 200;
    o->warmup = 20;
    o->seed = 42;
    o->nbatches = 2;
    o->batches[0] = 16, o->batches[1] = 256;
    o->verify = 1;
    o->label = "";
    o->csv = o->md = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-verify")) {
            o->verify = 0;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (!strcmp(a, "--samples-per-rank")) {
            if (parse_u64(v, &o->per_rank) || !o->per_rank)
                return -1;
        } else if (!strcmp(a, "--steps")) {
            if (parse_u64(v, &o->steps) || !o->steps)
                return -1;
        } else if (!strcmp(a, "--warmup")) {
            if (parse_u64(v, &o->warmup))
                return -1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64(v, &o->seed))
                return -1;
        } else if (!strcmp(a, "--label")) {
            o->label = v;
        } else if (!strcmp(a, "--csv")) {
            o->csv = v;
        } else if (!strcmp(a, "--md")) {
            o->md = v;
        } else if (!strcmp(a, "--variants")) {
            /* Exact names, comma separated; the floors are always measured since the
               ratios need them. */
            for (int x = 0; x < NV; x++)
                g_use[x] = x == V_FLOOR_GETS || x == V_FLOOR_A2AV;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int found = 0;
                for (int x = 0; x < NV; x++)
                    if (!strcmp(t, VNAME[x]))
                        g_use[x] = found = 1;
                if (!found)
                    return -1;
            }
        } else if (!strcmp(a, "--batches")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o->nbatches = 0;
            for (char *t = strtok(buf, ","); t && o->nbatches < 16; t = strtok(NULL, ","))
                if (parse_u64(t, &o->batches[o->nbatches++]) || !o->batches[o->nbatches - 1])
                    return -1;
            if (!o->nbatches)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
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

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "[rank %d] out of memory (%zu bytes)\n", g_rank, n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static double quantile_sorted(const double *v, uint64_t n, double q)
{
    uint64_t i = (uint64_t)(q * (double)(n - 1) + 0.5);
    return v[i < n ? i : n - 1];
}

/* Everything one step needs, prepared outside the clock. */
typedef struct plan {
    uint64_t *ids;       /* B ids of this rank */
    uint64_t need;       /* bytes of this rank's batch */
    int *owner;          /* owner of ids[k] */
    uint64_t *disp;      /* offset of ids[k] in its owner's shard */
    uint64_t *outoff;    /* B + 1: where sample k lands in the output */
    /* Alltoallv floor */
    int *scount, *sdispl, *rcount, *rdispl;
    uint8_t *sbuf;
    uint64_t sbytes;
} plan;

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_P);
    opts o;
    if (parse_args(argc, argv, &o)) {
        if (g_rank == 0)
            fprintf(stderr,
                    "usage: %s [--samples-per-rank N] [--steps S] [--warmup W] [--batches 16,256]\n"
                    "          [--seed S] [--label TEXT] [--csv FILE] [--md FILE] [--no-verify]\n"
                    "          [--variants lib-onesided,lib-collective,ddstore,floor-gets+agree]\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }
    const int P = g_P, me = g_rank;
    const uint64_t N = o.per_rank, total = N * (uint64_t)P;
    char libver[MPI_MAX_LIBRARY_VERSION_STRING];
    int lvlen = 0;
    MPI_Get_library_version(libver, &lvlen);
    const char *mpi = strstr(libver, "Open MPI") ? "openmpi" : strstr(libver, "MPICH") ? "mpich" : "other";

    /* Global index, computed locally: gsize[g], gdisp[g] (offset in its owner's shard).
       Rank r owns [r*N, (r+1)*N). */
    uint64_t *gsize = xmalloc(sizeof(uint64_t) * total), *gdisp = xmalloc(sizeof(uint64_t) * total);
    uint64_t *shard_bytes = xmalloc(sizeof(uint64_t) * (size_t)P);
    for (int r = 0; r < P; r++) {
        uint64_t acc = 0;
        for (uint64_t i = 0; i < N; i++) {
            uint64_t g = (uint64_t)r * N + i;
            gsize[g] = size_of(o.seed, g);
            gdisp[g] = acc;
            acc += gsize[g];
        }
        shard_bytes[r] = acc;
    }
    const uint64_t mybytes = shard_bytes[me], g0 = (uint64_t)me * N;

    /* The raw-MPI window: MPI_Win_allocate (see ENVIRONMENT.md: the fast shared-memory
       RMA path in both MPIs), holding the bytes the library holds. Its size is rounded
       up to 64 bytes, as the library does: MPICH 4.0.2 (ch4, shared memory) returns
       wrong bytes from a rank's window when the window of the rank before it is not a
       multiple of 16 bytes (measured here: +1 and +8 fail, +16 works). */
    uint8_t *wbase = NULL;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)((mybytes + 63) / 64 * 64), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &wbase, &win);
    for (uint64_t i = 0; i < N; i++)
        fill(o.seed, g0 + i, wbase + gdisp[g0 + i], gsize[g0 + i]);
    MPI_Barrier(MPI_COMM_WORLD);

    /* The library, same bytes. */
    mdl_loader *h = NULL;
    lib_check(mdl_init(MPI_COMM_WORLD, &h), "mdl_init");
    {
        uint64_t *off = xmalloc(sizeof(uint64_t) * (N + 1));
        off[0] = 0;
        for (uint64_t i = 0; i < N; i++)
            off[i + 1] = off[i] + gsize[g0 + i];
        lib_check(mdl_register_shard(h, wbase, off, N), "mdl_register_shard");
        free(off);
    }

    double mean_size = 0;
    for (uint64_t g = 0; g < total; g++)
        mean_size += (double)gsize[g];
    mean_size /= (double)total;

    FILE *csv = stdout, *md = stdout;
    if (me == 0 && o.csv && !(csv = fopen(o.csv, "w"))) {
        fprintf(stderr, "cannot write %s\n", o.csv);
        csv = stdout;
    }
    if (me == 0) {
        fprintf(stderr, "engine_floor: %s, %d ranks, %llu samples/rank, mean %.0f B, %llu steps + %llu warm-up\n",
                mpi, P, (unsigned long long)N, mean_size, (unsigned long long)o.steps,
                (unsigned long long)o.warmup);
        fprintf(csv, "label,mpi,ranks,batch,variant,steps,median_us,p10_us,p90_us,mean_bytes_per_rank,"
                     "floor,ratio_to_floor,ratio_to_best_floor\n");
    }

    const uint64_t nsteps = o.warmup + o.steps;
    double *t[NV], *tmax = xmalloc(sizeof(double) * nsteps);
    for (int v = 0; v < NV; v++)
        t[v] = xmalloc(sizeof(double) * nsteps);
    double med[16][NV], p10[16][NV], p90[16][NV], meanbytes[16];
    double agree_in[64] = {0}, agree_out[64];
    long bad[NV] = {0};

    for (int bi = 0; bi < o.nbatches; bi++) {
        const uint64_t B = o.batches[bi];
        plan pl;
        pl.ids = xmalloc(sizeof(uint64_t) * B);
        pl.owner = xmalloc(sizeof(int) * B);
        pl.disp = xmalloc(sizeof(uint64_t) * B);
        pl.outoff = xmalloc(sizeof(uint64_t) * (B + 1));
        pl.scount = xmalloc(sizeof(int) * (size_t)P);
        pl.sdispl = xmalloc(sizeof(int) * (size_t)P);
        pl.rcount = xmalloc(sizeof(int) * (size_t)P);
        pl.rdispl = xmalloc(sizeof(int) * (size_t)P);
        uint64_t *peer_ids = xmalloc(sizeof(uint64_t) * B);
        uint64_t *liboff = xmalloc(sizeof(uint64_t) * (B + 1));
        uint8_t *out = xmalloc(B * 8192);
        uint8_t *rbuf = xmalloc(B * 8192);
        /* Peers can ask me for at most (P-1) * B samples of at most 8192 bytes. */
        const size_t sbuf_cap = (size_t)P * B * 8192;
        pl.sbuf = xmalloc(sbuf_cap);
        double bytes_acc = 0;

        for (uint64_t s = 0; s < nsteps; s++) {
            /* ---- plan (outside the clock) ---- */
            batch_ids(o.seed, me, B, s, total, pl.ids);
            pl.outoff[0] = 0;
            for (int p = 0; p < P; p++)
                pl.rcount[p] = pl.scount[p] = 0;
            for (uint64_t k = 0; k < B; k++) {
                uint64_t g = pl.ids[k];
                pl.owner[k] = (int)(g / N);
                pl.disp[k] = gdisp[g];
                pl.outoff[k + 1] = pl.outoff[k] + gsize[g];
                if (pl.owner[k] != me)
                    pl.rcount[pl.owner[k]] += (int)gsize[g];
            }
            pl.need = pl.outoff[B];
            if (s >= o.warmup)
                bytes_acc += (double)pl.need;
            /* What every peer wants from me, in its request order: the send side of the
               Alltoallv floor, packed now so the timed region is the bare collective. */
            pl.sbytes = 0;
            for (int p = 0; p < P; p++) {
                pl.sdispl[p] = (int)pl.sbytes;
                if (p == me)
                    continue;
                batch_ids(o.seed, p, B, s, total, peer_ids);
                for (uint64_t k = 0; k < B; k++) {
                    uint64_t g = peer_ids[k];
                    if (g / N != (uint64_t)me)
                        continue;
                    if (pl.sbytes + gsize[g] > sbuf_cap) {
                        fprintf(stderr, "send buffer too small\n");
                        MPI_Abort(MPI_COMM_WORLD, 2);
                    }
                    memcpy(pl.sbuf + pl.sbytes, wbase + gdisp[g], gsize[g]);
                    pl.sbytes += gsize[g];
                    pl.scount[p] += (int)gsize[g];
                }
            }
            {
                int acc = 0;
                for (int p = 0; p < P; p++) {
                    pl.rdispl[p] = acc;
                    acc += pl.rcount[p];
                }
            }

            /* Settle: one untimed bare-gets round trip. Measured (Open MPI, shared memory):
               whichever variant ran first after the planning above paid ~15 us more at
               batch 16, raw MPI included; this absorbs that first-operation cost. */
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
            for (uint64_t k = 0; k < B; k++)
                if (pl.owner[k] != me)
                    MPI_Get(out + pl.outoff[k], (int)(pl.outoff[k + 1] - pl.outoff[k]), MPI_BYTE, pl.owner[k],
                            (MPI_Aint)pl.disp[k], (int)(pl.outoff[k + 1] - pl.outoff[k]), MPI_BYTE, win);
            MPI_Win_flush_all(win);
            MPI_Win_unlock_all(win);
            for (int vi = 0; vi < NV; vi++) {
                /* Rotate the order every step, so that no variant always follows the
                   same one (a variant can leave work behind that the next one pays). */
                const int v = (int)((vi + s) % NV);
                if (!g_use[v]) {
                    t[v][s] = 0;
                    continue;
                }
                MPI_Barrier(MPI_COMM_WORLD);
                double a = MPI_Wtime();
                switch (v) {
                case V_LIB_ONESIDED:
                case V_LIB_COLLECTIVE:
                    lib_check(mdl_set_backend(h, v == V_LIB_ONESIDED ? MDL_BACKEND_ONESIDED
                                                                    : MDL_BACKEND_COLLECTIVE),
                              "mdl_set_backend");
                    a = MPI_Wtime(); /* setting the backend is not part of a step */
                    lib_check(mdl_fetch_batch(h, pl.ids, B, out, pl.need, liboff), "mdl_fetch_batch");
                    break;
                case V_DDSTORE:
                    for (uint64_t k = 0; k < B; k++) {
                        int cnt = (int)(pl.outoff[k + 1] - pl.outoff[k]);
                        MPI_Win_lock(MPI_LOCK_SHARED, pl.owner[k], 0, win);
                        MPI_Get(out + pl.outoff[k], cnt, MPI_BYTE, pl.owner[k], (MPI_Aint)pl.disp[k], cnt,
                                MPI_BYTE, win);
                        MPI_Win_unlock(pl.owner[k], win);
                    }
                    break;
                case V_GETS_AGREE:
                    MPI_Allreduce(agree_in, agree_out, 64, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    /* fall through - then exactly floor-gets */
                case V_FLOOR_GETS:
                    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
                    for (uint64_t k = 0; k < B; k++) {
                        int cnt = (int)(pl.outoff[k + 1] - pl.outoff[k]);
                        if (pl.owner[k] == me)
                            memcpy(out + pl.outoff[k], wbase + pl.disp[k], (size_t)cnt);
                        else
                            MPI_Get(out + pl.outoff[k], cnt, MPI_BYTE, pl.owner[k], (MPI_Aint)pl.disp[k], cnt,
                                    MPI_BYTE, win);
                    }
                    MPI_Win_flush_all(win);
                    MPI_Win_unlock_all(win);
                    break;
                case V_FLOOR_A2AV:
                    MPI_Alltoallv(pl.sbuf, pl.scount, pl.sdispl, MPI_BYTE, rbuf, pl.rcount, pl.rdispl, MPI_BYTE,
                                  MPI_COMM_WORLD);
                    break;
                }
                t[v][s] = MPI_Wtime() - a;

                /* ---- verify (outside the clock) ---- */
                if (!o.verify)
                    continue;
                if (v == V_FLOOR_A2AV) {
                    /* Segment from p = my requests to p, in request order. */
                    uint64_t *pos = xmalloc(sizeof(uint64_t) * (size_t)P);
                    for (int p = 0; p < P; p++)
                        pos[p] = (uint64_t)pl.rdispl[p];
                    for (uint64_t k = 0; k < B; k++) {
                        int p = pl.owner[k];
                        if (p == me)
                            continue;
                        if (!verify(o.seed, pl.ids[k], rbuf + pos[p], gsize[pl.ids[k]]))
                            bad[v]++;
                        pos[p] += gsize[pl.ids[k]];
                    }
                    free(pos);
                } else {
                    const uint64_t *oo = (v == V_LIB_ONESIDED || v == V_LIB_COLLECTIVE) ? liboff : pl.outoff;
                    for (uint64_t k = 0; k < B; k++)
                        if (oo[k + 1] - oo[k] != gsize[pl.ids[k]] ||
                            !verify(o.seed, pl.ids[k], out + oo[k], gsize[pl.ids[k]]))
                            bad[v]++;
                }
                memset(out, 0, pl.need); /* a variant that skipped work must not pass */
            }
        }
        meanbytes[bi] = bytes_acc / (double)o.steps;
        for (int v = 0; v < NV; v++) {
            MPI_Reduce(t[v], tmax, (int)nsteps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (me == 0) {
                double *m = tmax + o.warmup;
                qsort(m, o.steps, sizeof(double), cmp_double);
                med[bi][v] = quantile_sorted(m, o.steps, 0.5) * 1e6;
                p10[bi][v] = quantile_sorted(m, o.steps, 0.1) * 1e6;
                p90[bi][v] = quantile_sorted(m, o.steps, 0.9) * 1e6;
            }
        }
        free(pl.ids);
        free(pl.owner);
        free(pl.disp);
        free(pl.outoff);
        free(pl.scount);
        free(pl.sdispl);
        free(pl.rcount);
        free(pl.rdispl);
        free(pl.sbuf);
        free(peer_ids);
        free(liboff);
        free(out);
        free(rbuf);
    }

    long gbad[NV];
    MPI_Reduce(bad, gbad, NV, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    long anybad = 0;
    if (me == 0) {
        for (int bi = 0; bi < o.nbatches; bi++) {
            double best = fmin(med[bi][V_FLOOR_GETS], med[bi][V_FLOOR_A2AV]);
            for (int v = 0; v < NV; v++) {
                if (!g_use[v])
                    continue;
                fprintf(csv, "%s,%s,%d,%llu,%s,%llu,%.2f,%.2f,%.2f,%.0f,%s,%.3f,%.3f\n", o.label, mpi, P,
                        (unsigned long long)o.batches[bi], VNAME[v], (unsigned long long)o.steps, med[bi][v],
                        p10[bi][v], p90[bi][v], meanbytes[bi], VNAME[VFLOOR[v]],
                        med[bi][v] / med[bi][VFLOOR[v]], med[bi][v] / best);
            }
        }
        if (csv != stdout)
            fclose(csv);
        if (o.md && !(md = fopen(o.md, "w")))
            md = stdout;
        fprintf(md, "\n%s%s%d ranks, %s, mean sample %.0f B, median of %llu steps (slowest rank per step)\n\n",
                o.label, *o.label ? ", " : "", P, mpi, mean_size, (unsigned long long)o.steps);
        fprintf(md, "| batch/rank | ranks | variant          | median us | p10 us | p90 us | ratio to floor | vs best floor |\n");
        fprintf(md, "|-----------:|------:|------------------|----------:|-------:|-------:|---------------:|--------------:|\n");
        for (int bi = 0; bi < o.nbatches; bi++) {
            double best = fmin(med[bi][V_FLOOR_GETS], med[bi][V_FLOOR_A2AV]);
            for (int v = 0; v < NV; v++) {
                if (!g_use[v])
                    continue;
                fprintf(md, "| %10llu | %5d | %-16s | %9.1f | %6.1f | %6.1f | %8.2f (%s) | %13.2f |\n",
                        (unsigned long long)o.batches[bi], P, VNAME[v], med[bi][v], p10[bi][v], p90[bi][v],
                        med[bi][v] / med[bi][VFLOOR[v]], VFLOOR[v] == V_FLOOR_GETS ? "gets" : "a2av",
                        med[bi][v] / best);
            }
        }
        for (int v = 0; v < NV; v++) {
            if (gbad[v])
                fprintf(md, "\nVERIFICATION FAILED: %s delivered %ld wrong samples\n", VNAME[v], gbad[v]);
            anybad += gbad[v];
        }
        if (md != stdout)
            fclose(md);
    }
    MPI_Bcast(&anybad, 1, MPI_LONG, 0, MPI_COMM_WORLD);

    lib_check(mdl_finalize(&h), "mdl_finalize");
    MPI_Win_free(&win);
    free(gsize);
    free(gdisp);
    free(shard_bytes);
    for (int v = 0; v < NV; v++)
        free(t[v]);
    free(tmax);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
