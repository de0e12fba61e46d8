/*
 * log.c - timestamped single-line logging to stderr.
 */
#include "common/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/termsafe.h"
#include "common/timeutil.h"

static const char *log_component = "ddp";
static volatile int log_level_min = LOG_INFO;

static const char *const log_names[] = {"DEBUG", "INFO", "WARN", "ERROR", "OFF"};

int log_level_parse(const char *s)
{
    static const char *const lower[] = {"debug", "info", "warn", "error", "off"};
    for (int i = 0; i <= LOG_OFF; i++)
        if (s && strcmp(s, lower[i]) == 0)
            return i;
    return -1;
}

void log_init(const char *component, enum log_level level)
{
    log_component = component;
    log_level_min = level;
    int env = log_level_parse(getenv("DDP_LOG_LEVEL"));
    if (env >= 0)
        log_level_min = env;
}

void log_set_level(enum log_level level)
{
    log_level_min = level;
}

enum log_level log_get_level(void)
{
    return (enum log_level)log_level_min;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    if ((int)level < log_level_min || level >= LOG_OFF)
        return;
    char line[4096];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line),
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s %s: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, log_names[level], log_component);
    if (n < 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    /* One event, one line: fold embedded newlines; every other control character (a job's
     * name or a worker's line quoted in a reason) is shown as \xNN, never acts on a
     * terminal. */
    for (size_t i = (size_t)n; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    char out[sizeof(line) + 64];
    memcpy(out, line, (size_t)n);
    termsafe_escape(line + n, len - (size_t)n, out + n, sizeof(out) - (size_t)n - 1);
    len = strlen(out);
    out[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, out, len);
    (void)w;
}

int log_limit_pass(struct log_limit *l, int64_t interval_ms, long *left_out)
{
    int64_t now = time_mono_ms(), next = atomic_load(&l->next_ms);
    if (now >= next && atomic_compare_exchange_strong(&l->next_ms, &next, now + interval_ms)) {
        *left_out = atomic_exchange(&l->left_out, 0);
        return 1;
    }
    atomic_fetch_add(&l->left_out, 1);
    return 0;
}
