/* The C program of docs/c-and-fortran.md: 3 samples per rank, every rank fetches the job's last
 * sample. tests/run_cmake_tests.sh builds it by by-hand.txt's line, and as C++ by cxx/. */
#include <mdloader.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* This rank's shard: 3 samples of 2, 0 and 3 bytes. */
    const char data[] = {'a', 'b', 'c', 'd', 'e'};
    const uint64_t offsets[] = {0, 2, 2, 5};
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (st == MDL_OK) st = mdl_register_shard(h, data, offsets, 3);
    uint64_t n_total = 0;
    if (st == MDL_OK) st = mdl_num_samples(h, &n_total);
    /* Every rank fetches the last sample of the job and its own first one. */
    uint64_t ids[2] = {n_total - 1, 3 * (uint64_t)rank};
    char out[64]; uint64_t out_offsets[3];
    if (st == MDL_OK) st = mdl_fetch_batch(h, ids, 2, out, sizeof out, out_offsets);
    if (st != MDL_OK) {
        char why[256];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "rank %d: %s: %s\n", rank, mdl_status_string(st), why);
    } else {
        printf("rank %d: sample %llu has %llu bytes\n", rank, (unsigned long long)ids[0],
               (unsigned long long)(out_offsets[1] - out_offsets[0]));
    }
    mdl_finalize(&h);
    MPI_Finalize();
    return st != MDL_OK;
}
