/*
 * validate.h - strict checks of everything a client sends ddpd: job specs, node
 * registrations, heartbeats, job ids. Each function either succeeds or fills err with
 * DDP_EINVAL and a message naming the field and the rule it broke; on failure nothing is
 * written to the out-parameter.
 */
#ifndef DDP_SERVER_VALIDATE_H
#define DDP_SERVER_VALIDATE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define SPEC_MAX_ARGS    256
#define SPEC_MAX_ARG_LEN 4096
#define SPEC_MAX_ENV     256
/* One "NAME=value" string with its NUL: the kernel's MAX_ARG_STRLEN (32 pages of 4 KiB). */
#define SPEC_MAX_ENV_STRING (128 * 1024)
#define SPEC_MAX_NODES      1024
#define SPEC_MAX_NPROC      1024
#define SPEC_MAX_PATH       4096
#define BEAT_MAX_ITEMS      4096
#define BEAT_MAX_LINES      5000
#define BEAT_MAX_WAIT_MS    2000
/* How deeply a metric may nest: ordinary JSON clients (Python's json, browsers) stop far
 * short of jansson's 2048 levels. */
#define BEAT_MAX_METRIC_DEPTH 16
#define LOG_LINE_MAX          4096

/* A validated job spec. json is the canonical spec (every field present, defaults filled
 * in, nnodes as "MIN:MAX"), owned by the struct; the numbers are copies of its fields. */
struct job_spec {
    json_t *json;
    const char *name; /* borrowed from json */
    int nmin, nmax;
    int nproc;
    int max_restarts;
    int64_t max_runtime_s;
    int grace_period_s;
    int hang_timeout_s;
    int priority;                /* -1000..1000, higher first; 0 by default */
    const json_t *node_selector; /* borrowed from json: labels a node must have; may be {} */
    const char *preempt_signal;  /* borrowed from json: the notice's signal, "SIGUSR1" */
    int preempt_grace_s;         /* from the notice to the stop (SIGTERM and grace_period_s) */
    int gpus_per_proc; /* GPUs per worker 0..SPEC_MAX_GPUS_PER_PROC, or SPEC_GPUS_AUTO: the spec
                        * said "auto" or nothing (1 on a node with GPUs, 0 on one without) */
};

/* Labels: at most LABELS_MAX pairs; a key is 1..63 of [A-Za-z0-9._/-], a value 0..63 of
 * [A-Za-z0-9._-]. */
#define LABELS_MAX 64
/* Checks the optional object field key of obj as labels; *out is borrowed (NULL if absent). */
int validate_labels(const json_t *obj, const char *key, json_t **out, struct ddp_err *err);

#define SPEC_PRIORITY_MIN (-1000)
#define SPEC_PRIORITY_MAX 1000
/* preempt_grace_s: the default and the most a job may ask */
#define SPEC_PREEMPT_GRACE_DEFAULT 30
#define SPEC_PREEMPT_GRACE_MAX     3600

/* gpus_per_proc: the most a job may ask, and "auto" (sched.h's SCHED_GPUS_AUTO) */
#define SPEC_MAX_GPUS_PER_PROC 64
#define SPEC_GPUS_AUTO         (-1)

/* Validates a job spec object. On success *out owns a new canonical json. */
int validate_job_spec(const json_t *body, struct job_spec *out, struct ddp_err *err);
/* Releases what *spec owns; accepts a zeroed struct. */
void validate_spec_release(struct job_spec *spec);

/* A node registration; strings borrowed from the body. */
struct node_reg {
    const char *name;
    const char *address;
    const char *incarnation;
    const char *credential; /* the node's current credential, to take over a live name; or NULL */
    json_t *labels;         /* borrowed; NULL when the agent sends none */
    const char *isolation;  /* "per-user" or "single-user" (borrowed), or NULL: not said */
    int slots;
    int port_lo, port_hi;
};
int validate_register(const json_t *body, struct node_reg *out, struct ddp_err *err);

struct beat_worker {
    int64_t job;
    int64_t generation;
    int rank, local_rank;
    int64_t pid;
    int exited;
    int exit_code, signal;
    /* What the worker's TORCHELASTIC_ERROR_FILE said (borrowed), or NULL. */
    const char *err_message, *err_frame;
    int64_t err_time; /* seconds since the epoch, 0 unknown */
};
struct beat_log {
    int64_t job, generation;
    int rank;
    int64_t seq;
    const json_t *lines; /* borrowed array of strings */
};
struct beat_metric {
    int64_t job, generation, seq;
    const json_t *metric; /* borrowed object */
};
struct beat_progress {
    int64_t job, generation;
    int rank;
    int64_t age_ms;
    int stopped; /* optional "stopped": the agent saw the process stopped (state T) */
};

/* A heartbeat body. Arrays are owned by the struct (validate_beat_release); json values
 * in them are borrowed from the body, which must outlive the struct. */
struct beat {
    const char *incarnation;
    int64_t version;
    int wait_ms; /* clamped to BEAT_MAX_WAIT_MS */
    struct beat_worker *workers;
    size_t nworkers;
    struct beat_log *logs;
    size_t nlogs;
    struct beat_metric *metrics;
    size_t nmetrics;
    struct beat_progress *progress;
    size_t nprogress;
};
int validate_beat(const json_t *body, struct beat *out, struct ddp_err *err);
void validate_beat_release(struct beat *b);

/* Parses "j-<n>" (n >= 1, decimal, no sign or leading zero); returns 0 or -1. */
int validate_job_id(const char *s, int64_t *out);

/* 1 when s is 1..63 characters of [A-Za-z0-9._-]. */
int validate_name(const char *s);

#endif
