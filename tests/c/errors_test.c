/*
 * errors_test: every bad input is reported, agreed on, and survivable.
 *
 * Collective calls (mdl_register_shard, mdl_fetch_batch) get a bad argument on ONE rank
 * (the last, sometimes rank 0 or two ranks) while the others call correctly. The
 * contract: the faulty rank returns its own code, every other rank MDL_ERR_REMOTE,
 * nobody hangs, and the handle keeps working: after each case all ranks do a correct
 * fetch and verify it byte by byte. Local calls (status strings, last-error text,
 * NULL handles, invalid enum values, finalize of NULL) are checked on every rank.
 *
 * Each case prints "PASS name" / "FAIL name" on rank 0 (agreed over all ranks);
 * why a rank failed goes to stderr. A per-case watchdog (SIGALRM) turns a hang into a
 * clear "TIMEOUT in case X" and exit code 3, so a hang names its case.
 *
 * Usage: errors_test [--seed S] [--base N] [--case-timeout SECONDS] [--model | --split-fails DOING]
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "mdloader.h"

static int g_rank, g_size, g_last;
static const char *volatile g_case = "startup";
static unsigned g_case_timeout = 120;
static int g_passed, g_failed, g_skipped;
static uint64_t g_seed = 7, g_base = 300;
static tc_rng g_rng;

/* ---------- watchdog ---------- */

static void on_alarm(int sig)
{
    (void)sig;
    /* Only async-signal-safe calls; the whole line in one write() so that ranks do not
       interleave: "[rank N] TIMEOUT in case NAME". */
    char line[512], digits[12];
    size_t k = 0;
    int r = g_rank, n = 0;
    do {
        digits[n++] = (char)('0' + r % 10);
        r /= 10;
    } while (r && n < 11);
    for (const char *p = "[rank "; *p; p++)
        line[k++] = *p;
    while (n)
        line[k++] = digits[--n];
    for (const char *p = "] TIMEOUT in case "; *p; p++)
        line[k++] = *p;
    for (const char *p = g_case; *p && k < sizeof line - 2; p++)
        line[k++] = *p;
    line[k++] = '\n';
    ssize_t ignored = write(2, line, k);
    (void)ignored;
    _exit(3);
}

static void watchdog_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
}

/* ---------- case bookkeeping ---------- */

typedef struct cres {
    int ok;
} cres;

static void case_begin(const char *name, cres *r)
{
    g_case = name;
    r->ok = 1;
    alarm(g_case_timeout);
}

