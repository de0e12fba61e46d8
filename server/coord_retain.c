/*
 * coord_retain.c - retention of finished jobs: deleting one (DELETE /v1/jobs/{id}), the
 * --job-ttl sweep of the ticker, and the whole kept log of a job as one gzip stream
 * (GET /v1/jobs/{id}/logs:download).
 *
 * Invariants:
 *   1. Only a finished job (SUCCEEDED, FAILED, CANCELLED) is deleted, and all of it goes in
 *      one store transaction: its row, events, metrics, logs and marks. Memory changes only
 *      after that transaction committed (invariant 1 of coord.c).
 *   2. Ids are never reused: c->jobs[id - 1] of a deleted id stays NULL, c->njobs (the
 *      highest id given out) does not go down, and the store keeps the highest deleted id
 *      (schema/003_retention.sql), so that coord_load() pads c->jobs up to it at the next
 *      start even when the newest job was the one deleted.
 *   3. c->live never holds a deleted job: a job is taken out of it before it is freed.
 *   4. The sweep is bounded per tick: it looks at RETAIN_SCAN_MAX ids at most, from where the
 *      last tick stopped, deletes RETAIN_DELETE_MAX jobs at most, and stops deleting once
 *      RETAIN_BUDGET_MS of real time went by (after its first deletion), since each deletion
 *      holds c->mu for its transaction.
 *   5. A log stream holds no lock between reads: each read takes c->mu and the store's mutex
 *      for one page of at most RETAIN_PAGE_LINES lines (about 1 MiB), so its memory is that
 *      page and zlib's state, whatever the size of the log. It ends at the last line stored
 *      when it was opened, and fails (the download is cut) when the job is deleted meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/coord_internal.h"

#define RETAIN_SCAN_MAX   4096
#define RETAIN_DELETE_MAX 100
#define RETAIN_BUDGET_MS  100
#define RETAIN_PAGE_LINES 256
/* A page: its lines and their newlines (LOG_LINE_MAX bytes each at most). */
#define RETAIN_PAGE_MAX ((size_t)RETAIN_PAGE_LINES * (LOG_LINE_MAX + 1))

void coord_jobs_pad(struct coord *c, int64_t upto)
{
    if (upto <= 0 || (uint64_t)upto <= c->njobs)
        return;
    XGROW(c->jobs, (size_t)upto, c->capjobs, 64);
    while (c->njobs < (uint64_t)upto)
        c->jobs[c->njobs++] = NULL;
}

static int coord_job_delete_txn(struct coord *c, void *ctx, struct ddp_err *e)
{
    const struct job *j = ctx;
    return store_job_delete(c->store, j->id, e);
}

/* Deletes finished job j from the store, then from memory (j is freed). 0, or
 * DDP_EINTERNAL with err set and nothing changed. */
static int coord_job_drop(struct coord *c, struct job *j, struct ddp_err *err)
{
    struct ddp_err e;
    if (coord_txn_run(c, coord_job_delete_txn, j, &e) != 0)
        return err_set(err, DDP_EINTERNAL, "cannot delete job j-%lld: %s", (long long)j->id, e.msg);
    /* a job that just ended may still sit in c->live until the next compaction */
    size_t k = 0;
    for (size_t i = 0; i < c->nlive; i++)
        if (c->live[i] != j)
            c->live[k++] = c->live[i];
    c->nlive = k;
    c->jobs[j->id - 1] = NULL;
    coord_job_free(j);
    return 0;
}

