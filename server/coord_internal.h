/*
 * coord_internal.h - the coordinator's private model (struct coord, job, node) and the
 * functions its files share. Only server/coord*.c include this; everything else uses coord.h.
 *
 * Ownership: the coordinator owns every job and node (freed by coord_close()); a job owns its
 * spec, placement (job->st.pl), marks, rank tables, JSON cache and one reference each to
 * last_metrics and disk_metrics (often the same object); a batch of heartbeat data is freed
 * by the last beat that waits for it. Every function declared
 * here expects c->mu held unless its comment says otherwise, and none of them frees what its
 * caller passed in except where it says "takes ownership".
 */
#ifndef DDP_SERVER_COORD_INTERNAL_H
#define DDP_SERVER_COORD_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <jansson.h>

#include "server/auth.h"
#include "server/coord.h"
#include "server/nodestate.h"
#include "server/sched.h"
#include "server/store.h"
#include "server/validate.h"

enum end_kind {
    END_NONE = 0,
    END_FAILURE = 1, /* counts against max_restarts */
    END_SCALE = 2,   /* scale-up: does not count */
    END_FINAL = 3,   /* a limit (max_runtime_s): FAILED without restart */
    END_CANCEL = 4,
};

#define RANK_RUNNING INT_MIN

/* How sure a failure is to be the root cause of a generation's end (docs/ddpd.md): a node
 * gone > a rank killed by a signal or exiting non-zero > a hang > a rank that only saw
 * its peers go (exit 4 rendezvous, 6 peer lost, 9 the runtime's own watchdog). */
enum cause_prio { CAUSE_NONE = 0, CAUSE_PEER = 1, CAUSE_HANG = 2, CAUSE_EXIT = 3, CAUSE_NODE = 4 };

/* Latest progress report of a rank of the current generation. */
struct rank_prog {
    int64_t age_ms;
    int stopped;
    int has;
};
#define REASON_MAX 1024

struct node {
    char name[64];
    char *address;
    int slots;
    int port_lo, port_hi;
    char *incarnation;
    enum node_state state;  /* see nodestate.c; changed only by coord_node_set() */
    int64_t last_seen;      /* monotonic ms of the last beat (or of ddpd's start) */
    int64_t last_beat_wall; /* 0: never */
    int64_t registered_at;
    uint64_t version;
    pthread_cond_t cond;
    int64_t suspect_since;         /* SUSPECT: monotonic ms of the first accusation */
    char suspect_by[96];           /* the accuser, e.g. "rank 1 on a" (kept for the loss reason) */
    char cred_hash[AUTH_HASH_HEX]; /* of the node credential; "" none (must register) */
    int removed;                   /* removed by an admin: a tombstone until ddpd restarts */
    int admin;                     /* enum node_admin: taken out of scheduling by an admin */
    char admin_reason[256];
    json_t *labels; /* owned JSON object of strings (never NULL once made) */
    /* What its agent said at its last registration with this ddpd (in memory only): whose
     * accounts jobs run as, "per-user" or "single-user"; "" when it did not say. */
    char isolation[16];
    /* READY again in memory, its row not yet written: coord_flush_nodes() writes every such
     * row in one transaction at the next tick (coord.c, invariant 1's one exception). */
    int row_stale;
};

/* An admin's hold on a node (docs/scheduling.md): cordon takes no new work; drain also moves
 * elastic jobs off. Both keep the node's running work otherwise. */
enum node_admin { NODE_SCHEDULABLE = 0, NODE_CORDONED = 1, NODE_DRAINED = 2 };

struct job_node {
    int node; /* index into c->nodes */
    int group_rank;
    int draining;
};

/* The part of a job written by a transition (copied whole, so a failed commit restores). */
struct job_st {
    enum job_state state;
    int generation, restarts, world_size;
    char master_addr[256];
    int master_port;
    struct job_node *pl; /* placement of the current (or last) generation; owned */
    int npl;
    char reason[REASON_MAX];
    char end_reason[REASON_MAX];
    int end_kind;
    int64_t started_at, finished_at;
    int64_t event_seq;
};

