/*
 * coord_beat.c - a heartbeat's logs and metrics: deduplication by the agent's seq (one mark
 * per job, generation and rank), job-wide seqs, caps, and the group commit that writes many
 * beats' rows in one transaction without holding c->mu (invariant 1 of coord.c); and the
 * drains a beat ends.
 *
 * Invariants:
 *   1. A mark, and a job's log_seq, metric_seq and last_metrics, advance in memory when
 *      their rows join the open batch; their disk_* twins hold the values as last committed
 *      and advance when the batch that wrote them committed.
 *   2. At most two batches are uncommitted: the one a leader commits (c->flush) and the open
 *      one (c->open), prepared on top of it. Batches commit in the order they were opened.
 *   3. A beat is answered 200 only once the batch holding its rows - or, for a beat of
 *      duplicates only, the newest batch that may hold them - has committed.
 *   4. A failed commit fails its batch and the open one on top of it (its marks were
 *      advanced past the failed rows), and puts every job they touched back to its disk_*
 *      values; with nothing else uncommitted, memory then equals the disk again. Their beats
 *      are answered 500, their agents keep the data and send it again, and the next batch
 *      stores it: one failed commit (a disk full for a while) costs a re-send, no restart.
 *   5. Marks are kept for the job's current and previous generation only
 *      (coord_marks_floor(): the previous one's workers may still ship their last lines while
 *      the next generation runs); the transition that starts a generation drops the older
 *      ones in memory and in the store, and data of a generation below the floor, which
 *      could no longer be deduplicated, is acknowledged and not stored. So marks, the marks
 *      table and the search in every beat stay bounded by two generations' ranks, however
 *      often a job restarts.
 */
#include "server/coord_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "server/metrics.h"

int64_t coord_marks_floor(const struct job *j)
{
    return (int64_t)j->st.generation - 1;
}

void coord_marks_drop(struct job *j)
{
    int64_t floor = coord_marks_floor(j);
    size_t k = 0;
    for (size_t i = 0; i < j->nmarks; i++)
        if (j->marks[i].gen >= floor)
            j->marks[k++] = j->marks[i];
    j->nmarks = k;
}

struct mark *coord_mark(struct job *j, int64_t gen, int rank, int create)
{
    for (size_t i = 0; i < j->nmarks; i++)
        if (j->marks[i].gen == gen && j->marks[i].rank == rank)
            return &j->marks[i];
    if (!create)
        return NULL;
    XGROW(j->marks, j->nmarks + 1, j->capmarks, 8);
    struct mark *m = &j->marks[j->nmarks++];
    m->gen = gen;
    m->rank = rank;
    m->last_seq = 0;
    m->disk_seq = 0;
    return m;
}

void coord_beat_refused(struct coord *c, int ni, const struct job *j, const char *what)
{
    metrics_beat_refused();
    log_warn_limited(1000, "node %s sent %s for a rank of job j-%lld it does not hold; dropped",
                     c->nodes[ni]->name, what, (long long)j->id);
}

/* Cuts s to at most LOG_LINE_MAX bytes on a UTF-8 character boundary. */
static char *coord_cut_line(const char *s)
{
    size_t n = strlen(s);
    if (n <= LOG_LINE_MAX)
        return xstrdup(s);
    n = LOG_LINE_MAX;
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
        n--;
    return xstrndup(s, n);
}

static struct data_row *coord_row(struct data_batch *d, int kind, int64_t job)
{
    XGROW(d->rows, d->n + 1, d->cap, 32);
    struct data_row *r = &d->rows[d->n++];
    memset(r, 0, sizeof(*r));
    r->kind = kind;
    r->job = job;
    return r;
}

void coord_batch_release(struct data_batch *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->rows[i].text);
        json_decref(d->rows[i].metrics);
    }
    free(d->rows);
    d->rows = NULL;
    d->n = d->cap = 0;
}

/* Phase 1 of a beat's logs and metrics, under c->mu: deduplicates by seq, gives the new lines
 * their job-wide seq, advances the marks and counters in memory and lists the rows to write.
 * Returns the number of beat entries that referred to a known job (new or duplicate). */
