/*
 * node_bench: the node-local path against both engines and a plain memcpy gather, side
 * by side in one run, on one node.
 *
 * Every rank holds n samples of one size; every step every rank fetches a batch of
 * samples drawn uniformly from the OTHER ranks' shards (so each is node-local to the
 * node-local path and remote to the engines). Each step runs, on the same ids, in turn:
 *
 *   memcpy      a plain gather of the same samples out of one in-process array holding
 *               the whole dataset (no library, no MPI), on every rank at once;
 *   node        mdl_fetch_batch with MDL_NODE_LOCAL=on (memcpy from the node's shared
 *               window, plus the fetch's one small agreement all-reduce);
 *   onesided    mdl_fetch_batch, MDL_NODE_LOCAL=off, backend forced one-sided;
 *   collective  the same, forced collective.
 *
 * Ranks start each variant together (a barrier, not timed); a variant's step time is
 * the slowest rank's. Medians over --steps steps after --warmup. The node path's bytes
 * are compared with memcpy's in every step.
 *
 * --mode sampler: the same with the built-in sampler (mdl_epoch_begin, mdl_next_batch:
 * shuffled epochs, steps agreed MDL_AGREEMENT_LAG steps ahead, so no step waits in a
 * blocking collective), one loader per variant (MDL_NODE_LOCAL=on; off with MDL_BACKEND
 * onesided; off with collective); each rank's batch holds samples of every rank, its
 * own included, and memcpy gathers the same ids. Every variant's ids and bytes are
 * compared with the node path's.
 *
 * --varying 1: sample lengths vary, uniformly from half the size to 1.5 times it (mean
 * the size), as molecules do; the library then keeps its index table, and memcpy's
 * gather reads each sample's place from a table of its own (the mode column says
 * "-varying"). Otherwise every sample has the size, the library needs no index, and
 * memcpy's place is arithmetic.
 *
 * Output: CSV on rank 0, one line per (batch, sample size):
 *   mpi,mode,ranks,batch,sample,t_memcpy_us,t_node_us,t_onesided_us,t_collective_us,
 *   node_over_memcpy_bandwidth,node_faster_than_both
 *
 * --out-align 4096 (fetch mode): mdl_fetch_batch's output buffer starts on that
 * boundary (aligned_alloc) instead of where malloc puts it, as the header advises;
 * memcpy's output stays a malloc block.
 *
 * Usage: node_bench --mpi NAME [--mode fetch|sampler] [--batches 16,64,256,1024]
 *                   [--sizes 256,1024,4096,16384] [--steps 30] [--warmup 5]
 *                   [--shard-bytes 33554432] [--varying 0|1] [--out-align 0|BYTES]
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "mdloader.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_size;

static void die(const char *what, mdl_status st)
{
    char why[256];
    mdl_last_error(why, sizeof why);
    fprintf(stderr, "rank %d: %s: %s: %s\n", g_rank, what, mdl_status_string(st), why);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Sample g's bytes: a hash of g per 8 bytes. */
static void fill(uint8_t *dst, uint64_t g, size_t size)
{
    for (size_t k = 0; k < size; k += 8) {
        uint64_t v = mix(g * 4096 + k / 8);
        memcpy(dst + k, &v, size - k < 8 ? size - k : 8);
    }
}

