/*
 * backoff.h - capped exponential backoff for retry loops: the first wait is min ms, each
 * next one doubles, never above max; reset after a success.
 */
#ifndef DDP_COMMON_BACKOFF_H
#define DDP_COMMON_BACKOFF_H

#include <stdint.h>

struct backoff {
    int64_t min_ms, max_ms, cur_ms;
};

void backoff_init(struct backoff *b, int64_t min_ms, int64_t max_ms);
/* The wait to take now; the next call returns twice as much, up to max_ms. */
int64_t backoff_next(struct backoff *b);
/* Back to min_ms (after a success). */
void backoff_reset(struct backoff *b);
/* Sleeps backoff_next(b) ms, but not past the monotonic deadline (time_mono_ms() units);
 * returns at once when the deadline has passed. */
void backoff_sleep(struct backoff *b, int64_t deadline_ms);

#endif