int coord_delete_job(struct coord *c, int64_t id, const char *by, char **out, struct ddp_err *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    if (!j) {
        rc = err_set(err, DDP_ENOTFOUND, "job j-%lld not found", (long long)id);
        goto out;
    }
    if (!jobstate_is_terminal(j->st.state)) {
        rc = err_set(err, DDP_EPRECOND,
                     "job j-%lld is %s: only a finished job (SUCCEEDED, FAILED, CANCELLED) is "
                     "deleted; cancel it first",
                     (long long)id, jobstate_name(j->st.state));
        goto out;
    }
    char *text = coord_job_text(c, j);
    const char *state = jobstate_name(j->st.state);
    rc = coord_job_drop(c, j, err);
    if (rc) {
        log_error("%s", err->msg);
        free(text);
        goto out;
    }
    log_info("job deleted id=j-%lld state=%s by=%s", (long long)id, state, by);
    *out = text;
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* 1 when j is a finished job older than the job TTL at wall time wall. */
static int coord_retain_due(const struct coord *c, const struct job *j, int64_t wall)
{
    if (!j || !jobstate_is_terminal(j->st.state))
        return 0;
    int64_t since = j->st.finished_at ? j->st.finished_at : j->created_at;
    return wall - since >= c->opts.job_ttl_ms;
}

void coord_retain_sweep(struct coord *c, int64_t now)
{
    if (c->opts.job_ttl_ms <= 0 || c->njobs == 0)
        return;
    int64_t wall = coord_wall(c, now);
    int64_t until = time_deadline_ms(RETAIN_BUDGET_MS);
    size_t scanned = 0, deleted = 0;
    int64_t lo = 0, hi = 0;
    struct ddp_err e;
    while (scanned < RETAIN_SCAN_MAX && scanned < c->njobs && deleted < RETAIN_DELETE_MAX) {
        if (c->retain_next >= c->njobs)
            c->retain_next = 0;
        struct job *j = c->jobs[c->retain_next];
        scanned++;
        if (!coord_retain_due(c, j, wall)) {
            c->retain_next++;
            continue;
        }
        if (deleted > 0 && time_left_ms(until) <= 0)
            break; /* the next tick goes on from this job */
        int64_t id = j->id;
        if (coord_job_drop(c, j, &e) != 0) {
            log_warn_limited(1000, "--job-ttl: %s (trying again at the next tick)", e.msg);
            break;
        }
        c->retain_next++;
        if (!deleted || id < lo)
            lo = id;
        if (!deleted || id > hi)
            hi = id;
        deleted++;
    }
    if (deleted)
        log_info("--job-ttl: deleted %zu finished jobs older than %lld s (ids j-%lld..j-%lld)",
                 deleted, (long long)(c->opts.job_ttl_ms / 1000), (long long)lo, (long long)hi);
}

/* ---- the kept log as gzip ------------------------------------------------------------ */

struct coord_log_gz {
    struct coord *c;
    int64_t id;
    int64_t after; /* the seq of the last line read */
    int64_t upto;  /* the last line stored when the stream was opened */
    z_stream z;
    struct buf page;
    int in_done; /* every line up to upto was read */
    int done;    /* the gzip trailer was written */
};

int coord_log_gz_open(struct coord *c, int64_t id, struct coord_log_gz **out, struct ddp_err *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    int64_t upto = j ? j->log_seq : 0;
    pthread_mutex_unlock(&c->mu);
    if (!j)
        return err_set(err, DDP_ENOTFOUND, "job j-%lld not found", (long long)id);
    struct coord_log_gz *g = xcalloc(1, sizeof(*g));
    g->c = c;
    g->id = id;
    g->upto = upto;
    buf_init_max(&g->page, RETAIN_PAGE_MAX);
    /* 15 + 16: a gzip header and trailer around the deflate data (zlib's deflateInit2) */
    if (deflateInit2(&g->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
        Z_OK) {
        buf_release(&g->page);
        free(g);
        return err_set(err, DDP_EINTERNAL, "zlib: cannot start a gzip stream");
    }
    *out = g;
    return rc;
}

/* Reads the next page of lines into g->page. 0, or -1 (the job is gone, the store failed). */
static int coord_log_gz_fill(struct coord_log_gz *g)
{
    struct coord *c = g->c;
    struct ddp_err e;
    int64_t last = g->after;
    int n = 0, rc = 0;
    buf_reset(&g->page);
    pthread_mutex_lock(&c->mu);
    if (!coord_job(c, g->id)) {
        rc = err_set(&e, DDP_ENOTFOUND, "the job was deleted");
    } else {
        pthread_mutex_lock(&c->store_mu);
        rc = store_logs_text(c->store, g->id, g->after, g->upto, RETAIN_PAGE_LINES, &g->page, &last,
                             &n, &e);
        pthread_mutex_unlock(&c->store_mu);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc) {
        log_warn("logs:download of j-%lld cut: %s", (long long)g->id, e.msg);
        return -1;
    }
    g->after = last;
    g->in_done = n < RETAIN_PAGE_LINES || last >= g->upto;
    g->z.next_in = (Bytef *)g->page.data;
    g->z.avail_in = (uInt)g->page.len;
    return 0;
}

long coord_log_gz_read(struct coord_log_gz *g, char *buf, size_t size)
{
    if (g->done || size == 0)
        return 0;
    if (size > (1u << 30))
        size = 1u << 30;
    g->z.next_out = (Bytef *)buf;
    g->z.avail_out = (uInt)size;
    /* Until some output is there: deflate may take a whole page and keep it for later. Each
     * round takes a page or finishes the stream, so the rounds are bounded by the pages. */
    while (g->z.avail_out == size && !g->done) {
        if (g->z.avail_in == 0 && !g->in_done && coord_log_gz_fill(g) != 0)
            return -1;
        int flush = g->in_done && g->z.avail_in == 0 ? Z_FINISH : Z_NO_FLUSH;
        int zr = deflate(&g->z, flush);
        if (zr == Z_STREAM_END)
            g->done = 1;
        else if (zr != Z_OK && zr != Z_BUF_ERROR)
            return -1;
    }
    return (long)(size - g->z.avail_out);
}

void coord_log_gz_close(struct coord_log_gz *g)
{
    if (!g)
        return;
    deflateEnd(&g->z);
    buf_release(&g->page);
    free(g);
}
