/*
 * hardening_test: the promises of docs/hardening.md (issue #9), one case each.
 *
 *  - settings/   every agreed setting of the table, set differently on one rank, makes
 *                mdl_init fail with MDL_ERR_INVALID_ARG on EVERY rank (the message names
 *                the variable, *h stays NULL); an invalid value on one rank is that
 *                rank's MDL_ERR_INVALID_ARG and MDL_ERR_REMOTE elsewhere, the remote
 *                message naming the rank and "MDL_ERR_INVALID_ARG". After each, a clean
 *                mdl_init on every rank works.
 *  - calibration/ MDL_CALIBRATION=<file>: the same parameters everywhere register fine,
 *                different ones are MDL_ERR_INVALID_ARG on every rank.
 *  - boundary/   impossible lengths (n = SIZE_MAX, n * 8 wrapping, out_cap above
 *                PTRDIFF_MAX, n_samples = UINT64_MAX) are MDL_ERR_INVALID_ARG, agreed,
 *                never a crash; mdl_set_prefetch above MDL_MAX_PREFETCH is refused.
 *  - state/      mdl_register_shard during an epoch: MDL_ERR_STATE on every rank.
 *  - errors/     remote messages name the failing rank and its status; no message has
 *                a doubled "mdl_x: mdl_x:" prefix.
 *  - onesided/   a one-sided fetch of 1,000,000 ids (gets in flight are bounded).
 *  - threads/    two threads on one handle: MDL_OK or MDL_ERR_STATE, never a crash; the
 *                local calls never wait for a prefetch thread stuck in a step.
 *  - init/       mdl_init_f with an invalid Fortran handle is an error, not an abort.
 *  - timeout/    MDL_TIMEOUT (only with --only timeout: it leaves MPI requests pending).
 *
 * Settings that differ per rank are made here with setenv() before mdl_init on selected
 * ranks and restored after (the library reads them at mdl_init).
 *
 * Each case prints "PASS name" / "FAIL name" / "SKIP name (why)" on rank 0 (agreed over
 * all ranks); why a rank failed goes to stderr. A per-case watchdog (SIGALRM) turns a
 * hang into "TIMEOUT in case X" and exit code 3. The address space is limited (current
 * size + 2 GiB) so that a runaway allocation fails instead of waking the OOM killer.
 *
 * Usage: hardening_test [--seed S] [--case-timeout SECONDS] [--only PREFIX[|PREFIX...]]
 *                       [--list] [--no-rlimit]
 *   --only 'settings/|boundary/'   runs the cases whose name starts with one of them
 *                                  (timeout/ runs only when named here);
 *   --list                         prints the case names and runs nothing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "mdloader.h"

#ifndef MDL_MAX_PREFETCH
#define MDL_MAX_PREFETCH 64
#endif

static int g_rank, g_size, g_last, g_provided;
static const char *volatile g_case = "startup";
static unsigned g_case_timeout = 60;
static int g_passed, g_failed, g_skipped, g_doubled;
static uint64_t g_seed = 11, g_base = 200;
static tc_rng g_rng;
static const char *g_only; /* '|'-separated name prefixes, or NULL for all */
static int g_list;         /* --list: print the names of the cases, run none */

/* ---------- watchdog ---------- */

