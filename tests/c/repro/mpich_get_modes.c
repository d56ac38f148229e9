/*
 * Pure-MPI reproduction (no MDLoader involved): on this project's 2-core virtual machines
 * the round trip between the two cores changes while a job runs (0.27-0.38 us, or
 * 0.7-1.3 us, for minutes, switching either way), most likely the hypervisor moving a
 * virtual CPU (a guess: a guest cannot see its host); and MPICH's MPI_Get over shared
 * memory, whose every get is served by the target through UCX's shared-memory
 * transport, slows with it by about 3x: a path that pays every hand-off between
 * cores. A local memcpy of the same pattern does not slow (it gets a little faster),
 * and Open MPI's shared-memory get, a copy by the origin out of the target's window,
 * does not slow.
 *
 * This is why the estimator's calibration, taken once at init, can mispredict MPICH's
 * one-sided engine at large samples on one node, and why benches/grid's model-alone
 * accuracy on MPICH shared memory moves from run to run: the engine's speed changed
 * under a running job, and only the online correction can follow it.
 *
 * One 64 MiB window per rank (MPI_Win_allocate, lock_all, as the library's shard
 * windows); each step times, slowest rank:
 *   get   1024 random 16 KB MPI_Gets from the other rank, completed by MPI_Win_flush_all
 *   copy  the same pattern copied locally out of the rank's own window (memcpy)
 *   rtt   an 8-byte MPI_Send/MPI_Recv round trip (mean of 200)
 * and every 20 steps the minimum of each is printed.
 *
 *   mpicc.mpich -O2 mpich_get_modes.c -o r && for i in 1 2 3 4 5 6; do mpiexec.mpich -n 2 ./r; done
 *
 * Seen (MPICH 4.0.2 ch4:ucx, UCX 1.13, 2-core AMD EPYC VM, idle, 2026-12-04) in 3 of 8
 * jobs and 2 of 6 in a second series, and in none of 6 jobs a few minutes later: the state
 * comes and goes with the machine, not with the program. For example:
 *     steps  39: get  4172 us  copy 1985 us  rtt 0.35 us      (most jobs, all along)
 *     steps 279: get 12430 us  copy 1566 us  rtt 1.27 us      (a job that switched)
 * Open MPI 4.1.4 (btl self,vader), interleaved with those: get 1.7-2.7 ms in every job,
 * also in the two jobs whose rtt read 0.71-0.80 us. UCX_TLS=self,sysv or self,posix did
 * not avoid the slow state.
 *
 * Arguments: [batch=1024] [steps=300, at least 20] [offset of the destination past a
 * page=0, below 4096]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REPORT_EVERY = 20, ROUND_TRIPS = 200 };
static const size_t SHARD = (size_t)64 << 20, SAMPLE = 16384;

static uint64_t next_random(uint64_t *state)
{
    *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
    return *state;
}

static double slowest_since(double start)
{
    double mine = MPI_Wtime() - start, slowest;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static double round_trip(int rank)
{
    char message[8] = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < ROUND_TRIPS; i++) {
        if (rank == 0) {
            MPI_Send(message, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(message, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(message, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(message, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
    return slowest_since(start) / ROUND_TRIPS;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "run with 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int batch = argc > 1 ? atoi(argv[1]) : 1024, steps = argc > 2 ? atoi(argv[2]) : 300;
    const int offset_arg = argc > 3 ? atoi(argv[3]) : 0;
    if (batch < 1 || steps < REPORT_EVERY || offset_arg < 0 || offset_arg >= 4096) {
        if (rank == 0)
            fprintf(stderr, "usage: %s [batch >= 1] [steps >= %d] [offset 0-4095]\n", argv[0], REPORT_EVERY);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const size_t offset = (size_t)offset_arg;
    char *allocation = aligned_alloc(4096, (size_t)batch * SAMPLE + 4096);
    char *out = allocation + offset;
    memset(out, 0, (size_t)batch * SAMPLE);

    char *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)SHARD, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, rank + 1, SHARD);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    MPI_Win_sync(win);
    uint64_t rng = 12345 + (uint64_t)rank;
    double get_min = 1e9, copy_min = 1e9, rtt_min = 1e9;
    for (int step = 0; step < steps; step++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int k = 0; k < batch; k++) {
            MPI_Aint at = (MPI_Aint)((next_random(&rng) % (SHARD / SAMPLE)) * SAMPLE);
            MPI_Get(out + (size_t)k * SAMPLE, (int)SAMPLE, MPI_BYTE, 1 - rank, at, (int)SAMPLE, MPI_BYTE, win);
        }
        MPI_Win_flush_all(win);
        double get = slowest_since(start);

        MPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        for (int k = 0; k < batch; k++)
            memcpy(out + (size_t)k * SAMPLE, base + (next_random(&rng) % (SHARD / SAMPLE)) * SAMPLE, SAMPLE);
        double copy = slowest_since(start);

        double rtt = round_trip(rank);
        get_min = get < get_min ? get : get_min;
        copy_min = copy < copy_min ? copy : copy_min;
        rtt_min = rtt < rtt_min ? rtt : rtt_min;
        if (step % REPORT_EVERY == REPORT_EVERY - 1) {
            if (rank == 0)
                printf("steps %3d: get %6.0f us  copy %5.0f us  rtt %.2f us\n", step, get_min * 1e6, copy_min * 1e6,
                       rtt_min * 1e6);
            fflush(stdout);
            get_min = copy_min = rtt_min = 1e9;
        }
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    free(allocation);
    MPI_Finalize();
    return 0;
}
