/*
 * LD_PRELOAD shim for tests/run_c_tests.sh: one rank (MDL_SHIM_RANK in
 * MPI_COMM_WORLD) fails its MDL_SHIM_NTH-th MPI_Type_commit (default the first), as an
 * MPI short of memory would. A step beyond int counts makes the types of its ids'
 * exchange first (commits 1-2 at 2 ranks), then its data's (3-4).
 * The collective engine makes such types after the step's agreement, for an exchange
 * beyond int counts (MPI_Alltoallw); the step must then fail on every rank instead of
 * leaving the others in the exchange for ever (large_count_test --first-fetch-fails).
 */
#include <mpi.h>
#include <stdlib.h>

int MPI_Type_commit(MPI_Datatype *type)
{
    static int calls;
    int rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *failing_rank = getenv("MDL_SHIM_RANK"), *nth = getenv("MDL_SHIM_NTH");
    if (++calls == (nth ? atoi(nth) : 1) && failing_rank && rank == atoi(failing_rank))
        return MPI_ERR_NO_MEM;
    return PMPI_Type_commit(type);
}
