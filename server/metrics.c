/*
 * metrics.c - Prometheus counters of ddpd and the /metrics page.
 *
 * Invariants:
 *   1. Every family is declared with # HELP and # TYPE once, its samples follow it; counters
 *      end in _total, units are in the names (_seconds, _bytes); a histogram's buckets are
 *      cumulative and end with le="+Inf" equal to _count (what promtool check metrics wants).
 *   2. Cardinality is bounded: route labels are the route table's patterns (never a raw
 *      path), methods a fixed list, per-job series only for live jobs (coord_stats()), per-node
 *      series only for registered nodes.
 *   3. Label values that come from users (a job's owner, a node's name) are escaped.
 *   4. No series carries a label Prometheus sets on its own (job, instance): a job's label is
 *      job_id, so a scrape under default honor_labels keeps it as is.
 */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/procstat.h"
#include "server/coord.h"
#include "server/jobstate.h"

/* The build, for ddp_build_info: the CMake project version (server/CMakeLists.txt defines
 * DDP_METRICS_VERSION for this file alone) and the commit where the build knows it. */
#ifndef DDP_METRICS_VERSION
#define DDP_METRICS_VERSION "unknown"
#endif
#ifndef DDP_METRICS_COMMIT
#define DDP_METRICS_COMMIT "unknown"
#endif

static const int metrics_codes[] = {200, 201, 400, 401, 403, 404, 405, 409, 413, 500, 503, 0};
#define METRICS_NCODES ((int)(sizeof(metrics_codes) / sizeof(metrics_codes[0])))

/* seconds */
static const double metrics_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                         0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
#define METRICS_NBUCKETS ((int)(sizeof(metrics_buckets) / sizeof(metrics_buckets[0])))
/* seconds: a long poll is held up to the beat's wait_ms (at most BEAT_MAX_WAIT_MS, 2 s) */
static const double metrics_lp_buckets[] = {0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 5};
#define METRICS_LP_NBUCKETS ((int)(sizeof(metrics_lp_buckets) / sizeof(metrics_lp_buckets[0])))

static const char *const *metrics_route_names;
static int metrics_nroutes;
/* route slot METRICS_MAX_ROUTES is "unmatched" */
/* Request methods by label; the last is every other method. */
static const char *const metrics_methods[] = {"GET",   "POST", "PUT",     "DELETE",
                                              "PATCH", "HEAD", "OPTIONS", "other"};
#define METRICS_NMETHODS ((int)(sizeof(metrics_methods) / sizeof(metrics_methods[0])))
static _Atomic uint64_t metrics_req[METRICS_MAX_ROUTES + 1][METRICS_NMETHODS][METRICS_NCODES];
/* The two histograms: requests, and long polls (METRICS_LP). Per histogram, route and method:
 * the count in each bucket (not cumulative; slot nb is over the top bucket) and the sum of
 * nanoseconds. */
enum { METRICS_REQ = 0, METRICS_LP = 1 };
#define METRICS_MAXB 16
_Static_assert(METRICS_NBUCKETS <= METRICS_MAXB && METRICS_LP_NBUCKETS <= METRICS_MAXB,
               "METRICS_MAXB too small");
static const double *const metrics_hbuckets[2] = {metrics_buckets, metrics_lp_buckets};
static const int metrics_hnb[2] = {METRICS_NBUCKETS, METRICS_LP_NBUCKETS};
static _Atomic uint64_t metrics_lat[2][METRICS_MAX_ROUTES + 1][METRICS_NMETHODS][METRICS_MAXB + 1];
static _Atomic uint64_t metrics_lat_ns[2][METRICS_MAX_ROUTES + 1][METRICS_NMETHODS];
static _Atomic uint64_t metrics_beats;
static _Atomic uint64_t metrics_refused;

void metrics_set_routes(const char *const *names, int n)
{
    metrics_route_names = names;
    metrics_nroutes = n > METRICS_MAX_ROUTES ? METRICS_MAX_ROUTES : n;
}