/* Agrees on the case result over all ranks; rank 0 prints the line. */
static void case_end(const char *name, cres *r)
{
    int loc = r->ok, glob = 0;
    MPI_Allreduce(&loc, &glob, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    alarm(0);
    if (glob)
        g_passed++;
    else
        g_failed++;
    if (g_rank == 0) {
        printf("%s %s\n", glob ? "PASS" : "FAIL", name);
        fflush(stdout);
    }
}

static void case_skip(const char *name, const char *why)
{
    g_skipped++;
    if (g_rank == 0) {
        printf("SKIP %s (%s)\n", name, why);
        fflush(stdout);
    }
}

/* case_begin for a case that needs a second rank; skipped (returns 0) on one rank. */
static int case_begin_with_peers(const char *name, cres *r)
{
    if (g_size < 2) {
        case_skip(name, "needs 2 ranks");
        return 0;
    }
    case_begin(name, r);
    return 1;
}

static const char *sname(mdl_status s)
{
    const char *t = mdl_status_string(s);
    return t ? t : "(null)";
}

/* One fprintf per message so that lines from different ranks do not interleave. */
#define NOTE(r, ...)                                                                     \
    do {                                                                                 \
        char msg_[1024];                                                                 \
        (r)->ok = 0;                                                                     \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                        \
        fprintf(stderr, "[rank %d] %s: %s\n", g_rank, g_case, msg_);                     \
    } while (0)

#define EXPECT(r, cond, ...)                                                             \
    do {                                                                                 \
        if (!(cond))                                                                     \
            NOTE(r, __VA_ARGS__);                                                        \
    } while (0)

static void expect_code(cres *r, const char *what, mdl_status got, mdl_status want)
{
    if (got != want) {
        char msg[512] = "";
        mdl_last_error(msg, sizeof msg);
        NOTE(r, "%s returned %d (%s), expected %d (%s); last error: \"%s\"", what, (int)got,
             sname(got), (int)want, sname(want), msg);
    }
}

/* After an error the calling thread's last-error text must say something. */
static void expect_last_error(cres *r, const char *what)
{
    char msg[512] = "";
    size_t n = mdl_last_error(msg, sizeof msg);
    EXPECT(r, n > 0 && msg[0] != '\0', "%s: mdl_last_error is empty after an error", what);
}

/* ---------- helpers for loaders ---------- */

typedef struct world {
    mdl_loader *h;
    tc_dataset ds;
} world;

/* mdl_init + register of the standard dataset; 0 on success. Collective. */
static int open_world(world *w, uint64_t seed)
{
    w->h = NULL;
    tc_dataset_init(&w->ds, g_size, g_base, seed, 1);
    if (mdl_init(MPI_COMM_WORLD, &w->h) != MDL_OK)
        return -1;
    uint8_t *data;
    uint64_t *off;
    uint64_t n = tc_build_shard(&w->ds, g_rank, &data, &off);
    mdl_status st = mdl_register_shard(w->h, data, off, n);
    free(data);
    free(off);
    return st == MDL_OK ? 0 : -1;
}

static void close_world(world *w, cres *r)
{
    mdl_status st = mdl_finalize(&w->h);
    if (r)
        expect_code(r, "mdl_finalize", st, MDL_OK);
    tc_dataset_free(&w->ds);
}

/* A random id with a nonzero size, so "buffer too small" is always possible. */
static uint64_t nonempty_id(const tc_dataset *ds)
{
    uint64_t total = tc_total(ds);
    for (;;) {
        uint64_t g = tc_below(&g_rng, total);
        if (tc_size_of(ds, g) > 0)
            return g;
    }
}

/* Collective: a correct random fetch on every rank, verified byte by byte. Proves the
   handle survived whatever error came before. */
static void recovery_fetch(world *w, cres *r, const char *after)
{
    size_t n = 1 + (size_t)tc_below(&g_rng, 24);
    uint64_t ids[32], offs[33];
    for (size_t i = 0; i < n; i++)
        ids[i] = tc_below(&g_rng, 4) ? tc_below(&g_rng, tc_total(&w->ds)) : nonempty_id(&w->ds);
    uint64_t need = tc_batch_bytes(&w->ds, ids, n);
    uint8_t *buf = malloc(need + 1);
    mdl_status st = mdl_fetch_batch(w->h, ids, n, buf, need, offs);
    if (st != MDL_OK) {
        char msg[512] = "";
        mdl_last_error(msg, sizeof msg);
        NOTE(r, "recovery fetch after %s returned %s (%s)", after, sname(st), msg);
    } else {
        for (size_t k = 0; k < n; k++) {
            if (offs[k + 1] - offs[k] != tc_size_of(&w->ds, ids[k]) ||
                tc_verify_sample(&w->ds, ids[k], buf + offs[k], offs[k + 1] - offs[k]) >= 0) {
                NOTE(r, "recovery fetch after %s: sample %zu (id %llu) wrong", after, k,
                     (unsigned long long)ids[k]);
                break;
            }
        }
    }
    free(buf);
}

/* ---------- local API cases ---------- */

/* Must run before any library call fails on this thread. */
static void case_last_error_initially_empty(void)
{
    cres r;
    const char *name = "api/mdl_last_error is 0 before any failure";
    case_begin(name, &r);
    char buf[8] = "junk";
    size_t n = mdl_last_error(buf, sizeof buf);
    EXPECT(&r, n == 0, "mdl_last_error returned %zu before any failing call", n);
    EXPECT(&r, buf[0] == '\0', "buffer not set to the empty string");
    case_end(name, &r);
}

static void case_status_strings(void)
{
    cres r;
    case_begin("api/mdl_status_string every code", &r);
    const char *s[10];
    for (int i = 0; i <= 9; i++) {
        s[i] = mdl_status_string((mdl_status)i);
        EXPECT(&r, s[i] && s[i][0], "mdl_status_string(%d) is NULL or empty", i);
    }
    for (int i = 0; i <= 9; i++)
        for (int j = i + 1; j <= 9; j++)
            if (s[i] && s[j])
                EXPECT(&r, strcmp(s[i], s[j]) != 0, "codes %d and %d share the text \"%s\"", i, j, s[i]);
    const char *u = mdl_status_string((mdl_status)42);
    EXPECT(&r, u != NULL, "mdl_status_string(42) returned NULL (unknown codes need text too)");
    if (g_rank == 0)
        for (int i = 0; i <= 9; i++)
            printf("      %d = %s\n", i, s[i] ? s[i] : "(null)");
    case_end("api/mdl_status_string every code", &r);
}

static void case_finalize_null(void)
{
    cres r;
    case_begin("api/mdl_finalize(NULL) and *h == NULL are no-ops", &r);
    expect_code(&r, "mdl_finalize(NULL)", mdl_finalize(NULL), MDL_OK);
    mdl_loader *h = NULL;
    expect_code(&r, "mdl_finalize(&NULL)", mdl_finalize(&h), MDL_OK);
    case_end("api/mdl_finalize(NULL) and *h == NULL are no-ops", &r);
}

static void case_null_handle(void)
{
    cres r;
    uint64_t x = 0, ids[1] = {0}, offs[2];
    uint8_t buf[8], shard[1] = {0};
    uint64_t soff[2] = {0, 1};
    case_begin("api/NULL handle -> MDL_ERR_NULL_ARG everywhere", &r);
    expect_code(&r, "mdl_num_samples(NULL)", mdl_num_samples(NULL, &x), MDL_ERR_NULL_ARG);
    expect_code(&r, "mdl_sample_size(NULL)", mdl_sample_size(NULL, 0, &x), MDL_ERR_NULL_ARG);
    expect_code(&r, "mdl_set_backend(NULL)", mdl_set_backend(NULL, MDL_BACKEND_AUTO), MDL_ERR_NULL_ARG);
    /* Without a handle there is no communicator to agree on: these are local, every
       rank calls them. */
    expect_code(&r, "mdl_fetch_batch(NULL)", mdl_fetch_batch(NULL, ids, 1, buf, 8, offs), MDL_ERR_NULL_ARG);
    expect_code(&r, "mdl_register_shard(NULL)", mdl_register_shard(NULL, shard, soff, 1), MDL_ERR_NULL_ARG);
    expect_last_error(&r, "after NULL handle");
    case_end("api/NULL handle -> MDL_ERR_NULL_ARG everywhere", &r);
}

static void case_init_null_out(void)
{
    cres r;
    case_begin("api/mdl_init(comm, NULL) -> MDL_ERR_NULL_ARG (all ranks)", &r);
    expect_code(&r, "mdl_init(WORLD, NULL)", mdl_init(MPI_COMM_WORLD, NULL), MDL_ERR_NULL_ARG);
    expect_code(&r, "mdl_init_f(c2f(WORLD), NULL)", mdl_init_f(MPI_Comm_c2f(MPI_COMM_WORLD), NULL),
                MDL_ERR_NULL_ARG);
    case_end("api/mdl_init(comm, NULL) -> MDL_ERR_NULL_ARG (all ranks)", &r);
}

static void case_last_error(world *w)
{
    cres r;
    case_begin("api/mdl_last_error text, truncation, (NULL, 0)", &r);
    uint64_t x;
    mdl_status st = mdl_sample_size(w->h, UINT64_MAX, &x);
    expect_code(&r, "mdl_sample_size(UINT64_MAX)", st, MDL_ERR_OUT_OF_RANGE);
    char full[1024] = "";
    size_t n = mdl_last_error(full, sizeof full);
    EXPECT(&r, n > 0 && full[0], "empty last error after MDL_ERR_OUT_OF_RANGE");
    EXPECT(&r, n < sizeof full ? strlen(full) == n : strlen(full) == sizeof full - 1,
           "returned length %zu but copied %zu chars", n, strlen(full));
    if (n >= 4) {
        char small[4];
        memset(small, 'X', sizeof small);
        size_t n2 = mdl_last_error(small, sizeof small);
        EXPECT(&r, n2 == n, "full length changed with a small buffer: %zu vs %zu", n2, n);
        EXPECT(&r, small[3] == '\0' && strncmp(small, full, 3) == 0,
               "truncated copy not NUL-terminated or not a prefix");
    }
    size_t n3 = mdl_last_error(NULL, 0);
    EXPECT(&r, n3 == n, "mdl_last_error(NULL, 0) returned %zu, expected %zu", n3, n);
    if (g_rank == 0)
        printf("      last error example: \"%s\"\n", full);
    case_end("api/mdl_last_error text, truncation, (NULL, 0)", &r);
}

static void case_sample_size_errors(world *w)
{
    cres r;
    uint64_t x, total = tc_total(&w->ds);
    case_begin("api/mdl_sample_size: id == total, NULL out", &r);
    expect_code(&r, "mdl_sample_size(total)", mdl_sample_size(w->h, total, &x), MDL_ERR_OUT_OF_RANGE);
    expect_code(&r, "mdl_sample_size(0, NULL)", mdl_sample_size(w->h, 0, NULL), MDL_ERR_NULL_ARG);
    expect_code(&r, "mdl_num_samples(h, NULL)", mdl_num_samples(w->h, NULL), MDL_ERR_NULL_ARG);
    case_end("api/mdl_sample_size: id == total, NULL out", &r);
}

static void case_invalid_backend(world *w)
{
    cres r;
    case_begin("api/mdl_set_backend((mdl_backend)7 and -1) -> MDL_ERR_INVALID_ARG, fetch still works", &r);
    expect_code(&r, "set ONESIDED", mdl_set_backend(w->h, MDL_BACKEND_ONESIDED), MDL_OK);
    expect_code(&r, "set (mdl_backend)7", mdl_set_backend(w->h, (mdl_backend)7), MDL_ERR_INVALID_ARG);
    expect_last_error(&r, "invalid backend");
    expect_code(&r, "set (mdl_backend)-1", mdl_set_backend(w->h, (mdl_backend)-1), MDL_ERR_INVALID_ARG);
    /* The rejected value must not have been stored half-way: the next fetch runs with
       the backend set before, the same on every rank. */
    recovery_fetch(w, &r, "invalid backend value");
    expect_code(&r, "set AUTO", mdl_set_backend(w->h, MDL_BACKEND_AUTO), MDL_OK);
    case_end("api/mdl_set_backend((mdl_backend)7 and -1) -> MDL_ERR_INVALID_ARG, fetch still works", &r);
}

/* ---------- state cases ---------- */

static void case_state(void)
{
    cres r;
    mdl_loader *h = NULL;
    uint64_t x, ids[1] = {0}, offs[2];
    uint8_t buf[16];
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);

    case_begin("state/fetch before register (all ranks) -> MDL_ERR_STATE", &r);
    expect_code(&r, "mdl_init", st, MDL_OK);
    if (st == MDL_OK) {
        expect_code(&r, "mdl_fetch_batch(n=1)", mdl_fetch_batch(h, ids, 1, buf, sizeof buf, offs),
                    MDL_ERR_STATE);
        expect_last_error(&r, "fetch before register");
        expect_code(&r, "mdl_fetch_batch(n=0)", mdl_fetch_batch(h, NULL, 0, NULL, 0, offs), MDL_ERR_STATE);
    }
    case_end("state/fetch before register (all ranks) -> MDL_ERR_STATE", &r);

    case_begin("state/num_samples, sample_size before register -> MDL_ERR_STATE", &r);
    if (h) {
        expect_code(&r, "mdl_num_samples", mdl_num_samples(h, &x), MDL_ERR_STATE);
        expect_code(&r, "mdl_sample_size", mdl_sample_size(h, 0, &x), MDL_ERR_STATE);
    }
    case_end("state/num_samples, sample_size before register -> MDL_ERR_STATE", &r);

    case_begin("state/set_backend before register is fine", &r);
    if (h)
        expect_code(&r, "mdl_set_backend(COLLECTIVE)", mdl_set_backend(h, MDL_BACKEND_COLLECTIVE), MDL_OK);
    case_end("state/set_backend before register is fine", &r);

    case_begin("state/finalize of an unregistered loader", &r);
    expect_code(&r, "mdl_finalize", mdl_finalize(&h), MDL_OK);
    EXPECT(&r, h == NULL, "handle not NULL after finalize");
    case_end("state/finalize of an unregistered loader", &r);
}

