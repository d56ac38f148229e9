/*
 * register_cost: what mdl_register_shard costs each rank, in time, page faults and
 * page tables, for a shard of --mb MB (4 KB samples) per rank.
 *
 *   mpirun -n 4 register_cost [--mb 1024]      (MDL_NODE_LOCAL=on|off as wanted)
 *
 * Per rank: the registration's wall time, the minor and major page faults it took
 * (getrusage), and VmPTE and VmRSS (/proc/self/status) after it; rank 0 prints the
 * maximum over ranks and the sum, one line, with the MDL_NODE_LOCAL in force. The
 * shard is filled (touched) before the clock starts.
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_common.h"
#include "mdloader.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    uint64_t mb = 1024;
    for (int i = 1; i + 1 < argc; i += 2)
        if (!strcmp(argv[i], "--mb"))
            mb = strtoull(argv[i + 1], NULL, 10);
    const uint64_t sample = 4096, n = mb * 1000000 / sample;
    uint8_t *data = malloc(n * sample);
    uint64_t *offsets = malloc((n + 1) * sizeof *offsets);
    if (!data || !offsets) {
        fprintf(stderr, "rank %d: no memory for a %llu MB shard\n", rank, (unsigned long long)mb);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (uint64_t i = 0; i <= n; i++)
        offsets[i] = i * sample;
    memset(data, rank + 1, n * sample);

    mdl_loader *h = NULL;
    if (mdl_init(MPI_COMM_WORLD, &h) != MDL_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    struct rusage before, after;
    MPI_Barrier(MPI_COMM_WORLD);
    getrusage(RUSAGE_SELF, &before);
    double t0 = MPI_Wtime();
    mdl_status st = mdl_register_shard(h, data, offsets, n);
    double t1 = MPI_Wtime();
    getrusage(RUSAGE_SELF, &after);
    if (st != MDL_OK) {
        char why[256];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "rank %d: mdl_register_shard: %s\n", rank, why);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double mine[5] = {t1 - t0, (double)(after.ru_minflt - before.ru_minflt),
                      (double)(after.ru_majflt - before.ru_majflt), (double)proc_field_kb("/proc/self/status", "VmPTE"), (double)proc_field_kb("/proc/self/status", "VmRSS")};
    double most[5], sum[5];
    MPI_Reduce(mine, most, 5, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(mine, sum, 5, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    const char *node_local = getenv("MDL_NODE_LOCAL");
    if (rank == 0)
        printf("register_cost: %d ranks x %llu MB, MDL_NODE_LOCAL=%s: registration %.3f s (slowest rank); "
               "minor faults %.0f per rank (max), %.0f in all; major %.0f; VmPTE %.0f kB (max), "
               "VmRSS %.0f MB (max)\n",
               size, (unsigned long long)mb, node_local ? node_local : "(default)", most[0], most[1], sum[1],
               sum[2], most[3], most[4] / 1024);
    mdl_finalize(&h);
    free(data);
    free(offsets);
    MPI_Finalize();
    return 0;
}
