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

#endif