static void case_register_twice(void)
{
    cres r;
    world w;
    case_begin("state/register twice (all ranks) -> MDL_ERR_STATE, first data kept", &r);
    if (open_world(&w, g_seed + 11) != 0) {
        NOTE(&r, "setup failed");
    } else {
        /* Second registration with different contents: if it were half-applied, the
           recovery fetch (checked against the first dataset) would show it. */
        tc_dataset other;
        tc_dataset_init(&other, g_size, g_base, g_seed + 99, 1);
        uint8_t *data;
        uint64_t *off;
        uint64_t n = tc_build_shard(&other, g_rank, &data, &off);
        expect_code(&r, "second mdl_register_shard", mdl_register_shard(w.h, data, off, n), MDL_ERR_STATE);
        free(data);
        free(off);
        tc_dataset_free(&other);
        recovery_fetch(&w, &r, "register twice");
    }
    close_world(&w, &r);
    case_end("state/register twice (all ranks) -> MDL_ERR_STATE, first data kept", &r);
}

/* ---------- register faults on one rank ---------- */

enum reg_fault { RF_OFF0, RF_DECREASING, RF_NULL_DATA, RF_NULL_OFFSETS };

static void case_register_fault(enum reg_fault f, const char *name, mdl_status want, int retry)
{
    cres r;
    case_begin(name, &r);
    tc_dataset ds;
    tc_dataset_init(&ds, g_size, g_base, g_seed + 21, 1);
    mdl_loader *h = NULL;
    expect_code(&r, "mdl_init", mdl_init(MPI_COMM_WORLD, &h), MDL_OK);
    uint8_t *data;
    uint64_t *off;
    uint64_t n = tc_build_shard(&ds, g_rank, &data, &off);
    const void *pd = data;
    const uint64_t *po = off;
    uint64_t saved[3] = {off[0], n >= 1 ? off[1] : 0, n >= 2 ? off[2] : 0};
    int me = g_rank == g_last;
    if (me) {
        switch (f) {
        case RF_OFF0: off[0] = 1; break;
        case RF_DECREASING: off[1] = off[2] + 1; break; /* off[1] > off[2] */
        case RF_NULL_DATA: pd = NULL; break;
        case RF_NULL_OFFSETS: po = NULL; break;
        }
    }
    mdl_status st = mdl_register_shard(h, pd, po, n);
    expect_code(&r, me ? "faulty rank: mdl_register_shard" : "mdl_register_shard", st,
                me ? want : (g_size > 1 ? MDL_ERR_REMOTE : want));
    if (st != MDL_OK)
        expect_last_error(&r, "register fault");
    if (retry) {
        /* The failed registration was agreed on before anything was committed, so a
           corrected retry must succeed and serve the right data. */
        off[0] = saved[0];
        if (n >= 2) {
            off[1] = saved[1];
            off[2] = saved[2];
        }
        st = mdl_register_shard(h, data, off, n);
        expect_code(&r, "corrected mdl_register_shard", st, MDL_OK);
        if (st == MDL_OK) {
            world w = {h, ds};
            recovery_fetch(&w, &r, "failed register + retry");
        }
    }
    free(data);
    free(off);
    expect_code(&r, "mdl_finalize", mdl_finalize(&h), MDL_OK);
    tc_dataset_free(&ds);
    case_end(name, &r);
}