void metrics_http(int route, const char *method, int code, int64_t ns, int long_poll)
{
    int r = route < 0 || route >= metrics_nroutes ? METRICS_MAX_ROUTES : route;
    int m = METRICS_NMETHODS - 1;
    for (int i = 0; method && i < METRICS_NMETHODS - 1; i++)
        if (strcmp(metrics_methods[i], method) == 0) {
            m = i;
            break;
        }
    int k = METRICS_NCODES - 1;
    for (int i = 0; i < METRICS_NCODES - 1; i++)
        if (metrics_codes[i] == code) {
            k = i;
            break;
        }
    atomic_fetch_add_explicit(&metrics_req[r][m][k], 1, memory_order_relaxed);
    double s = (double)ns / 1e9;
    int h = long_poll ? METRICS_LP : METRICS_REQ;
    int b = metrics_hnb[h];
    for (int i = 0; i < metrics_hnb[h]; i++)
        if (s <= metrics_hbuckets[h][i]) {
            b = i;
            break;
        }
    atomic_fetch_add_explicit(&metrics_lat[h][r][m][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&metrics_lat_ns[h][r][m], ns > 0 ? (uint64_t)ns : 0,
                              memory_order_relaxed);
}

void metrics_beat(void)
{
    atomic_fetch_add_explicit(&metrics_beats, 1, memory_order_relaxed);
}

void metrics_beat_refused(void)
{
    atomic_fetch_add_explicit(&metrics_refused, 1, memory_order_relaxed);
}

/* Appends printf output to the page. The page has no max, so buf_vprintf() cannot fail (it
 * aborts on out-of-memory); the check keeps that assumption visible. */
static void mbuf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void mbuf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int ret = buf_vprintf(b, fmt, ap);
    va_end(ap);
    if (ret != 0)
        abort(); /* only a buffer with a max refuses, and this one has none */
}

/* Appends v to the page as a label value: backslash, double quote and newline escaped. */
static void mbuf_label(struct buf *b, const char *v)
{
    for (const char *p = v; *p; p++) {
        if (*p == '\\' || *p == '"')
            mbuf_printf(b, "\\%c", *p);
        else if (*p == '\n')
            mbuf_printf(b, "\\n");
        else
            mbuf_printf(b, "%c", *p);
    }
}

static void mbuf_family(struct buf *b, const char *name, const char *type, const char *help)
{
    mbuf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram family over [route][method] cells (invariant 1): a series per cell that
 * counted anything. */
static void metrics_histogram(struct buf *b, int h, const char *name, const char *help)
{
    const double *bk = metrics_hbuckets[h];
    int nb = metrics_hnb[h];
    mbuf_family(b, name, "histogram", help);
    for (int r = 0; r <= METRICS_MAX_ROUTES; r++) {
        if (r >= metrics_nroutes && r != METRICS_MAX_ROUTES)
            continue;
        const char *route = r == METRICS_MAX_ROUTES ? "unmatched" : metrics_route_names[r];
        for (int m = 0; m < METRICS_NMETHODS; m++) {
            uint64_t v[METRICS_MAXB + 1];
            uint64_t total = 0;
            for (int i = 0; i <= nb; i++) {
                v[i] = atomic_load_explicit(&metrics_lat[h][r][m][i], memory_order_relaxed);
                total += v[i];
            }
            if (!total)
                continue;
            uint64_t cum = 0;
            for (int i = 0; i < nb; i++) {
                cum += v[i];
                mbuf_printf(b, "%s_bucket{route=\"%s\",method=\"%s\",le=\"%g\"} %llu\n", name,
                            route, metrics_methods[m], bk[i], (unsigned long long)cum);
            }
            mbuf_printf(b, "%s_bucket{route=\"%s\",method=\"%s\",le=\"+Inf\"} %llu\n", name, route,
                        metrics_methods[m], (unsigned long long)total);
            mbuf_printf(
                b, "%s_sum{route=\"%s\",method=\"%s\"} %.9f\n", name, route, metrics_methods[m],
                (double)atomic_load_explicit(&metrics_lat_ns[h][r][m], memory_order_relaxed) / 1e9);
            mbuf_printf(b, "%s_count{route=\"%s\",method=\"%s\"} %llu\n", name, route,
                        metrics_methods[m], (unsigned long long)total);
        }
    }
}

/* The per-job gauges of the live jobs (invariant 2): one family at a time. */
static void metrics_jobs(struct buf *b, const struct coord_job_stat *js, size_t nj)
{
    mbuf_family(b, "ddp_job_state", "gauge",
                "1 for each live job (PENDING, RUNNING, RESTARTING, CANCELLING) in its state; "
                "a finished job has no series.");
    for (size_t i = 0; i < nj; i++) {
        mbuf_printf(b, "ddp_job_state{job_id=\"j-%lld\",owner=\"", (long long)js[i].id);
        mbuf_label(b, js[i].owner);
        mbuf_printf(b, "\",state=\"%s\"} 1\n", jobstate_name(js[i].state));
    }
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ddp_job_generation", "The live job's current (or last) generation."},
        {"ddp_job_restarts", "Restarts of the live job counted against max_restarts."},
        {"ddp_job_world_size", "Ranks of the live job's current (or last) generation."},
        {"ddp_job_loss", "The loss in the last metrics the live job's rank 0 reported."},
        {"ddp_job_samples_per_second",
         "samples_per_s in the last metrics the live job's rank 0 reported."},
        {"ddp_job_epoch", "The epoch in the last metrics the live job's rank 0 reported."},
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        mbuf_family(b, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < nj; i++) {
            const struct coord_job_stat *s = &js[i];
            double v;
            switch (f) {
            case 0:
                v = s->generation;
                break;
            case 1:
                v = s->restarts;
                break;
            case 2:
                v = s->world_size;
                break;
            case 3:
                if (!s->has_loss)
                    continue;
                v = s->loss;
                break;
            case 4:
                if (!s->has_samples_per_s)
                    continue;
                v = s->samples_per_s;
                break;
            default:
                if (!s->has_epoch)
                    continue;
                v = s->epoch;
                break;
            }
            mbuf_printf(b, "%s{job_id=\"j-%lld\"} %.15g\n", fam[f].name, (long long)s->id, v);
        }
    }
}

