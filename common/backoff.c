/*
 * backoff.c - capped exponential backoff (see backoff.h).
 */
#include "common/backoff.h"

#include "common/timeutil.h"

void backoff_init(struct backoff *b, int64_t min_ms, int64_t max_ms)
{
    b->min_ms = min_ms > 0 ? min_ms : 1;
    b->max_ms = max_ms >= b->min_ms ? max_ms : b->min_ms;
    b->cur_ms = b->min_ms;
}

int64_t backoff_next(struct backoff *b)
{
    int64_t w = b->cur_ms;
    b->cur_ms = b->cur_ms > b->max_ms / 2 ? b->max_ms : b->cur_ms * 2;
    return w;
}

void backoff_reset(struct backoff *b)
{
    b->cur_ms = b->min_ms;
}

void backoff_sleep(struct backoff *b, int64_t deadline_ms)
{
    int64_t w = backoff_next(b), left = time_left_ms(deadline_ms);
    time_sleep_ms(w < left ? w : left);
}
