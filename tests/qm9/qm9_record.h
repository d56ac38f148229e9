/*
 * Header-only C decoder of QM9 graph records (record version 1) and reader of QM9 pack
 * files (pack version 1), as specified in docs/qm9_format.md and written by
 * `python -m mdloader.qm9 convert`.
 *
 * Portable: values are assembled from little-endian bytes, so the decoder works on any
 * host and on records at any alignment (e.g. inside a fetched MDLoader batch).
 *
 *   qm9_record rec;
 *   int err = qm9_record_decode(out + out_offsets[k], out_offsets[k+1] - out_offsets[k], &rec);
 *   if (err) fprintf(stderr, "%s\n", qm9_strerror(err));
 *   for (uint32_t i = 0; i < rec.n_atoms; i++) { rec.z[i]; qm9_record_pos(&rec, i, 0); ... }
 *   for (uint32_t k = 0; k < rec.n_edges; k++) { uint32_t s, t; qm9_record_edge(&rec, k, &s, &t); }
 *
 * The decoded struct points into the caller's buffer (no copy): keep the buffer alive.
 */
#ifndef QM9_RECORD_H
#define QM9_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QM9_RECORD_VERSION 1u
#define QM9_PACK_VERSION 1u
#define QM9_HEADER_BYTES 32u
#define QM9_PACK_HEADER_BYTES 24u

enum qm9_error {
    QM9_OK = 0,
    QM9_ERR_SHORT = 1,   /* fewer bytes than the header or than record_bytes */
    QM9_ERR_MAGIC = 2,   /* not "QM9G" / "QM9GPACK" */
    QM9_ERR_VERSION = 3, /* a version this reader does not know */
    QM9_ERR_SIZE = 4,    /* record_bytes disagrees with the layout or the buffer */
    QM9_ERR_IO = 5,      /* a pack file could not be opened or read */
    QM9_ERR_NOMEM = 6
};

typedef struct qm9_record {
    uint16_t version;
    uint16_t n_atoms;
    uint32_t n_edges;
    uint32_t mol_index;  /* QM9's molecule number, 1..133885 */
    uint32_t row;        /* 0-based position in the data set (= sample id) */
    float gap;           /* HOMO-LUMO gap, hartree */
    float cutoff;        /* edge radius, Angstrom */
    uint32_t record_bytes;
    const uint8_t *z;    /* n_atoms atomic numbers */
    const uint8_t *pos;  /* n_atoms * 3 little-endian f32: use qm9_record_pos() */
    const uint8_t *edges; /* n_edges * 2 little-endian u32: use qm9_record_edge() */
} qm9_record;

static inline uint16_t qm9_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t qm9_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t qm9_le64(const uint8_t *p)
{
    return (uint64_t)qm9_le32(p) | ((uint64_t)qm9_le32(p + 4) << 32);
}

