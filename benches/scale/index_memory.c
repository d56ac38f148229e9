/*
 * index_memory: memory of the global index at registration, per rank and per node.
 *
 * Every rank registers --per-rank samples of --bytes bytes (default 25,000,000 x 8:
 * N = 10^8 at 4 ranks), or of --bytes to --max-bytes bytes (lengths varying: samples of
 * one length keep no index table), fetches a few batches (so that every rank has read
 * the index), and reports, after freeing its own copy of the data:
 *   - VmHWM, the peak resident memory of the process (registration's peak);
 *   - Pss, its share of resident memory now (pages shared by the node's ranks, such as
 *     a node-shared index, count 1/k on each of the k ranks mapping them);
 * and rank 0 prints the node's totals and the shards' bytes. The shard's own bytes
 * (window) are part of both figures; run with the library before and after a change to
 * compare the index's part, and once with samples of one length (no index) to take
 * the rest out: index bytes per sample = (Pss - shards) varying minus (Pss - shards)
 * uniform, over N.
 *
 * --longest L makes each rank's first sample L bytes long: the index's width follows the
 * job's longest sample (64 KiB: 2.91 bytes a sample, without terabytes of samples).
 *
 * Usage: index_memory [--per-rank N] [--bytes S] [--max-bytes M] [--longest L]
 */
#define _POSIX_C_SOURCE 200809L
#include <mdloader.h>
#include "bench_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(mdl_status st, const char *what)
{
    if (st != MDL_OK) {
        char buf[512];
        mdl_last_error(buf, sizeof buf);
        fprintf(stderr, "%s: %s\n", what, buf);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

int main(int argc, char **argv)
{
    unsigned long long per_rank = 25000000ULL, bytes = 8, max_bytes = 0, longest = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--per-rank"))
            per_rank = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--bytes"))
            bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--max-bytes"))
            max_bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--longest"))
            longest = strtoull(argv[i + 1], NULL, 10);
    }
    if (max_bytes < bytes)
        max_bytes = bytes;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long before_kb = proc_field_kb("/proc/self/status", "VmRSS");

    uint64_t *offsets = malloc((per_rank + 1) * sizeof *offsets);
    if (!offsets) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Lengths bytes..max_bytes, spread by a multiplicative hash of the global id. */
    offsets[0] = 0;
    for (unsigned long long i = 0; i < per_rank; i++) {
        unsigned long long id = (unsigned long long)rank * per_rank + i;
        unsigned long long len = bytes + (id * 2654435761ULL >> 7) % (max_bytes - bytes + 1);
        offsets[i + 1] = offsets[i] + (i == 0 && longest ? longest : len);
    }
    uint64_t shard_bytes = offsets[per_rank];
    char *data = malloc(shard_bytes + 1);
    if (!data) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(data, rank, shard_bytes);

    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h), "mdl_init");
    double t0 = MPI_Wtime();
    check(mdl_register_shard(h, data, offsets, per_rank), "mdl_register_shard");
    double seconds = MPI_Wtime() - t0;
    free(data);
    free(offsets);

    /* A few batches spread over the whole dataset. */
    uint64_t total = 0, ids[256], out_offsets[257];
    check(mdl_num_samples(h, &total), "mdl_num_samples");
    if (longest > max_bytes)
        max_bytes = longest;
    char *out = malloc(256 * max_bytes);
    for (int step = 0; step < 4; step++) {
        for (int k = 0; k < 256; k++)
            ids[k] = (uint64_t)((k * 2654435761ULL + step * 97 + rank) % total);
        check(mdl_fetch_batch(h, ids, 256, out, 256 * max_bytes, out_offsets), "mdl_fetch_batch");
    }
    free(out);

    long hwm = proc_field_kb("/proc/self/status", "VmHWM");
    long pss = proc_field_kb("/proc/self/smaps_rollup", "Pss");
    long rss = proc_field_kb("/proc/self/status", "VmRSS");
    long mine[4] = {hwm, pss, rss, before_kb}, sum[4];
    MPI_Reduce(mine, sum, 4, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    unsigned long long all_shards = 0, mine_bytes = shard_bytes;
    MPI_Reduce(&mine_bytes, &all_shards, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    printf("rank %d: VmHWM %ld MB, Pss %ld MB, VmRSS %ld MB (before MPI work %ld MB)\n", rank, hwm / 1024,
           pss / 1024, rss / 1024, before_kb / 1024);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("N = %llu samples of %llu-%llu bytes on %d ranks, registered in %.2f s: node totals VmHWM %ld MB, "
               "Pss %ld MB, shards %.0f MB; (Pss - shards) / N = %.2f bytes\n",
               (unsigned long long)total, bytes, max_bytes, size, seconds, sum[0] / 1024, sum[1] / 1024,
               all_shards / 1048576.0, ((double)sum[1] * 1024 - (double)all_shards) / (double)total);
    check(mdl_finalize(&h), "mdl_finalize");
    MPI_Finalize();
    return 0;
}