static size_t coord_beat_data_prepare(struct coord *c, int ni, const struct beat *b, int64_t now,
                                      struct data_batch *d)
{
    int64_t wall = coord_wall(c, now);
    size_t known = 0;
    struct job **touched = xcalloc(b->nlogs + b->nmetrics + 1, sizeof(*touched));
    int *touched_metrics = xcalloc(b->nlogs + b->nmetrics + 1, sizeof(int));
    size_t nt = 0;
    for (size_t i = 0; i < b->nlogs + b->nmetrics; i++) {
        int is_log = i < b->nlogs;
        int64_t jid = is_log ? b->logs[i].job : b->metrics[i - b->nlogs].job;
        int64_t gen = is_log ? b->logs[i].generation : b->metrics[i - b->nlogs].generation;
        struct job *j = coord_job(c, jid);
        if (!j || gen > j->st.generation)
            continue;
        /* only the node that held the rank in that generation speaks for it; metrics are
         * rank 0's */
        if (!coord_node_held_rank(j, ni, gen, is_log ? b->logs[i].rank : -1)) {
            coord_beat_refused(c, ni, j, is_log ? "log lines" : "metrics");
            continue;
        }
        known++;
        if (gen < coord_marks_floor(j))
            continue; /* its marks are gone: it could not be deduplicated */
        size_t t = 0;
        while (t < nt && touched[t] != j)
            t++;
        if (is_log) {
            const struct beat_log *l = &b->logs[i];
            size_t n = json_array_size(l->lines);
            struct mark *m = coord_mark(j, l->generation, l->rank, 0);
            int64_t last = m ? m->last_seq : 0;
            if (l->seq + (int64_t)n - 1 <= last)
                continue;
            for (size_t k = 0; k < n; k++) {
                if (l->seq + (int64_t)k <= last)
                    continue;
                struct data_row *r = coord_row(d, ROW_LOG, j->id);
                r->seq = ++j->log_seq;
                r->gen = l->generation;
                r->rank = l->rank;
                r->text = coord_cut_line(json_string_value(json_array_get(l->lines, k)));
            }
            m = coord_mark(j, l->generation, l->rank, 1);
            m->last_seq = l->seq + (int64_t)n - 1;
            struct data_row *r = coord_row(d, ROW_MARK, j->id);
            r->gen = l->generation;
            r->rank = l->rank;
            r->seq = m->last_seq;
        } else {
            const struct beat_metric *mt = &b->metrics[i - b->nlogs];
            struct mark *m = coord_mark(j, mt->generation, -1, 0);
            if (m && mt->seq <= m->last_seq)
                continue;
            struct data_row *r = coord_row(d, ROW_METRIC, j->id);
            r->seq = ++j->metric_seq;
            r->time = wall;
            r->gen = mt->generation;
            r->text = jsonx_dumps(mt->metric);
            m = coord_mark(j, mt->generation, -1, 1);
            m->last_seq = mt->seq;
            r = coord_row(d, ROW_MARK, j->id);
            r->gen = mt->generation;
            r->rank = -1;
            r->seq = m->last_seq;
            json_decref(j->last_metrics);
            j->last_metrics = json_deep_copy(mt->metric);
            coord_job_dirty(j);
        }
        if (t == nt)
            touched[nt++] = j;
        if (!is_log)
            touched_metrics[t] = 1;
    }
    for (size_t t = 0; t < nt; t++) {
        struct job *j = touched[t];
        if (j->log_seq > c->opts.log_cap)
            coord_row(d, ROW_LOG_TRIM, j->id)->seq = j->log_seq - c->opts.log_cap;
        if (touched_metrics[t] && j->metric_seq > c->opts.metric_cap)
            coord_row(d, ROW_METRIC_TRIM, j->id)->seq = j->metric_seq - c->opts.metric_cap;
        struct data_row *r = coord_row(d, ROW_JOB_DATA, j->id);
        r->seq = j->log_seq;
        r->metric_seq = j->metric_seq;
        if (touched_metrics[t] && j->last_metrics) {
            r->text = jsonx_dumps(j->last_metrics);
            r->metrics = json_incref(j->last_metrics);
        }
    }
    free(touched);
    free(touched_metrics);
    return known;
}

