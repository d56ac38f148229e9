/*
 * Pure-MPI reproduction of lost output at MPI_Abort (no MDLoader involved): what a
 * process writes to stderr (flushed) just before MPI_Abort may never reach the user.
 * It is why mdloader's abort hook (python/mdloader/abort.py) pauses before aborting.
 *
 *   mpicc.mpich abort_output_loss.c -o r
 *   (while :; do :; done & while :; do :; done &)    # two busy loops: load
 *   for i in $(seq 200); do mpiexec.mpich -n 2 ./r 2>&1; done | grep -c "aborting the MPI job"
 *       got (MPICH 4.0, Hydra, 2 cores under load, 2026-12-03): 186 of 200; MPICH's own
 *       "application called MPI_Abort" line 183 of 200
 *   the same with PAUSE_MS=200 (the hook's pause):  200 of 200 (MPICH's line: 193)
 */
#define _DEFAULT_SOURCE /* usleep */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 1) {
        fprintf(stderr, "Traceback (most recent call last): ...\n");
        fprintf(stderr, "rank 1: aborting the MPI job\n");
        fflush(stderr);
        const char *pause = getenv("PAUSE_MS");
        if (pause)
            usleep((useconds_t)atoi(pause) * 1000);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
