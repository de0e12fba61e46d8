/*
 * timeutil.c - clocks and sleeping.
 */
#include "common/timeutil.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

int64_t time_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t time_mono_ms(void)
{
    return time_mono_ns() / 1000000LL;
}

int64_t time_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000LL;
}

void time_sleep_ms(int64_t ms)
{
    if (ms <= 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void time_format_rfc3339(int64_t wall_ms, char *buf, size_t size)
{
    time_t sec = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&sec, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(wall_ms % 1000));
}

int64_t time_deadline_ms(int64_t timeout_ms)
{
    if (timeout_ms < 0)
        return INT64_MAX;
    int64_t now = time_mono_ms();
    return timeout_ms > INT64_MAX - now ? INT64_MAX : now + timeout_ms;
}

int64_t time_left_ms(int64_t deadline_ms)
{
    int64_t left = deadline_ms - time_mono_ms();
    return left > 0 ? left : 0;
}

int64_t time_deadline_min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