struct mark {
    int64_t gen;
    int rank; /* -1: metrics */
    int64_t last_seq;
    int64_t disk_seq; /* last_seq as last committed (0: none); see coord_beat.c */
};

/* Random bytes of a job generation's token (256 bits, as every credential). */
#define JOB_TOKEN_BYTES 32

struct job {
    int64_t id;
    struct job_spec spec;
    char *spec_text;
    /* DDP_JOB_TOKEN of the current generation, JOB_TOKEN_BYTES random bytes in hex: drawn
     * again at each start (coord_start), so a worker left of an earlier generation cannot
     * join a later one's rendezvous store */
    char token[2 * JOB_TOKEN_BYTES + 1];
    char owner[AUTH_NAME_MAX + 1];
    char *request_id; /* the submit's Idempotency-Key, or NULL; owned */
    int64_t created_at;
    struct job_st st;
    json_t *last_metrics;
    int64_t log_seq, metric_seq;
    /* the three above as last committed: a failed batch of heartbeat data goes back to them */
    json_t *disk_metrics;
    int64_t disk_log_seq, disk_metric_seq;
    struct mark *marks;
    size_t nmarks, capmarks;
    int *rank_exit;               /* world_size entries: RANK_RUNNING or the exit status */
    char fail_reason[REASON_MAX]; /* failure that will end the current generation, or "" */
    int fail_prio;                /* its enum cause_prio */
    int fail_port;                /* fail_reason is an exit 5 (port in use): ddp's, not the job's */
    int fail_preempted;           /* fail_reason is an exit 10 (preempted): not the job's */
    int64_t fail_err_time;        /* fail_reason is a rank's error file of this time (s), or 0 */
    int end_port;                 /* the generation that ended did so for fail_port */
    int end_preempted;            /* ... or for fail_preempted */
    int cause_prio;               /* of end_reason while RESTARTING after a failure */
    int64_t ended_at;             /* monotonic ms the generation ended */
    struct rank_prog *prog;       /* world_size entries */
    int64_t hang_first;           /* when a rank was first reported over hang_timeout_s */
    int hang_node;                /* the node whose beat reported it */
    int64_t drain_deadline;       /* monotonic ms */
    char *json_cache;
    /* The placement of the generation before the current one (in memory only: after a
     * restart of ddpd it is empty), so that its nodes may still ship its last lines. */
    struct job_node *prev_pl; /* owned */
    int prev_npl;
    /* Why a job that wants a generation waits (coord_schedule(), in memory): a reason of
     * Slurm's vocabulary ("" while not waiting), what it needs, its place in the queue. */
    char wait_code[16];
    char wait_msg[200];
    int wait_pos;
    int64_t preempted_by; /* the job this one's generation was ended for (until it restarts) */
    int preempting;       /* it had victims stopped for it: its next start takes only MIN */
    int *hold, nhold;     /* while preempting: the nodes its victims free for it (node indexes) */
    /* Its generation ended with a preemption notice (a preemption or a drain; in memory):
     * while its entries drain, the beat answers of their nodes carry a notice (signal and
     * preempt_grace_s) and the drain bound includes preempt_grace_s. */
    int notice;
};

struct user {
    char name[AUTH_NAME_MAX + 1];
    enum role role;
    char hash[AUTH_HASH_HEX];
    int64_t created_at;
    int64_t max_slots;             /* quota: slots its jobs may hold at once; 0 = no limit */
    char group[AUTH_NAME_MAX + 1]; /* its group, "" for none */
};

/* A group's quota (docs/scheduling.md, "Quotas"): the slots all its users' jobs may hold. A
 * group a user names without a row here has no limit. */
struct group {
    char name[AUTH_NAME_MAX + 1];
    int64_t max_slots; /* 0 = no limit */
};

