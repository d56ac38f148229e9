/*
 * shm_test: registration where the node's shared memory (a small tmpfs on /dev/shm,
 * set up by tests/run_shm_tests.sh in a private mount namespace) may not hold the
 * store. Whatever the size, registration must succeed on every rank, every fetched
 * byte must be right, and the node-local path must be on exactly where the shards fit.
 *
 *   shm_test --samples N --bytes B [--varying 1] --expect shared|private
 *   shm_test --shards-vs-room DELTA_MIB | --index-vs-room DELTA_MIB --expect ...
 *   shm_test ... --space-after-shard MIB
 *
 * --space-after-shard: the last rank limits its address space (RLIMIT_AS, as
 * `ulimit -v` does) to what it maps once its shard is built, plus one more shard (the
 * window's copy) and MIB: room for its own shard, not for the node's whole shared
 * window, which MPICH and the node-local path map into every process.
 * Each rank registers N samples of B bytes (byte k of sample g is a hash of g and k),
 * then fetches batches of random ids with the library's defaults and checks them.
 * --expect says whether the shards should have stayed in shared memory (node-local
 * copies, no engine bytes on one node) or gone to private memory (engine bytes only);
 * anything else (alone: one rank) checks the bytes only. --expect timeout: registration
 * only, whose status each rank prints; then the job aborts (see main).
 */
#define _POSIX_C_SOURCE 200809L /* statvfs */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "check.h"
#include "common.h"
#include "mdloader.h"

static uint8_t byte_of(uint64_t id, uint64_t k)
{
    return (uint8_t)(tc_mix64(id * 1000003u + k / 8) >> (8 * (k % 8)));
}

/* Sizes DELTA MiB from the room the library will find in /dev/shm: what the file
   system has free now, after MPI_Init (each MPI takes some of it: Open MPI about
   0.1 MiB, MPICH about 8 MiB), minus MDL_SHM_RESERVE (16 MiB unless set); the
   smallest over the ranks. Shards: samples of 4 KiB whose shards together take
   room + DELTA. Index: samples of 1 byte (each rank's last of 2: see main), whose
   index (1 byte each: with 2 bytes the longest sample, the library packs 64 starts in
   a 64-byte line, src/store/packed.rs) and shards (1 byte each, page-rounded) take
   room + DELTA when DELTA < 0, and whose index alone takes it when DELTA > 0. */
