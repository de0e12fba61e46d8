/*
 * coord_sched.c - generations and scheduling glue: starting a generation where the scheduler
 * (sched.c, a pure function) places it, ending one, draining the old workers, finishing a
 * job, and scale-up.
 *
 * Invariants: a job in RESTARTING or CANCELLING keeps its last placement, and its draining
 * entries keep their slots until they are cleared (invariant 3 of coord.c); the scheduler's
 * view (struct cand) is rebuilt from the model at each coord_schedule(). Everything here
 * runs with c->mu held.
 */
#include "server/coord_internal.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/xalloc.h"
#include "server/sched.h"

/* Ends the current generation of a RUNNING (or, for a cancel, RESTARTING) job: its
 * assignments leave the desired sets and the job waits for the workers to go. */
int coord_end_generation(struct coord *c, struct job *j, int kind, const char *reason, int64_t now,
                         struct ddp_err *err)
{
    struct job_st next = j->st;
    next.state = kind == END_CANCEL ? JOB_CANCELLING : JOB_RESTARTING;
    snprintf(next.reason, sizeof(next.reason), "%s", reason);
    if (kind != END_CANCEL) {
        next.end_kind = kind;
        snprintf(next.end_reason, sizeof(next.end_reason), "%s", reason);
    }
    int was_running = j->st.state == JOB_RUNNING;
    int rc = coord_commit(c, j, &next, now, err);
    if (rc)
        return rc;
    if (kind != END_CANCEL) {
        j->cause_prio = kind == END_FAILURE ? j->fail_prio : CAUSE_NODE + 1;
        j->end_port = kind == END_FAILURE && j->fail_port;
        j->end_preempted = kind == END_FAILURE && j->fail_preempted;
        j->ended_at = now;
    }
    for (int i = 0; i < j->st.npl; i++) {
        struct node *n = c->nodes[j->st.pl[i].node];
        if (was_running)
            j->st.pl[i].draining = !coord_node_gone(c, n, now);
        coord_bump(n);
    }
    if (was_running)
        j->drain_deadline = now + (int64_t)j->spec.grace_period_s * 1000 + c->opts.drain_extra_ms;
    return 0;
}

/* A failure of the generation that just ended, learnt while it drains: if it is a likelier
 * root cause than the one recorded, it becomes the job's end_reason (the FAILED reason) and
 * an event says so, before the next generation starts. */
void coord_refine(struct coord *c, struct job *j, int prio, const char *cause, int64_t now)
{
    if (j->st.state != JOB_RESTARTING || j->st.end_kind != END_FAILURE || prio <= j->cause_prio)
        return;
    struct job_st next = j->st;
    snprintf(next.reason, sizeof(next.reason), "root cause: %.560s; %.400s followed", cause,
             j->st.end_reason);
    snprintf(next.end_reason, sizeof(next.end_reason), "%s", cause);
    if (coord_commit(c, j, &next, now, NULL) == 0)
        j->cause_prio = prio;
}

/* Records a failure of the current generation of a RUNNING job; the likeliest root cause
 * wins (then the earliest). */
int coord_fail(struct job *j, int prio, const char *reason)
{
    if (j->fail_reason[0] && prio <= j->fail_prio)
        return 0;
    snprintf(j->fail_reason, sizeof(j->fail_reason), "%s", reason);
    j->fail_prio = prio;
    j->fail_port = 0;
    j->fail_preempted = 0;
    j->fail_err_time = 0;
    return 1;
}

int coord_failure_charged(const struct job *j)
{
    return j->st.end_kind == END_FAILURE && j->cause_prio != CAUSE_NODE && !j->end_port &&
           !j->end_preempted;
}

int coord_end_noticed(struct coord *c, struct job *j, const char *reason, int64_t now)
{
    char why[REASON_MAX];
    snprintf(why, sizeof(why), "%.800s; notice %s, stopped %d s later", reason,
             j->spec.preempt_signal, j->spec.preempt_grace_s);
    int rc = coord_end_generation(c, j, END_SCALE, why, now, NULL);
    if (rc)
        return rc;
    j->notice = 1;
    j->drain_deadline += (int64_t)j->spec.preempt_grace_s * 1000;
    return 0;
}

int64_t coord_backoff_ms(const struct job *j)
{
    if (!coord_failure_charged(j) || j->st.restarts == 0)
        return 0;
    int shift = j->st.restarts - 1 < 6 ? j->st.restarts - 1 : 6;
    int64_t ms = (int64_t)1000 << shift;
    return ms < 60000 ? ms : 60000;
}

