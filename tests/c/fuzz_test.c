/*
 * fuzz_test: a seeded, reproducible fuzzer of the C boundary (docs/hardening.md).
 *
 * Every rank derives the same sequence of cases from --seed. Case K draws, from
 * (seed, K) alone, an operation, a hostile rank (or none) and a hostile variant of
 * one argument; per-rank details (batch sizes, ids) come from (seed, K, rank). So a
 * failure reproduces with `fuzz_test --seed S --first K --cases 1` at the same rank
 * count (the shared loader is opened afresh there; only the AUTO estimator's history
 * differs, which changes engine choices, never results).
 *
 * Operations:
 *   fetch     mdl_fetch_batch: NULL pointers with n > 0, n = 0/1/huge (SIZE_MAX,
 *             SIZE_MAX/8, 2^60, 2^40 with ids NULL), out_cap 0 / too small /
 *             UINT64_MAX / PTRDIFF_MAX+1, ids == N / UINT64_MAX / beyond N; benign
 *             batches with repeats, boundary and zero-length ids
 *   backend   mdl_set_backend(-1, 3, INT_MAX, INT_MIN, ...) on one rank (local
 *             MDL_ERR_INVALID_ARG, nothing stored), then maybe a valid but different
 *             backend on that rank: the next fetch fails on every rank
 *   register  a fresh loader: offsets[0] != 0, decreasing offsets, NULL data/offsets,
 *             n_samples = UINT64_MAX or 2^60, offsets[n] = UINT64_MAX or PTRDIFF_MAX+1;
 *             then maybe a corrected retry, a verified fetch, register twice, finalize
 *   epoch     mdl_set_prefetch(65 .. UINT32_MAX) (refused, not stored),
 *             mdl_epoch_begin with batch_size 0 / UINT64_MAX / other seed / epoch /
 *             drop_last on one rank, mdl_next_batch with a NULL out-pointer,
 *             mdl_epoch_seek past the end / to another step, fetch during the epoch
 *   local     mdl_num_samples, mdl_sample_size, mdl_stats_json and mdl_last_error with
 *             tiny buffers, mdl_status_string of random ints, NULL handles
 *
 * The oracle for collective calls (every rank's status is gathered after each call):
 *   - nobody hostile: every rank MDL_OK, fetched bytes verified exactly (common.h);
 *   - the hostile rank's argument is invalid by itself: that rank its own code, every
 *     other rank MDL_ERR_REMOTE;
 *   - it is valid alone but differs from the other ranks' (a "mismatch"): every rank
 *     MDL_ERR_INVALID_ARG (at one rank there is nothing to mismatch: MDL_OK).
 * No crash, no hang: a per-case watchdog (alarm) and crash handlers print the case
 * number and the seed.
 *
 * Usage: fuzz_test --seed S --cases N [--first K] [--base B] [--case-timeout SEC]
 *                  [--max-failures M] [--max-seconds T] [--funneled] [--trace]
 * --max-seconds stops starting new cases after T seconds (rank 0's clock decides).
 * Output (rank 0): "fuzz: N cases, seed S, ...", one "FAIL case K ..." line per failed
 * case (details per rank on stderr), and last "N passed, M failed" (cases as units).
 * Exit status 0 when every case passed.
 */
#define _POSIX_C_SOURCE 200809L
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mdloader.h"

#define GUARD 64
#define LAST_STATUS 11 /* MDL_ERR_CALL_MISMATCH, the highest mdl_status */
#define GUARD_BYTE 0xA5
#define GUARD_U64 0xDEADBEEFCAFEF00Dull

static int g_rank, g_size, g_thread_multiple, g_trace;
static uint64_t g_seed = 1, g_first = 0, g_cases = 300, g_base = 40, g_max_failures = 20;
static unsigned g_case_timeout = 60;
static double g_max_seconds = 0; /* 0: no time limit */
static volatile uint64_t g_case_no;
static const char *volatile g_op = "startup";
static const char *volatile g_desc = ""; /* the case's description, for crash reports */

/* ---------- watchdog and crash reports (async-signal-safe) ---------- */

