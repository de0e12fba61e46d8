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
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "server/auth.h"
#include "server/jobstate.h"

struct coord;
struct store;

struct coord_opts {
    int64_t node_timeout_ms; /* a node silent this long is LOST (default 5000) */
    int64_t log_cap;         /* log lines kept per job (default 100000) */
    int64_t metric_cap;      /* metric lines kept per job (default 10000) */
    int64_t drain_extra_ms;  /* added to grace_period_s to bound RESTARTING (default 10000) */
    /* Confirm window of a SUSPECT node (one a rank's exit 6 accuses, see nodestate.c and
     * coord_fault.c): LOST unless it beats within this many ms. 0: the default, 1000; < 0: no
     * suspicion (nodes are LOST only at node_timeout_ms). Never more than node_timeout_ms. */
    int64_t suspect_timeout_ms;
    int64_t max_nodes;         /* registered nodes at most (0: the default, 4096) */
    int64_t max_jobs_per_user; /* jobs not yet ended per owner (0: the default, 10000) */
    int max_user_priority;     /* the highest priority a non-admin may ask (default 0) */
    /* Finished jobs whose finished_at is this long ago are deleted by coord_tick(), at most
     * 100 a tick (0: the default, kept until deleted by hand). */
    int64_t job_ttl_ms;
    /* Cluster mode: the epoch this replica's win wrote (server/replica.h); every write
     * transaction first checks that ddp_epoch still holds it, and a coordinator that finds
     * another one retires (DDP_EUNAVAIL). 0: no check (a single SQLite file). */
    int64_t fence_epoch;
};

/* Opens the store at db_path and loads every job and node from it; nodes start LOST with
 * their silence counted from now. *out is closed with coord_close(). */
int coord_open(const char *db_path, const struct coord_opts *opts, int64_t now, struct coord **out,
               struct ddp_err *err);
/* The same on a store already open (a dqlite one, server/store.h), which the coordinator
 * takes (closed with it, also when this fails). db_path: the SQLite file whose size
 * coord_db_bytes() reports, or NULL; where: what the log line names. */
int coord_open_store(struct store *st, const char *db_path, const char *where,
                     const struct coord_opts *opts, int64_t now, struct coord **out,
                     struct ddp_err *err);
/* For a replica that lost the leadership (server/gate.h): coord_shutdown(), and every
 * transaction from now on fails with DDP_EUNAVAIL before it begins, so that no call still
 * running writes once this returns. Reads from memory still answer. */
void coord_retire(struct coord *c);
/* 1 once coord_retire() ran, or once the replicated store answered UNAVAILABLE (its node
 * lost the leadership). */
int coord_retired(struct coord *c);
/* 1 when the coordinator of a replicated store retired itself because a write failed in
 * its own node's storage (an I/O error or a full disk): the replica should hand the
 * leadership to one whose disk takes writes. */
int coord_storage_failed(struct coord *c);
/* 1 when, since the last call in this thread, a transaction of this thread was refused
 * before it began because its coordinator was retired: the call did nothing and may go to
 * the leader. Clears the flag. */
int coord_take_refusal(void);
/* Wakes every held heartbeat and frees everything; accepts NULL. No call may be running. */
void coord_close(struct coord *c);
/* Wakes held heartbeats and makes new ones answer at once (before the HTTP server stops). */
void coord_shutdown(struct coord *c);

/* Submits a job owned by who (a user; only an admin may ask a priority above
 * max_user_priority). request_id (the client's Idempotency-Key, or NULL): a
 * submit with a key the owner used before answers that job instead (*created 0), or 409 when
 * its spec differs. *created is 1 for a new job. */
int coord_submit(struct coord *c, const json_t *body, const struct principal *who,
                 const char *request_id, int64_t now, char **out, int *created,
                 struct ddp_err *err);
/* Changes a live job's priority (body {"priority": N}; admin): the next scheduling pass
 * orders it anew; an event says who changed it. */
int coord_update_job(struct coord *c, int64_t id, const json_t *body, const char *by, int64_t now,
                     char **out, struct ddp_err *err);