static void case_register_empty_dataset(void)
{
    cres r;
    const char *name = "register/every shard empty, data NULL (offsets NULL on odd ranks) -> OK, 0 samples, n=0 fetch OK";
    case_begin(name, &r);
    mdl_loader *h = NULL;
    expect_code(&r, "mdl_init", mdl_init(MPI_COMM_WORLD, &h), MDL_OK);
    uint64_t off0[1] = {0}, x = 99, offs[1] = {77};
    /* Odd ranks pass offsets NULL: allowed when n_samples == 0 per the header. */
    expect_code(&r, g_rank % 2 ? "mdl_register_shard(NULL, NULL, 0)" : "mdl_register_shard(NULL, {0}, 0)",
                mdl_register_shard(h, NULL, g_rank % 2 ? NULL : off0, 0), MDL_OK);
    expect_code(&r, "mdl_num_samples", mdl_num_samples(h, &x), MDL_OK);
    EXPECT(&r, x == 0, "mdl_num_samples = %llu, expected 0", (unsigned long long)x);
    expect_code(&r, "mdl_fetch_batch(n=0)", mdl_fetch_batch(h, NULL, 0, NULL, 0, offs), MDL_OK);
    EXPECT(&r, offs[0] == 0, "out_offsets[0] = %llu after empty fetch", (unsigned long long)offs[0]);
    expect_code(&r, "mdl_finalize", mdl_finalize(&h), MDL_OK);
    case_end(name, &r);
}

