/*
 * QM9 through MDLoader from C: every rank registers its slice of a QM9 pack file, then
 * fetches the molecules of a reference file (rows taken straight from the source CSV by
 * make_reference.py) in batches, over the one-sided, collective and automatic engines in
 * turn, decodes each record with qm9_record.h and compares it with the CSV values:
 * row (= sample id), QM9 index, atomic numbers, positions (the CSV decimal rounded to
 * binary32, bit for bit), the gap, and the edge list (recomputed from the positions by
 * the layout's rule, docs/qm9_format.md).
 *
 *   mpirun -n 2 qm9_decode_test PACK.qm9g REFERENCE.txt [batch]
 *
 * Exit status 0 when everything matched on every rank.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mdloader.h"
#include "qm9_record.h"

typedef struct ref_mol {
    uint64_t row;
    uint32_t mol_index;
    uint32_t n_atoms;
    double gap;
    int z[64];
    double xyz[64][3];
} ref_mol;

static int rank_;
static long errors_;

#define FAIL(...)                                                                                                  \
    do {                                                                                                           \
        if (errors_++ < 10) {                                                                                      \
            fprintf(stderr, "rank %d: ", rank_);                                                                   \
            fprintf(stderr, __VA_ARGS__);                                                                          \
            fputc('\n', stderr);                                                                                   \
        }                                                                                                          \
    } while (0)

static ref_mol *read_reference(const char *path, size_t *count)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    size_t n = 0;
    if (fscanf(f, "%zu", &n) != 1) {
        fclose(f);
        return NULL;
    }
    ref_mol *mols = calloc(n, sizeof *mols);
    for (size_t k = 0; mols && k < n; k++) {
        ref_mol *m = &mols[k];
        if (fscanf(f, "%lu %u %u %lf", (unsigned long *)&m->row, &m->mol_index, &m->n_atoms, &m->gap) != 4 ||
            m->n_atoms > 64) {
            free(mols);
            mols = NULL;
            break;
        }
        for (uint32_t a = 0; a < m->n_atoms; a++) {
            if (fscanf(f, "%d %lf %lf %lf", &m->z[a], &m->xyz[a][0], &m->xyz[a][1], &m->xyz[a][2]) != 4) {
                free(mols);
                mols = NULL;
                break;
            }
        }
    }
    fclose(f);
    *count = n;
    return mols;
}

static int same_float(float a, float b)
{
    return memcmp(&a, &b, sizeof a) == 0;
}

/* Compares one fetched record with its reference row; returns the edges seen. */
static uint64_t check(const uint8_t *rec_bytes, size_t len, const ref_mol *m)
{
    qm9_record r;
    int err = qm9_record_decode(rec_bytes, len, &r);
    if (err) {
        FAIL("row %lu: %s", (unsigned long)m->row, qm9_strerror(err));
        return 0;
    }
    if (r.row != m->row || r.mol_index != m->mol_index || r.n_atoms != m->n_atoms) {
        FAIL("row %lu: got row %u, index %u, %u atoms; CSV says index %u, %u atoms", (unsigned long)m->row, r.row,
             r.mol_index, r.n_atoms, m->mol_index, m->n_atoms);
        return 0;
    }
    if (!same_float(r.gap, (float)m->gap))
        FAIL("row %lu: gap %.9g, CSV %.9g", (unsigned long)m->row, r.gap, m->gap);
    for (uint32_t a = 0; a < r.n_atoms; a++) {
        if (r.z[a] != m->z[a])
            FAIL("row %lu atom %u: Z %u, CSV %d", (unsigned long)m->row, a, r.z[a], m->z[a]);
        for (int c = 0; c < 3; c++)
            if (!same_float(qm9_record_pos(&r, a, c), (float)m->xyz[a][c]))
                FAIL("row %lu atom %u axis %d: %.9g, CSV %.12g", (unsigned long)m->row, a, c,
                     qm9_record_pos(&r, a, c), m->xyz[a][c]);
    }
    /* The edge list must be exactly the ordered pairs within the cutoff, sorted. */
    uint64_t k = 0;
    for (uint32_t i = 0; i < r.n_atoms; i++) {
        for (uint32_t j = 0; j < r.n_atoms; j++) {
            if (!qm9_within_cutoff(&r, i, j))
                continue;
            uint32_t s, t;
            if (k >= r.n_edges) {
                FAIL("row %lu: fewer edges (%u) than pairs within the cutoff", (unsigned long)m->row, r.n_edges);
                return r.n_edges;
            }
            qm9_record_edge(&r, (uint32_t)k, &s, &t);
            if (s != i || t != j) {
                FAIL("row %lu edge %lu: (%u, %u), expected (%u, %u)", (unsigned long)m->row, (unsigned long)k, s, t,
                     i, j);
                return r.n_edges;
            }
            k++;
        }
    }
    if (k != r.n_edges)
        FAIL("row %lu: %u edges, %lu pairs within the cutoff", (unsigned long)m->row, r.n_edges, (unsigned long)k);
    return r.n_edges;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 3) {
        if (rank_ == 0)
            fprintf(stderr, "usage: %s PACK.qm9g REFERENCE.txt [batch]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    size_t batch = argc > 3 ? (size_t)atol(argv[3]) : 64;

    uint8_t *data;
    uint64_t *offsets, count = 0, first = 0;
    int err = qm9_pack_read_slice(argv[1], rank_, size, &data, &offsets, &count, &first);
    if (err) {
        fprintf(stderr, "rank %d: %s: %s\n", rank_, argv[1], qm9_strerror(err));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t nref = 0;
    ref_mol *ref = read_reference(argv[2], &nref);
    if (!ref) {
        fprintf(stderr, "rank %d: cannot read %s\n", rank_, argv[2]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (st == MDL_OK)
        st = mdl_register_shard(h, data, offsets, count);
    free(data);
    free(offsets);
    uint64_t total = 0;
    if (st == MDL_OK)
        st = mdl_num_samples(h, &total);
    if (st != MDL_OK) {
        char msg[512];
        mdl_last_error(msg, sizeof msg);
        fprintf(stderr, "rank %d: %s: %s\n", rank_, mdl_status_string(st), msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    const mdl_backend engines[3] = {MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO};
    uint64_t *ids = malloc(batch * sizeof *ids);
    uint64_t *out_offsets = malloc((batch + 1) * sizeof *out_offsets);
    size_t cap = batch * 8192;
    uint8_t *out = malloc(cap);
    uint64_t checked = 0, edges = 0, atoms = 0;
    size_t start = nref * (size_t)rank_ / (size_t)size; /* each rank starts elsewhere */
    for (size_t b = 0, step = 0; b < nref; b += batch, step++) {
        size_t n = nref - b < batch ? nref - b : batch;
        const ref_mol *which[n > 0 ? n : 1];
        for (size_t k = 0; k < n; k++) {
            which[k] = &ref[(start + b + k) % nref];
            ids[k] = which[k]->row;
        }
        st = mdl_set_backend(h, engines[step % 3]);
        if (st == MDL_OK)
            st = mdl_fetch_batch(h, ids, n, out, cap, out_offsets);
        if (st != MDL_OK) {
            char msg[512];
            mdl_last_error(msg, sizeof msg);
            FAIL("fetch: %s: %s", mdl_status_string(st), msg);
            break;
        }
        for (size_t k = 0; k < n; k++) {
            edges += check(out + out_offsets[k], out_offsets[k + 1] - out_offsets[k], which[k]);
            atoms += which[k]->n_atoms;
        }
        checked += n;
    }
    mdl_finalize(&h);

    long all_errors = 0;
    uint64_t all_checked = 0, all_edges = 0, all_atoms = 0;
    MPI_Allreduce(&errors_, &all_errors, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&checked, &all_checked, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&edges, &all_edges, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&atoms, &all_atoms, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank_ == 0)
        printf("qm9_decode_test (C): %d ranks, %lu samples in the loader, %lu molecules checked (%lu atoms, %lu "
               "edges): %ld mismatches\n",
               size, (unsigned long)total, (unsigned long)all_checked, (unsigned long)all_atoms,
               (unsigned long)all_edges, all_errors);
    free(ids);
    free(out_offsets);
    free(out);
    free(ref);
    MPI_Finalize();
    return all_errors == 0 && all_checked == (uint64_t)nref * (uint64_t)size ? 0 : 1;
}
