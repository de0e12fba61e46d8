/*
 * metrics.h - ddpd's own Prometheus counters (HTTP requests by route, method and code, a request
 * latency histogram, heartbeats received) and the /metrics text, which also carries the
 * coordinator's counts (jobs, nodes) and the store's health (coord_health()). Lock-free: counters are
 * C11 atomics, safe from any thread.
 */
#ifndef DDP_SERVER_METRICS_H
#define DDP_SERVER_METRICS_H

#include <stdint.h>

struct coord;

/* Routes are numbered by the caller (http.c's table); names are borrowed for the life of
 * the process. At most METRICS_MAX_ROUTES routes. */
#define METRICS_MAX_ROUTES 32
void metrics_set_routes(const char *const *names, int n);

/* Counts one request on route (-1: no route matched) with method (the request's; one
 * outside the known list counts as "other") answered with HTTP status code,
 * which took ns nanoseconds. */
void metrics_http(int route, const char *method, int code, int64_t ns);
void metrics_beat(void);
/* One heartbeat item for a rank its node does not hold (dropped). */
void metrics_beat_refused(void);

/* The Prometheus text exposition (version 0.0.4); caller frees. */
char *metrics_render(struct coord *c);

#endif