static void case_register_zero_length_only(void)
{
    cres r;
    const char *name = "register/only zero-length samples, data NULL -> OK, fetch OK";
    case_begin(name, &r);
    mdl_loader *h = NULL;
    expect_code(&r, "mdl_init", mdl_init(MPI_COMM_WORLD, &h), MDL_OK);
    uint64_t off[4] = {0, 0, 0, 0}, x = 0;
    expect_code(&r, "mdl_register_shard", mdl_register_shard(h, NULL, off, 3), MDL_OK);
    expect_code(&r, "mdl_num_samples", mdl_num_samples(h, &x), MDL_OK);
    EXPECT(&r, x == 3u * (uint64_t)g_size, "mdl_num_samples = %llu", (unsigned long long)x);
    uint64_t ids[3] = {0, x - 1, (uint64_t)g_rank * 3 + 1}, offs[4] = {9, 9, 9, 9};
    expect_code(&r, "mdl_fetch_batch of zero-length samples, out NULL", mdl_fetch_batch(h, ids, 3, NULL, 0, offs),
                MDL_OK);
    EXPECT(&r, offs[0] == 0 && offs[1] == 0 && offs[2] == 0 && offs[3] == 0, "out_offsets not all 0");
    expect_code(&r, "mdl_finalize", mdl_finalize(&h), MDL_OK);
    case_end(name, &r);
}

/* ---------- fetch faults ---------- */

enum fault { F_NONE, F_OOR_TOTAL, F_OOR_MAX, F_CAP_SMALL, F_CAP_ZERO, F_NULL_IDS, F_NULL_OUT, F_NULL_OFFS };
static const char *FAULT_NAMES[] = {"none", "id == num_samples", "id == UINT64_MAX", "out_cap = need - 1",
                                    "out_cap = 0 (need > 0)", "ids NULL with n > 0",
                                    "out NULL with out_cap = need > 0", "out_offsets NULL"};

static mdl_status fault_code(enum fault f)
{
    switch (f) {
    case F_NONE: return MDL_OK;
    case F_OOR_TOTAL:
    case F_OOR_MAX: return MDL_ERR_OUT_OF_RANGE;
    case F_CAP_SMALL:
    case F_CAP_ZERO: return MDL_ERR_BUFFER_TOO_SMALL;
    default: return MDL_ERR_NULL_ARG;
    }
}

/* faults[r] is rank r's fault, the same array on every rank. */
static void case_fetch_fault(world *w, const char *name, const enum fault *faults)
{
    cres r;
    case_begin(name, &r);
    enum fault mine = faults[g_rank];
    int anyone = 0;
    for (int i = 0; i < g_size; i++)
        anyone |= faults[i] != F_NONE;
    mdl_status want = mine != F_NONE ? fault_code(mine) : anyone ? MDL_ERR_REMOTE : MDL_OK;

    size_t n = 2 + (size_t)tc_below(&g_rng, 10);
    uint64_t ids[16], offs[17];
    for (size_t i = 0; i < n; i++)
        ids[i] = nonempty_id(&w->ds); /* need > 0, so every capacity fault applies */
    uint64_t need = tc_batch_bytes(&w->ds, ids, n), cap = need;
    uint8_t *buf = malloc(need);
    const uint64_t *pids = ids;
    void *pout = buf;
    uint64_t *poffs = offs;
    switch (mine) {
    case F_OOR_TOTAL: ids[n / 2] = tc_total(&w->ds); break;
    case F_OOR_MAX: ids[n - 1] = UINT64_MAX; break;
    case F_CAP_SMALL: cap = need - 1; break;
    case F_CAP_ZERO: cap = 0; break;
    case F_NULL_IDS: pids = NULL; break;
    case F_NULL_OUT: pout = NULL; break;
    case F_NULL_OFFS: poffs = NULL; break;
    case F_NONE: break;
    }
    for (size_t k = 0; k <= n; k++)
        offs[k] = UINT64_MAX;
    mdl_status st = mdl_fetch_batch(w->h, pids, n, pout, cap, poffs);
    expect_code(&r, mine != F_NONE ? "faulty rank: mdl_fetch_batch" : "mdl_fetch_batch", st, want);
    if (mine == F_CAP_SMALL || mine == F_CAP_ZERO) {
        EXPECT(&r, offs[n] == need, "out_offsets[n] = %llu, expected the needed size %llu",
               (unsigned long long)offs[n], (unsigned long long)need);
        /* The header says out_offsets is filled, so a caller can size and reuse it. */
        int filled = offs[0] == 0;
        for (size_t k = 0; k < n && filled; k++)
            filled = offs[k + 1] - offs[k] == tc_size_of(&w->ds, ids[k]);
        EXPECT(&r, filled, "out_offsets not filled with the sample boundaries on MDL_ERR_BUFFER_TOO_SMALL");
    }
    if (st != MDL_OK)
        expect_last_error(&r, FAULT_NAMES[mine]);
    free(buf);
    recovery_fetch(w, &r, name);
    case_end(name, &r);
}

