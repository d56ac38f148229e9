/*
 * The baseline for valgrind runs: only MPI_Init_thread and MPI_Finalize, at the thread
 * level the tests ask for (MULTIPLE, or FUNNELED with --funneled). Whatever valgrind
 * reports here is MPI's own (Open MPI leaks about 18.7 kB per process at start-up);
 * tests/run_fuzz_tests.sh turns these reports into suppressions.
 */
#include <mpi.h>
#include <string.h>

int main(int argc, char **argv)
{
    int provided = 0, level = MPI_THREAD_MULTIPLE;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--funneled"))
            level = MPI_THREAD_FUNNELED;
    MPI_Init_thread(&argc, &argv, level, &provided);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
