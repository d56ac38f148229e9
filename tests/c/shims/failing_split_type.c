/*
 * LD_PRELOAD shim for tests/run_c_tests.sh: one rank (MDL_SHIM_RANK in
 * MPI_COMM_WORLD) fails its MDL_SHIM_NTH-th MPI_Comm_split_type (default the first)
 * after the split itself has completed, as an MPI short of memory for the new
 * communicator would: the other ranks hold a node communicator that this rank lacks.
 * Registration maps the node's shards over such a split (errors_test --map-split-fails):
 * it must fail on every rank instead of leaving that rank's node in a gather for ever.
 */
#include <mpi.h>
#include <stdlib.h>

int MPI_Comm_split_type(MPI_Comm comm, int split_type, int key, MPI_Info info, MPI_Comm *newcomm)
{
    static int calls;
    int rank, rc = PMPI_Comm_split_type(comm, split_type, key, info, newcomm);
    PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *failing_rank = getenv("MDL_SHIM_RANK"), *nth = getenv("MDL_SHIM_NTH");
    if (rc == MPI_SUCCESS && ++calls == (nth ? atoi(nth) : 1) && failing_rank && rank == atoi(failing_rank)) {
        PMPI_Comm_free(newcomm);
        return MPI_ERR_NO_MEM;
    }
    return rc;
}