/* RESTARTING / CANCELLING: clears drains that are over and finishes the job when it is
 * due. A RESTARTING job that may restart is left for coord_schedule(). */
void coord_progress(struct coord *c, struct job *j, int64_t now)
{
    if (j->st.state != JOB_RESTARTING && j->st.state != JOB_CANCELLING)
        return;
    for (int i = 0; i < j->st.npl; i++)
        if (j->st.pl[i].draining &&
            (coord_node_gone(c, c->nodes[j->st.pl[i].node], now) || now >= j->drain_deadline))
            j->st.pl[i].draining = 0;
    if (coord_draining(j))
        return;
    struct job_st next = j->st;
    if (j->st.state == JOB_CANCELLING) {
        next.state = JOB_CANCELLED;
        /* the cancel's own reason names who cancelled ("cancelled by alice") */
        if (strncmp(j->st.reason, "cancelled", 9) != 0)
            snprintf(next.reason, sizeof(next.reason), "cancelled");
    } else if (j->st.end_kind == END_FINAL ||
               (coord_failure_charged(j) && j->st.restarts >= j->spec.max_restarts)) {
        next.state = JOB_FAILED;
        snprintf(next.reason, sizeof(next.reason), "%s", j->st.end_reason);
    } else {
        return;
    }
    next.finished_at = coord_wall(c, now);
    coord_commit(c, j, &next, now, NULL);
}

/* A job that is ready for a (new) generation: PENDING, or RESTARTING with nothing left to
 * drain and a restart allowed. */
static int coord_wants_start(const struct job *j)
{
    if (j->st.state == JOB_PENDING)
        return 1;
    if (j->st.state != JOB_RESTARTING || coord_draining(j))
        return 0;
    if (j->st.end_kind == END_FINAL)
        return 0;
    if (coord_failure_charged(j) && j->st.restarts >= j->spec.max_restarts)
        return 0;
    return 1;
}

struct cand {
    struct sched_node *sn; /* one per node; NULL name = not READY */
    int **ports;           /* used master ports per node */
    size_t *nports, *capports;
    size_t n;
    size_t *by_name; /* node indexes in name order (sched_by_name) */
};

static void coord_cand_add_port(struct cand *k, int node, int port)
{
    XGROW(k->ports[node], k->nports[node] + 1, k->capports[node], 8);
    k->ports[node][k->nports[node]++] = port;
    k->sn[node].used_ports = k->ports[node];
    k->sn[node].nused = k->nports[node];
}

int coord_node_gpus(const struct node *n)
{
    const char *v = json_string_value(json_object_get(n->labels, "gpus"));
    if (!v || !*v || strlen(v) > 3)
        return 0;
    int g = 0;
    for (const char *p = v; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        g = g * 10 + (*p - '0');
    }
    return g;
}

/* The GPUs one entry of j's placement holds on node sn. */
static int coord_entry_gpus(const struct job *j, const struct sched_node *sn)
{
    return j->spec.nproc * sched_gpus_per_proc(j->spec.gpus_per_proc, sn->gpus);
}

static struct sched_job coord_sched_job(const struct job *j, int nmax)
{
    struct sched_job sj = {j->spec.nmin, nmax, j->spec.nproc, j->spec.gpus_per_proc};
    return sj;
}

/* The scheduler's view: READY nodes with their free slots and GPUs and used ports. Nodes
 * that are not READY get free_slots -1 so they are never chosen. */
static void coord_cand_build(struct coord *c, struct cand *k)
{
    k->n = c->nnodes;
    k->sn = xcalloc(k->n + 1, sizeof(*k->sn));
    k->ports = xcalloc(k->n + 1, sizeof(*k->ports));
    k->nports = xcalloc(k->n + 1, sizeof(*k->nports));
    k->capports = xcalloc(k->n + 1, sizeof(*k->capports));
    for (size_t i = 0; i < k->n; i++) {
        struct node *n = c->nodes[i];
        k->sn[i].name = n->name;
        /* a cordoned or drained node takes no new work */
        k->sn[i].free_slots =
            nodestate_is_up(n->state) && n->admin == NODE_SCHEDULABLE ? n->slots : -1;
        k->sn[i].port_lo = n->port_lo;
        k->sn[i].port_hi = n->port_hi;
        k->sn[i].gpus = coord_node_gpus(n);
        k->sn[i].free_gpus = k->sn[i].gpus;
    }
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        for (int p = 0; p < j->st.npl; p++) {
            const struct job_node *jn = &j->st.pl[p];
            if (!coord_entry_holds(j, jn))
                continue;
            if (k->sn[jn->node].free_slots >= 0)
                k->sn[jn->node].free_slots -= j->spec.nproc;
            k->sn[jn->node].free_gpus -= coord_entry_gpus(j, &k->sn[jn->node]);
            if (j->st.master_port)
                coord_cand_add_port(k, jn->node, j->st.master_port);
        }
    }
    k->by_name = sched_by_name(k->sn, k->n);
}

