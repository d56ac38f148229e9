/*
 * LD_PRELOAD shim for tests/run_c_tests.sh: one rank (MDL_SHIM_RANK in
 * MPI_COMM_WORLD) fails its MDL_SHIM_NTH-th call (default the first) of MDL_SHIM_CALL
 * (MPI_Comm_split_type, the default, or MPI_Comm_split) after the split itself has
 * completed, as an MPI short of memory for the new communicator would: the other ranks
 * hold a communicator that this rank lacks. Registration splits its communicator
 * several times (errors_test --split-fails): each must fail on every rank instead of
 * leaving the others in the new communicator's first collective for ever.
 */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

/* Whether this call of `name`, the calls-th, is the one to fail. */
static int fails(const char *name, int calls)
{
    const char *call = getenv("MDL_SHIM_CALL"), *failing_rank = getenv("MDL_SHIM_RANK"), *nth = getenv("MDL_SHIM_NTH");
    int rank;
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return !strcmp(call ? call : "MPI_Comm_split_type", name) && calls == (nth ? atoi(nth) : 1) && failing_rank &&
           rank == atoi(failing_rank);
}

/* The split's outcome on this rank: the new communicator freed where it fails. */
static int outcome(int rc, const char *name, int calls, MPI_Comm *newcomm)
{
    if (rc != MPI_SUCCESS || !fails(name, calls))
        return rc;
    if (*newcomm != MPI_COMM_NULL) /* MPI_Comm_split's MPI_UNDEFINED color: none */
        PMPI_Comm_free(newcomm);
    return MPI_ERR_NO_MEM;
}

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
    static int calls;
    return outcome(PMPI_Comm_split_type(comm, split_type, key, info, newcomm), "MPI_Comm_split_type", ++calls, newcomm);
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm)
{
    static int calls;
    return outcome(PMPI_Comm_split(comm, color, key, newcomm), "MPI_Comm_split", ++calls, newcomm);
}
