/*
 * env.c - reads the torchrun environment (docs/api.md, "Worker environment").
 *
 * Two modes: with RANK and WORLD_SIZE set, the worker is one rank of a job and MASTER_ADDR
 * and MASTER_PORT are required; with neither set it is a plain single process (rank 0 of 1).
 * One set without the other is an error. Every number is parsed strictly (no empty values,
 * trailing junk or out-of-range values) and the message names the variable. *env is written
 * only on success.
 */
#include "ddp/env.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"

/* Largest world size we accept; the comm backends are designed and tested for up to 64. */
#define ENV_WORLD_MAX 65536

/* Parses the integer variable name into *out when set; *out is left alone when unset.
 * Returns 1 when set, 0 when unset, DDP_EINVAL when malformed. */
static int env_int(const char *name, long min, long max, int *out, struct ddp_err *err)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    long v = 0;
    /* strtol would skip leading blanks; a value with them is malformed all the same. */
    if (*s && !(*s == '-' || *s == '+' || (*s >= '0' && *s <= '9')))
        return err_set(err, DDP_EINVAL, "%s: '%s' is not an integer", name, s);
    if (args_parse_long(name, s, min, max, &v, err) < 0)
        return DDP_EINVAL;
    *out = (int)v;
    return 1;
}

/* Copies the string variable name into buf (size bytes) when set; rejects values that do
 * not fit. Returns 1 when set, 0 when unset, DDP_EINVAL when too long. */
static int env_str(const char *name, char *buf, size_t size, struct ddp_err *err)
{
    const char *s = getenv(name);
    if (!s)
        return 0;
    size_t n = strlen(s);
    if (n >= size)
        return err_set(err, DDP_EINVAL, "%s: value is longer than %zu bytes", name, size - 1);
    memcpy(buf, s, n + 1);
    return 1;
}

int env_read(struct ddp_env *env, struct ddp_err *err)
{
    struct ddp_env e;
    memset(&e, 0, sizeof(e));
    int ret = 0;
    e.rank = 0;
    e.world_size = 1;
    e.restart_count = 0;
    e.generation = 0;
    e.metrics_fd = -1;
    memcpy(e.job_id, "local", sizeof("local"));
    memcpy(e.master_addr, "127.0.0.1", sizeof("127.0.0.1"));

    int has_rank = getenv("RANK") != NULL;
    int has_world = getenv("WORLD_SIZE") != NULL;
    if (has_rank != has_world) {
        ret = err_set(err, DDP_EINVAL, "%s is set but %s is not", has_rank ? "RANK" : "WORLD_SIZE",
                      has_rank ? "WORLD_SIZE" : "RANK");
        goto out;
    }
    if ((ret = env_int("WORLD_SIZE", 1, ENV_WORLD_MAX, &e.world_size, err)) < 0)
        goto out;
    if ((ret = env_int("RANK", 0, ENV_WORLD_MAX - 1, &e.rank, err)) < 0)
        goto out;
    if (e.rank >= e.world_size) {
        ret = err_set(err, DDP_EINVAL, "RANK: %d is not below WORLD_SIZE %d", e.rank, e.world_size);
        goto out;
    }

    int has_addr = 0;
    if ((ret = env_str("MASTER_ADDR", e.master_addr, sizeof(e.master_addr), err)) < 0)
        goto out;
    has_addr = ret;
    if (has_addr && e.master_addr[0] == '\0') {
        ret = err_set(err, DDP_EINVAL, "MASTER_ADDR: empty value");
        goto out;
    }
    int has_port = 0;
    if ((ret = env_int("MASTER_PORT", 1, 65535, &e.master_port, err)) < 0)
        goto out;
    has_port = ret;
    if (has_rank && !has_addr) {
        ret = err_set(err, DDP_EINVAL, "MASTER_ADDR: not set, but RANK is");
        goto out;
    }
    if (has_rank && !has_port) {
        ret = err_set(err, DDP_EINVAL, "MASTER_PORT: not set, but RANK is");
        goto out;
    }

    /* Without torchrun's layout variables the job is one node holding every rank. */
    e.local_rank = e.rank;
    e.local_world_size = e.world_size;
    e.group_rank = 0;
    e.group_world_size = 1;
    if ((ret = env_int("LOCAL_WORLD_SIZE", 1, e.world_size, &e.local_world_size, err)) < 0)
        goto out;
    if ((ret = env_int("LOCAL_RANK", 0, ENV_WORLD_MAX - 1, &e.local_rank, err)) < 0)
        goto out;
    if (e.local_rank >= e.local_world_size) {
        ret = err_set(err, DDP_EINVAL, "LOCAL_RANK: %d is not below LOCAL_WORLD_SIZE %d",
                      e.local_rank, e.local_world_size);
        goto out;
    }
    if ((ret = env_int("GROUP_WORLD_SIZE", 1, e.world_size, &e.group_world_size, err)) < 0)
        goto out;
    if ((ret = env_int("GROUP_RANK", 0, ENV_WORLD_MAX - 1, &e.group_rank, err)) < 0)
        goto out;
    if (e.group_rank >= e.group_world_size) {
        ret = err_set(err, DDP_EINVAL, "GROUP_RANK: %d is not below GROUP_WORLD_SIZE %d",
                      e.group_rank, e.group_world_size);
        goto out;
    }
    if ((ret = env_int("TORCHELASTIC_RESTART_COUNT", 0, 1000000000, &e.restart_count, err)) < 0)
        goto out;
    if ((ret = env_int("DDP_GENERATION", 0, 1000000000, &e.generation, err)) < 0)
        goto out;
    if ((ret = env_str("DDP_JOB_ID", e.job_id, sizeof(e.job_id), err)) < 0)
        goto out;
    if (e.job_id[0] == '\0') {
        ret = err_set(err, DDP_EINVAL, "DDP_JOB_ID: empty value");
        goto out;
    }
    if ((ret = env_str("DDP_JOB_TOKEN", e.job_token, sizeof(e.job_token), err)) < 0)
        goto out;
    if ((ret = env_str("DDP_CHECKPOINT_DIR", e.checkpoint_dir, sizeof(e.checkpoint_dir), err)) < 0)
        goto out;
    if ((ret = env_str("DDP_HEARTBEAT_FILE", e.heartbeat_file, sizeof(e.heartbeat_file), err)) < 0)
        goto out;
    if ((ret = env_int("DDP_METRICS_FD", 0, 1 << 20, &e.metrics_fd, err)) < 0)
        goto out;
    if (ret == 1 && fcntl(e.metrics_fd, F_GETFD) < 0) {
        ret = err_set(err, DDP_EINVAL, "DDP_METRICS_FD: %d is not an open file descriptor",
                      e.metrics_fd);
        goto out;
    }
    ret = 0;
    *env = e;
out:
    return ret;
}