static void size_against_room(int index, double delta_mib, uint64_t *n, uint64_t *bytes)
{
    struct statvfs fs;
    double room = 0;
    if (statvfs("/dev/shm", &fs) == 0) {
        const char *reserve = getenv("MDL_SHM_RESERVE");
        room = (double)fs.f_bavail * (double)fs.f_frsize - (reserve ? atof(reserve) : 16.0 * 1048576);
    }
    MPI_Allreduce(MPI_IN_PLACE, &room, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    double target = room + delta_mib * 1048576;
    if (!index) {
        *bytes = 4096;
        *n = (uint64_t)(target / g_size / 4096);
    } else {
        *bytes = 1;
        *n = (uint64_t)(target / g_size / (delta_mib < 0 ? 2 : 1));
    }
    if (g_rank == 0)
        printf("shm_test: room %.1f MiB in /dev/shm after the reserve; %s %+.0f MiB: %llu samples of %llu B per rank\n",
               room / 1048576, index ? "index" : "shards", delta_mib, (unsigned long long)*n,
               (unsigned long long)*bytes);
}

/* Limit this process's address space to what it maps now plus `more` bytes (one rank
   alone: check() is collective, so a failure here aborts the job). */
static void limit_address_space(uint64_t more)
{
    unsigned long long mapped_pages = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    int read = statm && fscanf(statm, "%llu", &mapped_pages) == 1;
    if (statm)
        fclose(statm);
    uint64_t limit = (uint64_t)mapped_pages * (uint64_t)sysconf(_SC_PAGESIZE) + more;
    struct rlimit r = {.rlim_cur = limit, .rlim_max = limit};
    if (!read || setrlimit(RLIMIT_AS, &r) != 0) {
        fprintf(stderr, "shm_test: rank %d could not limit its address space\n", g_rank);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    fprintf(stderr, "shm_test: rank %d may map %.0f MiB more\n", g_rank, (double)more / 1048576);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    uint64_t n = 0, bytes = 0;
    const char *expect = "", *vs_room = NULL;
    double delta_mib = 0, space_mib = -1;
    int varying = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--samples"))
            n = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--bytes"))
            bytes = strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--varying"))
            varying = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--expect"))
            expect = argv[i + 1];
        else if (!strcmp(argv[i], "--space-after-shard"))
            space_mib = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--shards-vs-room") || !strcmp(argv[i], "--index-vs-room"))
            vs_room = argv[i], delta_mib = atof(argv[i + 1]);
    }
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int index_case = vs_room && !strcmp(vs_room, "--index-vs-room");
    if (vs_room)
        size_against_room(index_case, delta_mib, &n, &bytes);
    varying |= index_case;
    uint64_t first = (uint64_t)g_rank * n;
    uint8_t *data = malloc(n * bytes + 1);
    uint64_t *offsets = malloc((n + 1) * sizeof *offsets);
    check(data && offsets, "memory for the shard");
    tc_uniform_shard(first, n, bytes, byte_of, data, offsets);
    /* --varying 1 (implied by --index-vs-room): a job whose samples all have one
       length keeps no index, so each rank's last sample is one byte longer. */
    if (varying && n > 0) {
        offsets[n] += 1;
        data[n * bytes] = byte_of(first + n - 1, bytes);
    }
    if (space_mib >= 0 && g_rank == g_size - 1)
        limit_address_space(n * bytes + (uint64_t)(space_mib * 1048576));

    mdl_loader *h = NULL;
    check(mdl_init(MPI_COMM_WORLD, &h) == MDL_OK, "mdl_init");
    mdl_status st = mdl_register_shard(h, data, offsets, n);
    if (!strcmp(expect, "timeout")) {
        /* A rank late beyond MDL_TIMEOUT (tests/c/shims/late_shared_window.c): every
           rank must return an error, none hang. Wait outside MPI until the late rank
           has timed out too, then abort: after a timeout MPI_Finalize may hang. */
        printf("rank %d: mdl_register_shard returned %s\n", g_rank, mdl_status_string(st));
        fflush(stdout);
        sleep(12);
        MPI_Abort(MPI_COMM_WORLD, 0);
    }
    if (st != MDL_OK) {
        char why[512];
        mdl_last_error(why, sizeof why);
        fprintf(stderr, "rank %d: mdl_register_shard: %s\n", g_rank, why);
    }
    check(st == MDL_OK, "registration succeeds whatever the shared memory holds");
    free(data);
    if (g_failed) {
        MPI_Finalize();
        return 1;
    }

    enum { BATCH = 64, ROUNDS = 20 };
    uint64_t ids[BATCH], out_offsets[BATCH + 1];
    uint8_t *out = malloc(BATCH * bytes + 1);
    tc_rng rng = tc_rng_make(7, (uint64_t)g_rank);
    uint64_t total = n * (uint64_t)g_size, wrong = 0;
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < BATCH; i++)
            ids[i] = tc_below(&rng, total);
        check(mdl_fetch_batch(h, ids, BATCH, out, BATCH * bytes + 1, out_offsets) == MDL_OK, "mdl_fetch_batch");
        for (int i = 0; i < BATCH; i++)
            for (uint64_t k = 0; k < bytes; k += 61)
                wrong += out[out_offsets[i] + k] != byte_of(ids[i], k);
    }
    check(wrong == 0, "every fetched byte is right");

    char json[4096];
    size_t needed = 0;
    check(mdl_stats_json_job(h, json, sizeof json, &needed) == MDL_OK, "mdl_stats_json_job");
    double node_bytes = tc_json_number(json, "\"node_local\"", "bytes");
    if (!strcmp(expect, "shared"))
        check(node_bytes > 0, "the shards stayed in shared memory: node-local copies");
    else if (!strcmp(expect, "private"))
        check(node_bytes == 0, "the shards went to private memory: no node-local copies");
    if (g_rank == 0 && !g_failed)
        printf("shm_test: %llu samples of %llu B per rank, node-local bytes %.0f (expected %s): all checks passed\n",
               (unsigned long long)n, (unsigned long long)bytes, node_bytes, expect);
    check(mdl_finalize(&h) == MDL_OK, "mdl_finalize");
    free(out);
    free(offsets);
    MPI_Finalize();
    return g_failed != 0;
}