static inline float qm9_lef32(const uint8_t *p)
{
    uint32_t bits = qm9_le32(p);
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* Size of a record with n atoms and e edges. */
static inline uint64_t qm9_record_size(uint64_t n_atoms, uint64_t n_edges)
{
    return QM9_HEADER_BYTES + n_atoms + (4 - n_atoms % 4) % 4 + 12 * n_atoms + 8 * n_edges;
}

static inline const char *qm9_strerror(int err)
{
    switch (err) {
    case QM9_OK: return "ok";
    case QM9_ERR_SHORT: return "QM9 record: fewer bytes than the record needs";
    case QM9_ERR_MAGIC: return "QM9: bad magic (not a QM9 record or pack file)";
    case QM9_ERR_VERSION: return "QM9: unsupported version";
    case QM9_ERR_SIZE: return "QM9 record: record_bytes disagrees with the layout or the buffer";
    case QM9_ERR_IO: return "QM9 pack file: cannot open or read";
    case QM9_ERR_NOMEM: return "QM9: out of memory";
    default: return "QM9: unknown error";
    }
}

/* Decodes the record in buf[0 .. len). len must be exactly the record's size. */
static inline int qm9_record_decode(const void *buf, size_t len, qm9_record *rec)
{
    const uint8_t *p = (const uint8_t *)buf;
    if (len < QM9_HEADER_BYTES)
        return QM9_ERR_SHORT;
    if (memcmp(p, "QM9G", 4) != 0)
        return QM9_ERR_MAGIC;
    rec->version = qm9_le16(p + 4);
    if (rec->version != QM9_RECORD_VERSION)
        return QM9_ERR_VERSION;
    rec->n_atoms = qm9_le16(p + 6);
    rec->n_edges = qm9_le32(p + 8);
    rec->mol_index = qm9_le32(p + 12);
    rec->row = qm9_le32(p + 16);
    rec->gap = qm9_lef32(p + 20);
    rec->cutoff = qm9_lef32(p + 24);
    rec->record_bytes = qm9_le32(p + 28);
    if ((uint64_t)rec->record_bytes != qm9_record_size(rec->n_atoms, rec->n_edges))
        return QM9_ERR_SIZE;
    if ((uint64_t)len != rec->record_bytes)
        return len < rec->record_bytes ? QM9_ERR_SHORT : QM9_ERR_SIZE;
    uint32_t n = rec->n_atoms;
    rec->z = p + QM9_HEADER_BYTES;
    rec->pos = rec->z + n + (4 - n % 4) % 4;
    rec->edges = rec->pos + 12 * (size_t)n;
    return QM9_OK;
}

/* Coordinate axis (0 x, 1 y, 2 z) of atom i, Angstrom. */
static inline float qm9_record_pos(const qm9_record *rec, uint32_t atom, int axis)
{
    return qm9_lef32(rec->pos + 12 * (size_t)atom + 4 * (size_t)axis);
}

/* Edge k: source and target atom (0-based). */
static inline void qm9_record_edge(const qm9_record *rec, uint32_t k, uint32_t *src, uint32_t *dst)
{
    *src = qm9_le32(rec->edges + 8 * (size_t)k);
    *dst = qm9_le32(rec->edges + 8 * (size_t)k + 4);
}

/* Whether (i, j) is an edge by the layout's rule, computed from the stored positions. */
static inline int qm9_within_cutoff(const qm9_record *rec, uint32_t i, uint32_t j)
{
    double d[3];
    for (int a = 0; a < 3; a++)
        d[a] = (double)qm9_record_pos(rec, i, a) - (double)qm9_record_pos(rec, j, a);
    /* Each product rounded on its own (volatile: no fused multiply-add), then summed
       left to right, exactly as the layout defines it. */
    volatile double px = d[0] * d[0], py = d[1] * d[1], pz = d[2] * d[2];
    double d2 = (px + py) + pz;
    double c = (double)rec->cutoff;
    return i != j && d2 <= c * c;
}

/*
 * Reads rank's contiguous slice of a pack file (records floor(n*rank/size) ..
 * floor(n*(rank+1)/size) - 1): *data (malloc'ed, the records back to back),
 * *offsets (malloc'ed, *count + 1 entries from 0), *count records, *first = id of the
 * first. Ready for mdl_register_shard(h, *data, *offsets, *count). Free both with free().
 */
static inline int qm9_pack_read_slice(const char *path, int rank, int size, uint8_t **data, uint64_t **offsets,
                                      uint64_t *count, uint64_t *first)
{
    uint8_t head[QM9_PACK_HEADER_BYTES];
    *data = NULL;
    *offsets = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return QM9_ERR_IO;
    int err = QM9_OK;
    if (fread(head, 1, sizeof head, f) != sizeof head) {
        err = QM9_ERR_IO;
        goto done;
    }
    if (memcmp(head, "QM9GPACK", 8) != 0) {
        err = QM9_ERR_MAGIC;
        goto done;
    }
    if (qm9_le32(head + 8) != QM9_PACK_VERSION || qm9_le32(head + 12) != QM9_RECORD_VERSION) {
        err = QM9_ERR_VERSION;
        goto done;
    }
    uint64_t n = qm9_le64(head + 16);
    uint64_t lo = n * (uint64_t)rank / (uint64_t)size, hi = n * (uint64_t)(rank + 1) / (uint64_t)size;
    uint64_t m = hi - lo;
    uint8_t *raw = (uint8_t *)malloc(8 * (m + 1));
    *offsets = (uint64_t *)malloc(8 * (m + 1));
    if (!raw || !*offsets) {
        free(raw);
        err = QM9_ERR_NOMEM;
        goto done;
    }
    if (fseek(f, (long)(QM9_PACK_HEADER_BYTES + 8 * lo), SEEK_SET) != 0 || fread(raw, 8, m + 1, f) != m + 1) {
        free(raw);
        err = QM9_ERR_IO;
        goto done;
    }
    uint64_t base = qm9_le64(raw);
    for (uint64_t k = 0; k <= m; k++)
        (*offsets)[k] = qm9_le64(raw + 8 * k) - base;
    free(raw);
    uint64_t bytes = (*offsets)[m];
    uint64_t data_start = QM9_PACK_HEADER_BYTES + 8 * (n + 1);
    *data = (uint8_t *)malloc(bytes ? bytes : 1);
    if (!*data) {
        err = QM9_ERR_NOMEM;
        goto done;
    }
    if (fseek(f, (long)(data_start + base), SEEK_SET) != 0 || fread(*data, 1, bytes, f) != bytes) {
        err = QM9_ERR_IO;
        goto done;
    }
    *count = m;
    *first = lo;
done:
    fclose(f);
    if (err) {
        free(*data);
        free(*offsets);
        *data = NULL;
        *offsets = NULL;
    }
    return err;
}

#endif /* QM9_RECORD_H */