/* Phase 2, without c->mu (run by coord_txn_run(), under c->store_mu): the rows of batch ctx,
 * in the open transaction. */
static int coord_batch_write(struct coord *c, void *ctx, struct ddp_err *e)
{
    const struct data_batch *d = ctx;
    int rc = 0;
    for (size_t i = 0; !rc && i < d->n; i++) {
        const struct data_row *r = &d->rows[i];
        switch (r->kind) {
        case ROW_LOG:
            rc = store_log_add(c->store, r->job, r->seq, r->gen, r->rank, r->text, e);
            break;
        case ROW_METRIC:
            rc = store_metric_add(c->store, r->job, r->seq, r->time, r->gen, r->text, e);
            break;
        case ROW_MARK:
            rc = store_mark_put(c->store, r->job, r->gen, r->rank, r->seq, e);
            break;
        case ROW_LOG_TRIM:
            rc = store_log_trim(c->store, r->job, r->seq, e);
            break;
        case ROW_METRIC_TRIM:
            rc = store_metric_trim(c->store, r->job, r->seq, e);
            break;
        default:
            rc = store_job_data(c->store, r->job, r->seq, r->metric_seq, r->text, e);
            break;
        }
    }
    return rc;
}

/* Moves the rows of src to the end of dst (src is left empty). */
static void coord_batch_move(struct data_batch *dst, struct data_batch *src)
{
    for (size_t i = 0; i < src->n; i++) {
        struct data_row *r = coord_row(dst, src->rows[i].kind, src->rows[i].job);
        *r = src->rows[i];
    }
    free(src->rows);
    memset(src, 0, sizeof(*src));
}

/* Batch d committed: the disk_* values of what it wrote advance (invariant 1). */
static void coord_batch_committed(struct coord *c, const struct data_batch *d)
{
    for (size_t i = 0; i < d->n; i++) {
        const struct data_row *r = &d->rows[i];
        struct job *j = coord_job(c, r->job);
        if (!j)
            continue;
        if (r->kind == ROW_MARK) {
            /* NULL: a generation that started meanwhile dropped it */
            struct mark *m = coord_mark(j, r->gen, (int)r->rank, 0);
            if (m && r->seq > m->disk_seq)
                m->disk_seq = r->seq;
        } else if (r->kind == ROW_JOB_DATA) {
            if (r->seq > j->disk_log_seq)
                j->disk_log_seq = r->seq;
            if (r->metric_seq > j->disk_metric_seq)
                j->disk_metric_seq = r->metric_seq;
            if (r->metrics) {
                json_decref(j->disk_metrics);
                j->disk_metrics = json_incref(r->metrics);
            }
        }
    }
}

/* Batch d failed, or was prepared on a batch that failed: every job it touched goes back
 * to what the disk holds (invariant 4). Each touched job has a ROW_JOB_DATA row in d. */
static void coord_batch_undo(struct coord *c, const struct data_batch *d)
{
    for (size_t i = 0; i < d->n; i++) {
        struct job *j = d->rows[i].kind == ROW_JOB_DATA ? coord_job(c, d->rows[i].job) : NULL;
        if (!j)
            continue;
        j->log_seq = j->disk_log_seq;
        j->metric_seq = j->disk_metric_seq;
        if (j->last_metrics != j->disk_metrics) {
            json_decref(j->last_metrics);
            j->last_metrics = json_incref(j->disk_metrics);
            coord_job_dirty(j);
        }
        size_t k = 0;
        for (size_t m = 0; m < j->nmarks; m++) {
            if (!j->marks[m].disk_seq)
                continue; /* made by the failed rows: the disk has none */
            j->marks[k] = j->marks[m];
            j->marks[k++].last_seq = j->marks[m].disk_seq;
        }
        j->nmarks = k;
    }
}

/* Settles batch d as failed with message why, refused when its commit was refused before it
 * began (its rows are freed, waiters woken later). */
static void coord_batch_fail(struct coord *c, struct data_batch *d, const char *why, int refused)
{
    coord_batch_undo(c, d);
    d->state = BATCH_FAILED;
    d->refused = refused;
    snprintf(d->why, sizeof(d->why), "%s", why);
    coord_batch_release(d);
}