static void metrics_nodes(struct buf *b, const struct coord_node_stat *ns, size_t nn)
{
    mbuf_family(b, "ddp_node_state", "gauge",
                "1 for each registered node in its state (READY or LOST).");
    for (size_t i = 0; i < nn; i++) {
        mbuf_printf(b, "ddp_node_state{node=\"");
        mbuf_label(b, ns[i].name);
        mbuf_printf(b, "\",state=\"%s\"} 1\n", ns[i].up ? "READY" : "LOST");
    }
    static const struct {
        const char *name, *help;
    } fam[] = {
        {"ddp_node_slots", "Slots the node offers."},
        {"ddp_node_slots_used", "Slots of the node the live jobs hold."},
        {"ddp_node_heartbeat_age_seconds",
         "Seconds since the node's last heartbeat (since ddpd started, before its first)."},
    };
    for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
        mbuf_family(b, fam[f].name, "gauge", fam[f].help);
        for (size_t i = 0; i < nn; i++) {
            double v = f == 0 ? ns[i].slots : f == 1 ? ns[i].used : ns[i].beat_age_s;
            mbuf_printf(b, "%s{node=\"", fam[f].name);
            mbuf_label(b, ns[i].name);
            mbuf_printf(b, "\"} %.15g\n", v);
        }
    }
}

/* A gauge or counter family of one unlabelled sample; v < 0 (not known) leaves the sample
 * out, the family stays declared. */
static void metrics_one(struct buf *b, const char *name, const char *type, const char *help,
                        double v)
{
    mbuf_family(b, name, type, help);
    if (v >= 0)
        mbuf_printf(b, "%s %.15g\n", name, v);
}

static void metrics_process(struct buf *b)
{
    struct proc_usage u;
    proc_self_usage(&u);
    metrics_one(b, "ddp_process_cpu_seconds_total", "counter",
                "User and system CPU time ddpd spent.", u.cpu_s);
    metrics_one(b, "ddp_process_resident_memory_bytes", "gauge", "Resident memory of ddpd.",
                (double)u.rss_bytes);
    metrics_one(b, "ddp_process_open_fds", "gauge", "Open file descriptors of ddpd.",
                (double)u.open_fds);
    metrics_one(b, "ddp_process_max_fds", "gauge",
                "The limit of open file descriptors of ddpd (RLIMIT_NOFILE).", (double)u.max_fds);
    metrics_one(b, "ddp_process_start_time_seconds", "gauge",
                "When ddpd started, seconds since the Unix epoch.", u.start_time_s);
}

