/*
 * trace.c - fixed-capacity event array; recording never allocates (so tracing does not
 * perturb the step it measures beyond a clock read).
 */
#include "ddp/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

struct trace_ev {
    int64_t t_ns;
    uint64_t step;
    int kind;
    int index;
};

struct trace {
    size_t cap, len, dropped;
    uint64_t step;
    struct trace_ev *ev;
};

struct trace *trace_new(size_t max_events)
{
    struct trace *t = xcalloc(1, sizeof(*t));
    t->cap = max_events;
    t->ev = xmalloc((max_events ? max_events : 1) * sizeof(*t->ev));
    return t;
}

void trace_free(struct trace *t)
{
    if (!t)
        return;
    free(t->ev);
    free(t);
}

void trace_set_step(struct trace *t, uint64_t step)
{
    if (t)
        t->step = step;
}

void trace_event(struct trace *t, enum trace_kind kind, int index)
{
    if (!t)
        return;
    if (t->len == t->cap) {
        t->dropped++;
        return;
    }
    struct trace_ev *e = &t->ev[t->len++];
    e->t_ns = time_mono_ns();
    e->step = t->step;
    e->kind = (int)kind;
    e->index = index;
}

size_t trace_count(const struct trace *t)
{
    return t ? t->len : 0;
}

const char *trace_kind_name(enum trace_kind kind)
{
    static const char *const names[] = {"bwd_begin", "bwd_end",   "ar_issue", "ar_done",
                                        "step_end",  "fwd_begin", "ag_issue", "ag_done",
                                        "rs_issue",  "rs_done",   "wait"};
    return (unsigned)kind < sizeof(names) / sizeof(names[0]) ? names[kind] : "unknown";
}

int trace_write(const struct trace *t, const char *path, struct ddp_err *err)
{
    size_t cap = t->len * 64 + 128, used = 0;
    char *buf = xmalloc(cap);
    for (size_t i = 0; i < t->len; i++) {
        const struct trace_ev *e = &t->ev[i];
        int k = snprintf(buf + used, cap - used, "%lld %llu %s %d\n", (long long)e->t_ns,
                         (unsigned long long)e->step, trace_kind_name((enum trace_kind)e->kind),
                         e->index);
        if (k < 0 || (size_t)k >= cap - used)
            break;
        used += (size_t)k;
    }
    if (t->dropped) {
        int k = snprintf(buf + used, cap - used, "# dropped %zu events\n", t->dropped);
        if (k > 0 && (size_t)k < cap - used)
            used += (size_t)k;
    }
    int rc = fs_write_atomic(path, buf, used, 0644, err);
    free(buf);
    return rc;
}