static void on_alarm(int sig)
{
    (void)sig;
    char line[512];
    size_t k = 0;
    tc_sig_puts(line, &k, sizeof line, "[rank ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)g_rank);
    tc_sig_puts(line, &k, sizeof line, "] TIMEOUT in case ");
    tc_sig_puts(line, &k, sizeof line, g_case);
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

static int selected(const char *name)
{
    if (g_list) {
        if (g_rank == 0)
            printf("%s\n", name);
        return 0;
    }
    if (!g_only)
        return strncmp(name, "timeout/", 8) != 0; /* opt-in only */
    const char *p = g_only;
    while (*p) {
        const char *e = strchr(p, '|');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n && strncmp(name, p, n) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

static void case_begin(const char *name, cres *r)
{
    g_case = name;
    r->ok = 1;
    alarm(g_case_timeout);
}

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

static const char *sname(mdl_status s)
{
    const char *t = mdl_status_string(s);
    return t ? t : "(null)";
}

#define NOTE(r, ...)                                                                     \
    do {                                                                                 \
        char msg_[1536];                                                                 \
        (r)->ok = 0;                                                                     \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                        \
        fprintf(stderr, "[rank %d] %s: %s\n", g_rank, g_case, msg_);                     \
    } while (0)

#define EXPECT(r, cond, ...)                                                             \
    do {                                                                                 \
        if (!(cond))                                                                     \
            NOTE(r, __VA_ARGS__);                                                        \
    } while (0)

/* "mdl_x: mdl_x:" anywhere in msg (a prefix added twice). */
static int doubled_prefix(const char *msg)
{
    for (const char *p = strstr(msg, "mdl_"); p; p = strstr(p + 1, "mdl_")) {
        size_t n = 0;
        while (p[n] && (p[n] == '_' || (p[n] >= 'a' && p[n] <= 'z') || (p[n] >= '0' && p[n] <= '9')))
            n++;
        if (p[n] == ':' && p[n + 1] == ' ' && strncmp(p + n + 2, p, n) == 0 && p[n + 2 + n] == ':')
            return 1;
    }
    return 0;
}

/* The calling thread's last error; every message read goes through the doubled-prefix
   check, whose count a final case reports. */
static const char *last_error(char *buf, size_t len)
{
    buf[0] = '\0';
    mdl_last_error(buf, len);
    if (doubled_prefix(buf)) {
        g_doubled++;
        fprintf(stderr, "[rank %d] %s: doubled prefix in \"%s\"\n", g_rank, g_case, buf);
    }
    return buf;
}

static void expect_code(cres *r, const char *what, mdl_status got, mdl_status want)
{
    if (got != want) {
        char msg[1024];
        NOTE(r, "%s returned %d (%s), expected %d (%s); last error: \"%s\"", what, (int)got, sname(got),
             (int)want, sname(want), got != MDL_OK ? last_error(msg, sizeof msg) : "");
    }
}

/* "rank K" followed by a non-digit. */
static int names_rank(const char *msg, int k)
{
    char pat[32];
    snprintf(pat, sizeof pat, "rank %d", k);
    size_t n = strlen(pat);
    for (const char *p = strstr(msg, pat); p; p = strstr(p + 1, pat))
        if (p[n] < '0' || p[n] > '9')
            return 1;
    return 0;
}

/* The remote side of an agreed failure: MDL_ERR_REMOTE naming rank k and its status. */
static void expect_remote(cres *r, const char *what, mdl_status got, int k, const char *status_name)
{
    expect_code(r, what, got, MDL_ERR_REMOTE);
    if (got != MDL_ERR_REMOTE)
        return;
    char msg[1024];
    last_error(msg, sizeof msg);
    EXPECT(r, names_rank(msg, k) && strstr(msg, status_name),
           "%s: the MDL_ERR_REMOTE message does not name \"rank %d\" and \"%s\": \"%s\"", what, k,
           status_name, msg);
}

static void expect_msg_has(cres *r, const char *what, const char *needle)
{
    char msg[1024];
    last_error(msg, sizeof msg);
    EXPECT(r, strstr(msg, needle) != NULL, "%s: last error does not mention %s: \"%s\"", what, needle, msg);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int all_ranks(int v)
{
    int all = 0;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return all;
}

/* ---------- environment ---------- */

typedef struct envsave {
    const char *name;
    char *old;
    int had;
} envsave;

/* Sets name=value (value NULL: unsets), remembering what was there. */
static void env_put(envsave *s, const char *name, const char *value)
{
    const char *o = getenv(name);
    s->name = name;
    s->had = o != NULL;
    s->old = o ? strdup(o) : NULL;
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static void env_restore(envsave *s)
{
    if (s->had)
        setenv(s->name, s->old, 1);
    else
        unsetenv(s->name);
    free(s->old);
    s->old = NULL;
}

/* ---------- loaders over the standard dataset ---------- */

typedef struct world {
    mdl_loader *h;
    tc_dataset ds;
} world;

static int register_ds(mdl_loader *h, const tc_dataset *ds, int rank)
{
    uint8_t *data;
    uint64_t *off;
    uint64_t n = tc_build_shard(ds, rank, &data, &off);
    if (n == UINT64_MAX)
        return -1;
    mdl_status st = mdl_register_shard(h, data, off, n);
    free(data);
    free(off);
    return st == MDL_OK ? 0 : -1;
}

/* mdl_init + register over comm (rank/size of comm); 0 on success on this rank. */
static int open_world_on(world *w, MPI_Comm comm, uint64_t seed)
{
    int r, p;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &p);
    w->h = NULL;
    tc_dataset_init(&w->ds, p, g_base, seed, 0);
    if (mdl_init(comm, &w->h) != MDL_OK)
        return -1;
    return register_ds(w->h, &w->ds, r);
}

static int open_world(world *w, uint64_t seed)
{
    return open_world_on(w, MPI_COMM_WORLD, seed);
}

static void close_world(world *w, cres *r)
{
    if (w->h) {
        mdl_status st = mdl_finalize(&w->h);
        if (r)
            expect_code(r, "mdl_finalize", st, MDL_OK);
    }
    tc_dataset_free(&w->ds);
}

/* Checks a fetched batch; returns 0 if every sample is exact. */
static int verify_batch(cres *r, const tc_dataset *ds, const uint64_t *ids, size_t n, const uint8_t *buf,
                        const uint64_t *offs, const char *what)
{
    for (size_t k = 0; k < n; k++) {
        uint64_t len = offs[k + 1] - offs[k];
        int64_t bad = tc_verify_sample(ds, ids[k], buf + offs[k], len);
        if (offs[k + 1] < offs[k] || bad >= 0) {
            NOTE(r, "%s: sample %zu (id %llu) wrong (size %llu, first bad byte %lld)", what, k,
                 (unsigned long long)ids[k], (unsigned long long)len, (long long)bad);
            return -1;
        }
    }
    return 0;
}

/* Collective over the loader's communicator: a correct random fetch, verified byte by
   byte. Proves the handle survived what came before. */
static mdl_status good_fetch(world *w, cres *r, tc_rng *rng, const char *after)
{
    size_t n = 1 + (size_t)tc_below(rng, 24);
    uint64_t ids[32], offs[33];
    for (size_t i = 0; i < n; i++)
        ids[i] = tc_below(rng, tc_total(&w->ds));
    uint64_t need = tc_batch_bytes(&w->ds, ids, n);
    uint8_t *buf = malloc(need + 1);
    mdl_status st = mdl_fetch_batch(w->h, ids, n, buf, need, offs);
    if (st != MDL_OK) {
        char msg[1024];
        NOTE(r, "correct fetch after %s returned %s (%s)", after, sname(st), last_error(msg, sizeof msg));
    } else {
        char what[256];
        snprintf(what, sizeof what, "correct fetch after %s", after);
        verify_batch(r, &w->ds, ids, n, buf, offs, what);
    }
    free(buf);
    return st;
}

static void recovery_fetch(world *w, cres *r, const char *after)
{
    good_fetch(w, r, &g_rng, after);
}

/* ---------- settings ---------- */

/* mdl_init's outcome when some ranks changed the environment. h is finalized only if
   every rank got one (a collective call on a handle only some ranks have would hang). */
static void finish_init_attempt(cres *r, mdl_loader **h)
{
    int have = *h != NULL;
    if (all_ranks(have))
        mdl_finalize(h);
    else if (have)
        NOTE(r, "mdl_init gave a handle on this rank but not on every rank: leaking it");
}

static void clean_init(cres *r)
{
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    expect_code(r, "clean mdl_init afterwards (every rank)", st, MDL_OK);
    finish_init_attempt(r, &h);
}

/* mdl_init with `var` set to `last` on rank g_last and to `others` elsewhere. */
static mdl_status init_with_setting(const char *var, const char *others, const char *last, mdl_loader **h)
{
    envsave s;
    env_put(&s, var, g_rank == g_last ? last : others);
    mdl_status st = mdl_init(MPI_COMM_WORLD, h);
    env_restore(&s);
    return st;
}

static void case_setting_differs(const char *var, const char *others, const char *last)
{
    char name[256];
    snprintf(name, sizeof name, "settings/%s differs on rank %d (%s vs %s) -> MDL_ERR_INVALID_ARG on every rank",
             var, g_last, others, last);
    if (!selected(name))
        return;
    if (g_size < 2) {
        case_skip(name, "needs 2 ranks");
        return;
    }
    cres r;
    case_begin(name, &r);
    mdl_loader *h = NULL;
    mdl_status st = init_with_setting(var, others, last, &h);
    expect_code(&r, "mdl_init", st, MDL_ERR_INVALID_ARG);
    EXPECT(&r, h == NULL, "*h is not NULL after a failed mdl_init");
    if (st != MDL_OK)
        expect_msg_has(&r, "mdl_init", var);
    finish_init_attempt(&r, &h);
    clean_init(&r);
    case_end(name, &r);
}

/* The same value written two ways (-0 and 0) is the same setting: mdl_init succeeds. */
static void case_setting_same(const char *var, const char *others, const char *last)
{
    char name[256];
    snprintf(name, sizeof name, "settings/%s=%s on rank %d and %s elsewhere is one value -> MDL_OK", var, last, g_last,
             others);
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    mdl_loader *h = NULL;
    mdl_status st = init_with_setting(var, others, last, &h);
    expect_code(&r, "mdl_init", st, MDL_OK);
    EXPECT(&r, st != MDL_OK || mdl_finalize(&h) == MDL_OK, "mdl_finalize");
    case_end(name, &r);
}

static void case_setting_invalid(const char *var, const char *bad)
{
    char name[256];
    snprintf(name, sizeof name,
             "settings/%s=%s on rank %d -> MDL_ERR_INVALID_ARG there, MDL_ERR_REMOTE naming it elsewhere", var, bad,
             g_last);
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    envsave s;
    int me = g_rank == g_last;
    if (me)
        env_put(&s, var, bad);
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (me) {
        env_restore(&s);
        expect_code(&r, "faulty rank: mdl_init", st, MDL_ERR_INVALID_ARG);
        if (st != MDL_OK)
            expect_msg_has(&r, "faulty rank: mdl_init", var);
    } else {
        expect_remote(&r, "mdl_init", st, g_last, "MDL_ERR_INVALID_ARG");
    }
    EXPECT(&r, h == NULL, "*h is not NULL after a failed mdl_init");
    finish_init_attempt(&r, &h);
    clean_init(&r);
    case_end(name, &r);
}

static void settings_cases(void)
{
    /* Both values valid; the ranks disagree. MDL_WAIT comes last of these: before the
       agreement landed, spin against yield meant blocking against nonblocking
       collectives, which never match (a hang). */
    case_setting_differs("MDL_MATRIX_MAX_RANKS", "8", "4");
    case_setting_differs("MDL_CALIBRATION", "on", "off");
    case_setting_differs("MDL_PROBE_INTERVAL", "64", "0");
    case_setting_differs("MDL_HYSTERESIS", "0.1", "0.25");
    case_setting_same("MDL_HYSTERESIS", "0", "-0");
    case_setting_differs("MDL_PROBE_BUDGET", "0.05", "0.5");
    case_setting_same("MDL_CALIBRATION_SECONDS", "0.2", "+0.2");
    case_setting_differs("MDL_CALIBRATION_SECONDS", "0.4", "0.2");
    case_setting_differs("MDL_MAX_MESSAGE_BYTES", "65536", "4096");
    case_setting_differs("MDL_WARMUP_GETS", "512", "0");
    case_setting_differs("MDL_WARMUP_MAP_BYTES", "1073741824", "0");
    case_setting_differs("MDL_MAX_GETS_IN_FLIGHT", "4096", "1000");
    case_setting_differs("MDL_BACKEND", "onesided", "collective");
    case_setting_differs("MDL_TIMEOUT", "0", "30");
    case_setting_differs("MDL_SHARED_INDEX", "on", "off");
    case_setting_differs("MDL_AGREEMENT_LAG", "2", "0");
    case_setting_differs("MDL_NODE_LOCAL", "on", "off");
    case_setting_differs("MDL_WAIT", "spin", "yield");

    /* An invalid value on one rank (the others leave it unset). */
    case_setting_invalid("MDL_MATRIX_MAX_RANKS", "100000");
    case_setting_invalid("MDL_MAX_GETS_IN_FLIGHT", "0");
    case_setting_invalid("MDL_MAX_GETS_IN_FLIGHT", "2000000");
    case_setting_invalid("MDL_WARMUP_GETS", "65537");
    case_setting_invalid("MDL_WARMUP_MAP_BYTES", "-1");
    case_setting_invalid("MDL_CALIBRATION_SECONDS", "61");
    case_setting_invalid("MDL_HYSTERESIS", "1");
    case_setting_invalid("MDL_PROBE_BUDGET", "1.5");
    case_setting_invalid("MDL_MAX_MESSAGE_BYTES", "0");
    case_setting_invalid("MDL_PROBE_INTERVAL", "banana");
    case_setting_invalid("MDL_BACKEND", "fast");
    case_setting_invalid("MDL_TIMEOUT", "soon");
    case_setting_invalid("MDL_SHARED_INDEX", "maybe");
    case_setting_invalid("MDL_AGREEMENT_LAG", "65");
    case_setting_invalid("MDL_AGREEMENT_LAG", "-1");
    case_setting_invalid("MDL_NODE_LOCAL", "sometimes");
    case_setting_invalid("MDL_NODE_KEY", "-1");
    case_setting_invalid("MDL_WAIT", "banana");
    /* A typo in MDL_SHM_DIR would switch the shared-memory check off; too small a
       reserve hung Open MPI's window creation. */
    case_setting_invalid("MDL_SHM_DIR", "/no/such/directory");
    case_setting_invalid("MDL_SHM_DIR", "/etc/passwd");
    case_setting_invalid("MDL_SHM_RESERVE", "1048576");
    case_setting_invalid("MDL_SHM_RESERVE", "lots");
    case_setting_invalid("MDL_PROGRESS", "sometimes");
    case_setting_invalid("MDL_PROGRESS_US", "5");
}

/* ---------- calibration files ---------- */

/* The "calibration" object of a registered loader's statistics (malloc'd), or NULL. */
static char *calibration_object(mdl_loader *h)
{
    size_t n = mdl_stats_json(h, NULL, 0);
    char *json = malloc(n + 1);
    if (!json)
        return NULL;
    mdl_stats_json(h, json, n + 1);
    char *p = strstr(json, "\"calibration\"");
    char *b = p ? strchr(p, '{') : NULL;
    char *out = NULL;
    if (b) {
        int depth = 0;
        char *e = b;
        for (; *e; e++) {
            if (*e == '{')
                depth++;
            else if (*e == '}' && --depth == 0)
                break;
        }
        if (*e == '}') {
            out = strndup(b, (size_t)(e - b + 1));
        }
    }
    free(json);
    return out;
}

/* text with the number after "key": replaced by value * 1.5 + 1e-9 (malloc'd). */
static char *perturb(const char *text, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(text, quoted);
    if (!p)
        return NULL;
    const char *num = strchr(p, ':');
    if (!num)
        return NULL;
    num++;
    while (*num == ' ')
        num++;
    char *end;
    double v = strtod(num, &end);
    if (end == num)
        return NULL;
    char repl[64];
    snprintf(repl, sizeof repl, "%.17g", v * 1.5 + 1e-9);
    size_t len = strlen(text) + strlen(repl) + 1;
    char *out = malloc(len);
    snprintf(out, len, "%.*s%s%s", (int)(num - text), text, repl, end);
    return out;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* mode 0: same parameters everywhere (OK); 1: a_os differs on the last rank (INVALID_ARG
   everywhere); 2: the last rank's file is missing (INVALID_ARG there, REMOTE elsewhere);
   3: only "noise_onesided" differs on the last rank (INVALID_ARG everywhere: the noise
   steers AUTO's decisions as the parameters do, so registration refuses it, not every
   step after it). */
static void case_calibration_file(int mode, const char *name, const char *tmpl, long job)
{
    if (!selected(name))
        return;
    if (mode != 0 && g_size < 2) {
        case_skip(name, "needs 2 ranks");
        return;
    }
    cres r;
    case_begin(name, &r);
    char path[256];
    snprintf(path, sizeof path, "/tmp/mdl-hardening-%ld-%d-r%d.json", job, mode, g_rank);
    int me = g_rank == g_last;
    char *text = (mode == 1 && me) ? perturb(tmpl, "a_os")
                 : (mode == 3 && me) ? perturb(tmpl, "noise_onesided")
                                     : strdup(tmpl);
    if (!text)
        NOTE(&r, "could not make the file's text from \"%s\"", tmpl);
    else if (!(mode == 2 && me) && write_file(path, text) != 0)
        NOTE(&r, "could not write %s", path);
    free(text);
    if (mode == 2 && me)
        unlink(path);

    envsave s;
    env_put(&s, "MDL_CALIBRATION", path);
    world w;
    w.h = NULL;
    tc_dataset_init(&w.ds, g_size, g_base, g_seed + 40 + (uint64_t)mode, 0);
    mdl_status st = mdl_init(MPI_COMM_WORLD, &w.h);
    env_restore(&s);
    expect_code(&r, "mdl_init with MDL_CALIBRATION=<file>", st, MDL_OK);
    if (all_ranks(st == MDL_OK)) {
        uint8_t *data;
        uint64_t *off;
        uint64_t n = tc_build_shard(&w.ds, g_rank, &data, &off);
        st = mdl_register_shard(w.h, data, off, n);
        free(data);
        free(off);
        if (mode == 0) {
            expect_code(&r, "mdl_register_shard (same file everywhere)", st, MDL_OK);
            if (all_ranks(st == MDL_OK)) {
                recovery_fetch(&w, &r, "register with a calibration file");
                char *cal = calibration_object(w.h);
                EXPECT(&r, cal && strstr(cal, "\"file\""), "stats' calibration source is not \"file\": %s",
                       cal ? cal : "(none)");
                free(cal);
            }
        } else if (mode == 1) {
            expect_code(&r, "mdl_register_shard (a_os differs on the last rank)", st, MDL_ERR_INVALID_ARG);
        } else if (mode == 3) {
            expect_code(&r, "mdl_register_shard (noise_onesided differs on the last rank)", st, MDL_ERR_INVALID_ARG);
            if (st == MDL_OK) {
                /* What registering it anyway leads to: the steps' agreements see the
                   models' fingerprints differ. */
                recovery_fetch(&w, &r, "register with a file whose noise differs");
            }
        } else if (me) {
            expect_code(&r, "faulty rank: mdl_register_shard (file missing)", st, MDL_ERR_INVALID_ARG);
            if (st != MDL_OK)
                expect_msg_has(&r, "faulty rank", "MDL_CALIBRATION");
        } else {
            expect_remote(&r, "mdl_register_shard (file missing on the last rank)", st, g_last,
                          "MDL_ERR_INVALID_ARG");
        }
    }
    finish_init_attempt(&r, &w.h);
    tc_dataset_free(&w.ds);
    unlink(path);
    case_end(name, &r);
}

static void calibration_cases(void)
{
    const char *names[4] = {
        "calibration/MDL_CALIBRATION=<file>, the same parameters on every rank -> register OK",
        "calibration/MDL_CALIBRATION=<file>, a_os differs on the last rank -> register MDL_ERR_INVALID_ARG on every rank",
        "calibration/MDL_CALIBRATION=<file>, missing on the last rank -> MDL_ERR_INVALID_ARG there, MDL_ERR_REMOTE elsewhere",
        "calibration/MDL_CALIBRATION=<file>, noise_onesided differs on the last rank -> register MDL_ERR_INVALID_ARG on every rank",
    };
    if (!selected(names[0]) && !selected(names[1]) && !selected(names[2]) && !selected(names[3]))
        return;
    /* A valid file: the "calibration" object of a loader (calibration off: default
       parameters, no measuring), the same on every rank. */
    cres r;
    const char *setup = "calibration/setup: the calibration object of mdl_stats_json";
    case_begin(setup, &r);
    envsave s;
    env_put(&s, "MDL_CALIBRATION", "off");
    world w;
    char *tmpl = NULL;
    int ok = open_world(&w, g_seed + 30) == 0;
    env_restore(&s);
    if (all_ranks(ok)) {
        tmpl = calibration_object(w.h);
        EXPECT(&r, tmpl && strstr(tmpl, "\"a_os\""), "no calibration object with a_os in the statistics");
        close_world(&w, &r);
    } else {
        NOTE(&r, "could not open a loader with MDL_CALIBRATION=off");
        finish_init_attempt(&r, &w.h);
        tc_dataset_free(&w.ds);
    }
    long job = (long)getpid();
    MPI_Bcast(&job, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    case_end(setup, &r);
    if (!all_ranks(r.ok && tmpl)) {
        free(tmpl);
        return;
    }
    if (g_rank == 0)
        printf("      calibration file: %s\n", tmpl);
    for (int mode = 0; mode < 4; mode++)
        case_calibration_file(mode, names[mode], tmpl, job);
    free(tmpl);
}

/* ---------- boundary arithmetic ---------- */

enum bfault { B_N_MAX, B_N_MAX8, B_N_WRAP8, B_CAP_MAX, B_CAP_PTRDIFF };

static void case_fetch_boundary(world *w, enum bfault f, int everyone, const char *name)
{
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    int me = everyone || g_rank == g_last;
    uint64_t ids[4], offs[8];
    for (int i = 0; i < 4; i++)
        ids[i] = tc_below(&g_rng, tc_total(&w->ds));
    uint64_t need = tc_batch_bytes(&w->ds, ids, 4);
    uint8_t *buf = malloc(need + 64);
    size_t n = 4;
    uint64_t cap = need;
    if (me) {
        switch (f) {
        case B_N_MAX: n = SIZE_MAX; break;
        case B_N_MAX8: n = SIZE_MAX / 8; break;
        case B_N_WRAP8: n = SIZE_MAX / 8 + 1; break; /* n * 8 wraps to 0 */
        case B_CAP_MAX: cap = UINT64_MAX; break;
        case B_CAP_PTRDIFF: cap = (uint64_t)PTRDIFF_MAX + 1; break;
        }
    }
    mdl_status st = mdl_fetch_batch(w->h, ids, n, buf, cap, offs);
    if (me)
        expect_code(&r, "faulty rank: mdl_fetch_batch", st, MDL_ERR_INVALID_ARG);
    else
        expect_remote(&r, "mdl_fetch_batch", st, g_last, "MDL_ERR_INVALID_ARG");
    free(buf);
    recovery_fetch(w, &r, name);
    case_end(name, &r);
}

enum rfault { R_MAX, R_WRAP };

static void case_register_boundary(enum rfault f, int everyone, const char *name)
{
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    world w;
    w.h = NULL;
    tc_dataset_init(&w.ds, g_size, g_base, g_seed + 50, 0);
    mdl_status st = mdl_init(MPI_COMM_WORLD, &w.h);
    expect_code(&r, "mdl_init", st, MDL_OK);
    if (all_ranks(st == MDL_OK)) {
        uint8_t *data;
        uint64_t *off;
        uint64_t n = tc_build_shard(&w.ds, g_rank, &data, &off);
        int me = everyone || g_rank == g_last;
        /* The faulty rank passes real (short) arrays: only the count is impossible. */
        uint64_t bad = f == R_MAX ? UINT64_MAX : (UINT64_MAX / 8); /* (n + 1) * 8 wraps to 0 */
        st = mdl_register_shard(w.h, data, off, me ? bad : n);
        EXPECT(&r, st != MDL_OK, "mdl_register_shard with n_samples = %llu on %s returned MDL_OK",
               (unsigned long long)bad, me ? "this rank" : "another rank");
        if (me)
            expect_code(&r, "faulty rank: mdl_register_shard", st, MDL_ERR_INVALID_ARG);
        else
            expect_remote(&r, "mdl_register_shard", st, g_last, "MDL_ERR_INVALID_ARG");
        if (all_ranks(st != MDL_OK)) {
            /* Refused before anything was committed: a correct retry works. */
            st = mdl_register_shard(w.h, data, off, n);
            expect_code(&r, "corrected mdl_register_shard", st, MDL_OK);
            if (all_ranks(st == MDL_OK))
                recovery_fetch(&w, &r, "refused register + retry");
        }
        free(data);
        free(off);
    }
    finish_init_attempt(&r, &w.h);
    tc_dataset_free(&w.ds);
    case_end(name, &r);
}

static void case_prefetch_limit(world *w)
{
    char name[160];
    snprintf(name, sizeof name, "boundary/mdl_set_prefetch(%d + 1) and (UINT32_MAX) -> MDL_ERR_INVALID_ARG, %d accepted",
             MDL_MAX_PREFETCH, MDL_MAX_PREFETCH);
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    expect_code(&r, "mdl_set_prefetch(MAX + 1)", mdl_set_prefetch(w->h, MDL_MAX_PREFETCH + 1), MDL_ERR_INVALID_ARG);
    expect_code(&r, "mdl_set_prefetch(UINT32_MAX)", mdl_set_prefetch(w->h, UINT32_MAX), MDL_ERR_INVALID_ARG);
    expect_code(&r, "mdl_set_prefetch(MAX)", mdl_set_prefetch(w->h, MDL_MAX_PREFETCH), MDL_OK);
    expect_code(&r, "mdl_set_prefetch(0)", mdl_set_prefetch(w->h, 0), MDL_OK);
    recovery_fetch(w, &r, "mdl_set_prefetch");
    case_end(name, &r);
}

static void boundary_cases(void)
{
    char names[8][200];
    snprintf(names[0], 200, "boundary/mdl_fetch_batch n = SIZE_MAX on rank %d -> MDL_ERR_INVALID_ARG, agreed", g_last);
    snprintf(names[1], 200, "boundary/mdl_fetch_batch n = SIZE_MAX / 8 on rank %d -> MDL_ERR_INVALID_ARG, agreed", g_last);
    snprintf(names[2], 200, "boundary/mdl_fetch_batch n = SIZE_MAX / 8 + 1 (n * 8 wraps) on rank %d -> MDL_ERR_INVALID_ARG, agreed", g_last);
    snprintf(names[3], 200, "boundary/mdl_fetch_batch out_cap = UINT64_MAX on rank %d -> MDL_ERR_INVALID_ARG, agreed", g_last);
    snprintf(names[4], 200, "boundary/mdl_fetch_batch out_cap = PTRDIFF_MAX + 1 on rank %d -> MDL_ERR_INVALID_ARG, agreed", g_last);
    snprintf(names[5], 200, "boundary/mdl_fetch_batch n = SIZE_MAX on every rank -> MDL_ERR_INVALID_ARG");
    int any = 0;
    for (int i = 0; i < 6; i++)
        any |= selected(names[i]);
    snprintf(names[6], 200, "boundary/mdl_set_prefetch");
    any |= selected(names[6]);
    if (any) {
        cres setup;
        world w;
        case_begin("boundary/setup: open a loader", &setup);
        if (open_world(&w, g_seed + 1) != 0)
            NOTE(&setup, "mdl_init/mdl_register_shard failed");
        case_end("boundary/setup: open a loader", &setup);
        if (all_ranks(setup.ok)) {
            case_fetch_boundary(&w, B_N_MAX, 0, names[0]);
            case_fetch_boundary(&w, B_N_MAX8, 0, names[1]);
            case_fetch_boundary(&w, B_N_WRAP8, 0, names[2]);
            case_fetch_boundary(&w, B_CAP_MAX, 0, names[3]);
            case_fetch_boundary(&w, B_CAP_PTRDIFF, 0, names[4]);
            case_fetch_boundary(&w, B_N_MAX, 1, names[5]);
            case_prefetch_limit(&w);
            close_world(&w, NULL);
        }
    }
    char name[200];
    snprintf(name, sizeof name, "boundary/mdl_register_shard n_samples = UINT64_MAX on rank %d -> MDL_ERR_INVALID_ARG, agreed, retry works", g_last);
    case_register_boundary(R_MAX, 0, name);
    snprintf(name, sizeof name, "boundary/mdl_register_shard n_samples = UINT64_MAX / 8 ((n + 1) * 8 wraps) on rank %d -> MDL_ERR_INVALID_ARG, agreed", g_last);
    case_register_boundary(R_WRAP, 0, name);
    case_register_boundary(R_MAX, 1, "boundary/mdl_register_shard n_samples = UINT64_MAX on every rank -> MDL_ERR_INVALID_ARG");
}

/* ---------- state ---------- */

/* Drains the current epoch of w, verifying every batch. */
static void drain_epoch(world *w, cres *r, const char *what)
{
    for (int steps = 0; steps < 1000000; steps++) {
        const uint64_t *ids = NULL, *offs = NULL;
        const void *data = NULL;
        size_t n = 0;
        mdl_status st = mdl_next_batch(w->h, &ids, &data, &offs, &n);
        if (st != MDL_OK) {
            char msg[1024];
            NOTE(r, "%s: mdl_next_batch at step %d returned %s (%s)", what, steps, sname(st),
                 last_error(msg, sizeof msg));
            return;
        }
        if (n == 0)
            return;
        if (verify_batch(r, &w->ds, ids, n, data, offs, what) != 0)
            return;
    }
}

static void case_register_during_epoch(uint32_t depth)
{
    char name[200];
    snprintf(name, sizeof name,
             "state/mdl_register_shard during an epoch (prefetch %u) -> MDL_ERR_STATE on every rank, epoch goes on",
             depth);
    if (!selected(name))
        return;
    if (depth > 0 && g_provided < MPI_THREAD_MULTIPLE) {
        case_skip(name, "MPI_THREAD_MULTIPLE not provided");
        return;
    }
    cres r;
    case_begin(name, &r);
    world w;
    int ok = open_world(&w, g_seed + 60 + depth) == 0;
    EXPECT(&r, ok, "mdl_init/mdl_register_shard failed");
    if (all_ranks(ok)) {
        expect_code(&r, "mdl_set_prefetch", mdl_set_prefetch(w.h, depth), MDL_OK);
        mdl_status st = mdl_epoch_begin(w.h, 5, 0, 8, 1, 0);
        expect_code(&r, "mdl_epoch_begin", st, MDL_OK);
        if (all_ranks(st == MDL_OK)) {
            const uint64_t *ids, *offs;
            const void *data;
            size_t n = 0;
            st = mdl_next_batch(w.h, &ids, &data, &offs, &n);
            expect_code(&r, "first mdl_next_batch", st, MDL_OK);
            tc_dataset other;
            tc_dataset_init(&other, g_size, g_base, g_seed + 99, 0);
            uint8_t *d2;
            uint64_t *o2;
            uint64_t n2 = tc_build_shard(&other, g_rank, &d2, &o2);
            st = mdl_register_shard(w.h, d2, o2, n2);
            expect_code(&r, "mdl_register_shard during the epoch", st, MDL_ERR_STATE);
            free(d2);
            free(o2);
            tc_dataset_free(&other);
            drain_epoch(&w, &r, "the rest of the epoch");
        }
        expect_code(&r, "mdl_set_prefetch(0)", mdl_set_prefetch(w.h, 0), MDL_OK);
        recovery_fetch(&w, &r, "register during an epoch");
        close_world(&w, &r);
    } else {
        finish_init_attempt(&r, &w.h);
        tc_dataset_free(&w.ds);
    }
    case_end(name, &r);
}

/* ---------- error texts ---------- */

static void case_remote_text(void)
{
    char name[200];
    snprintf(name, sizeof name,
             "errors/out-of-range id on rank %d: the others' message names \"rank %d\" and MDL_ERR_OUT_OF_RANGE",
             g_last, g_last);
    if (!selected(name))
        return;
    if (g_size < 2) {
        case_skip(name, "needs 2 ranks");
        return;
    }
    cres r;
    case_begin(name, &r);
    world w;
    int ok = open_world(&w, g_seed + 70) == 0;
    EXPECT(&r, ok, "setup failed");
    if (all_ranks(ok)) {
        uint64_t ids[3], offs[4];
        for (int i = 0; i < 3; i++)
            ids[i] = tc_below(&g_rng, tc_total(&w.ds));
        if (g_rank == g_last)
            ids[1] = tc_total(&w.ds);
        uint64_t need = tc_batch_bytes(&w.ds, ids, 3) + 4096;
        uint8_t *buf = malloc(need);
        mdl_status st = mdl_fetch_batch(w.h, ids, 3, buf, need, offs);
        if (g_rank == g_last)
            expect_code(&r, "faulty rank: mdl_fetch_batch", st, MDL_ERR_OUT_OF_RANGE);
        else
            expect_remote(&r, "mdl_fetch_batch", st, g_last, "MDL_ERR_OUT_OF_RANGE");
        char msg[1024];
        if (g_rank == 0) {
            printf("      rank 0's message: \"%s\"\n", last_error(msg, sizeof msg));
            fflush(stdout);
        }
        free(buf);
        recovery_fetch(&w, &r, name);
        close_world(&w, &r);
    } else {
        finish_init_attempt(&r, &w.h);
        tc_dataset_free(&w.ds);
    }
    case_end(name, &r);
}

/* A handful of failing calls; each one's message is checked for a doubled prefix. */
static void doubled_check(cres *r, const char *what, mdl_status st)
{
    char msg[1024];
    if (st == MDL_OK)
        return;
    mdl_last_error(msg, sizeof msg);
    EXPECT(r, !doubled_prefix(msg), "%s (%s): doubled prefix in \"%s\"", what, sname(st), msg);
    if (g_rank == 0) {
        printf("      %s: \"%s\"\n", what, msg);
        fflush(stdout);
    }
}

static void case_no_doubled_prefix(void)
{
    const char *name = "errors/no message has a doubled prefix (\"mdl_x: mdl_x:\")";
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    world w;
    int ok = open_world(&w, g_seed + 80) == 0;
    EXPECT(&r, ok, "setup failed");
    if (all_ranks(ok)) {
        const uint64_t *ids, *offs;
        const void *data;
        size_t n;
        uint64_t x;
        doubled_check(&r, "mdl_epoch_begin, seed differs on the last rank",
                      mdl_epoch_begin(w.h, g_size > 1 && g_rank == g_last ? 2 : 1, 0, 4, 1, 0));
        doubled_check(&r, "mdl_epoch_begin, batch_size 0 on the last rank",
                      mdl_epoch_begin(w.h, 1, 0, g_rank == g_last ? 0 : 4, 1, 0));
        doubled_check(&r, "mdl_next_batch without an epoch", mdl_next_batch(w.h, &ids, &data, &offs, &n));
        doubled_check(&r, "mdl_epoch_seek without an epoch", mdl_epoch_seek(w.h, 3));
        doubled_check(&r, "mdl_register_shard twice", register_ds(w.h, &w.ds, g_rank) == 0 ? MDL_OK : MDL_ERR_STATE);
        doubled_check(&r, "mdl_sample_size(UINT64_MAX)", mdl_sample_size(w.h, UINT64_MAX, &x));
        doubled_check(&r, "mdl_set_backend(7)", mdl_set_backend(w.h, (mdl_backend)7));
        doubled_check(&r, "mdl_set_prefetch(UINT32_MAX)", mdl_set_prefetch(w.h, UINT32_MAX));
        /* Whether or not that was refused, no epoch may run with it (before the limit
           landed, epoch_begin then sized a queue for 2^32 batches and aborted). */
        mdl_set_prefetch(w.h, 0);
        if (all_ranks(mdl_epoch_begin(w.h, 1, 0, 4, 1, 0) == MDL_OK))
            doubled_check(&r, "mdl_epoch_seek past the end", mdl_epoch_seek(w.h, UINT64_MAX / 2));
        close_world(&w, &r);
    } else {
        finish_init_attempt(&r, &w.h);
        tc_dataset_free(&w.ds);
    }
    case_end(name, &r);
}

/* ---------- one-sided, many gets ---------- */

enum { SMALL = 16 };

static void small_fill(uint64_t seed, uint64_t g, uint8_t *dst)
{
    uint64_t a = tc_mix64(g * 2 + seed), b = tc_mix64(g * 2 + 1 + seed);
    memcpy(dst, &a, 8);
    memcpy(dst + 8, &b, 8);
}

static void case_onesided_many(size_t big_n, const char *gets_in_flight, const char *name)
{
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    envsave s;
    if (gets_in_flight)
        env_put(&s, "MDL_MAX_GETS_IN_FLIGHT", gets_in_flight);
    const uint64_t per_rank = 100000, seed = g_seed * 1000 + 3;
    mdl_loader *h = NULL;
    mdl_status st = mdl_init(MPI_COMM_WORLD, &h);
    if (gets_in_flight)
        env_restore(&s);
    expect_code(&r, "mdl_init", st, MDL_OK);
    if (all_ranks(st == MDL_OK)) {
        uint64_t *off = malloc(sizeof(uint64_t) * (per_rank + 1));
        uint8_t *data = malloc(per_rank * SMALL);
        for (uint64_t i = 0; i <= per_rank; i++)
            off[i] = i * SMALL;
        for (uint64_t i = 0; i < per_rank; i++)
            small_fill(seed, (uint64_t)g_rank * per_rank + i, data + i * SMALL);
        st = mdl_register_shard(h, data, off, per_rank);
        free(data);
        free(off);
        expect_code(&r, "mdl_register_shard", st, MDL_OK);
        if (all_ranks(st == MDL_OK)) {
            expect_code(&r, "mdl_set_backend(ONESIDED)", mdl_set_backend(h, MDL_BACKEND_ONESIDED), MDL_OK);
            /* The last rank fetches big_n random ids of rank 0's shard (its own at one
               rank), the others a thousand ids anywhere. */
            size_t n = g_rank == g_last ? big_n : 1000;
            uint64_t *ids = malloc(sizeof(uint64_t) * n);
            uint64_t *offs = malloc(sizeof(uint64_t) * (n + 1));
            uint8_t *buf = malloc(n * SMALL);
            if (!ids || !offs || !buf) {
                NOTE(&r, "out of memory for %zu ids", n);
                n = 0;
            }
            for (size_t i = 0; i < n; i++)
                ids[i] = g_rank == g_last ? tc_below(&g_rng, per_rank)
                                          : tc_below(&g_rng, per_rank * (uint64_t)g_size);
            double t0 = now();
            st = mdl_fetch_batch(h, ids, n, buf, (uint64_t)n * SMALL, offs);
            double dt = now() - t0;
            expect_code(&r, "mdl_fetch_batch", st, MDL_OK);
            if (st == MDL_OK) {
                uint8_t want[SMALL];
                for (size_t k = 0; k < n; k++) {
                    small_fill(seed, ids[k], want);
                    if (offs[k] != k * SMALL || memcmp(buf + k * SMALL, want, SMALL) != 0) {
                        NOTE(&r, "sample %zu (id %llu) wrong or misplaced", k, (unsigned long long)ids[k]);
                        break;
                    }
                }
            }
            if (g_rank == g_last) {
                printf("      rank %d: %zu ids one-sided in %.2f s\n", g_rank, n, dt);
                fflush(stdout);
            }
            free(ids);
            free(offs);
            free(buf);
        }
    }
    finish_init_attempt(&r, &h);
    case_end(name, &r);
}

/* ---------- threads ---------- */

typedef struct fetcher {
    world *w;
    pthread_barrier_t *bar;
    int iters, ok, state, bad;
    uint64_t seed;
    char why[256];
} fetcher;

static void *fetch_thread(void *arg)
{
    fetcher *f = arg;
    tc_rng rng = tc_rng_make(f->seed, 99);
    uint64_t ids[16], offs[17];
    uint8_t *buf = malloc(16 * 3000 + 1);
    for (int it = 0; it < f->iters; it++) {
        size_t n = 1 + (size_t)tc_below(&rng, 16);
        for (size_t i = 0; i < n; i++)
            ids[i] = tc_below(&rng, tc_total(&f->w->ds));
        uint64_t need = tc_batch_bytes(&f->w->ds, ids, n);
        pthread_barrier_wait(f->bar);
        mdl_status st = mdl_fetch_batch(f->w->h, ids, n, buf, need, offs);
        if (st == MDL_OK) {
            f->ok++;
            for (size_t k = 0; k < n; k++)
                if (tc_verify_sample(&f->w->ds, ids[k], buf + offs[k], offs[k + 1] - offs[k]) >= 0) {
                    if (!f->bad++)
                        snprintf(f->why, sizeof f->why, "iteration %d: sample %zu wrong", it, k);
                    break;
                }
        } else if (st == MDL_ERR_STATE) {
            f->state++;
        } else {
            if (!f->bad++)
                snprintf(f->why, sizeof f->why, "iteration %d: mdl_fetch_batch returned %s", it, sname(st));
        }
    }
    free(buf);
    return NULL;
}

static void case_two_threads(void)
{
    const char *name = "threads/two threads fetch on one handle at once (loader on MPI_COMM_SELF) -> MDL_OK or MDL_ERR_STATE";
    if (!selected(name))
        return;
    if (g_provided < MPI_THREAD_MULTIPLE) {
        case_skip(name, "MPI_THREAD_MULTIPLE not provided");
        return;
    }
    cres r;
    case_begin(name, &r);
    world w;
    int ok = open_world_on(&w, MPI_COMM_SELF, g_seed + 90 + (uint64_t)g_rank) == 0;
    EXPECT(&r, ok, "mdl_init(MPI_COMM_SELF)/register failed");
    if (ok) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, 2);
        fetcher f[2];
        pthread_t t[2];
        for (int i = 0; i < 2; i++) {
            memset(&f[i], 0, sizeof f[i]);
            f[i].w = &w;
            f[i].bar = &bar;
            f[i].iters = 300;
            f[i].seed = g_seed + (uint64_t)i;
            pthread_create(&t[i], NULL, fetch_thread, &f[i]);
        }
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        pthread_barrier_destroy(&bar);
        for (int i = 0; i < 2; i++)
            EXPECT(&r, f[i].bad == 0, "thread %d: %d bad results; first: %s", i, f[i].bad, f[i].why);
        if (g_rank == 0) {
            printf("      thread 0: %d OK, %d MDL_ERR_STATE; thread 1: %d OK, %d MDL_ERR_STATE\n", f[0].ok,
                   f[0].state, f[1].ok, f[1].state);
            fflush(stdout);
        }
        recovery_fetch(&w, &r, "two threads");
    }
    close_world(&w, &r);
    case_end(name, &r);
}

/* A local setter on another thread of rank 0 (the same backend every rank has) while
   every rank fetches: the fetches wait for the setter instead of failing on rank 0
   alone, which would leave the other ranks waiting in the fetch's collective. */
static volatile int g_setter_stop;

static void *setter_thread(void *arg)
{
    mdl_loader *h = arg;
    while (!g_setter_stop)
        mdl_set_backend(h, MDL_BACKEND_AUTO);
    return NULL;
}

static void case_setter_racing_fetches(void)
{
    const char *name = "threads/a local setter on another thread never fails a collective fetch on one rank";
    if (!selected(name))
        return;
    if (g_provided < MPI_THREAD_MULTIPLE) {
        case_skip(name, "MPI_THREAD_MULTIPLE not provided");
        return;
    }
    cres r;
    case_begin(name, &r);
    world w;
    int ok = open_world(&w, g_seed + 95) == 0;
    EXPECT(&r, ok, "mdl_init/register failed");
    if (ok) {
        pthread_t t;
        g_setter_stop = 0;
        if (g_rank == 0)
            pthread_create(&t, NULL, setter_thread, w.h);
        tc_rng rng = tc_rng_make(g_seed + 95, (uint64_t)g_rank);
        uint64_t ids[8], offs[9];
        uint8_t *buf = malloc(8 * 3000 + 1);
        int failed = 0;
        for (int it = 0; it < 500 && !failed; it++) {
            size_t n = 1 + (size_t)tc_below(&rng, 8);
            for (size_t i = 0; i < n; i++)
                ids[i] = tc_below(&rng, tc_total(&w.ds));
            mdl_status st = mdl_fetch_batch(w.h, ids, n, buf, tc_batch_bytes(&w.ds, ids, n), offs);
            if (st != MDL_OK) {
                NOTE(&r, "fetch %d returned %s", it, sname(st));
                failed = 1;
            }
        }
        free(buf);
        g_setter_stop = 1;
        if (g_rank == 0)
            pthread_join(t, NULL);
        if (!failed)
            recovery_fetch(&w, &r, "a racing setter");
    }
    close_world(&w, &r);
    case_end(name, &r);
}

/* Rank 0's prefetch thread is made to wait inside a step (the last rank's main thread
   sleeps, so its prefetch thread stops once its queue is full): the local calls on rank
   0 must return at once meanwhile. */
static void case_local_calls_while_prefetching(void)
{
    const char *name = "threads/mdl_num_samples, mdl_sample_size, mdl_stats_json return at once while a prefetch thread waits in a step";
    if (!selected(name))
        return;
    if (g_size < 2) {
        case_skip(name, "needs 2 ranks");
        return;
    }
    if (g_provided < MPI_THREAD_MULTIPLE) {
        case_skip(name, "MPI_THREAD_MULTIPLE not provided");
        return;
    }
    cres r;
    case_begin(name, &r);
    world w;
    int ok = open_world(&w, g_seed + 100) == 0;
    EXPECT(&r, ok, "setup failed");
    if (all_ranks(ok)) {
        expect_code(&r, "mdl_set_prefetch(2)", mdl_set_prefetch(w.h, 2), MDL_OK);
        mdl_status st = mdl_epoch_begin(w.h, 3, 0, 4, 1, 0);
        expect_code(&r, "mdl_epoch_begin", st, MDL_OK);
        if (all_ranks(st == MDL_OK)) {
            if (g_rank == 0) {
                const uint64_t *ids, *offs;
                const void *data;
                size_t n;
                double t0 = now();
                st = mdl_next_batch(w.h, &ids, &data, &offs, &n);
                double first = now() - t0;
                expect_code(&r, "first mdl_next_batch", st, MDL_OK);
                if (st == MDL_OK)
                    verify_batch(&r, &w.ds, ids, n, data, offs, "first batch");
                usleep(300000); /* the prefetch thread moves on into a step nobody joins */
                double worst = 0;
                const char *worst_call = "";
                for (int i = 0; i < 20; i++) {
                    uint64_t x;
                    char json[4096];
                    double a = now();
                    mdl_status s1 = mdl_num_samples(w.h, &x);
                    double b = now();
                    mdl_status s2 = mdl_sample_size(w.h, x - 1, &x);
                    double c = now();
                    size_t len = mdl_stats_json(w.h, json, sizeof json);
                    double d = now();
                    EXPECT(&r, s1 == MDL_OK && s2 == MDL_OK && len > 0, "local call failed: %s, %s, %zu", sname(s1),
                           sname(s2), len);
                    if (b - a > worst)
                        worst = b - a, worst_call = "mdl_num_samples";
                    if (c - b > worst)
                        worst = c - b, worst_call = "mdl_sample_size";
                    if (d - c > worst)
                        worst = d - c, worst_call = "mdl_stats_json";
                }
                EXPECT(&r, worst < 0.5, "%s took %.2f s while the prefetch thread waited", worst_call, worst);
                printf("      first batch after %.3f s; slowest local call %.4f s (%s)\n", first, worst, worst_call);
                fflush(stdout);
            } else {
                sleep(3);
            }
            drain_epoch(&w, &r, "the epoch");
        }
        expect_code(&r, "mdl_set_prefetch(0)", mdl_set_prefetch(w.h, 0), MDL_OK);
        close_world(&w, &r);
    } else {
        finish_init_attempt(&r, &w.h);
        tc_dataset_free(&w.ds);
    }
    case_end(name, &r);
}

/* ---------- Fortran handles ---------- */

static void case_init_f_invalid(MPI_Fint bad)
{
    char name[160];
    snprintf(name, sizeof name, "init/mdl_init_f(%d) on every rank -> an error, no abort", (int)bad);
    if (!selected(name))
        return;
    cres r;
    case_begin(name, &r);
    mdl_loader *h = NULL;
    mdl_status st = mdl_init_f(bad, &h);
    EXPECT(&r, st != MDL_OK && h == NULL, "mdl_init_f(%d) returned %s", (int)bad, sname(st));
    if (st != MDL_OK) {
        char msg[1024];
        EXPECT(&r, last_error(msg, sizeof msg)[0], "empty last error");
        if (g_rank == 0)
            printf("      %s: \"%s\"\n", sname(st), msg);
    }
    finish_init_attempt(&r, &h);
    case_end(name, &r);
}

/* ---------- MDL_TIMEOUT ---------- */

/* MDL_TIMEOUT=2 everywhere, collective backend. Rank 0 fetches at once and must get
   MDL_ERR_TIMEOUT after about 2 s; the others fetch 6 s later, when rank 0 has given up:
   they wait in the exchange for rank 0 and time out too. Every handle is then poisoned:
   further calls return MDL_ERR_STATE at once and mdl_finalize frees memory only. MPI
   requests stay pending, so this case runs only when asked for (--only timeout/). */
static void case_timeout(void)
{
    const char *name = "timeout/MDL_TIMEOUT=2: a rank 6 s late -> MDL_ERR_TIMEOUT, then MDL_ERR_STATE, finalize frees";
    if (!selected(name))
        return;
    if (g_size < 2) {
        case_skip(name, "needs 2 ranks");
        return;
    }
    cres r;
    case_begin(name, &r);
    envsave s;
    env_put(&s, "MDL_TIMEOUT", "2");
    world w;
    int ok = open_world(&w, g_seed + 110) == 0;
    env_restore(&s);
    EXPECT(&r, ok, "setup failed");
    if (all_ranks(ok)) {
        expect_code(&r, "mdl_set_backend(COLLECTIVE)", mdl_set_backend(w.h, MDL_BACKEND_COLLECTIVE), MDL_OK);
        /* Everybody needs bytes from somebody else: rank 0 from the last rank, the others
           from rank 0. */
        uint64_t ids[4], offs[5];
        for (int i = 0; i < 4; i++) {
            int from = g_rank == 0 ? g_last : 0;
            uint64_t lo = w.ds.first[from], cnt = w.ds.first[from + 1] - lo;
            ids[i] = lo + tc_below(&g_rng, cnt);
        }
        uint64_t need = tc_batch_bytes(&w.ds, ids, 4);
        uint8_t *buf = malloc(need + 1);
        MPI_Barrier(MPI_COMM_WORLD);
        if (g_rank != 0)
            sleep(6);
        double t0 = now();
        mdl_status st = mdl_fetch_batch(w.h, ids, 4, buf, need, offs);
        double dt = now() - t0;
        const char *ts = sname(st);
        char msg[1024];
        last_error(msg, sizeof msg);
        EXPECT(&r, st == MDL_ERR_TIMEOUT,
               "mdl_fetch_batch returned %s after %.1f s, expected MDL_ERR_TIMEOUT (last error \"%s\")", ts, dt,
               st != MDL_OK ? msg : "");
        EXPECT(&r, st == MDL_OK || (dt > 1.5 && dt < 5.0), "gave up after %.1f s with MDL_TIMEOUT=2", dt);
        if (g_rank == 0) {
            printf("      rank 0: %s after %.1f s: \"%s\"\n", ts, dt, msg);
            fflush(stdout);
        }
        if (st == MDL_ERR_TIMEOUT) {
            /* Poisoned: local answers, no MPI. */
            double a = now();
            expect_code(&r, "mdl_fetch_batch after the timeout", mdl_fetch_batch(w.h, ids, 4, buf, need, offs),
                        MDL_ERR_STATE);
            uint8_t *data;
            uint64_t *off;
            uint64_t n = tc_build_shard(&w.ds, g_rank, &data, &off);
            expect_code(&r, "mdl_register_shard after the timeout", mdl_register_shard(w.h, data, off, n),
                        MDL_ERR_STATE);
            free(data);
            free(off);
            expect_code(&r, "mdl_epoch_begin after the timeout", mdl_epoch_begin(w.h, 1, 0, 4, 1, 0), MDL_ERR_STATE);
            expect_code(&r, "mdl_finalize after the timeout", mdl_finalize(&w.h), MDL_OK);
            EXPECT(&r, w.h == NULL, "handle not NULL after mdl_finalize");
            EXPECT(&r, now() - a < 1.0, "the calls on the poisoned handle took %.1f s", now() - a);
        } else {
            /* Already a failure; the ranks are out of step, so this finalize may itself
               wait for MDL_TIMEOUT. */
            mdl_finalize(&w.h);
        }
        free(buf);
    } else {
        finish_init_attempt(&r, &w.h);
    }
    tc_dataset_free(&w.ds);
    case_end(name, &r);
}

/* ---------- main ---------- */

static void limit_address_space(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
            break;
    fclose(f);
    if (!kb)
        return;
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    rlim_t want = (rlim_t)(kb * 1024ull + (2ull << 30));
    if (rl.rlim_max == RLIM_INFINITY || want < rl.rlim_max) {
        rl.rlim_cur = want;
        setrlimit(RLIMIT_AS, &rl);
    }
}

int main(int argc, char **argv)
{
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &g_provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    g_last = g_size - 1;
    int rlimit = 1;
    for (int i = 1; i < argc; i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--seed") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v))
            g_seed = v, i++;
        else if (!strcmp(argv[i], "--case-timeout") && i + 1 < argc && !tc_parse_u64(argv[i + 1], &v))
            g_case_timeout = (unsigned)v, i++;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            g_only = argv[++i];
        else if (!strcmp(argv[i], "--list"))
            g_list = 1;
        else if (!strcmp(argv[i], "--no-rlimit"))
            rlimit = 0;
        else {
            if (g_rank == 0)
                fprintf(stderr,
                        "usage: %s [--seed S] [--case-timeout SECONDS] [--only PREFIX[|PREFIX...]] [--list] [--no-rlimit]\n",
                        argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    g_rng = tc_rng_make(g_seed, (uint64_t)g_rank);
    watchdog_install();
    if (rlimit)
        limit_address_space();
    if (g_rank == 0 && !g_list) {
        printf("hardening_test: %d ranks, faulty rank %d, thread level %s, seed %llu%s%s\n", g_size, g_last,
               g_provided >= MPI_THREAD_MULTIPLE ? "MULTIPLE" : "below MULTIPLE", (unsigned long long)g_seed,
               g_only ? ", only " : "", g_only ? g_only : "");
        fflush(stdout);
    }

    boundary_cases();
    calibration_cases();
    case_register_during_epoch(0);
    case_register_during_epoch(2);
    case_remote_text();
    case_no_doubled_prefix();
    char name[200];
    snprintf(name, sizeof name, "onesided/1,000,000 ids one-sided on rank %d (16-byte samples) -> byte-exact", g_last);
    case_onesided_many(1000000, NULL, name);
    case_onesided_many(5000, "1",
                       "onesided/MDL_MAX_GETS_IN_FLIGHT=1 on every rank: 5,000 ids one-sided -> byte-exact");
    case_two_threads();
    case_setter_racing_fetches();
    case_local_calls_while_prefetching();
    /* Last: these can hang (settings not yet agreed) or abort (invalid handles). */
    settings_cases();
    case_init_f_invalid(123456);
    case_init_f_invalid(-1);
    case_timeout();

    const char *dname = "errors/no message read in this run had a doubled prefix";
    if (selected(dname)) {
        cres r;
        case_begin(dname, &r);
        EXPECT(&r, g_doubled == 0, "%d messages with a doubled prefix (see above)", g_doubled);
        case_end(dname, &r);
    }

    if (g_rank == 0 && !g_list) {
        printf("hardening_test: %d passed, %d failed, %d skipped\n", g_passed, g_failed, g_skipped);
        fflush(stdout);
    }
    alarm(g_case_timeout);
    g_case = "MPI_Finalize";
    MPI_Finalize();
    return g_failed ? 1 : 0;
}
