/*
 * Pure-MPI reproduction: MPICH 4.0.2 (ch4:ucx, one node, more ranks than cores)
 * sometimes returns from MPI_Win_flush_all -- and MPI_Win_unlock_all -- before the data
 * of the MPI_Get calls it should complete has arrived in the origin buffer. No MDLoader
 * involved.
 *
 * Each rank fills its MPI_Win_allocate window with a known pattern; every step it
 * issues B gets of 2000 bytes from random other ranks, calls MPI_Win_flush_all, and
 * checks the bytes (then zeroes the buffer for the next step).
 *
 *   mpicc.mpich mpich_flush_all_incomplete.c -o r
 *   mpiexec.mpich -n 3 ./r            (2 cores: oversubscribed)
 *       expected: 0 wrong samples
 *       got: e.g. "1536 wrong samples in 6 rank-steps" -- whole steps of 256 gets
 *            missing (the buffer still holds the zeros of the previous step); in
 *            1 to 2 runs out of 3. Also with the lock held for the window's life (HELD=1)
 *            and with assert 0 instead of MPI_MODE_NOCHECK (argv[3]). With -n 2 (ranks =
 *            cores): no failure seen. Open MPI 4.1.4: no failure seen.
 *
 * MDLoader opens one lock_all per window and, when it does not yield between tests
 * (MDL_WAIT=spin, or auto with ranks <= cores), completes its gets with
 * MPI_Win_flush_all: tests/c/fetch_test with MDL_WAIT=spin on 3-4 MPICH ranks here
 * reports wrong bytes. Its yield mode (MPI_Rget + MPI_Testall), which auto picks on
 * oversubscribed nodes, passes.
 *
 * Usage: ./r [gets per step (256)] [steps (50)] [lock_all assert (default MPI_MODE_NOCHECK)]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint8_t pattern(int rank, size_t i)
{
    return (uint8_t)(i * 131 + (size_t)rank * 17 + (i >> 10) + 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (P < 2) {
        MPI_Finalize();
        return 2;
    }
    const size_t W = (size_t)10 << 20, LEN = 2000, SLOT = 4096;
    const int B = argc > 1 ? atoi(argv[1]) : 256, steps = argc > 2 ? atoi(argv[2]) : 50;
    const int lock_assert = argc > 3 ? atoi(argv[3]) : MPI_MODE_NOCHECK;
    const int held = getenv("HELD") != NULL;
    uint8_t *base;
    MPI_Win win;
    MPI_Win_allocate((MPI_Aint)W, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (size_t i = 0; i < W; i++)
        base[i] = pattern(me, i);
    MPI_Barrier(MPI_COMM_WORLD);

    uint8_t *out = calloc((size_t)B, SLOT);
    int *target = malloc(sizeof(int) * (size_t)B);
    size_t *disp = malloc(sizeof(size_t) * (size_t)B);
    srand((unsigned)me + 7);
    long bad = 0, bad_steps = 0;
    if (held)
        MPI_Win_lock_all(lock_assert, win);
    for (int s = 0; s < steps; s++) {
        for (int k = 0; k < B; k++) {
            target[k] = (me + 1 + rand() % (P - 1)) % P;
            disp[k] = (size_t)rand() % (W - LEN);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (!held)
            MPI_Win_lock_all(lock_assert, win);
        for (int k = 0; k < B; k++)
            MPI_Get(out + (size_t)k * SLOT, (int)LEN, MPI_BYTE, target[k], (MPI_Aint)disp[k], (int)LEN, MPI_BYTE,
                    win);
        MPI_Win_flush_all(win); /* every get above is complete at origin after this */
        if (!held)
            MPI_Win_unlock_all(win);
        long before = bad;
        for (int k = 0; k < B; k++)
            for (size_t i = 0; i < LEN; i++)
                if (out[(size_t)k * SLOT + i] != pattern(target[k], disp[k] + i)) {
                    bad++;
                    break;
                }
        bad_steps += bad > before;
        memset(out, 0, (size_t)B * SLOT);
    }
    if (held)
        MPI_Win_unlock_all(win);
    long mine[2] = {bad, bad_steps}, all[2];
    MPI_Reduce(mine, all, 2, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (me == 0)
        printf("%d ranks, %d gets/step, %d steps, assert %d%s: %ld wrong samples in %ld rank-steps\n", P, B, steps,
               lock_assert, held ? ", lock held" : "", all[0], all[1]);
    free(out);
    free(target);
    free(disp);
    MPI_Win_free(&win);
    MPI_Finalize();
    return all[0] && me == 0 ? 1 : 0;
}
