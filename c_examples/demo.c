/*
 * MDLoader demo: the "main job" of a GNN training loop, without the training.
 *
 * A synthetic dataset shaped like QM9 molecular-graph records (default 200k samples,
 * log-normal sizes with median ~1 KB, clipped to 0.3-3 KB) is sharded over the ranks in
 * contiguous blocks and registered with MDLoader once per variant:
 *
 *   default      the library's defaults, as a user gets them: AUTO, and the node-local
 *                path (samples of this node's ranks copied from shared memory; on one
 *                node, every sample)
 *   onesided, collective, auto
 *                MDL_NODE_LOCAL=off: every other rank's sample through the engine
 *                (forced, or AUTO's choice), as between nodes
 *   memcpy       no library: each rank copies the same number of bytes, sample by
 *                sample at random places, out of its own shard (one in-process array):
 *                what a node's memory can do, for reference
 *
 * Each variant reads its own copy, so that none finds in the cache what another has
 * just read, and AUTO learns from its own steps only. For each batch size per rank,
 * every step every rank draws a fresh uniformly random mini-batch of global ids (a
 * global shuffle, as SGD wants), and every variant fetches it, in a random order per
 * step: the variants are measured side by side, under the same machine load, on the
 * same ids. Every byte is verified. Rank 0 prints a table, per batch size and variant,
 * of medians over the measured steps of per-step figures of the whole job:
 *
 *   median step (ms)   the slowest rank's mdl_fetch_batch time
 *   p90 step (ms)      its 90th percentile
 *   samples/s          all ranks' samples of the step / the slowest rank's time
 *   MB/s               all ranks' bytes of the step / the slowest rank's time
 *   steps run by       steps each engine ran for this row's loader (warm-up included),
 *                      from mdl_stats_json: for "auto", what the estimator chose
 *
 * Only the mdl_fetch_batch call is timed; verification and the barrier that lines the
 * ranks up before each fetch are outside the clock. The first --warmup steps of each
 * batch size are not counted.
 *
 * Usage: mpirun -n 4 demo [--samples N] [--steps S] [--warmup W]
 *                         [--batches 16,64,256,1024]
 *                         [--engines default,onesided,collective,auto,memcpy]
 *                         [--seed S] [--no-verify] [--csv FILE]
 *        (Open MPI as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;
 *        more ranks than cores: mpirun --oversubscribe; scripts/demo.sh does both)
 * Environment: MDL_LOG=info shows the library's decisions; MDL_BACKEND is overridden
 * per loader by mdl_set_backend, MDL_NODE_LOCAL per variant.
 *
 * Exit status: 0 if every byte verified, 1 otherwise, 2 on bad usage or library error.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdloader.h"

/* ---------- deterministic dataset ---------- */

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Uniform in (0, 1) from a hash. */
static double unit(uint64_t h)
{
    return ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

/* Size of sample g: a QM9 graph record (3-29 atoms: positions, node and edge features,
   edge index) is a few hundred bytes to a few KB, most around 1 KB. Log-normal with
   median 1000 B and sigma 0.5, clipped to [300, 3000]. Computed identically on every
   rank (same libm on one machine), so any rank can verify any sample. */
static uint64_t sample_size(uint64_t seed, uint64_t g)
{
    uint64_t h1 = mix64(g * 2 + 1 + seed * 0x9E3779B97F4A7C15ull);
    uint64_t h2 = mix64(h1 ^ 0xA0761D6478BD642Full);
    double z = sqrt(-2.0 * log(unit(h1))) * cos(6.283185307179586 * unit(h2));
    double s = 1000.0 * exp(0.5 * z);
    if (s < 300.0)
        s = 300.0;
    if (s > 3000.0)
        s = 3000.0;
    return (uint64_t)s;
}

static uint64_t sample_key(uint64_t seed, uint64_t g)
{
    return mix64(mix64(g) ^ (seed * 0xD6E8FEB86659FD93ull));
}

static void fill_sample(uint64_t seed, uint64_t g, uint8_t *dst, uint64_t n)
{
    uint64_t key = sample_key(seed, g);
    for (uint64_t k = 0; k < n; k += 8) {
        uint64_t w = mix64(key + (k >> 3));
        for (uint64_t j = 0; j < 8 && k + j < n; j++)
            dst[k + j] = (uint8_t)(w >> (j * 8));
    }
}

static int verify_sample(uint64_t seed, uint64_t g, const uint8_t *p, uint64_t n)
{
    uint64_t key = sample_key(seed, g);
    for (uint64_t k = 0; k < n; k += 8) {
        uint64_t w = mix64(key + (k >> 3));
        for (uint64_t j = 0; j < 8 && k + j < n; j++)
            if (p[k + j] != (uint8_t)(w >> (j * 8)))
                return 0;
    }
    return 1;
}

/* ---------- options ---------- */

/* What a row measures (see the top of the file). */
typedef enum variant { V_DEFAULT, V_ONESIDED, V_COLLECTIVE, V_AUTO, V_MEMCPY, NVARIANTS } variant;
static const char *const variant_names[NVARIANTS] = {"default", "onesided", "collective", "auto", "memcpy"};

typedef struct opts {
    uint64_t samples, steps, warmup, seed;
    uint64_t batches[32];
    int nbatches;
    variant engines[NVARIANTS];
    int nengines;
    int verify;
    const char *csv;
} opts;

static const char *engine_name(variant v)
{
    return variant_names[v];
}

/* The backend a library variant forces (the default variant runs AUTO). */
static mdl_backend backend_of(variant v)
{
    return v == V_ONESIDED ? MDL_BACKEND_ONESIDED : v == V_COLLECTIVE ? MDL_BACKEND_COLLECTIVE : MDL_BACKEND_AUTO;
}

static int parse_u64(const char *s, uint64_t *v)
{
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (*end == 'k')
        x *= 1000ull, end++;
    if (*end != '\0')
        return -1;
    *v = x;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    o->samples = 200000;
    o->steps = 50;
    o->warmup = 5;
    o->seed = 2024;
    o->nbatches = 4;
    o->batches[0] = 16, o->batches[1] = 64, o->batches[2] = 256, o->batches[3] = 1024;
    o->nengines = NVARIANTS;
    for (int v = 0; v < NVARIANTS; v++)
        o->engines[v] = (variant)v;
    o->verify = 1;
    o->csv = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-verify")) {
            o->verify = 0;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (!strcmp(a, "--samples")) {
            if (parse_u64(v, &o->samples) || o->samples == 0)
                return -1;
        } else if (!strcmp(a, "--steps")) {
            if (parse_u64(v, &o->steps) || o->steps == 0)
                return -1;
        } else if (!strcmp(a, "--warmup")) {
            if (parse_u64(v, &o->warmup))
                return -1;
        } else if (!strcmp(a, "--seed")) {
            if (parse_u64(v, &o->seed))
                return -1;
        } else if (!strcmp(a, "--csv")) {
            o->csv = v;
        } else if (!strcmp(a, "--batches")) {
            char buf[512];
            snprintf(buf, sizeof buf, "%s", v);
            o->nbatches = 0;
            for (char *t = strtok(buf, ","); t && o->nbatches < 32; t = strtok(NULL, ","))
                if (parse_u64(t, &o->batches[o->nbatches++]))
                    return -1;
            if (o->nbatches == 0)
                return -1;
        } else if (!strcmp(a, "--engines")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o->nengines = 0;
            for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                int v = 0;
                if (o->nengines == NVARIANTS)
                    return -1; /* more variants than there are */
                while (v < NVARIANTS && strcmp(t, variant_names[v]))
                    v++;
                if (v == NVARIANTS)
                    return -1;
                o->engines[o->nengines++] = (variant)v;
            }
            if (o->nengines == 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* Steps run so far by one engine, from mdl_stats_json ("onesided": {"steps": N, ...}).
   Used to show what AUTO chose; -1 if the statistics are unavailable. */
static long engine_steps(const mdl_loader *h, const char *engine)
{
    char js[4096], key[64];
    if (mdl_stats_json(h, js, sizeof js) == 0)
        return -1;
    /* The engine's object, not "backend": "onesided". */
    snprintf(key, sizeof key, "\"%s\": {\"steps\": ", engine);
    const char *p = strstr(js, key);
    return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of x[0..n) (sorted in place). */
static double median(double *x, uint64_t n)
{
    qsort(x, n, sizeof(double), cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static void check(mdl_status st, const char *what, int rank)
{
    if (st == MDL_OK)
        return;
    char msg[512] = "";
    mdl_last_error(msg, sizeof msg);
    fprintf(stderr, "[rank %d] %s failed: %s (%s)\n", rank, what, mdl_status_string(st), msg);
    /* A collective call failed: the library already made every rank fail the same
       call, so every rank reaches this abort; MPI_Abort just ends the job quickly. */
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    int provided, rank, P;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    opts o;
    if (parse_args(argc, argv, &o) != 0) {
        if (rank == 0)
            fprintf(stderr,
                    "usage: %s [--samples N] [--steps S] [--warmup W] [--batches 16,64,256,1024]\n"
                    "          [--engines default,onesided,collective,auto,memcpy] [--seed S] [--no-verify]\n"
                    "          [--csv FILE]\n",
                    argv[0]);
        MPI_Finalize();
        return 2;
    }

    /* Contiguous block sharding, as a loader reading its part of a file would do. */
    uint64_t per = o.samples / (uint64_t)P, extra = o.samples % (uint64_t)P;
    uint64_t nloc = per + ((uint64_t)rank < extra);
    uint64_t first = (uint64_t)rank * per + ((uint64_t)rank < extra ? (uint64_t)rank : extra);
    uint64_t *off = malloc(sizeof(uint64_t) * (nloc + 1));
    uint8_t *data = NULL;
    if (off) {
        off[0] = 0;
        for (uint64_t i = 0; i < nloc; i++)
            off[i + 1] = off[i] + sample_size(o.seed, first + i);
        data = malloc(off[nloc] ? off[nloc] : 1);
    }
    if (!off || !data) {
        fprintf(stderr, "[rank %d] out of memory for the shard\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (uint64_t i = 0; i < nloc; i++)
        fill_sample(o.seed, first + i, data + off[i], off[i + 1] - off[i]);

    /* One loader per library variant, each with its own copy of the shard, as
       benches/grid does: in interleaved steps a variant must not find in the cache the
       samples another has just read, and AUTO's estimator learns from AUTO's steps
       only. The memcpy variant keeps a copy of the shard of its own. */
    mdl_loader *h[NVARIANTS] = {NULL};
    mdl_loader *any = NULL; /* a loader to ask sample sizes */
    uint8_t *own = NULL;    /* the memcpy variant's array */
    double tinit = 0, treg = 0;
    for (int e = 0; e < o.nengines; e++) {
        if (o.engines[e] == V_MEMCPY) {
            own = malloc(off[nloc] ? off[nloc] : 1);
            if (!own) {
                fprintf(stderr, "[rank %d] out of memory for the memcpy variant\n", rank);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            memcpy(own, data, off[nloc]);
            continue;
        }
        if (o.engines[e] == V_DEFAULT)
            unsetenv("MDL_NODE_LOCAL");
        else
            setenv("MDL_NODE_LOCAL", "off", 1);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        check(mdl_init(MPI_COMM_WORLD, &h[e]), "mdl_init", rank);
        double t1 = MPI_Wtime();
        check(mdl_register_shard(h[e], data, off, nloc), "mdl_register_shard", rank);
        double t2 = MPI_Wtime();
        check(mdl_set_backend(h[e], backend_of(o.engines[e])), "mdl_set_backend", rank);
        if (!any)
            any = h[e], tinit = t1 - t0, treg = t2 - t1;
    }
    if (!any) {
        if (rank == 0)
            fprintf(stderr, "--engines needs at least one variant of the library\n");
        MPI_Finalize();
        return 2;
    }
    uint64_t shard_bytes = off[nloc];
    free(data); /* the library keeps its own copies */
    free(off);

    uint64_t total = 0, all_bytes = 0;
    check(mdl_num_samples(any, &total), "mdl_num_samples", rank);
    MPI_Allreduce(&shard_bytes, &all_bytes, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    double tmax[2], tl[2] = {tinit, treg};
    MPI_Reduce(tl, tmax, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("MDLoader demo: %d ranks, %llu samples (%.1f MB, mean %.0f B/sample), %llu steps "
               "(+%llu warm-up) per batch size, engines interleaved step by step, verify=%s\n",
               P, (unsigned long long)total, (double)all_bytes / 1e6, (double)all_bytes / (double)total,
               (unsigned long long)o.steps, (unsigned long long)o.warmup, o.verify ? "every byte" : "off");
        printf("mdl_init %.1f ms, mdl_register_shard %.1f ms (slowest rank; one loader per variant)\n\n",
               tmax[0] * 1e3, tmax[1] * 1e3);
        printf("| batch/rank | variant    | median step (ms) | p90 step (ms) | samples/s  | MB/s    | steps run by     |\n");
        printf("|-----------:|------------|-----------------:|--------------:|-----------:|--------:|------------------|\n");
        fflush(stdout);
    }
    FILE *csv = NULL;
    if (rank == 0 && o.csv) {
        csv = fopen(o.csv, "w");
        if (csv)
            fprintf(csv, "ranks,batch_per_rank,engine,steps,median_step_s,p90_step_s,samples_per_s,mb_per_s\n");
        else
            fprintf(stderr, "cannot write %s\n", o.csv);
    }

    /* Per engine and step: this rank's time and bytes; on rank 0 the slowest rank's time
       and the job's bytes. */
    uint64_t nsteps = o.warmup + o.steps, cells = (uint64_t)o.nengines * nsteps;
    double *tstep = malloc(sizeof(double) * cells), *tslow = malloc(sizeof(double) * cells);
    double *bstep = malloc(sizeof(double) * cells), *bsum = malloc(sizeof(double) * cells);
    double *m = malloc(sizeof(double) * o.steps);
    long bad = 0;

    for (int bi = 0; bi < o.nbatches; bi++) {
        uint64_t B = o.batches[bi];
        uint64_t *ids = malloc(sizeof(uint64_t) * (B ? B : 1));
        uint64_t *offs = malloc(sizeof(uint64_t) * (B + 1));
        uint8_t *buf = malloc(B * 3000 + 1); /* 3000 B is the largest sample */
        long os0[NVARIANTS], co0[NVARIANTS];
        for (int e = 0; e < o.nengines; e++)
            os0[e] = h[e] ? engine_steps(h[e], "onesided") : -1, co0[e] = h[e] ? engine_steps(h[e], "collective") : -1;
        for (uint64_t s = 0; s < nsteps; s++) {
            /* This step's ids, the same for every engine. */
            uint64_t st = mix64(o.seed ^ mix64(B * 1000003u + s) ^ ((uint64_t)rank << 40));
            uint64_t need = 0;
            for (uint64_t k = 0; k < B; k++) {
                st += 0x9E3779B97F4A7C15ull;
                ids[k] = mix64(st) % total;
                uint64_t sz;
                check(mdl_sample_size(any, ids[k], &sz), "mdl_sample_size", rank);
                need += sz;
            }
            /* The engines in a random order per step, the same on every rank (their
               fetches are collective), so that none always runs first or last. */
            int order[NVARIANTS] = {0, 1, 2, 3, 4};
            uint64_t r = mix64(o.seed ^ mix64(B * 7919u + s + 1));
            for (int i = o.nengines - 1; i > 0; i--) {
                int j = (int)(mix64(r + (uint64_t)i) % (uint64_t)(i + 1)), t = order[i];
                order[i] = order[j], order[j] = t;
            }
            for (int i = 0; i < o.nengines; i++) {
                int e = order[i];
                MPI_Barrier(MPI_COMM_WORLD);
                if (!h[e]) {
                    /* memcpy: the step's sizes, each from a random place of the own shard. */
                    uint64_t place = mix64(st ^ 0x5bd1e995u);
                    double a = MPI_Wtime();
                    offs[0] = 0;
                    for (uint64_t k = 0; k < B; k++) {
                        uint64_t len = sample_size(o.seed, ids[k]);
                        place = mix64(place);
                        uint64_t from = shard_bytes > len ? place % (shard_bytes - len) : 0;
                        memcpy(buf + offs[k], own + from, len <= shard_bytes ? len : 0);
                        offs[k + 1] = offs[k] + len;
                    }
                    double b = MPI_Wtime();
                    tstep[e * nsteps + s] = b - a;
                    bstep[e * nsteps + s] = (double)need;
                    continue;
                }
                double a = MPI_Wtime();
                mdl_status rc = mdl_fetch_batch(h[e], ids, B, buf, need, offs);
                double b = MPI_Wtime();
                check(rc, "mdl_fetch_batch", rank);
                tstep[e * nsteps + s] = b - a;
                bstep[e * nsteps + s] = (double)need;
                if (!o.verify)
                    continue;
                for (uint64_t k = 0; k < B; k++) {
                    uint64_t len = offs[k + 1] - offs[k];
                    if (len != sample_size(o.seed, ids[k]) ||
                        !verify_sample(o.seed, ids[k], buf + offs[k], len)) {
                        if (bad < 10)
                            fprintf(stderr, "[rank %d] batch %llu %s step %llu: sample %llu wrong\n", rank,
                                    (unsigned long long)B, engine_name(o.engines[e]), (unsigned long long)s,
                                    (unsigned long long)ids[k]);
                        bad++;
                    }
                }
            }
        }
        /* Slowest rank and the job's bytes per step; one reduction per batch size keeps
           the measurement loop free of extra collectives. */
        MPI_Reduce(tstep, tslow, (int)cells, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(bstep, bsum, (int)cells, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        for (int e = 0; e < o.nengines; e++) {
            /* Every rank reads its own statistics (local); rank 0's counts tell, as the
               estimator's choices are the same on every rank. */
            long os = h[e] ? engine_steps(h[e], "onesided") - os0[e] : 0;
            long co = h[e] ? engine_steps(h[e], "collective") - co0[e] : 0;
            if (rank != 0)
                continue;
            /* Medians over the measured steps of per-step quantities of the whole job:
               the slowest rank's step time, all ranks' samples and bytes over it. */
            const double *t = tslow + e * nsteps + o.warmup, *by = bsum + e * nsteps + o.warmup;
            for (uint64_t k = 0; k < o.steps; k++)
                m[k] = t[k];
            double med = median(m, o.steps);
            double p90 = m[(o.steps * 9) / 10]; /* m is sorted now */
            for (uint64_t k = 0; k < o.steps; k++)
                m[k] = (double)P * (double)B / t[k];
            double sps = median(m, o.steps);
            for (uint64_t k = 0; k < o.steps; k++)
                m[k] = by[k] / t[k] / 1e6;
            double mbs = median(m, o.steps);
            char picks[64] = "?";
            if (!h[e])
                snprintf(picks, sizeof picks, "(no library)");
            else if (os0[e] >= 0 && co0[e] >= 0)
                snprintf(picks, sizeof picks, "os %ld, coll %ld", os, co);
            printf("| %10llu | %-10s | %16.3f | %13.3f | %10.0f | %7.1f | %-16s |\n", (unsigned long long)B,
                   engine_name(o.engines[e]), med * 1e3, p90 * 1e3, sps, mbs, picks);
            fflush(stdout);
            if (csv)
                fprintf(csv, "%d,%llu,%s,%llu,%.9f,%.9f,%.1f,%.3f\n", P, (unsigned long long)B,
                        engine_name(o.engines[e]), (unsigned long long)o.steps, med, p90, sps, mbs);
        }
        free(ids);
        free(offs);
        free(buf);
    }
    if (csv)
        fclose(csv);

    long gbad = 0;
    MPI_Allreduce(&bad, &gbad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (o.verify)
            printf("\nverification: %s (%ld wrong samples)\n", gbad ? "FAILED" : "every byte correct", gbad);
        fflush(stdout);
    }
    for (int e = 0; e < o.nengines; e++)
        check(mdl_finalize(&h[e]), "mdl_finalize", rank);
    free(own);
    free(m);
    free(tstep);
    free(tslow);
    free(bstep);
    free(bsum);
    MPI_Finalize();
    return gbad ? 1 : 0;
}