static void fetch_fault_suite(world *w, mdl_backend b, const char *bname)
{
    char name[256];
    enum fault *faults = calloc((size_t)g_size, sizeof *faults); /* all F_NONE */
    if (!faults)
        MPI_Abort(MPI_COMM_WORLD, 2);
    mdl_set_backend(w->h, b); /* every rank sets the same */

    for (enum fault f = F_OOR_TOTAL; f <= F_NULL_OFFS; f++) {
        faults[g_last] = f;
        snprintf(name, sizeof name, "fetch/%s/%s on rank %d", bname, FAULT_NAMES[f], g_last);
        case_fetch_fault(w, name, faults);
        faults[g_last] = F_NONE;
    }
    if (g_size >= 2) {
        faults[0] = F_OOR_TOTAL;
        snprintf(name, sizeof name, "fetch/%s/%s on rank 0", bname, FAULT_NAMES[F_OOR_TOTAL]);
        case_fetch_fault(w, name, faults);
        faults[g_last] = F_NULL_IDS;
        snprintf(name, sizeof name, "fetch/%s/two faulty ranks (0: out of range, %d: ids NULL)", bname, g_last);
        case_fetch_fault(w, name, faults);
        faults[0] = faults[g_last] = F_NONE;
    }
    for (int i = 0; i < g_size; i++)
        faults[i] = F_OOR_TOTAL;
    snprintf(name, sizeof name, "fetch/%s/every rank out of range", bname);
    case_fetch_fault(w, name, faults);
    for (int i = 0; i < g_size; i++)
        faults[i] = F_NONE;
    snprintf(name, sizeof name, "fetch/%s/no fault (control)", bname);
    case_fetch_fault(w, name, faults);
    free(faults);
}

/* ---------- backend mismatch ---------- */

static void case_backend_mismatch(world *w, mdl_backend others, mdl_backend last, const char *name)
{
    cres r;
    if (!case_begin_with_peers(name, &r))
        return;
    expect_code(&r, "mdl_set_backend", mdl_set_backend(w->h, g_rank == g_last ? last : others), MDL_OK);
    uint64_t ids[4], offs[5];
    for (int i = 0; i < 4; i++)
        ids[i] = tc_below(&g_rng, tc_total(&w->ds));
    uint64_t need = tc_batch_bytes(&w->ds, ids, 4);
    uint8_t *buf = malloc(need + 1);
    mdl_status st = mdl_fetch_batch(w->h, ids, 4, buf, need, offs);
    /* Which rank is "at fault" is a matter of opinion; what matters is that nobody
       proceeds as if all was well and nobody hangs. */
    /* The header promises MDL_ERR_INVALID_ARG on every rank: no single rank is "the"
       faulty one, so nobody gets MDL_ERR_REMOTE. */
    expect_code(&r, "mdl_fetch_batch with mismatched backends", st, MDL_ERR_INVALID_ARG);
    if (st != MDL_OK)
        expect_last_error(&r, "backend mismatch");
    if (g_rank == 0) {
        printf("      rank 0 got %s\n", sname(st));
        fflush(stdout);
    }
    free(buf);
    expect_code(&r, "mdl_set_backend (agree again)", mdl_set_backend(w->h, others), MDL_OK);
    recovery_fetch(w, &r, name);
    expect_code(&r, "mdl_set_backend(AUTO)", mdl_set_backend(w->h, MDL_BACKEND_AUTO), MDL_OK);
    case_end(name, &r);
}

/* ---------- init with a null communicator (last: an MPI error handler could abort) ---------- */