static void sig_line(const char *what, int sig)
{
    char line[512];
    size_t k = 0;
    tc_sig_puts(line, &k, sizeof line, "[rank ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_rank);
    tc_sig_puts(line, &k, sizeof line, "] ");
    tc_sig_puts(line, &k, sizeof line, what);
    if (sig) {
        tc_sig_puts(line, &k, sizeof line, " (signal ");
        tc_sig_putu(line, &k, sizeof line, (unsigned long long)sig);
        tc_sig_puts(line, &k, sizeof line, ")");
    }
    tc_sig_puts(line, &k, sizeof line, " in fuzz case ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_case_no);
    tc_sig_puts(line, &k, sizeof line, " (");
    tc_sig_puts(line, &k, sizeof line, g_desc[0] ? g_desc : g_op);
    tc_sig_puts(line, &k, sizeof line, "), seed ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_seed);
    tc_sig_puts(line, &k, sizeof line, ": reproduce with --seed ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_seed);
    tc_sig_puts(line, &k, sizeof line, " --first ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_case_no);
    tc_sig_puts(line, &k, sizeof line, " --cases 1\n");
    ssize_t ignored = write(2, line, k);
    (void)ignored;
}

static void on_alarm(int sig)
{
    (void)sig;
    sig_line("TIMEOUT", 0);
    _exit(3);
}

static void on_crash(int sig)
{
    sig_line("CRASH", sig);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_handlers(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_crash;
    sa.sa_flags = SA_RESETHAND;
    int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaction(sigs[i], &sa, NULL);
}

/* ---------- a case ---------- */

typedef struct fcase {
    uint64_t k;
    tc_rng common; /* identical on every rank */
    tc_rng mine;   /* this rank's own stream */
    int hostile;   /* the hostile rank, or -1 */
    int me;        /* this rank is the hostile one */
    int ok;
    char desc[200];
} fcase;

/* The code's C name (the library's own text is for users; these are for bug reports). */
static const char *sname(int s)
{
    static const char *names[] = {"MDL_OK", "MDL_ERR_NULL_ARG", "MDL_ERR_INVALID_ARG", "MDL_ERR_OUT_OF_RANGE",
                                  "MDL_ERR_BUFFER_TOO_SMALL", "MDL_ERR_STATE", "MDL_ERR_MPI", "MDL_ERR_NO_MEMORY",
                                  "MDL_ERR_PANIC", "MDL_ERR_REMOTE", "MDL_ERR_TIMEOUT", "MDL_ERR_CALL_MISMATCH"};
    return s >= 0 && s <= LAST_STATUS ? names[s] : "(not an mdl_status)";
}

/* One fprintf per message so that lines from different ranks do not interleave. */
#define NOTE(c, ...)                                                                          \
    do {                                                                                      \
        char msg_[1024];                                                                      \
        (c)->ok = 0;                                                                          \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                             \
        fprintf(stderr, "[rank %d] case %llu (seed %llu) %s: %s\n", g_rank,                   \
                (unsigned long long)(c)->k, (unsigned long long)g_seed, (c)->desc, msg_);    \
    } while (0)

#define EXPECT(c, cond, ...)                                                                  \
    do {                                                                                      \
        if (!(cond))                                                                          \
            NOTE(c, __VA_ARGS__);                                                             \
    } while (0)

static void last_error_text(char *buf, size_t len)
{
    buf[0] = '\0';
    mdl_last_error(buf, len);
}

/* A local call's status against the one expected (or either of two). */
static void expect_local(fcase *c, const char *what, mdl_status got, mdl_status want, mdl_status alt)
{
    if (got != want && got != alt) {
        char msg[512];
        last_error_text(msg, sizeof msg);
        NOTE(c, "%s returned %s, expected %s; last error: \"%s\"", what, sname(got), sname(want), msg);
    }
}

/* What a collective call should return. */
enum exp_kind {
    EXP_OK,       /* every rank MDL_OK */
    EXP_LOCAL,    /* the hostile rank `code` (or `alt`), the others MDL_ERR_REMOTE */
    EXP_MISMATCH, /* every rank MDL_ERR_INVALID_ARG; MDL_OK at one rank */
    EXP_ALL,      /* every rank `code` (the same mistake everywhere) */
    EXP_ANY_FAIL, /* every rank non-OK, no further promise */
};

typedef struct expect {
    enum exp_kind kind;
    mdl_status code, alt;
} expect;

static expect ex_ok(void) { expect e = {EXP_OK, MDL_OK, MDL_OK}; return e; }
static expect ex_local(mdl_status code, mdl_status alt) { expect e = {EXP_LOCAL, code, alt}; return e; }
static expect ex_mismatch(void) { expect e = {EXP_MISMATCH, MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG}; return e; }
static expect ex_all(mdl_status code) { expect e = {EXP_ALL, code, code}; return e; }

/* Gathers every rank's status of one collective call and applies the oracle. Returns
   the gathered vector's verdict "every rank returned MDL_OK" (identical on every rank,
   so callers can branch on it without the ranks' control flow diverging). */
static int check_collective(fcase *c, const char *call, mdl_status st, expect e)
{
    int mine = (int)st, *all = malloc(sizeof(int) * (size_t)g_size);
    if (!all)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    int all_ok = 1, any_ok = 0;
    for (int r = 0; r < g_size; r++) {
        all_ok &= all[r] == MDL_OK;
        any_ok |= all[r] == MDL_OK;
    }
    if (e.kind == EXP_MISMATCH && g_size == 1)
        e = ex_ok();
    if (e.kind == EXP_LOCAL && c->hostile < 0)
        e = ex_ok();
    int good;
    const char *want;
    char wbuf[160];
    switch (e.kind) {
    case EXP_OK:
        good = mine == MDL_OK;
        want = "MDL_OK";
        break;
    case EXP_LOCAL:
        if (c->me) {
            good = mine == (int)e.code || mine == (int)e.alt;
            snprintf(wbuf, sizeof wbuf, "%s%s%s (hostile rank)", sname(e.code), e.alt != e.code ? " or " : "",
                     e.alt != e.code ? sname(e.alt) : "");
            want = wbuf;
        } else {
            good = mine == MDL_ERR_REMOTE;
            want = "MDL_ERR_REMOTE";
        }
        break;
    case EXP_MISMATCH:
    case EXP_ALL:
        good = mine == (int)e.code;
        want = sname(e.code);
        break;
    default:
        good = mine != MDL_OK;
        want = "an error";
        break;
    }
    if (!good) {
        char msg[512];
        last_error_text(msg, sizeof msg);
        NOTE(c, "%s returned %s, expected %s; last error: \"%s\"", call, sname(mine), want,
             mine == MDL_OK ? "" : msg);
    }
    /* The agreement rule itself, whatever was expected: all succeed or all fail. */
    if (!all_ok && any_ok && g_rank == 0) {
        char line[512];
        size_t k = 0;
        for (int r = 0; r < g_size && k + 40 < sizeof line; r++)
            k += (size_t)snprintf(line + k, sizeof line - k, "%s%d:%s", r ? ", " : "", r, sname(all[r]));
        NOTE(c, "%s: ranks disagree on success (%s)", call, line);
    }
    free(all);
    return all_ok;
}

/* Whether v is equal on every rank (collective). */
static int same_everywhere(uint64_t v)
{
    uint64_t lo, hi;
    MPI_Allreduce(&v, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&v, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return lo == hi;
}

/* ---------- the shared loader ---------- */

typedef struct world {
    mdl_loader *h;
    tc_dataset ds;
    int had_epoch; /* an epoch was begun on h (each epoch case ends its epoch) */
} world;

static int open_world(world *w, uint64_t seed)
{
    w->h = NULL;
    w->had_epoch = 0;
    if (tc_dataset_init(&w->ds, g_size, g_base, seed, 1) != 0)
        return -1;
    if (mdl_init(MPI_COMM_WORLD, &w->h) != MDL_OK)
        return -1;
    uint8_t *data;
    uint64_t *off;
    uint64_t n = tc_build_shard(&w->ds, g_rank, &data, &off);
    if (n == UINT64_MAX)
        MPI_Abort(MPI_COMM_WORLD, 2);
    mdl_status st = mdl_register_shard(w->h, data, off, n);
    free(data);
    free(off);
    return st == MDL_OK ? 0 : -1;
}

static void close_world(world *w)
{
    mdl_finalize(&w->h);
    tc_dataset_free(&w->ds);
}

/* A random id: mostly uniform, sometimes a shard boundary, the last id or a repeat. */
static uint64_t random_id(tc_rng *r, const tc_dataset *ds, const uint64_t *prev, size_t n_prev)
{
    uint64_t total = tc_total(ds);
    switch (tc_below(r, 8)) {
    case 0: {
        int owner = (int)tc_below(r, (uint64_t)ds->nranks);
        uint64_t g = ds->first[owner] + (tc_below(r, 2) ? 0 : tc_n_local(ds, owner));
        return g < total ? g : total - 1;
    }
    case 1: return total - 1;
    case 2:
        if (n_prev)
            return prev[tc_below(r, n_prev)];
        return 0;
    default: return tc_below(r, total);
    }
}

static uint64_t nonempty_id(tc_rng *r, const tc_dataset *ds)
{
    for (;;) {
        uint64_t g = tc_below(r, tc_total(ds));
        if (tc_size_of(ds, g) > 0)
            return g;
    }
}

/* Verifies a fetched batch: offsets, bytes, and the guards after the buffers. */
static void verify_fetch(fcase *c, const tc_dataset *ds, const uint64_t *ids, size_t n, const uint8_t *out,
                         uint64_t cap, const uint64_t *offs, size_t offs_guard_at)
{
    if (offs[0] != 0) {
        NOTE(c, "out_offsets[0] = %llu", (unsigned long long)offs[0]);
        return;
    }
    for (size_t k = 0; k < n; k++) {
        uint64_t len = offs[k + 1] - offs[k];
        if (offs[k + 1] < offs[k] || offs[k + 1] > cap || len != tc_size_of(ds, ids[k])) {
            NOTE(c, "out_offsets[%zu..%zu] = %llu..%llu for id %llu of size %llu (cap %llu)", k, k + 1,
                 (unsigned long long)offs[k], (unsigned long long)offs[k + 1], (unsigned long long)ids[k],
                 (unsigned long long)tc_size_of(ds, ids[k]), (unsigned long long)cap);
            return;
        }
        int64_t bad = tc_verify_sample(ds, ids[k], out + offs[k], len);
        if (bad >= 0) {
            NOTE(c, "sample %zu (id %llu): byte %lld wrong", k, (unsigned long long)ids[k], (long long)bad);
            return;
        }
    }
    for (size_t i = 0; i < GUARD; i++)
        if (out[cap + i] != GUARD_BYTE) {
            NOTE(c, "byte %zu after out_cap was overwritten", i);
            return;
        }
    for (size_t i = 0; i < 4; i++)
        if (offs[offs_guard_at + i] != GUARD_U64) {
            NOTE(c, "out_offsets[%zu] (after n + 1 entries) was overwritten", offs_guard_at + i);
            return;
        }
}

/* ---------- fetch ---------- */

enum fetch_variant {
    FV_IDS_NULL,
    FV_OUT_NULL,
    FV_OFFS_NULL,
    FV_N_SIZE_MAX,
    FV_N_SIZE_MAX_8,
    FV_N_2_60,
    FV_N_SIZE_MAX_IDS_NULL,
    FV_N_2_40_IDS_NULL,
    FV_CAP_SMALL,
    FV_CAP_ZERO,
    FV_CAP_U64_MAX,
    FV_CAP_PTRDIFF_MAX_1,
    FV_ID_TOTAL,
    FV_ID_U64_MAX,
    FV_ID_BEYOND,
    FV_COUNT
};
static const char *FV_NAMES[] = {"ids NULL, n > 0", "out NULL, out_cap = need > 0", "out_offsets NULL",
                                 "n = SIZE_MAX", "n = SIZE_MAX/8", "n = 2^60", "n = SIZE_MAX, ids NULL",
                                 "n = 2^40, ids NULL", "out_cap = need - 1", "out_cap = 0 (need > 0)",
                                 "out_cap = UINT64_MAX", "out_cap = PTRDIFF_MAX + 1", "an id == num_samples",
                                 "an id == UINT64_MAX", "an id > num_samples"};

static expect fetch_expect(enum fetch_variant v)
{
    switch (v) {
    case FV_IDS_NULL:
    case FV_OUT_NULL:
    case FV_OFFS_NULL:
    case FV_N_2_40_IDS_NULL: return ex_local(MDL_ERR_NULL_ARG, MDL_ERR_NULL_ARG);
    case FV_N_SIZE_MAX_IDS_NULL: return ex_local(MDL_ERR_INVALID_ARG, MDL_ERR_NULL_ARG);
    case FV_N_SIZE_MAX:
    case FV_N_SIZE_MAX_8:
    case FV_N_2_60:
    case FV_CAP_U64_MAX:
    case FV_CAP_PTRDIFF_MAX_1: return ex_local(MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG);
    case FV_CAP_SMALL:
    case FV_CAP_ZERO: return ex_local(MDL_ERR_BUFFER_TOO_SMALL, MDL_ERR_BUFFER_TOO_SMALL);
    default: return ex_local(MDL_ERR_OUT_OF_RANGE, MDL_ERR_OUT_OF_RANGE);
    }
}

/* One fetch on every rank; the hostile rank (if any) applies variant v. `e_override`
   replaces the oracle when not NULL (backend mismatch). Returns 1 if every rank got
   MDL_OK. */
static int fuzz_fetch_once(fcase *c, world *w, int v, const expect *e_override)
{
    const tc_dataset *ds = &w->ds;
    tc_rng *r = &c->mine;
    size_t n;
    switch (tc_below(r, 10)) {
    case 0: n = 0; break;
    case 1: n = 1; break;
    case 2: n = (size_t)tc_below(r, 1500); break;
    default: n = (size_t)tc_below(r, 64); break;
    }
    int hostile = c->me && v >= 0;
    if (hostile && n == 0)
        n = 1 + (size_t)tc_below(r, 8); /* every variant needs a batch to spoil */
    uint64_t *ids = malloc(sizeof(uint64_t) * (n + 1));
    uint64_t *offs = malloc(sizeof(uint64_t) * (n + 1 + 4));
    if (!ids || !offs)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (size_t i = 0; i < n; i++)
        ids[i] = random_id(r, ds, ids, i);
    if (hostile && (v == FV_OUT_NULL || v == FV_CAP_SMALL || v == FV_CAP_ZERO))
        ids[tc_below(r, n)] = nonempty_id(r, ds); /* need > 0 */
    uint64_t need = tc_batch_bytes(ds, ids, n);
    uint64_t cap = need + (tc_below(r, 4) == 0 ? tc_below(r, 100) : 0);
    uint8_t *out = malloc(cap + GUARD);
    if (!out)
        MPI_Abort(MPI_COMM_WORLD, 2);
    memset(out, GUARD_BYTE, cap + GUARD);
    for (size_t i = 0; i < n + 1 + 4; i++)
        offs[i] = GUARD_U64;

    const uint64_t *pids = (n == 0 && tc_below(r, 2)) ? NULL : ids;
    void *pout = (need == 0 && cap == 0 && tc_below(r, 2)) ? NULL : out;
    uint64_t *poffs = offs;
    size_t pn = n;
    uint64_t pcap = cap;
    if (hostile) {
        switch ((enum fetch_variant)v) {
        case FV_IDS_NULL: pids = NULL; break;
        case FV_OUT_NULL: pout = NULL, pcap = need; break;
        case FV_OFFS_NULL: poffs = NULL; break;
        case FV_N_SIZE_MAX: pn = SIZE_MAX; break;
        case FV_N_SIZE_MAX_8: pn = SIZE_MAX / 8; break;
        case FV_N_2_60: pn = (size_t)1 << 60; break;
        case FV_N_SIZE_MAX_IDS_NULL: pn = SIZE_MAX, pids = NULL; break;
        case FV_N_2_40_IDS_NULL: pn = (size_t)1 << 40, pids = NULL; break;
        case FV_CAP_SMALL: pcap = need - 1; break;
        case FV_CAP_ZERO: pcap = 0; if (tc_below(r, 2)) pout = NULL; break;
        case FV_CAP_U64_MAX: pcap = UINT64_MAX; break;
        case FV_CAP_PTRDIFF_MAX_1: pcap = (uint64_t)PTRDIFF_MAX + 1; break;
        case FV_ID_TOTAL: ids[tc_below(r, n)] = tc_total(ds); break;
        case FV_ID_U64_MAX: ids[tc_below(r, n)] = UINT64_MAX; break;
        case FV_ID_BEYOND: ids[tc_below(r, n)] = tc_total(ds) + 1 + tc_below(r, 1u << 30); break;
        default: break;
        }
    }
    mdl_status st = mdl_fetch_batch(w->h, pids, pn, pout, pcap, poffs);
    expect e = v >= 0 ? fetch_expect((enum fetch_variant)v) : ex_ok();
    if (e_override)
        e = *e_override;
    int all_ok = check_collective(c, "mdl_fetch_batch", st, e);
    if (st == MDL_OK && !hostile)
        verify_fetch(c, ds, ids, n, out, cap, offs, n + 1);
    if (hostile && st == MDL_ERR_BUFFER_TOO_SMALL) {
        EXPECT(c, offs[n] == need, "out_offsets[n] = %llu on MDL_ERR_BUFFER_TOO_SMALL, expected %llu",
               (unsigned long long)offs[n], (unsigned long long)need);
        for (size_t i = 0; i < GUARD; i++)
            if (out[cap + i] != GUARD_BYTE) {
                NOTE(c, "byte %zu after the buffer was overwritten on MDL_ERR_BUFFER_TOO_SMALL", i);
                break;
            }
    }
    if (!hostile || pout == out)
        for (size_t i = 0; i < GUARD && st != MDL_OK; i++)
            if (out[cap + i] != GUARD_BYTE) {
                NOTE(c, "byte %zu after out_cap was overwritten by a failed fetch", i);
                break;
            }
    free(ids);
    free(offs);
    free(out);
    return all_ok;
}

static void op_fetch(fcase *c, world *w)
{
    int v = c->hostile >= 0 ? (int)tc_below(&c->common, FV_COUNT) : -1;
    snprintf(c->desc, sizeof c->desc, "fetch: %s on rank %d", v >= 0 ? FV_NAMES[v] : "none", c->hostile);
    g_op = "fetch";
    fuzz_fetch_once(c, w, v, NULL);
    /* The loader must stay usable after any refused fetch. */
    if (v >= 0)
        fuzz_fetch_once(c, w, -1, NULL);
}

/* ---------- backend ---------- */

static void op_backend(fcase *c, world *w)
{
    static const int invalid[] = {-1, 3, INT_MAX, INT_MIN, 4, 255};
    int bad = invalid[tc_below(&c->common, sizeof invalid / sizeof invalid[0])];
    int other = (int)tc_below(&c->common, 3);
    int mismatch = c->hostile >= 0 && tc_below(&c->common, 2);
    int base = (int)tc_below(&c->common, 3);
    if (mismatch && other == base)
        other = (base + 1) % 3;
    snprintf(c->desc, sizeof c->desc, "backend: all %d, rank %d sets %d%s%s", base, c->hostile, bad,
             mismatch ? " then " : "", mismatch ? (other == 0 ? "AUTO" : other == 1 ? "ONESIDED" : "COLLECTIVE") : "");
    g_op = "backend";
    expect_local(c, "mdl_set_backend(valid)", mdl_set_backend(w->h, (mdl_backend)base), MDL_OK, MDL_OK);
    if (c->me) {
        char what[64];
        snprintf(what, sizeof what, "mdl_set_backend(%d)", bad);
        expect_local(c, what, mdl_set_backend(w->h, (mdl_backend)bad), MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG);
        char msg[256];
        last_error_text(msg, sizeof msg);
        EXPECT(c, msg[0] != '\0', "empty last error after an invalid backend");
        if (mismatch)
            expect_local(c, "mdl_set_backend(other)", mdl_set_backend(w->h, (mdl_backend)other), MDL_OK, MDL_OK);
    }
    expect e = mismatch ? ex_mismatch() : ex_ok();
    fuzz_fetch_once(c, w, -1, &e);
    /* Agree again: the next fetch works. */
    expect_local(c, "mdl_set_backend(agree)", mdl_set_backend(w->h, (mdl_backend)base), MDL_OK, MDL_OK);
    fuzz_fetch_once(c, w, -1, NULL);
}

/* ---------- register on a fresh loader ---------- */

enum reg_variant {
    RV_OFF0,
    RV_OFF0_EMPTY,
    RV_DECREASING,
    RV_DATA_NULL,
    RV_OFFS_NULL,
    RV_N_U64_MAX,
    RV_N_2_60,
    RV_N_U64_MAX_OFFS_NULL,
    RV_LAST_U64_MAX,
    RV_LAST_PTRDIFF_MAX_1,
    RV_COUNT
};
static const char *RV_NAMES[] = {"offsets[0] = 1", "n = 0, offsets = {3}", "decreasing offsets",
                                 "data NULL with bytes", "offsets NULL, n > 0", "n_samples = UINT64_MAX",
                                 "n_samples = 2^60", "n_samples = UINT64_MAX, offsets NULL",
                                 "offsets[n] = UINT64_MAX", "offsets[n] = PTRDIFF_MAX + 1"};

static void op_register(fcase *c)
{
    int v = c->hostile >= 0 ? (int)tc_below(&c->common, RV_COUNT) : -1;
    int retry = (int)tc_below(&c->common, 2), twice = tc_below(&c->common, 4) == 0;
    snprintf(c->desc, sizeof c->desc, "register: %s on rank %d%s%s", v >= 0 ? RV_NAMES[v] : "none", c->hostile,
             retry ? ", retry" : "", twice ? ", twice" : "");
    g_op = "register";
    world w;
    tc_dataset_init(&w.ds, g_size, g_base, g_seed ^ tc_mix64(c->k), 1);
    w.h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &w.h);
    if (!check_collective(c, "mdl_init", st, ex_ok())) {
        if (w.h)
            mdl_finalize(&w.h);
        tc_dataset_free(&w.ds);
        return;
    }
    uint8_t *data;
    uint64_t *off;
    uint64_t n = tc_build_shard(&w.ds, g_rank, &data, &off);
    if (n == UINT64_MAX)
        MPI_Abort(MPI_COMM_WORLD, 2);
    const void *pd = data;
    const uint64_t *po = off;
    uint64_t pn = n;
    uint64_t bad_empty[1] = {3};
    expect e = ex_ok();
    if (v >= 0) {
        /* Variants that need samples or bytes fall back to n_samples = UINT64_MAX on a
           rank whose shard is too small for them (every rank knows every layout). */
        uint64_t hn = tc_n_local(&w.ds, c->hostile);
        int need_bytes = 0;
        for (uint64_t i = 0; i < hn && !need_bytes; i++)
            need_bytes = tc_size_of(&w.ds, w.ds.first[c->hostile] + i) > 0;
        if ((v == RV_OFF0 || v == RV_OFFS_NULL || v == RV_LAST_U64_MAX || v == RV_LAST_PTRDIFF_MAX_1) && hn < 1)
            v = RV_N_U64_MAX;
        if (v == RV_DECREASING && (hn < 2 || tc_size_of(&w.ds, w.ds.first[c->hostile] + 1) == 0))
            v = RV_N_U64_MAX;
        if (v == RV_DATA_NULL && !need_bytes)
            v = RV_N_U64_MAX;
        switch ((enum reg_variant)v) {
        case RV_DATA_NULL:
        case RV_OFFS_NULL: e = ex_local(MDL_ERR_NULL_ARG, MDL_ERR_NULL_ARG); break;
        case RV_N_U64_MAX_OFFS_NULL: e = ex_local(MDL_ERR_INVALID_ARG, MDL_ERR_NULL_ARG); break;
        default: e = ex_local(MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG); break;
        }
        if (c->me) {
            switch ((enum reg_variant)v) {
            case RV_OFF0: off[0] = 1; break;
            case RV_OFF0_EMPTY: po = bad_empty, pn = 0; break;
            case RV_DECREASING: off[1] = off[2] + 1; break;
            case RV_DATA_NULL: pd = NULL; break;
            case RV_OFFS_NULL: po = NULL; break;
            case RV_N_U64_MAX: pn = UINT64_MAX; break;
            case RV_N_2_60: pn = (uint64_t)1 << 60; break;
            case RV_N_U64_MAX_OFFS_NULL: pn = UINT64_MAX, po = NULL; break;
            case RV_LAST_U64_MAX: off[n] = UINT64_MAX; break;
            case RV_LAST_PTRDIFF_MAX_1: off[n] = (uint64_t)PTRDIFF_MAX + 1; break;
            default: break;
            }
        }
    }
    st = mdl_register_shard(w.h, pd, po, pn);
    int registered = check_collective(c, "mdl_register_shard", st, e);
    if (!registered && retry) {
        off[0] = 0;
        for (uint64_t i = 0; i < n; i++)
            off[i + 1] = off[i] + tc_size_of(&w.ds, w.ds.first[g_rank] + i);
        st = mdl_register_shard(w.h, data, off, n);
        registered = check_collective(c, "corrected mdl_register_shard", st, ex_ok());
    }
    if (registered) {
        uint64_t total = 0;
        expect_local(c, "mdl_num_samples", mdl_num_samples(w.h, &total), MDL_OK, MDL_OK);
        EXPECT(c, total == tc_total(&w.ds), "mdl_num_samples = %llu, expected %llu", (unsigned long long)total,
               (unsigned long long)tc_total(&w.ds));
        if (twice)
            check_collective(c, "second mdl_register_shard", mdl_register_shard(w.h, data, off, n),
                             ex_all(MDL_ERR_STATE));
        fuzz_fetch_once(c, &w, -1, NULL);
    } else {
        /* Not registered: fetch refused everywhere, locally. */
        uint64_t o[1];
        check_collective(c, "mdl_fetch_batch before register", mdl_fetch_batch(w.h, NULL, 0, NULL, 0, o),
                         ex_all(MDL_ERR_STATE));
    }
    free(data);
    free(off);
    check_collective(c, "mdl_finalize", mdl_finalize(&w.h), ex_ok());
    EXPECT(c, w.h == NULL, "handle not NULL after mdl_finalize");
    tc_dataset_free(&w.ds);
}

/* ---------- epoch ---------- */

enum epoch_variant {
    EV_PREFETCH_BIG,   /* set_prefetch(> 64) on one rank: refused, not stored */
    EV_BS_ZERO,        /* batch_size 0 on one rank */
    EV_BS_MAX,         /* batch_size UINT64_MAX on one rank (valid alone) */
    EV_SEED,           /* another seed on one rank */
    EV_EPOCH,          /* another epoch number */
    EV_DROP,           /* another drop_last */
    EV_SHUFFLE_NONZERO,/* another nonzero shuffle: the same meaning, so fine */
    EV_NEXT_NULL,      /* a NULL out-pointer of mdl_next_batch on one rank */
    EV_SEEK_PAST,      /* seek past the end on one rank */
    EV_SEEK_OTHER,     /* seek to another valid step on one rank */
    EV_COUNT
};
static const char *EV_NAMES[] = {"set_prefetch(> 64)", "batch_size 0", "batch_size UINT64_MAX",
                                 "another seed", "another epoch", "another drop_last", "shuffle 7 (nonzero)",
                                 "next_batch NULL out-pointer", "seek past the end", "seek to another step"};

typedef struct ep {
    uint64_t total, per_rank, batch, steps;
} ep;

static uint64_t epoch_steps(uint64_t total, uint64_t bs, int drop, uint64_t *per_rank)
{
    uint64_t p = (uint64_t)g_size;
    *per_rank = drop ? total / p : (total + p - 1) / p;
    return bs == 0 ? 0 : *per_rank / bs + (*per_rank % bs != 0);
}

/* One mdl_next_batch on every rank, verified: the same n everywhere, n as the sampler's
   arithmetic says for that step (when known), ids in range, bytes right. Returns the
   agreed n, or -1 if the call failed on every rank. `null_on` is the rank that passes
   a NULL out-pointer (or -1). */
static long long next_step(fcase *c, world *w, uint64_t step, const ep *x, int null_on)
{
    const uint64_t *ids = NULL, *offs = NULL;
    const void *data = NULL;
    size_t n = (size_t)-1;
    mdl_status st;
    int which = (int)tc_below(&c->common, 4);
    if (g_rank == null_on) {
        st = mdl_next_batch(w->h, which == 0 ? NULL : &ids, which == 1 ? NULL : &data, which == 2 ? NULL : &offs,
                            which == 3 ? NULL : &n);
    } else {
        st = mdl_next_batch(w->h, &ids, &data, &offs, &n);
    }
    int all_ok;
    if (null_on >= 0) {
        /* The header: the step is still taken on every rank and MDL_ERR_NULL_ARG
           returned there. Others get MDL_OK (step taken) or, if the library agrees
           on the failure, MDL_ERR_REMOTE: either keeps the ranks in step. */
        if (g_rank == null_on)
            expect_local(c, "mdl_next_batch with a NULL out-pointer", st, MDL_ERR_NULL_ARG, MDL_ERR_NULL_ARG);
        else
            expect_local(c, "mdl_next_batch (another rank passes NULL)", st, MDL_OK, MDL_ERR_REMOTE);
        return -2;
    }
    all_ok = check_collective(c, "mdl_next_batch", st, ex_ok());
    if (!all_ok)
        return -1;
    EXPECT(c, same_everywhere((uint64_t)n), "mdl_next_batch: n differs across ranks at step %llu",
           (unsigned long long)step);
    uint64_t want = 0;
    if (step < x->steps) {
        uint64_t left = x->per_rank - step * x->batch;
        want = left < x->batch ? left : x->batch;
    }
    EXPECT(c, n == want, "mdl_next_batch at step %llu of %llu: n = %zu, expected %llu", (unsigned long long)step,
           (unsigned long long)x->steps, n, (unsigned long long)want);
    if (n > 0 && n == want) {
        if (!ids || !data || !offs) {
            NOTE(c, "mdl_next_batch: NULL ids/data/offsets with n = %zu", n);
        } else if (offs[0] != 0) {
            NOTE(c, "mdl_next_batch: offsets[0] = %llu", (unsigned long long)offs[0]);
        } else {
            for (size_t k = 0; k < n; k++) {
                if (ids[k] >= x->total) {
                    NOTE(c, "mdl_next_batch: id %llu >= %llu", (unsigned long long)ids[k],
                         (unsigned long long)x->total);
                    break;
                }
                uint64_t len = offs[k + 1] - offs[k];
                if (offs[k + 1] < offs[k] ||
                    tc_verify_sample(&w->ds, ids[k], (const uint8_t *)data + offs[k], len) >= 0) {
                    NOTE(c, "mdl_next_batch: sample %zu (id %llu) wrong at step %llu", k,
                         (unsigned long long)ids[k], (unsigned long long)step);
                    break;
                }
            }
        }
    }
    uint64_t mine = (uint64_t)n, most = 0;
    MPI_Allreduce(&mine, &most, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    return (long long)most; /* agreed, so that every rank's loop takes the same turns */
}

/* Whether the case is still good on every rank (collective). */
static int agreed_ok(const fcase *c)
{
    int mine = c->ok, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

static void op_epoch(fcase *c, world *w)
{
    tc_rng *cr = &c->common;
    int v = c->hostile >= 0 ? (int)tc_below(cr, EV_COUNT) : -1;
    ep x;
    x.total = tc_total(&w->ds);
    static const uint64_t bss[] = {1, 2, 3, 7, 16, 32, 100};
    uint64_t bs = tc_below(cr, 8) == 0 ? (tc_below(cr, 2) ? x.total : UINT64_MAX) : bss[tc_below(cr, 7)];
    int shuffle = (int)tc_below(cr, 2), drop = (int)tc_below(cr, 2);
    uint64_t eseed = tc_next(cr), enumber = tc_below(cr, 4) ? tc_below(cr, 100) : tc_next(cr);
    uint32_t depth = tc_below(cr, 2) ? 0 : (uint32_t)(tc_below(cr, 8) ? 1 + tc_below(cr, 3) : tc_below(cr, 65));
    static const uint32_t big_depths[] = {65, 100, 1000, 1u << 20, UINT32_MAX};
    uint32_t big = big_depths[tc_below(cr, 5)];
    if (v == EV_BS_MAX && bs == UINT64_MAX)
        bs = 7;
    x.batch = bs;
    x.steps = epoch_steps(x.total, bs, drop, &x.per_rank);
    uint64_t run = tc_below(cr, (x.steps < 5 ? x.steps : 5) + 1);
    uint64_t seek_to = tc_below(cr, x.steps + 1);
    uint64_t seek_other = (seek_to + 1 + tc_below(cr, x.steps)) % (x.steps + 1);
    uint64_t past = tc_below(cr, 2) ? UINT64_MAX : x.steps + 1 + tc_below(cr, 1000);
    snprintf(c->desc, sizeof c->desc, "epoch: %s on rank %d (batch %llu, shuffle %d, drop %d, prefetch %u, %llu steps)",
             v >= 0 ? EV_NAMES[v] : "none", c->hostile, (unsigned long long)bs, shuffle, drop, depth,
             (unsigned long long)x.steps);
    g_op = "epoch";

    expect_local(c, "mdl_set_prefetch(depth)", mdl_set_prefetch(w->h, depth), MDL_OK, MDL_OK);
    if (v == EV_PREFETCH_BIG && c->me) {
        char what[64];
        snprintf(what, sizeof what, "mdl_set_prefetch(%u)", big);
        expect_local(c, what, mdl_set_prefetch(w->h, big), MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG);
    }
    uint64_t a_seed = eseed, a_epoch = enumber, a_bs = bs;
    int a_shuffle = shuffle, a_drop = drop;
    expect e = ex_ok();
    switch (v) {
    case EV_BS_ZERO: a_bs = 0; e = ex_local(MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG); break;
    case EV_BS_MAX: a_bs = UINT64_MAX; e = ex_mismatch(); break;
    case EV_SEED: a_seed = eseed ^ 1; e = ex_mismatch(); break;
    case EV_EPOCH: a_epoch = enumber + 1; e = ex_mismatch(); break;
    case EV_DROP: a_drop = !drop; e = ex_mismatch(); break;
    case EV_SHUFFLE_NONZERO: if (shuffle) a_shuffle = 7; break;
    default: break;
    }
    if (!c->me) {
        a_seed = eseed, a_epoch = enumber, a_bs = bs, a_shuffle = shuffle, a_drop = drop;
    }
    mdl_status st = mdl_epoch_begin(w->h, a_seed, a_epoch, a_bs, a_shuffle, a_drop);
    int begun = check_collective(c, "mdl_epoch_begin", st, e);
    if (!begun) {
        /* A refused begin leaves the epoch before it as it was: the previous case's,
           ended (next_batch gives n == 0 on every rank), or none (refused locally). */
        const uint64_t *ids, *offs;
        const void *data;
        size_t n = 1;
        mdl_status next = mdl_next_batch(w->h, &ids, &data, &offs, &n);
        if (w->had_epoch) {
            check_collective(c, "mdl_next_batch after a refused begin (previous epoch ended)", next, ex_ok());
            EXPECT(c, next != MDL_OK || n == 0, "the previous, ended epoch gave a batch of %zu", n);
        } else {
            check_collective(c, "mdl_next_batch without an epoch", next, ex_all(MDL_ERR_STATE));
        }
        fuzz_fetch_once(c, w, -1, NULL);
        return;
    }
    w->had_epoch = 1;
    if (g_size == 1 && v == EV_BS_MAX && c->me) {
        /* At one rank the hostile batch size is simply the batch size. */
        x.batch = UINT64_MAX;
        x.steps = epoch_steps(x.total, x.batch, drop, &x.per_rank);
        run = x.steps < run ? x.steps : run;
        seek_to = seek_to > x.steps ? x.steps : seek_to;
        seek_other = seek_other > x.steps ? x.steps : seek_other;
    }
    if (g_size == 1 && v == EV_DROP) {
        x.steps = epoch_steps(x.total, x.batch, !drop, &x.per_rank);
        run = x.steps < run ? x.steps : run;
        seek_to = seek_to > x.steps ? x.steps : seek_to;
        seek_other = seek_other > x.steps ? x.steps : seek_other;
    }
    uint64_t step = 0;
    for (uint64_t i = 0; i < run; i++, step++)
        if (next_step(c, w, step, &x, -1) < 0)
            break;
    /* A fetch during the epoch is refused on every rank, without communication. */
    if (step < x.steps && tc_below(cr, 3) == 0) {
        uint64_t o[1];
        check_collective(c, "mdl_fetch_batch during an epoch", mdl_fetch_batch(w->h, NULL, 0, NULL, 0, o),
                         ex_all(MDL_ERR_STATE));
    }
    if (step < x.steps && depth > 0 && g_thread_multiple && tc_below(cr, 3) == 0)
        expect_local(c, "mdl_set_backend while prefetching", mdl_set_backend(w->h, MDL_BACKEND_AUTO), MDL_ERR_STATE,
                     MDL_ERR_STATE);
    int in_step = agreed_ok(c); /* whether `step` is still the position of every rank */
    switch (v) {
    case EV_NEXT_NULL:
        if (step < x.steps) {
            next_step(c, w, step, &x, c->hostile);
            in_step = 0;
        }
        break;
    case EV_SEEK_PAST: {
        mdl_status s = mdl_epoch_seek(w->h, c->me ? past : seek_to);
        check_collective(c, "mdl_epoch_seek (one rank past the end)", s,
                         ex_local(MDL_ERR_INVALID_ARG, MDL_ERR_INVALID_ARG));
        break; /* a refused seek leaves the epoch where it was */
    }
    case EV_SEEK_OTHER: {
        mdl_status s = mdl_epoch_seek(w->h, c->me ? seek_other : seek_to);
        if (check_collective(c, "mdl_epoch_seek (one rank elsewhere)", s, ex_mismatch()))
            step = g_size == 1 ? seek_other : seek_to; /* one rank: a seek like any other */
        break;
    }
    default:
        if (tc_below(cr, 2)) {
            mdl_status s = mdl_epoch_seek(w->h, seek_to);
            if (check_collective(c, "mdl_epoch_seek", s, ex_ok()))
                step = seek_to;
        }
        break;
    }
    if (in_step && agreed_ok(c))
        for (uint64_t i = 0; i < 3 && step <= x.steps; i++, step++)
            if (next_step(c, w, step, &x, -1) <= 0)
                break;
    /* End the epoch: seek to its end, where next_batch gives n == 0 on every rank. */
    check_collective(c, "mdl_epoch_seek(end)", mdl_epoch_seek(w->h, x.steps), ex_ok());
    if (agreed_ok(c))
        next_step(c, w, x.steps, &x, -1);
    expect_local(c, "mdl_set_prefetch(0)", mdl_set_prefetch(w->h, 0), MDL_OK, MDL_OK);
    fuzz_fetch_once(c, w, -1, NULL);
}

/* ---------- local calls ---------- */

static void op_local(fcase *c, world *w)
{
    tc_rng *r = &c->mine;
    snprintf(c->desc, sizeof c->desc, "local calls");
    g_op = "local";
    uint64_t total = tc_total(&w->ds), x = 12345;
    expect_local(c, "mdl_num_samples", mdl_num_samples(w->h, &x), MDL_OK, MDL_OK);
    EXPECT(c, x == total, "mdl_num_samples = %llu, expected %llu", (unsigned long long)x, (unsigned long long)total);
    expect_local(c, "mdl_num_samples(h, NULL)", mdl_num_samples(w->h, NULL), MDL_ERR_NULL_ARG, MDL_ERR_NULL_ARG);
    expect_local(c, "mdl_num_samples(NULL, &x)", mdl_num_samples(NULL, &x), MDL_ERR_NULL_ARG, MDL_ERR_NULL_ARG);
    for (int i = 0; i < 8; i++) {
        uint64_t id;
        switch (tc_below(r, 5)) {
        case 0: id = total + tc_below(r, 1000); break;
        case 1: id = UINT64_MAX - tc_below(r, 3); break;
        default: id = tc_below(r, total); break;
        }
        uint64_t sz = 777;
        mdl_status st = mdl_sample_size(w->h, id, &sz);
        if (id < total) {
            expect_local(c, "mdl_sample_size", st, MDL_OK, MDL_OK);
            EXPECT(c, sz == tc_size_of(&w->ds, id), "mdl_sample_size(%llu) = %llu, expected %llu",
                   (unsigned long long)id, (unsigned long long)sz, (unsigned long long)tc_size_of(&w->ds, id));
        } else {
            expect_local(c, "mdl_sample_size(out of range)", st, MDL_ERR_OUT_OF_RANGE, MDL_ERR_OUT_OF_RANGE);
        }
    }
    expect_local(c, "mdl_sample_size(h, 0, NULL)", mdl_sample_size(w->h, 0, NULL), MDL_ERR_NULL_ARG,
                 MDL_ERR_NULL_ARG);
    expect_local(c, "mdl_set_backend(NULL)", mdl_set_backend(NULL, MDL_BACKEND_AUTO), MDL_ERR_NULL_ARG,
                 MDL_ERR_NULL_ARG);
    expect_local(c, "mdl_set_prefetch(NULL)", mdl_set_prefetch(NULL, (uint32_t)tc_next(r)), MDL_ERR_NULL_ARG,
                 MDL_ERR_NULL_ARG);

    /* mdl_stats_json: the full length, then truncated copies with guards. */
    size_t full = mdl_stats_json(w->h, NULL, 0);
    EXPECT(c, full > 2, "mdl_stats_json(h, NULL, 0) = %zu", full);
    EXPECT(c, mdl_stats_json(w->h, NULL, 1 + (size_t)tc_below(r, 100)) == full,
           "mdl_stats_json(h, NULL, len > 0) changed the length");
    EXPECT(c, mdl_stats_json(NULL, NULL, 0) == 0, "mdl_stats_json(NULL, ...) != 0");
    char *text = malloc(full + 1 + GUARD);
    if (!text)
        MPI_Abort(MPI_COMM_WORLD, 2);
    size_t got = mdl_stats_json(w->h, text, full + 1);
    EXPECT(c, got == full && strlen(text) == full && text[0] == '{' && text[full - 1] == '}',
           "mdl_stats_json full copy: returned %zu of %zu, text \"%.60s\"", got, full, text);
    for (int i = 0; i < 4; i++) {
        size_t len;
        switch (tc_below(r, 4)) {
        case 0: len = 1; break;
        case 1: len = 2 + (size_t)tc_below(r, 6); break;
        case 2: len = full; break;
        default: len = 1 + (size_t)tc_below(r, full + 8); break;
        }
        char *b = malloc(len + GUARD);
        if (!b)
            MPI_Abort(MPI_COMM_WORLD, 2);
        memset(b, GUARD_BYTE, len + GUARD);
        size_t n = mdl_stats_json(w->h, b, len);
        size_t copied = len - 1 < full ? len - 1 : full;
        EXPECT(c, n == full, "mdl_stats_json(len %zu) returned %zu, expected %zu", len, n, full);
        EXPECT(c, b[copied] == '\0' && strncmp(b, text, copied) == 0,
               "mdl_stats_json(len %zu): not a NUL-terminated prefix", len);
        for (size_t g = len; g < len + GUARD; g++)
            if ((unsigned char)b[g] != GUARD_BYTE) {
                NOTE(c, "mdl_stats_json(len %zu) wrote byte %zu past len", len, g - len);
                break;
            }
        free(b);
    }
    free(text);

    /* mdl_last_error: make an error, then tiny buffers. */
    uint64_t sz;
    mdl_sample_size(w->h, UINT64_MAX, &sz);
    size_t elen = mdl_last_error(NULL, 0);
    EXPECT(c, elen > 0, "mdl_last_error(NULL, 0) = 0 after an error");
    EXPECT(c, mdl_last_error(NULL, 1 + (size_t)tc_below(r, 64)) == elen, "mdl_last_error(NULL, len) changed the length");
    char eb[8 + GUARD];
    for (int i = 0; i < 3; i++) {
        size_t len = (size_t)tc_below(r, 8);
        memset(eb, GUARD_BYTE, sizeof eb);
        size_t n = mdl_last_error(eb, len);
        EXPECT(c, n == elen, "mdl_last_error(len %zu) = %zu, expected %zu", len, n, elen);
        if (len > 0) {
            size_t copied = len - 1 < elen ? len - 1 : elen;
            EXPECT(c, eb[copied] == '\0', "mdl_last_error(len %zu) not NUL-terminated", len);
        }
        for (size_t g = len; g < sizeof eb; g++)
            if ((unsigned char)eb[g] != GUARD_BYTE) {
                NOTE(c, "mdl_last_error(len %zu) wrote byte %zu past len", len, g - len);
                break;
            }
    }

    /* mdl_status_string of random ints. */
    for (int i = 0; i < 6; i++) {
        int s;
        switch (tc_below(r, 5)) {
        case 0: s = (int)tc_below(r, LAST_STATUS + 2); break;
        case 1: s = INT_MAX - (int)tc_below(r, 2); break;
        case 2: s = INT_MIN + (int)tc_below(r, 2); break;
        case 3: s = -1 - (int)tc_below(r, 100); break;
        default: s = (int)(uint32_t)tc_next(r); break;
        }
        const char *t = mdl_status_string((mdl_status)s);
        if (!t || !t[0]) {
            NOTE(c, "mdl_status_string(%d) is NULL or empty", s);
        } else if (s >= 0 && s <= LAST_STATUS) {
            EXPECT(c, strcmp(t, "unknown status") != 0, "mdl_status_string(%d) = \"unknown status\"", s);
        } else {
            EXPECT(c, strcmp(t, "unknown status") == 0, "mdl_status_string(%d) = \"%s\", expected \"unknown status\"",
                   s, t);
        }
    }
}

/* ---------- the driver ---------- */

enum op { OP_FETCH, OP_BACKEND, OP_REGISTER, OP_EPOCH, OP_LOCAL };

static enum op pick_op(tc_rng *r)
{
    uint64_t x = tc_below(r, 100);
    if (x < 38)
        return OP_FETCH;
    if (x < 50)
        return OP_BACKEND;
    if (x < 60)
        return OP_REGISTER;
    if (x < 82)
        return OP_EPOCH;
    return OP_LOCAL;
}

static void usage(const char *prog)
{
    if (g_rank == 0)
        fprintf(stderr,
                "usage: %s --seed S --cases N [--first K] [--base B] [--case-timeout SEC] [--max-failures M]\n"
                "          [--max-seconds T] [--funneled] [--trace]\n",
                prog);
}

int main(int argc, char **argv)
{
    int provided = 0, funneled = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--funneled"))
            funneled = 1;
    MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
    g_thread_multiple = provided >= MPI_THREAD_MULTIPLE;
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        int has = i + 1 < argc;
        const char *a = argv[i];
        if (!strcmp(a, "--funneled"))
            continue;
        else if (!strcmp(a, "--trace"))
            g_trace = 1;
        else if (!strcmp(a, "--seed") && has && !tc_parse_u64(argv[i + 1], &v))
            g_seed = v, i++;
        else if (!strcmp(a, "--cases") && has && !tc_parse_u64(argv[i + 1], &v))
            g_cases = v, i++;
        else if (!strcmp(a, "--first") && has && !tc_parse_u64(argv[i + 1], &v))
            g_first = v, i++;
        else if (!strcmp(a, "--base") && has && !tc_parse_u64(argv[i + 1], &v) && v > 0)
            g_base = v, i++;
        else if (!strcmp(a, "--case-timeout") && has && !tc_parse_u64(argv[i + 1], &v) && v > 0)
            g_case_timeout = (unsigned)v, i++;
        else if (!strcmp(a, "--max-failures") && has && !tc_parse_u64(argv[i + 1], &v))
            g_max_failures = v, i++;
        else if (!strcmp(a, "--max-seconds") && has && !tc_parse_u64(argv[i + 1], &v))
            g_max_seconds = (double)v, i++;
        else {
            usage(argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    install_handlers();
    if (g_rank == 0) {
        printf("fuzz: %llu cases, seed %llu (first %llu, %d ranks, thread level %s)\n", (unsigned long long)g_cases,
               (unsigned long long)g_seed, (unsigned long long)g_first, g_size,
               g_thread_multiple ? "MULTIPLE" : "below MULTIPLE");
        fflush(stdout);
    }

    world w;
    g_case_no = g_first;
    alarm(g_case_timeout);
    if (open_world(&w, g_seed) != 0) {
        if (g_rank == 0)
            printf("fuzz: opening the shared loader failed\n0 passed, 1 failed\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    alarm(0);
    uint64_t passed = 0, failed = 0, counts[5] = {0};
    double start = MPI_Wtime();
    for (uint64_t k = g_first; k < g_first + g_cases; k++) {
        if (g_max_seconds > 0) {
            /* Rank 0's clock decides for everyone, so that all ranks stop together. */
            int stop = g_rank == 0 && MPI_Wtime() - start > g_max_seconds;
            MPI_Bcast(&stop, 1, MPI_INT, 0, MPI_COMM_WORLD);
            if (stop) {
                if (g_rank == 0)
                    printf("fuzz: time limit of %.0f s reached after %llu cases\n", g_max_seconds,
                           (unsigned long long)(k - g_first));
                break;
            }
        }
        fcase c;
        memset(&c, 0, sizeof c);
        c.k = k;
        c.ok = 1;
        c.common = tc_rng_make(g_seed ^ tc_mix64(k), 0x1000000ull);
        c.mine = tc_rng_make(g_seed ^ tc_mix64(k), (uint64_t)g_rank);
        enum op op = pick_op(&c.common);
        c.hostile = tc_below(&c.common, 4) == 0 ? -1 : (int)tc_below(&c.common, (uint64_t)g_size);
        c.me = c.hostile == g_rank;
        g_case_no = k;
        g_desc = c.desc;
        counts[op]++;
        alarm(g_case_timeout);
        /* Every case starts from the same settings: a backend chosen by the case. */
        mdl_backend b = (mdl_backend)tc_below(&c.common, 3);
        mdl_status st = mdl_set_backend(w.h, b);
        if (st != MDL_OK)
            NOTE(&c, "mdl_set_backend(%d) at the start of the case returned %s", (int)b, sname(st));
        switch (op) {
        case OP_FETCH: op_fetch(&c, &w); break;
        case OP_BACKEND: op_backend(&c, &w); break;
        case OP_REGISTER: op_register(&c); break;
        case OP_EPOCH: op_epoch(&c, &w); break;
        case OP_LOCAL: op_local(&c, &w); break;
        }
        int mine = c.ok, all = 0;
        MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (all) {
            passed++;
        } else {
            failed++;
            if (g_rank == 0) {
                printf("FAIL case %llu: %s (reproduce: --seed %llu --first %llu --cases 1)\n", (unsigned long long)k,
                       c.desc, (unsigned long long)g_seed, (unsigned long long)k);
                fflush(stdout);
            }
            /* Whatever state that left the shared loader in, start again from a new one. */
            close_world(&w);
            if (open_world(&w, g_seed) != 0) {
                if (g_rank == 0)
                    printf("fuzz: reopening the shared loader failed after case %llu\n", (unsigned long long)k);
                alarm(0);
                break;
            }
        }
        if (g_trace && g_rank == 0) {
            printf("%s case %llu: %s\n", all ? "ok  " : "FAIL", (unsigned long long)k, c.desc);
            fflush(stdout);
        }
        alarm(0);
        if (failed >= g_max_failures && g_max_failures > 0) {
            if (g_rank == 0)
                printf("fuzz: stopping after %llu failures\n", (unsigned long long)failed);
            break;
        }
    }
    g_op = "finalize";
    g_desc = "";
    alarm(g_case_timeout);
    close_world(&w);
    if (g_rank == 0) {
        printf("fuzz: ops fetch %llu, backend %llu, register %llu, epoch %llu, local %llu\n",
               (unsigned long long)counts[0], (unsigned long long)counts[1], (unsigned long long)counts[2],
               (unsigned long long)counts[3], (unsigned long long)counts[4]);
        printf("%llu passed, %llu failed\n", (unsigned long long)passed, (unsigned long long)failed);
        fflush(stdout);
    }
    MPI_Finalize();
    return failed ? 1 : 0;
}
