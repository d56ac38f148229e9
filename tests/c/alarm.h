/*
 * alarm.h: a test's own watchdog. After alarm(seconds), one line "[rank R] TIMEOUT in
 * case NAME" and exit code 3, so that a hang names its case. Needs _POSIX_C_SOURCE
 * (sigaction) before the first include, and common.h.
 */
#ifndef MDL_TESTS_ALARM_H
#define MDL_TESTS_ALARM_H

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "common.h"

/* Set by the test: the handler reads them (async-signal-safe reads only). */
static int tc_alarm_rank;
static const char *volatile tc_alarm_case = "startup";

static inline void tc_alarm_handler(int sig)
{
    (void)sig;
    char line[256];
    size_t k = 0;
    tc_sig_puts(line, &k, sizeof line, "[rank ");
    tc_sig_putu(line, &k, sizeof line, (unsigned long long)tc_alarm_rank);
    tc_sig_puts(line, &k, sizeof line, "] TIMEOUT in case ");
    tc_sig_puts(line, &k, sizeof line, tc_alarm_case);
    line[k++] = '\n';
    ssize_t ignored = write(2, line, k);
    (void)ignored;
    _exit(3);
}

static inline void tc_alarm_install(int rank)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tc_alarm_handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    tc_alarm_rank = rank;
}

#endif /* MDL_TESTS_ALARM_H */