char *metrics_render(struct coord *c, int64_t now)
{
    struct buf b = BUF_INIT;
    int64_t jobs[JOB_STATE_COUNT], ready = 0, lost = 0;
    coord_counts(c, jobs, &ready, &lost);
    mbuf_printf(&b,
                "# HELP ddp_build_info The ddpd build: version and commit as labels, value 1.\n"
                "# TYPE ddp_build_info gauge\n"
                "ddp_build_info{version=\"%s\",commit=\"%s\"} 1\n",
                DDP_METRICS_VERSION, DDP_METRICS_COMMIT);
    mbuf_printf(&b, "# HELP ddp_jobs Jobs known to ddpd by state.\n# TYPE ddp_jobs gauge\n");
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        mbuf_printf(&b, "ddp_jobs{state=\"%s\"} %lld\n", jobstate_name((enum job_state)s),
                    (long long)jobs[s]);
    mbuf_printf(&b, "# HELP ddp_nodes Registered nodes by state.\n# TYPE ddp_nodes gauge\n");
    mbuf_printf(&b, "ddp_nodes{state=\"READY\"} %lld\nddp_nodes{state=\"LOST\"} %lld\n",
                (long long)ready, (long long)lost);
    struct coord_job_stat *js = NULL;
    struct coord_node_stat *ns = NULL;
    size_t nj = 0, nn = 0;
    coord_stats(c, now, &js, &nj, &ns, &nn);
    metrics_jobs(&b, js, nj);
    metrics_nodes(&b, ns, nn);
    free(js);
    free(ns);
    mbuf_printf(&b,
                "# HELP ddp_http_requests_total HTTP requests by route, method and status code.\n"
                "# TYPE ddp_http_requests_total counter\n");
    for (int r = 0; r <= METRICS_MAX_ROUTES; r++) {
        if (r >= metrics_nroutes && r != METRICS_MAX_ROUTES)
            continue;
        const char *name = r == METRICS_MAX_ROUTES ? "unmatched" : metrics_route_names[r];
        for (int m = 0; m < METRICS_NMETHODS; m++)
            for (int k = 0; k < METRICS_NCODES; k++) {
                uint64_t v = atomic_load_explicit(&metrics_req[r][m][k], memory_order_relaxed);
                if (!v)
                    continue;
                char code[16];
                if (metrics_codes[k])
                    snprintf(code, sizeof(code), "%d", metrics_codes[k]);
                else
                    snprintf(code, sizeof(code), "other");
                mbuf_printf(&b,
                            "ddp_http_requests_total{route=\"%s\",method=\"%s\",code=\"%s\"} "
                            "%llu\n",
                            name, metrics_methods[m], code, (unsigned long long)v);
            }
    }
    metrics_histogram(&b, METRICS_REQ, "ddp_http_request_duration_seconds",
                      "Time to answer an HTTP request by route pattern and method (long polls "
                      "are in ddp_http_long_poll_duration_seconds).");
    metrics_histogram(&b, METRICS_LP, "ddp_http_long_poll_duration_seconds",
                      "Time to answer a request held by design (heartbeats, held up to their "
                      "wait_ms while nothing changes) by route pattern and method.");
    mbuf_printf(&b,
                "# HELP ddp_heartbeats_total Heartbeats received from agents.\n"
                "# TYPE ddp_heartbeats_total counter\nddp_heartbeats_total %llu\n",
                (unsigned long long)atomic_load_explicit(&metrics_beats, memory_order_relaxed));
    mbuf_printf(&b,
                "# HELP ddp_heartbeat_items_refused_total Heartbeat items (worker states, "
                "progress, log lines, metrics) for a rank the node does not hold, dropped.\n"
                "# TYPE ddp_heartbeat_items_refused_total counter\n"
                "ddp_heartbeat_items_refused_total %llu\n",
                (unsigned long long)atomic_load_explicit(&metrics_refused, memory_order_relaxed));
    struct coord_health h;
    coord_health(c, &h);
    mbuf_printf(&b,
                "# HELP ddp_store_write_failures_total Write transactions of the database that "
                "failed.\n# TYPE ddp_store_write_failures_total counter\n"
                "ddp_store_write_failures_total %llu\n",
                (unsigned long long)h.store_failures);
    mbuf_printf(&b,
                "# HELP ddp_store_healthy 0 while the last write of the database failed and "
                "none succeeded since, else 1.\n# TYPE ddp_store_healthy gauge\n"
                "ddp_store_healthy %d\n",
                h.store_ok ? 1 : 0);
    metrics_one(&b, "ddp_store_last_commit_timestamp_seconds", "gauge",
                "When the last write transaction of the database committed, seconds since the "
                "Unix epoch (no sample before the first).",
                h.store_ok_at ? (double)h.store_ok_at / 1000.0 : -1);
    metrics_one(&b, "ddp_store_last_failure_timestamp_seconds", "gauge",
                "When the last write transaction of the database failed, seconds since the "
                "Unix epoch (no sample before the first).",
                h.store_failed_at ? (double)h.store_failed_at / 1000.0 : -1);
    metrics_one(&b, "ddp_store_database_bytes", "gauge",
                "Size of the database file and its write-ahead log.", (double)coord_db_bytes(c));
    metrics_process(&b);
    return buf_detach(&b, NULL);
}
