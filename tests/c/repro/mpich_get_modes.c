/*
 * Pure-MPI reproduction (no MDLoader involved): MPICH's MPI_Get over shared memory runs
 * at one of two speeds for identical windows, fixed for a window's life. It is why the
 * estimator's calibration (a scratch window) can mispredict the one-sided engine on the
 * shard's window at large samples, and why benches/grid's model accuracy on MPICH
 * shared memory moves from run to run.
 *
 * Each round allocates a fresh 64 MiB window per rank (MPI_Win_allocate, lock_all for
 * its life, as the library does), then times 20 steps of 1024 random 16 KB MPI_Gets from
 * the other rank completed by MPI_Win_flush_all (slowest rank, median).
 *
 *   mpicc.mpich -O2 mpich_get_modes.c -o r && for i in 1 2; do mpiexec.mpich -n 2 ./r 1024 6; done
 *       got (MPICH 4.0, 2 cores, idle, 2026-12-03): in 5 of 6 jobs 4.6-5.8 ms for every
 *       window; in one job 5.5-5.7 ms for windows 0-2 and 15.1-16.0 ms for windows 3-5
 *       (every base on a page boundary). The gets need the target's progress (a target
 *       that sleeps outside MPI holds them for its whole sleep), so the two speeds are
 *       presumably two ways of serving them; not investigated further. In benches/grid
 *       (fresh windows for every point) the slow speed was the common one that evening:
 *       MPICH's raw-get floor at 1024 x 16 KB took 10.9-11.8 ms in 7 runs of 8.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { STEPS = 20 };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const size_t shard = (size_t)64 << 20, sample = 16384;
    const int batch = argc > 1 ? atoi(argv[1]) : 1024, windows = argc > 2 ? atoi(argv[2]) : 6;
    char *out = malloc((size_t)batch * sample);
    memset(out, 0, (size_t)batch * sample);
    for (int w = 0; w < windows; w++) {
        char *base;
        MPI_Win win;
        MPI_Win_allocate((MPI_Aint)shard, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        memset(base, rank + 1, shard);
        MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
        MPI_Win_sync(win);
        MPI_Barrier(MPI_COMM_WORLD);
        uint64_t rng = 12345 + (uint64_t)rank + (uint64_t)w * 7;
        double times[STEPS];
        for (int step = 0; step < STEPS; step++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int k = 0; k < batch; k++) {
                rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
                MPI_Aint at = (MPI_Aint)((rng % (shard / sample)) * sample);
                MPI_Get(out + (size_t)k * sample, (int)sample, MPI_BYTE, 1 - rank, at, (int)sample, MPI_BYTE, win);
            }
            MPI_Win_flush_all(win);
            double mine = MPI_Wtime() - t0;
            MPI_Allreduce(&mine, &times[step], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        }
        for (int i = 0; i < STEPS; i++)
            for (int j = i + 1; j < STEPS; j++)
                if (times[j] < times[i]) {
                    double t = times[i];
                    times[i] = times[j], times[j] = t;
                }
        if (rank == 0)
            printf("window %d (base %% 4096 = %lu): median %.0f us\n", w, (unsigned long)((uintptr_t)base % 4096),
                   times[STEPS / 2] * 1e6);
        MPI_Win_unlock_all(win);
        MPI_Win_free(&win);
    }
    free(out);
    MPI_Finalize();
    return 0;
}
