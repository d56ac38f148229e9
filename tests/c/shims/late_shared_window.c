/*
 * LD_PRELOAD shim for tests/run_shm_tests.sh: one rank (MDL_SHIM_RANK in
 * MPI_COMM_WORLD) comes back from its first MPI_Win_allocate_shared MDL_SHIM_SLEEP
 * seconds late, beyond MDL_TIMEOUT: a node whose shared memory is slow to set up.
 * The other ranks must time out, and so must the late one in the agreement that
 * follows, instead of falling back into a collective the others never enter.
 */
#define _POSIX_C_SOURCE 200809L /* sleep */
#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm, void *baseptr, MPI_Win *win)
{
    static int calls;
    int rc = PMPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win), rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *late_rank = getenv("MDL_SHIM_RANK"), *seconds = getenv("MDL_SHIM_SLEEP");
    if (++calls == 1 && late_rank && seconds && rank == atoi(late_rank))
        sleep((unsigned)atoi(seconds));
    return rc;
}