/* The leader's part: takes the open batch, commits it without c->mu (under c->store_mu)
 * and settles it, and the open batch prepared on top of it when it failed. Called and
 * returns with c->mu held, c->open set and c->flush NULL. */
static void coord_batch_flush(struct coord *c)
{
    struct data_batch *take = c->open;
    struct ddp_err e;
    c->open = NULL;
    c->flush = take;
    pthread_mutex_unlock(&c->mu);
    int rc = coord_txn_run(c, coord_batch_write, take, &e);
    pthread_mutex_lock(&c->mu);
    if (!rc) {
        coord_batch_committed(c, take);
        take->state = BATCH_DONE;
        coord_batch_release(take);
    } else {
        size_t lines = 0;
        for (size_t i = 0; i < take->n; i++)
            lines += take->rows[i].kind == ROW_LOG || take->rows[i].kind == ROW_METRIC;
        log_warn_limited(1000,
                         "cannot store %zu log lines and metrics of heartbeats (their beats "
                         "fail, the agents send them again): %s",
                         lines, e.msg);
        /* Refused before it began: so is the batch above it, which would have followed it. */
        int refused = coord_refusal_seen();
        struct data_batch *above = c->open;
        c->open = NULL;
        coord_batch_fail(c, take, e.msg, refused);
        if (above)
            coord_batch_fail(c, above, e.msg, refused);
    }
    c->flush = NULL;
    pthread_cond_broadcast(&c->data_cond);
}

/* Stores the beat's new log lines and metrics with group commit. Called and returns with
 * c->mu held. The rows join the open batch (c->open); one waiting beat at a time becomes
 * the leader, takes the whole batch and commits it without c->mu (under c->store_mu), so the
 * fsync neither stalls the readers nor is paid once per beat. A beat returns when the batch
 * holding its rows - or, for a beat of duplicates only, the newest batch that may hold them
 * (batches commit in order) - has settled, so a 200 always means "on disk". When that batch
 * failed (invariant 4) the beat fails with DDP_EINTERNAL, and its data is stored when the
 * agent sends it again; when that commit was refused before it began (the leadership was
 * lost), the beat's thread is marked refused, so that it is answered not_leader. */
int coord_beat_data(struct coord *c, int ni, const struct beat *b, int64_t now, struct ddp_err *err)
{
    struct data_batch d = {0};
    struct data_batch *mine = NULL;
    int rc = 0;
    size_t known = coord_beat_data_prepare(c, ni, b, now, &d);
    if (d.n > 0) {
        if (!c->open)
            c->open = xcalloc(1, sizeof(*c->open));
        coord_batch_move(c->open, &d);
        mine = c->open;
    } else if (known) {
        mine = c->open ? c->open : c->flush;
    }
    if (!mine)
        return 0;
    mine->refs++;
    while (mine->state == BATCH_OPEN) {
        if (c->flush || c->open != mine)
            pthread_cond_wait(&c->data_cond, &c->mu);
        else
            coord_batch_flush(c);
    }
    if (mine->state == BATCH_FAILED) {
        rc = err_set(err, DDP_EINTERNAL, "cannot store logs and metrics (send them again): %s",
                     mine->why);
        if (mine->refused)
            coord_refusal_mark();
    }
    if (--mine->refs == 0)
        free(mine);
    return rc;
}

/* Clears the drains of node ni for jobs whose old workers the beat no longer reports
 * running. Returns 1 when a drain ended. */
int coord_beat_drains(struct coord *c, int ni, const struct beat *b)
{
    int changed = 0;
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state != JOB_RESTARTING && j->st.state != JOB_CANCELLING)
            continue;
        for (int p = 0; p < j->st.npl; p++) {
            if (j->st.pl[p].node != ni || !j->st.pl[p].draining)
                continue;
            int running = 0;
            for (size_t k = 0; k < b->nworkers; k++)
                if (b->workers[k].job == j->id && b->workers[k].generation == j->st.generation &&
                    !b->workers[k].exited)
                    running = 1;
            if (!running) {
                j->st.pl[p].draining = 0;
                changed = 1;
            }
        }
    }
    return changed;
}
