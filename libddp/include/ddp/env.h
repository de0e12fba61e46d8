/*
 * env.h - the torchrun environment a worker is started with (docs/api.md, "Worker
 * environment"). Without RANK/WORLD_SIZE the worker is a plain single process: rank 0 of 1,
 * MASTER_ADDR 127.0.0.1, no rendezvous needed.
 */
#ifndef DDP_ENV_H
#define DDP_ENV_H

#include "common/err.h"

struct ddp_env {
    int rank;             /* RANK */
    int world_size;       /* WORLD_SIZE */
    int local_rank;       /* LOCAL_RANK */
    int local_world_size; /* LOCAL_WORLD_SIZE */
    int group_rank;       /* GROUP_RANK (node rank) */
    int group_world_size; /* GROUP_WORLD_SIZE */
    int restart_count;    /* TORCHELASTIC_RESTART_COUNT */
    int generation;       /* DDP_GENERATION, 0 if unset */
    char master_addr[256];
    int master_port;           /* MASTER_PORT, 0 when single process */
    char job_id[64];           /* DDP_JOB_ID or "local" */
    char job_token[128];       /* DDP_JOB_TOKEN or "" */
    char checkpoint_dir[1024]; /* DDP_CHECKPOINT_DIR or "" */
    char heartbeat_file[1024]; /* DDP_HEARTBEAT_FILE or "" */
    int metrics_fd;            /* DDP_METRICS_FD or -1 */
};

/* Reads the environment into *env. Fails with DDP_EINVAL naming the variable when a value is
 * malformed or inconsistent (RANK >= WORLD_SIZE, RANK set without MASTER_ADDR, ...). */
int env_read(struct ddp_env *env, struct ddp_err *err);

#endif
