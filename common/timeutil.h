/*
 * timeutil.h - clocks and sleeping.
 */
#ifndef DDP_COMMON_TIMEUTIL_H
#define DDP_COMMON_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Monotonic milliseconds (CLOCK_MONOTONIC); only differences mean anything. */
int64_t time_mono_ms(void);
/* Monotonic nanoseconds. */
int64_t time_mono_ns(void);
/* Wall-clock milliseconds since the Unix epoch. */
int64_t time_wall_ms(void);
/* Sleeps ms milliseconds, resuming after signals. */
void time_sleep_ms(int64_t ms);
/* Deadlines are absolute time_mono_ms() values. The deadline timeout_ms from now
 * (timeout_ms < 0: INT64_MAX, no deadline). */
int64_t time_deadline_ms(int64_t timeout_ms);
/* Milliseconds left until deadline, 0 once it has passed. */
int64_t time_left_ms(int64_t deadline_ms);
/* The earlier of two deadlines. */
int64_t time_deadline_min(int64_t a, int64_t b);
/* Writes wall-clock ms as RFC 3339 UTC ("2026-11-29T13:58:16.123Z") into buf (>= 32 bytes). */
void time_format_rfc3339(int64_t wall_ms, char *buf, size_t size);

#endif