int coord_get_job(struct coord *c, int64_t id, char **out, struct ddp_err *err);
/* state < 0: every state. owner NULL: every owner's. page_token 0: from the newest. */
int coord_list_jobs(struct coord *c, int state, const char *owner, int page_size,
                    int64_t page_token, char **out, struct ddp_err *err);
/* 0 when who may read (act 0) or cancel (act 1) job id; DDP_ENOTFOUND when it may not see
 * the job (the same answer as for an unknown id), DDP_EPERM when it sees but may not act. */
int coord_job_access(struct coord *c, int64_t id, const struct principal *who, int act,
                     struct ddp_err *err);
/* The reason says "cancelled by <by>" (the user's name). */
int coord_cancel(struct coord *c, int64_t id, const char *by, int64_t now, char **out,
                 struct ddp_err *err);
/* Deletes a finished job (SUCCEEDED, FAILED, CANCELLED) with its events, metrics, logs and
 * marks, in one transaction; the answer is the job as it was. Its id answers DDP_ENOTFOUND
 * from then on and is never given out again. DDP_ENOTFOUND: no such job; DDP_EPRECOND: the
 * job is live (cancel it first); DDP_EINTERNAL: the store failed (nothing deleted). by (the
 * user) goes to ddpd's log. */
int coord_delete_job(struct coord *c, int64_t id, const char *by, char **out, struct ddp_err *err);
int coord_events(struct coord *c, int64_t id, int64_t after, char **out, struct ddp_err *err);
int coord_metrics(struct coord *c, int64_t id, int64_t after, char **out, struct ddp_err *err);
/* rank < 0: every rank. */
int coord_logs(struct coord *c, int64_t id, int rank, int64_t after, int limit, char **out,
               struct ddp_err *err);

/* The whole kept log of a job as one gzip stream (lines in seq order, each "text\n"), read
 * a piece at a time in bounded memory (coord_retain.c). Open: DDP_ENOTFOUND for an unknown
 * job; the stream ends at the last line stored at the open. Read: up to size bytes into buf,
 * their count (> 0), 0 at the end of the stream, or -1 when it cannot go on (the job was
 * deleted meanwhile, the store failed). Each read takes the coordinator's mutex for one page
 * of lines. Close accepts NULL; every stream is closed before coord_close(). */
struct coord_log_gz;
int coord_log_gz_open(struct coord *c, int64_t id, struct coord_log_gz **out, struct ddp_err *err);
long coord_log_gz_read(struct coord_log_gz *g, char *buf, size_t size);
void coord_log_gz_close(struct coord_log_gz *g);

/* Registers a node (the caller holds the bootstrap token) and gives it a new node
 * credential (in the answer, "credential"). A name that is registered and up is taken over
 * only with its current credential in the body ("credential"); a LOST one by anybody. */
int coord_register(struct coord *c, const json_t *body, int64_t now, char **out,
                   struct ddp_err *err);
/* Admin holds on a node: action "cordon" (no new work), "drain" (no new work, and RUNNING
 * jobs that can re-form without the node at MIN or more move off it, at no restart's cost;
 * the others finish there) or "uncordon"; reason (may be NULL) is shown with the node. */
int coord_node_admin(struct coord *c, const char *name, const char *action, const char *reason,
                     int64_t now, char **out, struct ddp_err *err);
/* Removes a node (admin): its jobs lose it as if it died, its credential opens nothing. */
int coord_remove_node(struct coord *c, const char *name, int64_t now, char **out,
                      struct ddp_err *err);
/* Handles one heartbeat; may hold the answer up to the beat's wait_ms (real time) while
 * the node's desired set does not change. */
int coord_beat(struct coord *c, const char *node, const json_t *body, int64_t now, char **out,
               struct ddp_err *err);
int coord_list_nodes(struct coord *c, int64_t now, char **out, struct ddp_err *err);

/* Users (coord_users.c). The first start (no users) creates user "admin" (role admin)
 * holding admin_token; later starts only say whom the token belongs to. */
int coord_users_bootstrap(struct coord *c, const char *admin_token, int64_t now,
                          struct ddp_err *err);
/* Resolves a bearer token to a user or to a node credential (node: the node the path names,
 * or NULL). 0 with *p set, or DDP_EUNAUTH. The bootstrap token is the caller's to check. */