static int parse_list(const char *s, uint64_t *out, int max)
{
    int n = 0;
    while (*s && n < max) {
        char *end;
        out[n++] = strtoull(s, &end, 10);
        s = *end == ',' ? end + 1 : end;
        if (end == s && *s)
            break;
    }
    return n;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static mdl_loader *open_loader(const char *node_local, const char *backend, const uint8_t *shard,
                               const uint64_t *offsets, uint64_t n)
{
    setenv("MDL_NODE_LOCAL", node_local, 1);
    setenv("MDL_BACKEND", backend, 1);
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (st != MDL_OK)
        die("mdl_init", st);
    if ((st = mdl_register_shard(h, shard, offsets, n)) != MDL_OK)
        die("mdl_register_shard", st);
    return h;
}

/* The dataset as memcpy sees it: all samples in one array, sample g at
   all[start[g] .. start[g + 1]]. */
typedef struct {
    uint8_t *all;
    uint64_t *start;
} dataset;

/* memcpy's gather of ids into out, packed. */
static void gather(const dataset *d, const uint64_t *ids, uint64_t n, uint8_t *out)
{
    uint64_t at = 0;
    for (uint64_t k = 0; k < n; k++) {
        uint64_t len = d->start[ids[k] + 1] - d->start[ids[k]];
        memcpy(out + at, d->all + d->start[ids[k]], len);
        at += len;
    }
}

/* The slowest rank's time of one variant: barrier, run, allreduce(max). */
#define TIMED(result, body)                                                                   \
    do {                                                                                      \
        MPI_Barrier(MPI_COMM_WORLD);                                                          \
        double t0_ = MPI_Wtime();                                                             \
        body;                                                                                 \
        double t_ = MPI_Wtime() - t0_;                                                        \
        MPI_Allreduce(&t_, &(result), 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);                \
    } while (0)

static void report(const char *mpi, const char *mode, uint64_t batch, size_t size, double *t[4], int steps)
{
    double m[4];
    for (int v = 0; v < 4; v++)
        m[v] = median(t[v], steps) * 1e6;
    if (g_rank == 0)
        printf("%s,%s,%d,%llu,%zu,%.2f,%.2f,%.2f,%.2f,%.3f,%d\n", mpi, mode, g_size, (unsigned long long)batch, size, m[0],
               m[1], m[2], m[3], m[0] / m[1], m[1] < m[2] && m[1] < m[3]);
    fflush(stdout);
}

/* One sampler step of loader h, timed as the slowest rank's; its batch in *ids etc. */
static double sampler_step(mdl_loader *h, const uint64_t **ids, const void **data, const uint64_t **offs, size_t *n)
{
    double t;
    mdl_status st = MDL_OK;
    TIMED(t, st = mdl_next_batch(h, ids, data, offs, n));
    if (st != MDL_OK)
        die("mdl_next_batch", st);
    return t;
}

/* --mode sampler at one batch size: epochs of the three loaders in step, on the same
   seed (the same ids), until warmup + steps steps are measured. */
static void run_sampler(mdl_loader *h[3], uint64_t batch, const dataset *d, uint8_t *out_memcpy, double *t[4],
                        int steps, int warmup)
{
    int s = -warmup, bad = 0;
    for (uint64_t epoch = 0; s < steps; epoch++) {
        for (int v = 0; v < 3; v++) {
            mdl_status st = mdl_epoch_begin(h[v], 7, epoch, batch, 1, 1);
            if (st != MDL_OK)
                die("mdl_epoch_begin", st);
        }
        /* An epoch may hold thousands of steps: stop it once enough are measured (the
           next mdl_epoch_begin stops it on every rank alike). */
        while (s < steps) {
            const uint64_t *ids[3], *offs[3];
            const void *data[3];
            size_t n[3];
            double r[4];
            for (int v = 0; v < 3; v++)
                r[v + 1] = sampler_step(h[v], &ids[v], &data[v], &offs[v], &n[v]);
            if (n[0] == 0)
                break;
            TIMED(r[0], gather(d, ids[0], n[0], out_memcpy));
            size_t bytes = offs[0][n[0]];
            for (int v = 1; v < 3; v++)
                bad |= n[v] != n[0] || memcmp(ids[v], ids[0], n[0] * sizeof **ids) || memcmp(data[v], data[0], bytes);
            bad |= memcmp(data[0], out_memcpy, bytes) != 0;
            if (s >= 0)
                for (int v = 0; v < 4; v++)
                    t[v][s] = r[v];
            s++;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (bad) {
        if (g_rank == 0)
            fprintf(stderr, "sampler batches differ between variants or from memcpy at batch %llu\n", (unsigned long long)batch);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    const char *mpi = "?", *mode = "fetch";
    uint64_t batches[16] = {16, 64, 256, 1024}, sizes[16] = {256, 1024, 4096, 16384};
    int n_batches = 4, n_sizes = 4, steps = 30, warmup = 5, varying = 0;
    size_t out_align = 0;
    uint64_t shard_bytes = 32u << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mpi"))
            mpi = argv[i + 1];
        else if (!strcmp(argv[i], "--mode"))
            mode = argv[i + 1];
        else if (!strcmp(argv[i], "--batches"))
            n_batches = parse_list(argv[i + 1], batches, 16);
        else if (!strcmp(argv[i], "--sizes"))
            n_sizes = parse_list(argv[i + 1], sizes, 16);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup"))
            warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--varying"))
            varying = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--out-align"))
            out_align = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--shard-bytes"))
            shard_bytes = strtoull(argv[i + 1], NULL, 10);
    }
    if (g_size < 2) {
        if (g_rank == 0)
            fprintf(stderr, "node_bench needs at least 2 ranks (samples come from the other ranks)\n");
        MPI_Finalize();
        return 1;
    }
    if (g_rank == 0)
        printf("mpi,mode,ranks,batch,sample,t_memcpy_us,t_node_us,t_onesided_us,t_collective_us,"
               "node_over_memcpy_bandwidth,node_faster_than_both\n");
    uint64_t max_batch = 0;
    for (int b = 0; b < n_batches; b++)
        max_batch = batches[b] > max_batch ? batches[b] : max_batch;
    double *t[4];
    for (int v = 0; v < 4; v++)
        t[v] = malloc((size_t)steps * sizeof *t[v]);
    uint64_t *ids = malloc(max_batch * sizeof *ids), *offs = malloc((max_batch + 1) * sizeof *offs);

    for (int z = 0; z < n_sizes; z++) {
        size_t size = sizes[z];
        uint64_t n = shard_bytes / size, total = n * (uint64_t)g_size;
        /* The whole dataset in this process (memcpy's source); this rank's shard is a slice. */
        dataset d = {NULL, malloc((total + 1) * sizeof(uint64_t))};
        d.start[0] = 0;
        for (uint64_t g = 0; g < total; g++)
            d.start[g + 1] = d.start[g] + (varying ? size / 2 + mix(g ^ 0x76617279u) % (size + 1) : size);
        d.all = malloc(d.start[total]);
        for (uint64_t g = 0; g < total; g++)
            fill(d.all + d.start[g], g, d.start[g + 1] - d.start[g]);
        uint64_t first = (uint64_t)g_rank * n, *offsets = malloc((n + 1) * sizeof *offsets);
        for (uint64_t i = 0; i <= n; i++)
            offsets[i] = d.start[first + i] - d.start[first];
        const uint8_t *mine = d.all + d.start[first];
        const char *mode_name = varying ? (!strcmp(mode, "sampler") ? "sampler-varying" : "fetch-varying") : mode;
        size_t cap = max_batch * (varying ? size + size / 2 + 1 : size);
        uint8_t *out_memcpy = malloc(cap);
        uint8_t *out = out_align ? aligned_alloc(out_align, (cap + out_align - 1) / out_align * out_align) : malloc(cap);
        if (!strcmp(mode, "sampler")) {
            mdl_loader *h[3] = {open_loader("on", "auto", mine, offsets, n), open_loader("off", "onesided", mine, offsets, n),
                                open_loader("off", "collective", mine, offsets, n)};
            for (int b = 0; b < n_batches; b++) {
                run_sampler(h, batches[b], &d, out_memcpy, t, steps, warmup);
                report(mpi, mode_name, batches[b], size, t, steps);
            }
            for (int v = 0; v < 3; v++)
                mdl_finalize(&h[v]);
            free(out_memcpy);
            free(out);
            free(offsets);
            free(d.all);
            free(d.start);
            continue;
        }
        mdl_loader *node = open_loader("on", "auto", mine, offsets, n), *engines = open_loader("off", "auto", mine, offsets, n);
        uint64_t rng = mix(0x6e6f6465u + (uint64_t)g_rank * 7919 + size);

        for (int b = 0; b < n_batches; b++) {
            uint64_t batch = batches[b];
            int bad = 0;
            for (int s = -warmup; s < steps; s++) {
                for (uint64_t k = 0; k < batch; k++) {
                    rng = mix(rng);
                    uint64_t owner = (uint64_t)g_rank + 1 + rng % (uint64_t)(g_size - 1);
                    ids[k] = (owner % (uint64_t)g_size) * n + (rng >> 20) % n;
                }
                double r[4];
                TIMED(r[0], gather(&d, ids, batch, out_memcpy));
                mdl_status st = MDL_OK;
                TIMED(r[1], st = mdl_fetch_batch(node, ids, batch, out, cap, offs));
                if (st != MDL_OK)
                    die("mdl_fetch_batch (node-local)", st);
                bad |= memcmp(out, out_memcpy, offs[batch]) != 0;
                mdl_set_backend(engines, MDL_BACKEND_ONESIDED);
                TIMED(r[2], st = mdl_fetch_batch(engines, ids, batch, out, cap, offs));
                if (st != MDL_OK)
                    die("mdl_fetch_batch (one-sided)", st);
                mdl_set_backend(engines, MDL_BACKEND_COLLECTIVE);
                TIMED(r[3], st = mdl_fetch_batch(engines, ids, batch, out, cap, offs));
                if (st != MDL_OK)
                    die("mdl_fetch_batch (collective)", st);
                if (s >= 0)
                    for (int v = 0; v < 4; v++)
                        t[v][s] = r[v];
            }
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (bad) {
                if (g_rank == 0)
                    fprintf(stderr, "node-local bytes differ from memcpy's at batch %llu, sample %zu\n",
                            (unsigned long long)batch, size);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            report(mpi, mode_name, batch, size, t, steps);
        }
        mdl_finalize(&node);
        mdl_finalize(&engines);
        free(out_memcpy);
        free(out);
        free(offsets);
        free(d.all);
        free(d.start);
    }
    for (int v = 0; v < 4; v++)
        free(t[v]);
    free(ids);
    free(offs);
    MPI_Finalize();
    return 0;
}