/* One row of a heartbeat's data transaction (built under c->mu, written without it). */
enum { ROW_LOG, ROW_METRIC, ROW_MARK, ROW_LOG_TRIM, ROW_METRIC_TRIM, ROW_JOB_DATA };
struct data_row {
    int kind;
    int64_t job, seq, gen, rank, time;
    char *text; /* owned: line, metric JSON, or last_metrics JSON (NULL: unchanged) */
    int64_t metric_seq;
    json_t *metrics; /* ROW_JOB_DATA: a reference to the last_metrics of text, or NULL */
};
/* A batch of rows committed in one transaction (coord_beat.c). */
enum { BATCH_OPEN, BATCH_DONE, BATCH_FAILED };
struct data_batch {
    struct data_row *rows;
    size_t n, cap;
    int state; /* BATCH_OPEN until its commit returned (or a commit below it failed) */
    int refs;  /* beats waiting for it; the last one frees it */
    char why[DDP_ERR_MSG_MAX]; /* BATCH_FAILED: the store's message */
    int refused;               /* BATCH_FAILED: refused before it began (the leadership was lost) */
};

struct coord {
    pthread_mutex_t mu;
    pthread_mutex_t store_mu; /* the SQLite connection; taken after mu, or alone */
    pthread_cond_t data_cond; /* with mu: heartbeat data batches, see coord_beat_data */
    struct data_batch *open;  /* the batch that takes new rows (never empty), or NULL */
    struct data_batch *flush; /* the batch a leader commits now, or NULL */
    struct store *store;
    pthread_mutex_t health_mu;         /* the four below; taken inside store_mu, or alone */
    uint64_t store_failures;           /* write transactions that failed since the start */
    int store_failing;                 /* the last one failed and none succeeded since */
    int64_t store_failed_wall;         /* wall ms of the last failure */
    char store_error[DDP_ERR_MSG_MAX]; /* its message */
    int64_t store_ok_wall;             /* wall ms of the last write that succeeded; 0: none */
    char *db_path;                     /* the database file, for its size in /metrics; owned */
    struct coord_opts opts;
    int64_t wall_offset; /* wall ms = now + wall_offset */
    uint64_t version_base;
    int shutting_down;
    _Atomic int retired;   /* coord_retire(): every later transaction refused (set under
                            * store_mu; read without it by coord_retired(), gate_enter()) */
    int storage_failed;    /* retired because the own node's disk failed (under store_mu) */
    int nodes_stale;       /* some node's row_stale is set (coord_flush_nodes()) */
    struct job **jobs;     /* by id - 1; NULL for a deleted id (coord_retain.c) */
    size_t njobs, capjobs; /* njobs: the highest id given out */
    size_t retain_next;    /* the index the next --job-ttl sweep starts at */
    struct job **live; /* jobs not (known to be) terminal, in id order; see coord_live_compact */
    size_t nlive, caplive;
    struct node **nodes;
    size_t nnodes, capnodes;
    int *nhash;       /* open addressing: node index + 1, 0 = empty */
    size_t nhash_cap; /* a power of two, > 2 * nnodes */
    size_t nremoved;  /* tombstones in nodes (removed by an admin) */
    struct user *users;
    size_t nusers, capusers;
    struct group *groups;
    size_t ngroups, capgroups;
};

/* coord_model.c */
int64_t coord_wall(struct coord *c, int64_t now);
struct job *coord_job(struct coord *c, int64_t id);
int coord_node_index(struct coord *c, const char *name);
void coord_bump(struct node *n);
/* Moves n to state to; a move nodestate.c's table refuses is a bug: logged, n unchanged,
 * -1. A move to the state n is in does nothing and returns 0. */
int coord_node_set(struct node *n, enum node_state to);
int coord_node_gone(struct coord *c, const struct node *n, int64_t now);
void coord_job_dirty(struct job *j);
/* The one rule of slots: entry p of j's placement holds j->spec.nproc slots (and its master
 * port) on its node while the job is RUNNING, or while the entry drains (invariant 3 of
 * coord.c). 1 when it does. */