int coord_authenticate(struct coord *c, const char *token, const char *node, struct principal *p);
/* Admin calls: body {"name", "role"?}; the answer {"user": {...}, "token"} carries the only
 * copy of the new token. */
int coord_user_add(struct coord *c, const json_t *body, int64_t now, char **out,
                   struct ddp_err *err);
int coord_users_list(struct coord *c, char **out, struct ddp_err *err);
/* Groups (admins): {"groups": [Group...]} (those with a quota, and those users name); one
 * group {"group": Group} (DDP_ENOTFOUND when neither); setting one's max_slots from body
 * {"max_slots": N} (0 = no limit), which starts waiting jobs a raised quota lets fit. *out
 * is new text (caller frees) on success. */
int coord_groups_list(struct coord *c, char **out, struct ddp_err *err);
int coord_group_get(struct coord *c, const char *name, char **out, struct ddp_err *err);
int coord_group_put(struct coord *c, const char *name, const json_t *body, int64_t now, char **out,
                    struct ddp_err *err);
/* Admin: body {"role"?, "max_slots"?, "group"?} (max_slots 0 = no quota, group "" = none);
 * the last admin keeps its
 * role. */
int coord_user_update(struct coord *c, const char *name, const json_t *body, int64_t now,
                      char **out, struct ddp_err *err);
/* Refuses the last admin (DDP_EPRECOND). */
int coord_user_remove(struct coord *c, const char *name, char **out, struct ddp_err *err);
/* An admin for anyone, a user for itself: a new token, the old one stops working. */
int coord_user_rotate(struct coord *c, const char *name, const struct principal *who, char **out,
                      struct ddp_err *err);

/* Node timeouts and confirmed suspicions, runtime limits, hang and restart progress,
 * scheduling, scale-up. */
void coord_tick(struct coord *c, int64_t now);

/* Counts for /metrics. */
void coord_counts(struct coord *c, int64_t jobs[JOB_STATE_COUNT], int64_t *nodes_ready,
                  int64_t *nodes_lost);

/* One live job (PENDING, RUNNING, RESTARTING, CANCELLING) as /metrics shows it (coord_stats.c).
 * loss, samples_per_s and epoch come from the last metrics rank 0 reported; has_* is 0 where
 * that report had no such number (or there is none yet). */
struct coord_job_stat {
    int64_t id;
    char owner[AUTH_NAME_MAX + 1];
    enum job_state state;
    int generation, restarts, world_size;
    int has_loss, has_samples_per_s, has_epoch;
    double loss, samples_per_s, epoch;
};
/* One registered node (removed ones left out) as /metrics shows it. */
struct coord_node_stat {
    char name[64];
    int up;            /* READY (or SUSPECT) in the API's terms; 0: LOST */
    int slots, used;   /* slots, and those the live jobs hold */
    double beat_age_s; /* since its last heartbeat (or since ddpd started, before its first) */
};
/* The live jobs (in id order) and the nodes (in registration order), copied under the
 * coordinator's mutex at monotonic now. On return *jobs and *nodes hold *njobs and *nnodes
 * entries (NULL when none); the caller frees both arrays with free(). Never fails (the
 * allocator aborts on out-of-memory). */
void coord_stats(struct coord *c, int64_t now, struct coord_job_stat **jobs, size_t *njobs,
                 struct coord_node_stat **nodes, size_t *nnodes);
/* The bytes of the database file plus those of its write-ahead log (none yet: 0), or -1 when
 * the database file cannot be stat()ed. Takes no lock (the path never changes). */
int64_t coord_db_bytes(struct coord *c);

/* The health of the store, for /readyz and /metrics. */
struct coord_health {
    int store_ok;            /* 0 while the last write failed and no write succeeded since */
    uint64_t store_failures; /* write transactions that failed since ddpd started */
    int64_t store_failed_at; /* wall ms of the last failure; 0: none */
    char store_error[DDP_ERR_MSG_MAX]; /* its message ("" when none) */
    int64_t store_ok_at;               /* wall ms of the last write that succeeded; 0: none */
};
/* Fills *out. Takes neither the coordinator's mutex nor the store's, so it answers while a
 * write hangs on the disk. */
void coord_health(struct coord *c, struct coord_health *out);

#endif