static void case_init_comm_null(void)
{
    cres r;
    const char *name = "init/mdl_init(MPI_COMM_NULL) and mdl_init_f(c2f(MPI_COMM_NULL)) -> error, no abort";
    case_begin(name, &r);
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_NULL, &h);
    EXPECT(&r, st != MDL_OK && h == NULL, "mdl_init(MPI_COMM_NULL) returned %s", sname(st));
    if (st == MDL_OK)
        mdl_finalize(&h);
    h = NULL;
    st = mdl_init_f(MPI_Comm_c2f(MPI_COMM_NULL), &h);
    EXPECT(&r, st != MDL_OK && h == NULL, "mdl_init_f(c2f(MPI_COMM_NULL)) returned %s", sname(st));
    if (st == MDL_OK)
        mdl_finalize(&h);
    if (g_rank == 0)
        printf("      got %s\n", sname(st));
    case_end(name, &r);
}

/* ---------- one rank's engine model differs: every step refused everywhere ---------- */

static void case_model_fingerprint(void)
{
    const char *name = "model/one rank's cost model perturbed -> every fetch and sampler step MDL_ERR_STATE everywhere";
    cres r;
    if (!case_begin_with_peers(name, &r))
        return;
    enum { SAMPLES = 8, BYTES = 16 };
    static uint8_t data[SAMPLES * BYTES], out[4 * SAMPLES * BYTES];
    uint64_t offsets[SAMPLES + 1], out_offsets[SAMPLES + 1];
    for (int i = 0; i <= SAMPLES; i++)
        offsets[i] = (uint64_t)i * BYTES;
    /* The test hook: one parameter of the last rank's model one ulp off (a rank that
       computed differently). */
    if (g_rank == g_last)
        setenv("MDL_TEST_PERTURB_MODEL", "1", 1);
    mdl_loader *h = NULL;
    expect_code(&r, "mdl_init", mdl_init(MPI_COMM_WORLD, &h), MDL_OK);
    expect_code(&r, "mdl_register_shard", mdl_register_shard(h, data, offsets, SAMPLES), MDL_OK);
    unsetenv("MDL_TEST_PERTURB_MODEL");
    uint64_t ids[SAMPLES];
    for (int i = 0; i < SAMPLES; i++)
        ids[i] = (uint64_t)((g_rank + 1) % g_size) * SAMPLES + (uint64_t)i; /* a neighbour's */
    for (int attempt = 0; attempt < 2; attempt++)
        expect_code(&r, "mdl_fetch_batch", mdl_fetch_batch(h, ids, SAMPLES, out, sizeof out, out_offsets),
                    MDL_ERR_STATE);
    expect_code(&r, "mdl_epoch_begin", mdl_epoch_begin(h, 1, 0, 4, 1, 0), MDL_OK);
    const uint64_t *bids, *boffs;
    const void *bdata;
    size_t n = 0;
    expect_code(&r, "mdl_next_batch", mdl_next_batch(h, &bids, &bdata, &boffs, &n), MDL_ERR_STATE);
    expect_code(&r, "mdl_finalize", mdl_finalize(&h), MDL_OK);
    EXPECT(&r, h == NULL, "mdl_finalize left a handle");
    case_end(name, &r);
}

/* ---------- one of registration's communicator splits, failing on one rank ---------- */

/* The runner preloads tests/c/shims/failing_split.c, set to fail the last rank's split
   of one of registration's communicators after the split completed: the others hold a
   communicator it lacks. Registration must fail on every rank (it left them in the new
   communicator's first collective for ever), every rank's error naming `doing` (what
   registration split for), and a second registration succeed. */
static void case_split_fails(const char *doing)
{
    static char name[256]; /* the watchdog names the case */
    snprintf(name, sizeof name, "register/the split for \"%s\" failing on the last rank -> MPI there, REMOTE elsewhere, then a retry",
             doing);
    cres r;
    if (!case_begin_with_peers(name, &r))
        return;
    world w;
    mdl_loader *h = NULL;
    tc_dataset_init(&w.ds, g_size, g_base, g_seed, 1);
    expect_code(&r, "mdl_init", mdl_init(MPI_COMM_WORLD, &h), MDL_OK);
    uint8_t *data;
    uint64_t *off;
    uint64_t n = tc_build_shard(&w.ds, g_rank, &data, &off);
    int me = g_rank == g_last;
    mdl_status st = mdl_register_shard(h, data, off, n);
    expect_code(&r, me ? "faulty rank: mdl_register_shard" : "mdl_register_shard", st, me ? MDL_ERR_MPI : MDL_ERR_REMOTE);
    char msg[512] = "";
    mdl_last_error(msg, sizeof msg);
    /* The split that failed is the one meant, not another of registration's. */
    EXPECT(&r, strstr(msg, doing) && (!me || strstr(msg, "MPI_Comm_split")),
           "the error names what the split was for (and on the faulty rank, the call): %s", msg);
    st = mdl_register_shard(h, data, off, n);
    expect_code(&r, "mdl_register_shard again", st, MDL_OK);
    if (st == MDL_OK) {
        w.h = h;
        recovery_fetch(&w, &r, "a failed node split");
    }
    free(data);
    free(off);
    expect_code(&r, "mdl_finalize", mdl_finalize(&h), MDL_OK);
    tc_dataset_free(&w.ds);
    case_end(name, &r);
}

/* ---------- init with an intercommunicator: refused on every rank ---------- */

