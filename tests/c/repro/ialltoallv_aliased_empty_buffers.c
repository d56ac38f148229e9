/*
 * Pure-MPI reproduction of the Open MPI hang behind MDLoader's idle-rank failure
 * (no MDLoader involved).
 *
 * MDLoader's collective engine gives MPI the address of one static dummy for an empty
 * buffer, for the send side AND the receive side. On a rank whose send and receive
 * counts are all zero, MPI_Ialltoallv then gets sendbuf == recvbuf. Open MPI's libnbc
 * treats sendbuf == recvbuf as MPI_IN_PLACE (its NBC_IN_PLACE macro) and builds a
 * different schedule on that rank only; the ranks' nonblocking collectives stop
 * matching and the next one (here MPI_Iallreduce) hangs on every rank. Aliased send and
 * receive buffers are erroneous in MPI anyway; MPICH happens to tolerate them.
 *
 * 3 ranks, nonblocking collectives completed by a test-and-yield loop like MDLoader's:
 * one collective-engine step where rank 0 is idle (rank 1 gets one 100-byte sample from
 * rank 2): MPI_Ialltoall of counts, MPI_Ialltoallv of ids, MPI_Ialltoallv of bytes;
 * then the next step's MPI_Iallreduce.
 *
 *   mpicc.openmpi ialltoallv_aliased_empty_buffers.c -o r
 *   mpirun.openmpi --oversubscribe -n 3 ./r
 *       expected: "step 1 done" and "step 2 done" from every rank
 *       got (Open MPI 4.1.4): "step 1 done" x 3, then a hang in MPI_Iallreduce
 *   mpirun.openmpi --oversubscribe -x DISTINCT=1 -n 3 ./r      works: the empty send
 *       and receive buffers get two different dummy addresses (the fix)
 *   mpicc.mpich ... && mpiexec.mpich -n 3 ./r                  works either way
 */
#include <mpi.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t dummy_send, dummy_recv;
static int distinct;

static void wait1(MPI_Request *r)
{
    int done = 0;
    while (!done) {
        MPI_Test(r, &done, MPI_STATUS_IGNORE);
        if (!done)
            sched_yield();
    }
}

/* counts -> displacements; returns the total */
static int displs(const int *c, int *d)
{
    int t = 0;
    for (int i = 0; i < 3; i++) {
        d[i] = t;
        t += c[i];
    }
    return t;
}

/* What MDLoader does for an empty buffer: one dummy address for both sides (or, with
   DISTINCT, one per side). */
static void *sbuf(void *p, int total)
{
    return total ? p : &dummy_send;
}
static void *rbuf(void *p, int total)
{
    return total ? p : distinct ? &dummy_recv : &dummy_send;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, P;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &P);
    if (P != 3) {
        if (me == 0)
            fprintf(stderr, "run with exactly 3 ranks\n");
        MPI_Finalize();
        return 2;
    }
    distinct = getenv("DISTINCT") != NULL;
    MPI_Comm c;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Request q;
    double a[4] = {me, 0, 0, 0}, b[4];
    MPI_Iallreduce(a, b, 4, MPI_DOUBLE, MPI_MAX, c, &q);
    wait1(&q);

    uint64_t ids_to[3] = {0, 0, 0}, ids_from[3];
    if (me == 1)
        ids_to[2] = 1; /* rank 1 wants one sample from rank 2 */
    MPI_Ialltoall(ids_to, 1, MPI_UINT64_T, ids_from, 1, MPI_UINT64_T, c, &q);
    wait1(&q);

    int sc[3], sd[3], rc[3], rd[3];
    for (int p = 0; p < 3; p++) {
        sc[p] = (int)ids_to[p];
        rc[p] = (int)ids_from[p];
    }
    int st = displs(sc, sd), rt = displs(rc, rd);
    uint64_t want[1] = {8}, asked[1];
    MPI_Ialltoallv(sbuf(want, st), sc, sd, MPI_UINT64_T, rbuf(asked, rt), rc, rd, MPI_UINT64_T, c, &q);
    wait1(&q);

    for (int p = 0; p < 3; p++) {
        sc[p] = (int)ids_from[p] * 100;
        rc[p] = (int)ids_to[p] * 100;
    }
    st = displs(sc, sd);
    rt = displs(rc, rd);
    static char packed[100], received[100];
    MPI_Ialltoallv(sbuf(packed, st), sc, sd, MPI_BYTE, rbuf(received, rt), rc, rd, MPI_BYTE, c, &q);
    wait1(&q);
    printf("rank %d: step 1 done\n", me);
    fflush(stdout);

    MPI_Iallreduce(a, b, 4, MPI_DOUBLE, MPI_MAX, c, &q);
    wait1(&q);
    printf("rank %d: step 2 done\n", me);
    fflush(stdout);
    MPI_Comm_free(&c);
    MPI_Finalize();
    return 0;
}
