/*
 * metrics.c - Prometheus counters of ddpd.
 *
 * Invariant: every series is declared with # HELP and # TYPE once, counters end in _total,
 * the histogram's buckets are cumulative and end with le="+Inf" equal to _count (what
 * promtool check metrics wants).
 */
#include "server/metrics.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "server/coord.h"
#include "server/jobstate.h"

static const int metrics_codes[] = {200, 201, 400, 401, 403, 404, 405, 409, 413, 500, 503, 0};
#define METRICS_NCODES ((int)(sizeof(metrics_codes) / sizeof(metrics_codes[0])))

/* seconds */
static const double metrics_buckets[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                         0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
#define METRICS_NBUCKETS ((int)(sizeof(metrics_buckets) / sizeof(metrics_buckets[0])))

static const char *const *metrics_route_names;
static int metrics_nroutes;
/* route slot METRICS_MAX_ROUTES is "unmatched" */
/* Request methods by label; the last is every other method. */
static const char *const metrics_methods[] = {"GET",   "POST", "PUT",     "DELETE",
                                              "PATCH", "HEAD", "OPTIONS", "other"};
#define METRICS_NMETHODS ((int)(sizeof(metrics_methods) / sizeof(metrics_methods[0])))
static _Atomic uint64_t metrics_req[METRICS_MAX_ROUTES + 1][METRICS_NMETHODS][METRICS_NCODES];
static _Atomic uint64_t metrics_lat[METRICS_NBUCKETS + 1];
static _Atomic uint64_t metrics_lat_ns_sum;
static _Atomic uint64_t metrics_beats;
static _Atomic uint64_t metrics_refused;

void metrics_set_routes(const char *const *names, int n)
{
    metrics_route_names = names;
    metrics_nroutes = n > METRICS_MAX_ROUTES ? METRICS_MAX_ROUTES : n;
}

void metrics_http(int route, const char *method, int code, int64_t ns)
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
    int b = METRICS_NBUCKETS;
    for (int i = 0; i < METRICS_NBUCKETS; i++)
        if (s <= metrics_buckets[i]) {
            b = i;
            break;
        }
    atomic_fetch_add_explicit(&metrics_lat[b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&metrics_lat_ns_sum, ns > 0 ? (uint64_t)ns : 0, memory_order_relaxed);
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

char *metrics_render(struct coord *c)
{
    struct buf b = BUF_INIT;
    int64_t jobs[JOB_STATE_COUNT], ready = 0, lost = 0;
    coord_counts(c, jobs, &ready, &lost);
    mbuf_printf(&b, "# HELP ddp_jobs Jobs known to ddpd by state.\n# TYPE ddp_jobs gauge\n");
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        mbuf_printf(&b, "ddp_jobs{state=\"%s\"} %lld\n", jobstate_name((enum job_state)s),
                    (long long)jobs[s]);
    mbuf_printf(&b, "# HELP ddp_nodes Registered nodes by state.\n# TYPE ddp_nodes gauge\n");
    mbuf_printf(&b, "ddp_nodes{state=\"READY\"} %lld\nddp_nodes{state=\"LOST\"} %lld\n",
                (long long)ready, (long long)lost);
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
    mbuf_printf(&b, "# HELP ddp_http_request_duration_seconds Time to answer an HTTP request.\n"
                    "# TYPE ddp_http_request_duration_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < METRICS_NBUCKETS; i++) {
        cum += atomic_load_explicit(&metrics_lat[i], memory_order_relaxed);
        mbuf_printf(&b, "ddp_http_request_duration_seconds_bucket{le=\"%g\"} %llu\n",
                    metrics_buckets[i], (unsigned long long)cum);
    }
    cum += atomic_load_explicit(&metrics_lat[METRICS_NBUCKETS], memory_order_relaxed);
    mbuf_printf(&b, "ddp_http_request_duration_seconds_bucket{le=\"+Inf\"} %llu\n",
                (unsigned long long)cum);
    mbuf_printf(&b, "ddp_http_request_duration_seconds_sum %.9f\n",
                (double)atomic_load_explicit(&metrics_lat_ns_sum, memory_order_relaxed) / 1e9);
    mbuf_printf(&b, "ddp_http_request_duration_seconds_count %llu\n", (unsigned long long)cum);
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
    return buf_detach(&b, NULL);
}