static void coord_cand_release(struct cand *k)
{
    for (size_t i = 0; i < k->n; i++)
        free(k->ports[i]);
    free(k->ports);
    free(k->nports);
    free(k->capports);
    free(k->by_name);
    free(k->sn);
}

/* 1 while a job j preempted still drains. */
static int coord_victims_draining(struct coord *c, const struct job *j)
{
    for (size_t i = 0; i < c->nlive; i++)
        if (c->live[i]->preempted_by == j->id && coord_draining(c->live[i]))
            return 1;
    return 0;
}

/* Tries to start the next generation of j on the candidates, on at most nmax nodes (its
 * quota may allow fewer than the spec's MAX); updates them on success. */
static int coord_start(struct coord *c, struct job *j, struct cand *k, int nmax, int64_t now)
{
    struct sched_job sj = coord_sched_job(j, nmax);
    size_t cap = k->n < (size_t)nmax ? k->n : (size_t)nmax;
    struct sched_placement pl = {.idx = xcalloc(cap + 1, sizeof(size_t))};
    int avoid_node = -1;
    if (j->st.npl > 0 && j->st.master_port) {
        avoid_node = j->st.pl[0].node;
        k->sn[avoid_node].avoid_port = j->st.master_port;
    }
    int rc = sched_place(&sj, k->sn, k->n, k->by_name, &pl);
    if (avoid_node >= 0)
        k->sn[avoid_node].avoid_port = 0;
    if (rc) {
        free(pl.idx);
        return rc;
    }
    struct job_st next = j->st;
    int first = j->st.state == JOB_PENDING;
    next.pl = xcalloc(pl.n, sizeof(*next.pl));
    next.npl = (int)pl.n;
    for (size_t i = 0; i < pl.n; i++) {
        next.pl[i].node = (int)pl.idx[i];
        next.pl[i].group_rank = (int)i;
    }
    next.state = JOB_RUNNING;
    next.generation = j->st.generation + 1;
    if (!first && coord_failure_charged(j))
        next.restarts = j->st.restarts + 1;
    next.world_size = (int)pl.n * j->spec.nproc;
    snprintf(next.master_addr, sizeof(next.master_addr), "%s", c->nodes[pl.idx[0]]->address);
    next.master_port = pl.master_port;
    if (first)
        snprintf(next.reason, sizeof(next.reason), "started on %zu node%s (world size %d)", pl.n,
                 pl.n == 1 ? "" : "s", next.world_size);
    else
        snprintf(next.reason, sizeof(next.reason),
                 "generation %d started on %zu node%s (world size %d, restarts %d/%d)",
                 next.generation, pl.n, pl.n == 1 ? "" : "s", next.world_size, next.restarts,
                 j->spec.max_restarts);
    next.end_kind = END_NONE;
    next.end_reason[0] = '\0';
    if (!next.started_at)
        next.started_at = coord_wall(c, now);
    free(pl.idx);
    /* a token of the generation's own (coord_internal.h) */
    char was[sizeof(j->token)];
    memcpy(was, j->token, sizeof(was));
    if (rand_hex(j->token, JOB_TOKEN_BYTES) != 0) {
        log_error("job j-%lld: no randomness for its generation's token", (long long)j->id);
        free(next.pl);
        return DDP_EINTERNAL;
    }
    rc = coord_commit(c, j, &next, now, NULL);
    if (rc) {
        memcpy(j->token, was, sizeof(was));
        return rc;
    }
    free(j->rank_exit);
    j->fail_reason[0] = '\0';
    j->fail_prio = CAUSE_NONE;
    j->fail_port = 0;
    j->fail_preempted = 0;
    j->preempted_by = 0;
    j->notice = 0;
    j->hang_first = 0;
    free(j->prog);
    j->prog = xcalloc((size_t)j->st.world_size + 1, sizeof(*j->prog));
    j->rank_exit = xcalloc((size_t)j->st.world_size + 1, sizeof(int));
    for (int r = 0; r < j->st.world_size; r++)
        j->rank_exit[r] = RANK_RUNNING;
    for (int i = 0; i < j->st.npl; i++) {
        int ni = j->st.pl[i].node;
        k->sn[ni].free_slots -= j->spec.nproc;
        k->sn[ni].free_gpus -= coord_entry_gpus(j, &k->sn[ni]);
        coord_cand_add_port(k, ni, j->st.master_port);
        coord_bump(c->nodes[ni]);
    }
    return 0;
}

