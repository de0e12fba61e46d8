/*
 * coord.h - ddpd's model of the world (jobs, nodes, generations) and every rule that
 * changes it: submit, cancel, register, heartbeat, and the periodic tick (node timeouts,
 * runtime limits, restarts, scheduling, scale-up).
 *
 * Thread safety: every function takes the coordinator's one mutex; callers need no lock.
 * Durability: each change is committed to the store before the function returns and
 * before any other thread can see it (the mutex is held across the commit).
 * Time: every function that needs the clock takes `now`, monotonic milliseconds
 * (time_mono_ms() in ddpd, anything increasing in tests); wall-clock times shown to users
 * are derived from it with the offset taken at coord_open().
 *
 * Answers are JSON text, written to *out on success (caller frees). On failure err holds
 * the code and the message for the client and *out is untouched.
 */
#ifndef DDP_SERVER_COORD_H
#define DDP_SERVER_COORD_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"
#include "server/jobstate.h"

struct coord;

struct coord_opts {
    int64_t node_timeout_ms; /* a node silent this long is LOST (default 5000) */
    int64_t log_cap;         /* log lines kept per job (default 100000) */
    int64_t metric_cap;      /* metric lines kept per job (default 10000) */
    int64_t drain_extra_ms;  /* added to grace_period_s to bound RESTARTING (default 10000) */
    /* Confirm window of a SUSPECT node (one a rank's exit 6 accuses, see nodestate.c and
     * coord_fault.c): LOST unless it beats within this many ms. 0: the default, 1000; < 0: no
     * suspicion (nodes are LOST only at node_timeout_ms). Never more than node_timeout_ms. */
    int64_t suspect_timeout_ms;
};

/* Opens the store at db_path and loads every job and node from it; nodes start LOST with
 * their silence counted from now. *out is closed with coord_close(). */
int coord_open(const char *db_path, const struct coord_opts *opts, int64_t now, struct coord **out,
               struct ddp_err *err);
/* Wakes every held heartbeat and frees everything; accepts NULL. No call may be running. */
void coord_close(struct coord *c);
/* Wakes held heartbeats and makes new ones answer at once (before the HTTP server stops). */
void coord_shutdown(struct coord *c);

int coord_submit(struct coord *c, const json_t *body, int64_t now, char **out, struct ddp_err *err);
int coord_get_job(struct coord *c, int64_t id, char **out, struct ddp_err *err);
/* state < 0: every state. page_token 0: from the newest. */
int coord_list_jobs(struct coord *c, int state, int page_size, int64_t page_token, char **out,
                    struct ddp_err *err);
int coord_cancel(struct coord *c, int64_t id, int64_t now, char **out, struct ddp_err *err);
int coord_events(struct coord *c, int64_t id, int64_t after, char **out, struct ddp_err *err);
int coord_metrics(struct coord *c, int64_t id, int64_t after, char **out, struct ddp_err *err);
/* rank < 0: every rank. */
int coord_logs(struct coord *c, int64_t id, int rank, int64_t after, int limit, char **out,
               struct ddp_err *err);

int coord_register(struct coord *c, const json_t *body, int64_t now, char **out,
                   struct ddp_err *err);
/* Handles one heartbeat; may hold the answer up to the beat's wait_ms (real time) while
 * the node's desired set does not change. */
int coord_beat(struct coord *c, const char *node, const json_t *body, int64_t now, char **out,
               struct ddp_err *err);
int coord_list_nodes(struct coord *c, int64_t now, char **out, struct ddp_err *err);

/* Node timeouts and confirmed suspicions, runtime limits, hang and restart progress,
 * scheduling, scale-up. */
void coord_tick(struct coord *c, int64_t now);

/* Counts for /metrics. */
void coord_counts(struct coord *c, int64_t jobs[JOB_STATE_COUNT], int64_t *nodes_ready,
                  int64_t *nodes_lost);

#endif
