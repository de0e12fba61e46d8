/*
 * log.h - one line per event on stderr:
 *
 *   2026-11-29T13:58:16.123Z INFO  ddpd: job submitted id=j-3 nnodes=2:2
 *
 * The level is checked before anything is formatted. Thread safe: each line is written
 * with one write(2). The component is set once per process (log_init) and may be
 * overridden per call with log_msg().
 */
#ifndef DDP_COMMON_LOG_H
#define DDP_COMMON_LOG_H

#include <stdint.h>

enum log_level { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_OFF = 4 };

/* Sets the process's component name (borrowed: must outlive the process's logging) and
 * the minimum level. The level also comes from DDP_LOG_LEVEL (debug|info|warn|error|off)
 * when that is set. */
void log_init(const char *component, enum log_level level);

void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* Parses "debug", "info", "warn", "error", "off"; returns -1 for anything else. */
int log_level_parse(const char *s);

void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_debug(...)                       \
    do {                                     \
        if (log_get_level() <= LOG_DEBUG)    \
            log_msg(LOG_DEBUG, __VA_ARGS__); \
    } while (0)
#define log_info(...)                       \
    do {                                    \
        if (log_get_level() <= LOG_INFO)    \
            log_msg(LOG_INFO, __VA_ARGS__); \
    } while (0)
#define log_warn(...)                       \
    do {                                    \
        if (log_get_level() <= LOG_WARN)    \
            log_msg(LOG_WARN, __VA_ARGS__); \
    } while (0)
#define log_error(...)                       \
    do {                                     \
        if (log_get_level() <= LOG_ERROR)    \
            log_msg(LOG_ERROR, __VA_ARGS__); \
    } while (0)

/*
 * Warnings that can repeat many times a second (a flood of refused connections, strangers on a
 * port): at most one line per interval from one call site, and the next line that passes says
 * how many were left out. A struct log_limit starts zeroed; log_limit_pass is thread safe.
 */
struct log_limit {
    _Atomic int64_t next_ms; /* monotonic ms from which the next line may pass */
    _Atomic long left_out;   /* lines held back since the last one that passed */
};
/* 1 when a line may be written now (*left_out: how many were held back before it), else 0
 * (and the line is counted as held back). */
int log_limit_pass(struct log_limit *l, int64_t interval_ms, long *left_out);

#define log_warn_limited(interval_ms, ...)                                                         \
    do {                                                                                           \
        static struct log_limit log_limit_;                                                        \
        long log_left_;                                                                            \
        if (log_get_level() <= LOG_WARN && log_limit_pass(&log_limit_, interval_ms, &log_left_)) { \
            if (log_left_)                                                                         \
                log_msg(LOG_WARN,                                                                  \
                        "%ld more warnings like the next were left out (at most one "              \
                        "a %lld ms)",                                                              \
                        log_left_, (long long)(interval_ms));                                      \
            log_msg(LOG_WARN, __VA_ARGS__);                                                        \
        }                                                                                          \
    } while (0)

#endif