static void case_init_intercomm(void)
{
    const char *name = "init/mdl_init and mdl_init_replicated of an intercommunicator -> INVALID_ARG everywhere";
    cres r;
    if (!case_begin_with_peers(name, &r))
        return;
    /* Even and odd ranks, joined by an intercommunicator (leaders: world ranks 0 and 1). */
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, g_rank % 2 ? 0 : 1, 77, &inter);
    mdl_loader *h = NULL;
    expect_code(&r, "mdl_init(intercommunicator)", mdl_init(inter, &h), MDL_ERR_INVALID_ARG);
    EXPECT(&r, h == NULL, "mdl_init(intercommunicator) left a handle");
    expect_code(&r, "mdl_init_replicated(intercommunicator, 1)", mdl_init_replicated(inter, 1, &h), MDL_ERR_INVALID_ARG);
    EXPECT(&r, h == NULL, "mdl_init_replicated(intercommunicator) left a handle");
    if (h)
        mdl_finalize(&h);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    case_end(name, &r);
}

/* Every case the product library can run: the model case needs a test hook. */
static void every_case_but_the_model(void)
{
    case_last_error_initially_empty();
    case_status_strings();
    case_finalize_null();
    case_null_handle();
    case_init_null_out();
    case_state();
    case_register_twice();
    case_register_fault(RF_OFF0, "register/offsets[0] != 0 on last rank", MDL_ERR_INVALID_ARG, 0);
    case_register_fault(RF_DECREASING, "register/decreasing offsets on last rank", MDL_ERR_INVALID_ARG, 0);
    case_register_fault(RF_NULL_DATA, "register/data NULL with bytes > 0 on last rank", MDL_ERR_NULL_ARG, 0);
    case_register_fault(RF_NULL_OFFSETS, "register/offsets NULL on last rank", MDL_ERR_NULL_ARG, 0);
    case_register_fault(RF_DECREASING, "register/retry after a failed register", MDL_ERR_INVALID_ARG, 1);
    case_register_empty_dataset();
    case_register_zero_length_only();

    world w;
    cres setup;
    case_begin("setup/open the shared loader", &setup);
    if (open_world(&w, g_seed) != 0)
        NOTE(&setup, "mdl_init/mdl_register_shard failed");
    case_end("setup/open the shared loader", &setup);
    if (setup.ok) {
        case_last_error(&w);
        case_sample_size_errors(&w);
        case_invalid_backend(&w);
        fetch_fault_suite(&w, MDL_BACKEND_ONESIDED, "onesided");
        fetch_fault_suite(&w, MDL_BACKEND_COLLECTIVE, "collective");
        fetch_fault_suite(&w, MDL_BACKEND_AUTO, "auto");
        case_backend_mismatch(&w, MDL_BACKEND_ONESIDED, MDL_BACKEND_COLLECTIVE,
                              "backend/mismatch onesided vs collective on last rank");
        case_backend_mismatch(&w, MDL_BACKEND_AUTO, MDL_BACKEND_ONESIDED,
                              "backend/mismatch auto vs onesided on last rank");
        case_backend_mismatch(&w, MDL_BACKEND_COLLECTIVE, MDL_BACKEND_AUTO,
                              "backend/mismatch collective vs auto on last rank");
        cres fin;
        case_begin("setup/finalize the shared loader", &fin);
        close_world(&w, &fin);
        EXPECT(&fin, w.h == NULL, "handle not NULL after finalize");
        case_end("setup/finalize the shared loader", &fin);
    }
    case_init_intercomm();
    case_init_comm_null();
}

int main(int argc, char **argv)
{
    int provided = 0, model_only = 0;
    const char *split_fails = NULL;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_last = g_size - 1;
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--seed") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v))
            g_seed = v, i++;
        else if (!strcmp(argv[i], "--base") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v) && v > 0)
            g_base = v, i++;
        else if (!strcmp(argv[i], "--case-timeout") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v))
            g_case_timeout = (unsigned)v, i++;
        else if (!strcmp(argv[i], "--model"))
            model_only = 1;
        else if (!strcmp(argv[i], "--split-fails") && i + 1 < argc)
            split_fails = argv[++i];
        else {
            if (g_rank == 0)
                fprintf(stderr, "usage: %s [--seed S] [--base N] [--case-timeout SECONDS] [--model | --split-fails DOING]\n",
                        argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    /* One stream per rank: batch sizes and ids differ between ranks, as in real use. */
    g_rng = tc_rng_make(g_seed, (uint64_t)g_rank);
    watchdog_install();
    if (g_rank == 0) {
        printf("errors_test: %d ranks, faulty rank %d, seed %llu\n", g_size, g_last,
               (unsigned long long)g_seed);
        fflush(stdout);
    }

    if (model_only)
        case_model_fingerprint(); /* needs the test-hooks library (tests/run_fault_tests.sh) */
    else if (split_fails)
        case_split_fails(split_fails); /* needs tests/c/shims/failing_split.c preloaded */
    else
        every_case_but_the_model();

    if (g_rank == 0) {
        printf("errors_test: %d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
        fflush(stdout);
    }
    alarm(g_case_timeout);
    g_case = "MPI_Finalize";
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
