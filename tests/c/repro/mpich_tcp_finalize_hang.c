/*
 * Pure-MPI reproduction: MPICH 4.0.2 (ch4:ucx) over TCP between two ranks sometimes
 * never returns from MPI_Finalize after one-sided gets and all-to-all exchanges, all of
 * which completed. No MDLoader involved.
 *
 * The pattern of a loader's life: a duplicated communicator, an MPI_Win_allocate window
 * locked for its whole life (MPI_Win_lock_all), steps of MPI_Get + MPI_Win_flush_all
 * from the other ranks, MPI_Iallreduce, MPI_Alltoallv; then unlock, free the window and
 * the communicator, and MPI_Finalize.
 *
 *   mpicc.mpich mpich_tcp_finalize_hang.c -o r
 *   for i in $(seq 100); do
 *     MPIR_CVAR_NOLOCAL=1 UCX_TLS=self,tcp timeout 60 mpiexec.mpich -n 2 ./r || echo "run $i: exit $?"
 *   done
 *       expected: every run prints "done" and exits 0 within a second
 *       got (2 cores, load 2-6, ./r 300): 10 of 100 runs printed "done" on both ranks
 *            and then stayed in MPI_Finalize until killed (exit 124): one rank in
 *            MPICH's PMI read (the finalize barrier), the other in ucp_worker_progress.
 *
 * MDLoader's tests/c/fetch_test over the same transport shows the same two stacks after
 * "all checks passed" (2 of 56 runs here). The library leaves nothing behind at that
 * point: every loader is finalized (windows and communicators freed), its progress
 * thread joined; the hung processes hold only their main thread and UCX's own "async"
 * thread.
 *
 * Usage: ./r [steps (2000)] [gets per step (32)]
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    int gets = argc > 2 ? atoi(argv[2]) : 32;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);

    const MPI_Aint window_bytes = 4 << 20;
    uint8_t *base;
    MPI_Win win;
    MPI_Win_allocate(window_bytes, 1, MPI_INFO_NULL, comm, &base, &win);
    for (MPI_Aint i = 0; i < window_bytes; i++) base[i] = (uint8_t)(i * 7 + rank);
    MPI_Barrier(comm);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);

    uint8_t *got = malloc((size_t)gets * 4096);
    int *counts = malloc(sizeof(int) * 4 * (size_t)size);
    int *send_counts = counts, *recv_counts = counts + size, *sdispl = counts + 2 * size, *rdispl = counts + 3 * size;
    uint8_t *sendbuf = malloc((size_t)size * 65536), *recvbuf = malloc((size_t)size * 65536);
    srand(12345 + rank);
    long wrong = 0;
    for (int step = 0; step < steps; step++) {
        /* Gets from the other ranks, completed by a flush. */
        for (int k = 0; k < gets; k++) {
            int target = (rank + 1 + rand() % (size > 1 ? size - 1 : 1)) % size;
            MPI_Aint at = rand() % (window_bytes - 4096);
            MPI_Get(got + (size_t)k * 4096, 4096, MPI_BYTE, target, at, 4096, MPI_BYTE, win);
        }
        MPI_Win_flush_all(win);
        /* The step's agreement. */
        double mine = step, agreed;
        MPI_Request request;
        MPI_Iallreduce(&mine, &agreed, 1, MPI_DOUBLE, MPI_MAX, comm, &request);
        MPI_Wait(&request, MPI_STATUS_IGNORE);
        wrong += agreed != step;
        /* Every third step, an exchange of random sizes. */
        if (step % 3 == 0) {
            for (int q = 0; q < size; q++) send_counts[q] = rand() % 65536;
            MPI_Alltoall(send_counts, 1, MPI_INT, recv_counts, 1, MPI_INT, comm);
            for (int q = 0; q < size; q++) {
                sdispl[q] = q * 65536;
                rdispl[q] = q * 65536;
            }
            MPI_Alltoallv(sendbuf, send_counts, sdispl, MPI_BYTE, recvbuf, recv_counts, rdispl, MPI_BYTE, comm);
        }
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    MPI_Comm_free(&comm);
    printf("rank %d: done (%d steps, %ld wrong agreements)\n", rank, steps, wrong);
    fflush(stdout);
    free(got);
    free(counts);
    free(sendbuf);
    free(recvbuf);
    MPI_Finalize();
    return 0;
}
