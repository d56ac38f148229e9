/*
 * Pure-MPI measurement of the slow start of one-sided gets on a new window (no MDLoader
 * involved), behind MDL_WARMUP_GETS.
 *
 * Each round allocates a fresh 8 MB window per rank (4000 samples of 2 KB), then times
 * 60 steps of one random 16-sample batch per rank: MPI_Get of every remote sample inside
 * one lock_all epoch and one MPI_Win_flush_all (the slowest rank's time per step). With
 * WARMUP=n, n small gets to random places of the neighbour's window are issued (flushed
 * every 8) before the timed steps.
 *
 *   mpicc.openmpi openmpi_new_window_slow_gets.c -o r
 *   mpirun.openmpi --mca btl self,vader -n 2 ./r
 *       got (Open MPI 4.1.4, shared memory, 2 cores): steps start at 20-40 us and settle
 *       at 3-8 us after ~40 steps, in every round (every new window)
 *   mpirun.openmpi --mca btl self,vader -x WARMUP=512 -n 2 ./r
 *       got: 3-8 us from the first step (128 warm-up gets were not enough)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SAMPLES = 4000, SIZE = 2048, BATCH = 16, STEPS = 60, ROUNDS = 3 };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    const int warmup = getenv("WARMUP") ? atoi(getenv("WARMUP")) : 0;
    const MPI_Aint bytes = (MPI_Aint)SAMPLES * SIZE;
    uint8_t *out = malloc(BATCH * SIZE), junk[8];
    srand(1 + me);
    for (int round = 0; round < ROUNDS; round++) {
        uint8_t *base;
        MPI_Win win;
        MPI_Win_allocate(bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
        memset(base, me + 1, (size_t)bytes);
        MPI_Win_lock_all(0, win);
        for (int i = 0; i < warmup; i++) {
            MPI_Get(junk, 8, MPI_BYTE, (me + 1) % P, rand() % (bytes - 8), 8, MPI_BYTE, win);
            if (i % 8 == 7)
                MPI_Win_flush_all(win);
        }
        MPI_Win_flush_all(win);
        MPI_Barrier(MPI_COMM_WORLD);
        double t[STEPS], slowest[STEPS];
        for (int s = 0; s < STEPS; s++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int k = 0; k < BATCH; k++) {
                int id = rand() % (SAMPLES * P), owner = id / SAMPLES;
                MPI_Aint at = (MPI_Aint)(id % SAMPLES) * SIZE;
                if (owner == me)
                    memcpy(out + k * SIZE, base + at, SIZE);
                else
                    MPI_Get(out + k * SIZE, SIZE, MPI_BYTE, owner, at, SIZE, MPI_BYTE, win);
            }
            MPI_Win_flush_all(win);
            t[s] = MPI_Wtime() - t0;
        }
        MPI_Reduce(t, slowest, STEPS, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (me == 0) {
            printf("window %d, us per step:", round);
            for (int s = 0; s < STEPS; s++)
                printf(" %.0f", slowest[s] * 1e6);
            printf("\n");
        }
        MPI_Win_unlock_all(win);
        MPI_Win_free(&win);
    }
    free(out);
    MPI_Finalize();
    return 0;
}
