/*
 * trace.h - a bounded in-memory event trace of the training step, written to a file at the
 * end (--trace FILE), for the overlap test and for looking at a step by eye.
 *
 * File format: one event a line, "<t_ns> <step> <kind> <index>", t_ns monotonic
 * nanoseconds, kind one of bwd_begin / bwd_end (index = layer), ar_issue / ar_done (index =
 * bucket), step_end (index 0), and on the sharded paths fwd_begin (index = layer),
 * ag_issue / ag_done and rs_issue / rs_done (all-gather and reduce-scatter, index = unit),
 * and wait (the training thread starts waiting for the collective whose *_done follows).
 * Events past max_events are counted and dropped.
 */
#ifndef DDP_TRACE_H
#define DDP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

enum trace_kind {
    TRACE_BWD_BEGIN = 0,
    TRACE_BWD_END = 1,
    TRACE_AR_ISSUE = 2,
    TRACE_AR_DONE = 3,
    TRACE_STEP_END = 4,
    TRACE_FWD_BEGIN = 5,
    TRACE_AG_ISSUE = 6,
    TRACE_AG_DONE = 7,
    TRACE_RS_ISSUE = 8,
    TRACE_RS_DONE = 9,
    TRACE_WAIT = 10,
};

struct trace;

/* Caller frees with trace_free(). */
struct trace *trace_new(size_t max_events);
void trace_free(struct trace *t);
/* Sets the step number recorded with the following events. t may be NULL (no-op). */
void trace_set_step(struct trace *t, uint64_t step);
/* Records an event now. t may be NULL (no-op). */
void trace_event(struct trace *t, enum trace_kind kind, int index);
size_t trace_count(const struct trace *t);
/* Writes the events to path (atomically). */
int trace_write(const struct trace *t, const char *path, struct ddp_err *err);
const char *trace_kind_name(enum trace_kind kind);

#endif