/* Sets why j waits (coord_internal.h: wait_code etc.); marks its JSON dirty on a change. */
static void coord_wait_set(struct job *j, const char *code, int pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void coord_wait_set(struct job *j, const char *code, int pos, const char *fmt, ...)
{
    char msg[sizeof(j->wait_msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (strcmp(j->wait_code, code) == 0 && strcmp(j->wait_msg, msg) == 0 && j->wait_pos == pos)
        return;
    snprintf(j->wait_code, sizeof(j->wait_code), "%s", code);
    snprintf(j->wait_msg, sizeof(j->wait_msg), "%s", msg);
    j->wait_pos = pos;
    coord_job_dirty(j);
}

/* A job left waiting holds the nodes it fits (and its node_selector allows) from every job
 * of a lower priority, and from scale-ups: *pending_min_nproc, the fewest slots a waiting
 * job wants on a node, drops to its nproc. */
static void coord_hold_fitting(struct coord *c, const struct cand *k, const struct job *j,
                               int *reserved, int *pending_min_nproc)
{
    if (j->spec.nproc < *pending_min_nproc)
        *pending_min_nproc = j->spec.nproc;
    const json_t *sel = j->spec.node_selector;
    int selective = sel && json_object_size(sel) > 0;
    struct sched_job sj = coord_sched_job(j, j->spec.nmax);
    for (size_t n = 0; n < k->n; n++)
        if (sched_node_fits(&sj, &k->sn[n]) && reserved[n] < j->spec.priority &&
            (!selective || coord_node_matches(c->nodes[n], sel)))
            reserved[n] = j->spec.priority;
}

/* While j's victims drain, the nodes their preemption made fit j are kept for j: a victim
 * whose workers are gone first must not take its slots back (it waits, RESTARTING, at a
 * lower priority) before the others' are free and j fits. Only those nodes: the victims'
 * others (a shrunk one's nodes left, nodes j may not use) stay open to them. */
static void coord_hold_for_preemptor(const struct job *j, int *reserved)
{
    for (int i = 0; i < j->nhold; i++)
        if (reserved[j->hold[i]] < j->spec.priority)
            reserved[j->hold[i]] = j->spec.priority;
}

/* j makes room no more (it started, or its victims are gone): its hold ends. */
static void coord_preempting_done(struct job *j)
{
    j->preempting = 0;
    free(j->hold);
    j->hold = NULL;
    j->nhold = 0;
}

/* Victim order: those that can shrink (above MIN) first, then the lowest priority, then the
 * newest. */
static int coord_victim_cmp(const void *pa, const void *pb)
{
    const struct job *a = *(const struct job *const *)pa, *b = *(const struct job *const *)pb;
    int sa = a->st.npl > a->spec.nmin, sb = b->st.npl > b->spec.nmin;
    if (sa != sb)
        return sa ? -1 : 1;
    if (a->spec.priority != b->spec.priority)
        return a->spec.priority < b->spec.priority ? -1 : 1;
    return a->id > b->id ? -1 : a->id < b->id;
}

/* Preemption for j, which waits for Resources: ends the generation of RUNNING jobs of a lower
 * priority whose nodes j could use - shrinking elastic ones (by their nodes above MIN) before
 * stopping any, lowest priority and newest first - when that frees enough nodes for j's MIN;
 * nothing when it would not. Not charged to the victims (END_SCALE): they re-form on what is
 * left, or wait, and grow back when room returns. off[n]: nodes j may not use. Returns the
 * number of victims. */
static int coord_preempt_for(struct coord *c, struct job *j, const struct cand *k,
                             const int *reserved, const char *off, int64_t now)
{
    int nproc = j->spec.nproc, have = 0;
    struct sched_job sj = coord_sched_job(j, j->spec.nmax);
    char *fits = xcalloc(k->n + 1, 1), *eligible = xcalloc(k->n + 1, 1);
    for (size_t n = 0; n < k->n; n++) {
        struct node *nd = c->nodes[n];
        eligible[n] = !off[n] && !nd->removed && nodestate_is_up(nd->state) &&
                      nd->admin == NODE_SCHEDULABLE && reserved[n] <= j->spec.priority &&
                      nd->slots >= nproc && (k->sn[n].gpus > 0 || sj.gpus_per_proc <= 0) &&
                      k->sn[n].gpus >= nproc * sched_gpus_per_proc(sj.gpus_per_proc, k->sn[n].gpus);
        fits[n] = eligible[n] && sched_node_fits(&sj, &k->sn[n]);
        have += fits[n];
    }
    int need = j->spec.nmin - have, nv = 0;
    struct job **v = xcalloc(c->nlive + 1, sizeof(*v));
    for (size_t i = 0; need > 0 && i < c->nlive; i++) {
        struct job *x = c->live[i];
        if (x->st.state == JOB_RUNNING && x->spec.priority < j->spec.priority && x != j)
            v[nv++] = x;
    }
    qsort(v, (size_t)nv, sizeof(*v), coord_victim_cmp);
    /* Node by node, each made to fit by the fewest victims there: the victims on it are taken
     * in victim order until it fits (none when it cannot), then any the node fits without is
     * given back (the later ones first). A victim gives up at most its room of nodes: in the
     * shrink phase its nodes above MIN, when it stops all of them. */
    int *took = xcalloc((size_t)nv + 1, sizeof(int));
    int *on = xcalloc((size_t)nv + 1, sizeof(int)); /* the victims tried on one node */
    char *picked = xcalloc((size_t)nv + 1, 1);
    int *held = xcalloc(k->n + 1, sizeof(int)); /* the nodes made to fit, for j's hold */
    int gained = 0, nheld = 0;
    for (int phase = 0; phase < 2 && gained < need; phase++) {
        for (size_t n = 0; n < k->n && gained < need; n++) {
            if (!eligible[n] || fits[n])
                continue;
            int want_gpus = nproc * sched_gpus_per_proc(sj.gpus_per_proc, k->sn[n].gpus);
            int slots = k->sn[n].free_slots, gpus = k->sn[n].free_gpus, non = 0, ok = 0;
            /* victims already stopped for another node first: their slots here cost no
             * job more (within their room); then new ones */
            for (int again = 1; again >= 0 && !ok; again--)
                for (int i = 0; i < nv && !ok; i++) {
                    struct job *x = v[i];
                    int shrink = x->st.npl > x->spec.nmin;
                    int room = shrink ? x->st.npl - x->spec.nmin : x->st.npl;
                    if (picked[i] != again || (!again && phase == 0 && !shrink) ||
                        took[i] >= room || coord_group_rank(x, (int)n) < 0)
                        continue;
                    slots += x->spec.nproc;
                    gpus += coord_entry_gpus(x, &k->sn[n]);
                    on[non++] = i;
                    ok = slots >= nproc && gpus >= want_gpus;
                }
            if (!ok)
                continue;
            /* the last one taken is needed; new ones (taken last) are given back first */
            for (int t = non - 2; t >= 0; t--) {
                struct job *x = v[on[t]];
                int g = coord_entry_gpus(x, &k->sn[n]);
                if (slots - x->spec.nproc >= nproc && gpus - g >= want_gpus) {
                    slots -= x->spec.nproc;
                    gpus -= g;
                    on[t] = -1;
                }
            }
            for (int t = 0; t < non; t++)
                if (on[t] >= 0) {
                    picked[on[t]] = 1;
                    took[on[t]]++;
                }
            fits[n] = 1;
            gained++;
            held[nheld++] = (int)n;
        }
    }
    int ended = 0, chosen = 0;
    for (int i = 0; i < nv; i++)
        chosen += picked[i];
    char victims[800] = "";
    if (gained >= need && chosen > 0) {
        for (int i = 0; i < nv; i++) {
            if (!picked[i])
                continue;
            struct job *x = v[i];
            char why[REASON_MAX];
            snprintf(why, sizeof(why),
                     "preempted for j-%lld (priority %d > %d): %s; it resumes from its checkpoint "
                     "on the nodes left, or when room returns, at no restart's cost",
                     (long long)j->id, j->spec.priority, x->spec.priority,
                     x->st.npl > x->spec.nmin ? "shrinks" : "stops");
            if (coord_end_noticed(c, x, why, now) == 0) {
                x->preempted_by = j->id;
                size_t voff = strlen(victims);
                snprintf(victims + voff, sizeof(victims) - voff, "%sj-%lld (priority %d, %s)",
                         ended ? ", " : "", (long long)x->id, x->spec.priority,
                         x->st.npl > x->spec.nmin ? "shrinks" : "stops");
                ended++;
            }
        }
        if (ended) {
            /* the preemptor's own events say whom it preempted */
            struct job_st note = j->st;
            snprintf(note.reason, sizeof(note.reason),
                     "preempts %.700s (priority %d): needs %d more node(s) for its MIN", victims,
                     j->spec.priority, need);
            if (coord_commit(c, j, &note, now, NULL) != 0)
                log_warn("job j-%lld: cannot record whom it preempts", (long long)j->id);
            j->preempting = 1;
            free(j->hold);
            j->hold = held;
            j->nhold = nheld;
            held = NULL;
            log_info("job j-%lld (priority %d) preempts %d job(s) for %d node(s)", (long long)j->id,
                     j->spec.priority, ended, need);
        }
    }
    free(picked);
    free(held);
    free(on);
    free(took);
    free(v);
    free(fits);
    free(eligible);
    return ended;
}

/* Queue order: higher priority first, then submit order (id). */
static int coord_queue_cmp(const void *pa, const void *pb)
{
    const struct job *a = *(const struct job *const *)pa, *b = *(const struct job *const *)pb;
    if (a->spec.priority != b->spec.priority)
        return a->spec.priority > b->spec.priority ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Ready nodes of k that fit j now (slots, GPUs), not ruled out (off[i]); with reserved
 * (may be NULL), only those no waiting job of a higher priority than j's holds back. */
static int coord_fitting(const struct cand *k, const int *reserved, const char *off,
                         const struct job *j)
{
    struct sched_job sj = coord_sched_job(j, j->spec.nmax);
    int n = 0;
    for (size_t i = 0; i < k->n; i++)
        if (sched_node_fits(&sj, &k->sn[i]) && !off[i] &&
            (!reserved || reserved[i] <= j->spec.priority))
            n++;
    return n;
}

/* " and 4 GPUs each (gpus_per_proc 2 x 2 workers; ...)" for a job that asks GPUs, else ""
 * (auto counts GPUs too, 1 per worker on a GPU node, and is not named: a CPU node fits it). */
static void coord_gpu_need(const struct job *j, char *buf, size_t len)
{
    buf[0] = '\0';
    if (j->spec.gpus_per_proc > 0)
        snprintf(buf, len,
                 " and %d GPUs each (gpus_per_proc %d x %d workers; nodes without GPUs "
                 "never fit)",
                 j->spec.gpus_per_proc * j->spec.nproc, j->spec.gpus_per_proc, j->spec.nproc);
}

/* The jobs that want a generation, in queue order (priority, then submit order). A job that
 * does not fit does not block later ones of its priority (backfill), but it holds back the
 * nodes it could use from every job of a lower priority, so a big important job is not
 * starved by a stream of small ones. A failure's restart waits out its backoff; a job of a
 * user at its quota (slots held) waits, and one near it gets at most what is left. Then
 * scale-up of RUNNING jobs below MAX onto READY nodes that no waiting job (PENDING, or
 * RESTARTING below MIN) can use. Each job left waiting says why (wait_code). */
void coord_schedule(struct coord *c, int64_t now)
{
    struct cand k;
    coord_cand_build(c, &k);
    int pending_min_nproc = INT_MAX;
    struct job **q = xcalloc(c->nlive + 1, sizeof(*q));
    int *reserved = xcalloc(k.n + 1, sizeof(int)); /* highest priority holding the node */
    /* per job of the queue, reused: the nodes its selector rules out, and the free slots of
     * the nodes hidden from it while it is placed */
    char *off = xcalloc(k.n + 1, 1);
    int *saved = xcalloc(k.n + 1, sizeof(int));
    for (size_t i = 0; i < k.n; i++)
        reserved[i] = INT_MIN;
    size_t nq = 0;
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (coord_wants_start(j))
            q[nq++] = j;
        else if (j->wait_code[0])
            coord_wait_set(j, "", 0, "%s", "");
    }
    qsort(q, nq, sizeof(*q), coord_queue_cmp);
    int pos = 0, preempt_draining = 0;
    /* the lowest priority running: a job at or below it has no one to preempt, so the scan
     * for victims (over every live job) is skipped for it */
    int low_running = INT_MAX;
    for (size_t i = 0; i < c->nlive; i++) {
        if (c->live[i]->preempted_by && coord_draining(c->live[i]))
            preempt_draining = 1;
        if (c->live[i]->st.state == JOB_RUNNING && c->live[i]->spec.priority < low_running)
            low_running = c->live[i]->spec.priority;
    }
    struct quota_tally *tally = NULL; /* made by coord_quota_of when a quota applies */
    for (size_t i = 0; i < nq; i++) {
        struct job *j = q[i];
        int64_t wait = j->st.state == JOB_RESTARTING ? j->ended_at + coord_backoff_ms(j) - now : 0;
        if (wait > 0) {
            coord_wait_set(
                j, "Backoff", 0, "restart %d of %d after a backoff of %.0f s (failures of the job)",
                j->st.restarts + 1, j->spec.max_restarts, (double)coord_backoff_ms(j) / 1000.0);
            /* it waits as a queued job does: the nodes it fits (the ones it just left, most
             * likely) go neither to a lower priority nor to a scale-up meanwhile */
            coord_hold_fitting(c, &k, j, reserved, &pending_min_nproc);
            continue;
        }
        int nmax = j->spec.nmax;
        if (j->preempting)
            nmax = j->spec.nmin; /* its victims shrink to make room for MIN, not for MAX */
        struct sched_quota qt;
        const char *grp;
        int bound;
        coord_quota_of(c, &tally, j->owner, &qt, &grp);
        int fit = sched_quota_nodes(&qt, j->spec.nproc, nmax, &bound);
        if (fit < j->spec.nmin) {
            pos++;
            if (bound == SCHED_QUOTA_GROUP)
                coord_wait_set(j, "Quota", pos,
                               "group %s (of user %s) holds %lld of its %lld slots; the job needs "
                               "%d more",
                               grp, j->owner, qt.group_held, qt.group_max,
                               j->spec.nmin * j->spec.nproc);
            else
                coord_wait_set(j, "Quota", pos,
                               "user %s holds %lld of its %lld slots; the job needs %d more",
                               j->owner, qt.user_held, qt.user_max, j->spec.nmin * j->spec.nproc);
            continue;
        }
        nmax = fit;
        /* the nodes its node_selector rules out */
        const json_t *sel = j->spec.node_selector;
        int selective = sel && json_object_size(sel) > 0, eligible = 0;
        for (size_t n = 0; n < k.n; n++) {
            off[n] = selective && !coord_node_matches(c->nodes[n], sel);
            eligible += !off[n] && !c->nodes[n]->removed;
        }
        if (selective && eligible == 0) {
            pos++;
            char *want = jsonx_dumps(sel);
            coord_wait_set(j, "NodeSelector", pos,
                           "no registered node has the labels %.120s; it waits for one", want);
            free(want);
            continue;
        }
        /* hide the nodes held back for higher priorities, and those ruled out */
        for (size_t n = 0; n < k.n; n++) {
            saved[n] = k.sn[n].free_slots;
            if (reserved[n] > j->spec.priority || off[n])
                k.sn[n].free_slots = -1;
        }
        int rc = coord_start(c, j, &k, nmax, now);
        for (size_t n = 0; n < k.n; n++)
            if (reserved[n] > j->spec.priority || off[n])
                k.sn[n].free_slots = saved[n];
        if (rc == DDP_EINTERNAL)
            continue; /* it fit but could not be recorded (logged): the next pass tries again,
                       * with no reservation or preemption made for it now */
        if (rc == 0) {
            if (j->wait_code[0])
                coord_wait_set(j, "", 0, "%s", "");
            coord_preempting_done(j);
            coord_tally_add(c, tally, j);
            continue;
        }
        int all = coord_fitting(&k, NULL, off, j);
        int open = coord_fitting(&k, reserved, off, j);
        char gneed[160];
        coord_gpu_need(j, gneed, sizeof(gneed));
        pos++;
        /* A job is making room only while a job it preempted still drains: once they are
         * gone and it did not start (a higher priority took the room), it may preempt again. */
        if (j->preempting && !coord_victims_draining(c, j))
            coord_preempting_done(j);
        /* One preemption at a time: while victims drain, nothing more is stopped. */
        int making_room = preempt_draining || j->preempting;
        if (!making_room && open < j->spec.nmin && all < j->spec.nmin &&
            j->spec.priority > low_running && coord_preempt_for(c, j, &k, reserved, off, now) > 0)
            preempt_draining = making_room = 1;
        if (all >= j->spec.nmin && open < j->spec.nmin)
            coord_wait_set(j, "Priority", pos,
                           "needs %d node%s x %d slots; %d fit%s but are held for jobs of a "
                           "higher priority",
                           j->spec.nmin, j->spec.nmin == 1 ? "" : "s", j->spec.nproc, all,
                           all == 1 ? "s" : "");
        else
            coord_wait_set(j, "Resources", pos,
                           "needs %d node%s x %d free slots%s; %d node%s fit%s now%s", j->spec.nmin,
                           j->spec.nmin == 1 ? "" : "s", j->spec.nproc, gneed, open,
                           open == 1 ? "" : "s", open == 1 ? "s" : "",
                           making_room ? "; jobs of a lower priority make room" : "");
        /* a job left waiting (PENDING, or RESTARTING below MIN) keeps nodes it could use
         * from being taken by a scale-up or by lower priorities */
        coord_hold_fitting(c, &k, j, reserved, &pending_min_nproc);
        if (j->preempting)
            coord_hold_for_preemptor(j, reserved);
    }
    free(q);
    free(reserved);
    free(off);
    free(saved);
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state != JOB_RUNNING || j->st.npl >= j->spec.nmax)
            continue;
        int any_exited = 0;
        for (int r = 0; r < j->st.world_size && j->rank_exit; r++)
            if (j->rank_exit[r] != RANK_RUNNING)
                any_exited = 1;
        if (any_exited)
            continue; /* finishing: do not disturb */
        struct sched_quota qt;
        const char *grp;
        coord_quota_of(c, &tally, j->owner, &qt, &grp);
        if (sched_quota_nodes(&qt, j->spec.nproc, 1, NULL) < 1)
            continue; /* growing would pass its owner's quota, or its group's */
        struct sched_job sj = coord_sched_job(j, j->spec.nmax);
        for (size_t ni = 0; ni < k.n; ni++) {
            if (!sched_node_fits(&sj, &k.sn[ni]) || k.sn[ni].free_slots >= pending_min_nproc)
                continue;
            if (!coord_node_matches(c->nodes[ni], j->spec.node_selector))
                continue;
            int in = 0;
            for (int p = 0; p < j->st.npl; p++)
                if (j->st.pl[p].node == (int)ni)
                    in = 1;
            if (in)
                continue;
            char reason[128];
            snprintf(reason, sizeof(reason), "scale up: %s joined", c->nodes[ni]->name);
            if (coord_end_generation(c, j, END_SCALE, reason, now, NULL) == 0)
                k.sn[ni].free_slots = -1; /* claimed for this job's next generation */
            break;
        }
    }
    coord_tally_free(tally);
    coord_cand_release(&k);
}

/* Ends a RUNNING job's generation for a recorded failure, or finishes it when every rank
 * exited 0. Returns 1 when the job changed. */
int coord_check_ranks(struct coord *c, struct job *j, int64_t now)
{
    if (j->st.state != JOB_RUNNING)
        return 0;
    if (j->fail_reason[0])
        return coord_end_generation(c, j, END_FAILURE, j->fail_reason, now, NULL) == 0;
    if (!j->rank_exit || j->st.world_size == 0)
        return 0;
    for (int r = 0; r < j->st.world_size; r++)
        if (j->rank_exit[r] != 0)
            return 0;
    struct job_st next = j->st;
    next.state = JOB_SUCCEEDED;
    snprintf(next.reason, sizeof(next.reason), "all %d ranks exited 0", j->st.world_size);
    next.finished_at = coord_wall(c, now);
    if (coord_commit(c, j, &next, now, NULL) != 0)
        return 0;
    for (int p = 0; p < j->st.npl; p++)
        coord_bump(c->nodes[j->st.pl[p].node]);
    return 1;
}