int coord_entry_holds(const struct job *j, const struct job_node *p);
/* Slots held on node (coord_entry_holds() summed over the live jobs). */
int coord_slots_used(struct coord *c, int node);
int coord_draining(const struct job *j);
void coord_jobs_push(struct coord *c, struct job *j);
void coord_live_compact(struct coord *c);
void coord_job_free(struct job *j);
struct node *coord_node_new(struct coord *c, const char *name);
void coord_node_free(struct node *n);
void coord_nodes_push(struct coord *c, struct node *n);
/* Marks node ni removed (by an admin, or a tombstone for a placement naming a node no longer
 * stored): LOST and gone for its jobs at once, out of the name index, the listings and the
 * counts, its credential void. */
void coord_node_removed(struct coord *c, int ni, int64_t now);
int coord_group_rank(const struct job *j, int ni);
/* 1 when node n has every label of selector (an object of strings; NULL or {}: any node). */
int coord_node_matches(const struct node *n, const json_t *selector);
/* The GPUs a node's agent hands out: its "gpus" label (the agent detects it, a --label
 * overrides it), 0 when it has none or the label is not a count 0..999. */
int coord_node_gpus(const struct node *n);
/* 1 when node ni held rank (< 0: the metrics stream, rank 0's) of generation gen of j: the
 * current generation or, from prev_pl, the one before. */
int coord_node_held_rank(const struct job *j, int ni, int64_t gen, int rank);
/* Jobs of owner that are not terminal. */
size_t coord_jobs_active_of(struct coord *c, const char *owner);

/* coord_views.c */
json_t *coord_job_json(struct coord *c, const struct job *j);
char *coord_job_text(struct coord *c, struct job *j);
json_t *coord_node_json(struct coord *c, int idx, int64_t now);
json_t *coord_assignments(struct coord *c, int ni);
/* The notices for node ni: one object per (job, generation) whose workers there drain after
 * a noticed end, {job_id, generation, signal, grace_s}. */
json_t *coord_notices(struct coord *c, int ni);

/* coord_txn.c */
/* Work done inside one store transaction: 0, or a negative code with e filled. */
typedef int (*coord_txn_fn)(struct coord *c, void *ctx, struct ddp_err *e);
/* The transaction runner (GNU Taler's TEH_DB_run_transaction): takes c->store_mu, begins,
 * runs fn(c, ctx, e), commits, and rolls back when begin, fn or commit fails. Returns 0, or
 * the first error with e filled (the store then holds nothing of fn's writes). Needs no
 * c->mu (the heartbeat group commit runs it without). Every store write goes through here, so
 * it also keeps the storage health of coord_health(). */
int coord_txn_run(struct coord *c, coord_txn_fn fn, void *ctx, struct ddp_err *e);
/* Whether a transaction of this thread was refused before it began (coord_take_refusal()
 * without clearing it), and marking this thread so: a beat whose rows another thread's
 * refused commit carried is refused too, and answered not_leader as that one. */
int coord_refusal_seen(void);
void coord_refusal_mark(void);
/* A job's row as it will be with status *st, the event of the change (time wall), and the
 * marks of generations below marks_below dropped (0: none). */
struct job_write {
    const struct job *j;
    const struct job_st *st;
    int64_t wall;
    int64_t marks_below;
};
/* A coord_txn_fn for a struct job_write. */
int coord_job_write(struct coord *c, void *ctx, struct ddp_err *e);
/* Moves job j to status *next; see coord_txn.c. */
int coord_commit(struct coord *c, struct job *j, struct job_st *next, int64_t now,
                 struct ddp_err *err);
/* Writes the rows of the nodes whose row_stale is set, all in one transaction, and clears
 * the flags; on failure they stay set for the next tick. Under c->mu. */
void coord_flush_nodes(struct coord *c);
int coord_put_node(struct coord *c, const struct node *n, int ready, int64_t beat_wall,
                   struct ddp_err *err);

/* coord_sched.c */
int coord_end_generation(struct coord *c, struct job *j, int kind, const char *reason, int64_t now,
                         struct ddp_err *err);
void coord_refine(struct coord *c, struct job *j, int prio, const char *cause, int64_t now);
/* Ends the generation of RUNNING job j for a reason not its own (a preemption, a drain),
 * uncharged, with a preemption notice to its workers first (docs/scheduling.md). */
int coord_end_noticed(struct coord *c, struct job *j, const char *reason, int64_t now);
/* 1 when reason became the recorded failure (a likelier or first root cause). */
int coord_fail(struct job *j, int prio, const char *reason);
/* 1 when the generation j ended for counts against max_restarts: a failure of the job's
 * own, not a node's (lost, restarted, removed) nor ddp's (exit 5, port in use). */
int coord_failure_charged(const struct job *j);
/* The wait before the next generation after a charged failure: 0 after the first, then
 * 1 s, 2 s, 4 s, ... up to 60 s. */
int64_t coord_backoff_ms(const struct job *j);
void coord_progress(struct coord *c, struct job *j, int64_t now);
void coord_schedule(struct coord *c, int64_t now);
int coord_check_ranks(struct coord *c, struct job *j, int64_t now);

/* coord_beat.c */
struct mark *coord_mark(struct job *j, int64_t gen, int rank, int create);
/* The lowest generation of j whose data is deduplicated (and kept): the previous one. */
int64_t coord_marks_floor(const struct job *j);
/* Drops j's marks below coord_marks_floor() from memory (the store's go with the transition
 * that starts a generation, see coord_commit()). */
void coord_marks_drop(struct job *j);
/* Frees the rows of d (d itself stays, empty). */
void coord_batch_release(struct data_batch *d);
/* Stores the logs and metrics of node ni's beat b (only for ranks ni holds). */
int coord_beat_data(struct coord *c, int ni, const struct beat *b, int64_t now,
                    struct ddp_err *err);
/* Counts and warns (rate-limited) about an item of node ni's beat for a rank it does not
 * hold in j. */
void coord_beat_refused(struct coord *c, int ni, const struct job *j, const char *what);
int coord_beat_drains(struct coord *c, int ni, const struct beat *b);

/* coord_fault.c */
void coord_lost_why(const struct node *n, int64_t now, char *buf, size_t size);
void coord_node_restarted(struct coord *c, int ni, int64_t now);
int coord_beat_workers(struct coord *c, int ni, const struct beat *b, int64_t now);
void coord_check_hang(struct coord *c, struct job *j, int64_t now);
/* LOST for nodes silent past node_timeout_ms, LOST_CONFIRMED for suspects whose confirm
 * window closed without a beat. */
void coord_nodes_expire(struct coord *c, int64_t now);

/* coord_users.c */
int coord_users_load(struct coord *c, struct ddp_err *err);
/*
 * The slots the live jobs of each user and each group hold, counted once for a scheduling
 * pass (coord_schedule) instead of once for each job it looks at (with thousands of queued
 * jobs that was quadratic, under c->mu). coord_tally_add counts a job the pass started (t may
 * be NULL: nothing to count yet). Valid while c->mu is held and users and groups do not
 * change; freed by coord_tally_free.
 */
struct quota_tally;
struct quota_tally *coord_tally_new(struct coord *c);
void coord_tally_add(struct coord *c, struct quota_tally *t, const struct job *j);
void coord_tally_free(struct quota_tally *t);
/* The quotas of owner and of its group (sched.h), with the slots held counted by *t, which
 * is made (coord_tally_new) the first time a quota applies; *group is the group's name ("" for
 * none), borrowed from the model. */
void coord_quota_of(struct coord *c, struct quota_tally **t, const char *owner,
                    struct sched_quota *q, const char **group);

/* coord_retain.c */
/* Makes c->jobs reach id upto, with NULL for the ids that have no job (deleted). */
void coord_jobs_pad(struct coord *c, int64_t upto);
/* Deletes finished jobs older than opts.job_ttl_ms, bounded work (coord_retain.c); called by
 * the tick where no loop over c->live runs. */
void coord_retain_sweep(struct coord *c, int64_t now);

/* coord_stats.c: nothing shared (coord.h has its calls). */

/* coord_load.c */
int coord_load(struct coord *c, int64_t now, struct ddp_err *err);

#endif
