/*
 * assign.c - parsing of the assignments in a heartbeat answer.
 *
 * Invariants:
 *   1. a parsed assignment is self-consistent (0 <= group_rank < group_world_size,
 *      world_size >= group_rank * nproc_per_node + nproc_per_node, argv non-empty), so the
 *      environment built from it never names a rank outside the world;
 *   2. its owner is "" or 1..63 of [A-Za-z0-9._-] (ddpd's rule for user names), so it can
 *      be looked up in the user map and named in a message as it is.
 */
#include "agent/assign.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "agent/gpus.h"
#include "common/jsonx.h"
#include "common/signame.h"
#include "common/xalloc.h"

static int assign_int(const json_t *obj, const char *key, int required, int64_t min, int64_t max,
                      int *out, struct ddp_err *err)
{
    int64_t v = *out;
    int rc = jsonx_get_int(obj, key, required, min, max, &v, err);
    if (rc < 0)
        return rc;
    *out = (int)v;
    return 0;
}

static int assign_str(const json_t *obj, const char *key, int required, char **out,
                      struct ddp_err *err)
{
    const char *s = "";
    int rc = jsonx_get_string(obj, key, required, &s, err);
    if (rc < 0)
        return rc;
    *out = xstrdup(s);
    return 0;
}

int assign_parse(const json_t *obj, struct assign *out, struct ddp_err *err)
{
    struct assign a;
    memset(&a, 0, sizeof(a));
    a.grace_period_s = -1;
    a.preempt_signo = SIGUSR1;
    a.preempt_grace_s = 30;
    a.gpus_per_proc = -1;
    int rc = DDP_EINVAL;
    json_t *cmd = NULL, *env = NULL;

    if (!json_is_object(obj)) {
        err_set(err, DDP_EINVAL, "assignment: expected an object");
        goto out;
    }
    if (assign_str(obj, "job_id", 1, &a.job_id, err) < 0)
        goto out;
    if (a.job_id[0] == '\0' || strchr(a.job_id, '/') || strcmp(a.job_id, ".") == 0 ||
        strcmp(a.job_id, "..") == 0) { /* it names a folder under <work-dir>/jobs */
        err_set(err, DDP_EINVAL, "field 'job_id': '%s' is not a job id", a.job_id);
        goto out;
    }
    if (jsonx_get_int(obj, "generation", 1, 0, INT64_MAX, &a.generation, err) < 0)
        goto out;
    if (assign_str(obj, "run_id", 0, &a.run_id, err) < 0)
        goto out;
    if (jsonx_get_array(obj, "command", 1, &cmd, err) < 0)
        goto out;
    a.argc = json_array_size(cmd);
    if (a.argc == 0) {
        err_set(err, DDP_EINVAL, "field 'command': expected at least one item");
        goto out;
    }
    a.argv = xcalloc(a.argc + 1, sizeof(char *));
    for (size_t i = 0; i < a.argc; i++) {
        const char *s = json_string_value(json_array_get(cmd, i));
        if (!s || !*s) {
            err_set(err, DDP_EINVAL, "field 'command[%zu]': expected a non-empty string", i);
            goto out;
        }
        a.argv[i] = xstrdup(s);
    }
    if (jsonx_get_object(obj, "env", 0, &env, err) < 0)
        goto out;
    if (env) {
        size_t n = json_object_size(env), i = 0;
        a.env_keys = xcalloc(n + 1, sizeof(char *));
        a.env_vals = xcalloc(n + 1, sizeof(char *));
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v)
        {
            if (!json_is_string(v)) {
                err_set(err, DDP_EINVAL, "field 'env.%s': expected a string", k);
                goto out;
            }
            if (!*k || strchr(k, '=')) {
                err_set(err, DDP_EINVAL, "field 'env': '%s' is not a variable name", k);
                goto out;
            }
            a.env_keys[i] = xstrdup(k);
            a.env_vals[i] = xstrdup(json_string_value(v));
            a.nenv = ++i;
        }
    }
    if (assign_str(obj, "workdir", 0, &a.workdir, err) < 0 ||
        assign_str(obj, "checkpoint_dir", 0, &a.checkpoint_dir, err) < 0 ||
        assign_int(obj, "grace_period_s", 0, 0, 3600, &a.grace_period_s, err) < 0 ||
        assign_int(obj, "group_world_size", 1, 1, 1024, &a.group_world_size, err) < 0 ||
        assign_int(obj, "group_rank", 1, 0, 1023, &a.group_rank, err) < 0 ||
        assign_int(obj, "nproc_per_node", 1, 1, 1024, &a.nproc_per_node, err) < 0 ||
        assign_int(obj, "world_size", 1, 1, 1024 * 1024, &a.world_size, err) < 0 ||
        assign_str(obj, "master_addr", 1, &a.master_addr, err) < 0 ||
        assign_int(obj, "master_port", 1, 1, 65535, &a.master_port, err) < 0 ||
        assign_int(obj, "restart_count", 0, 0, 1000000, &a.restart_count, err) < 0 ||
        assign_int(obj, "max_restarts", 0, 0, 1000000, &a.max_restarts, err) < 0 ||
        assign_str(obj, "job_token", 0, &a.job_token, err) < 0 ||
        assign_str(obj, "owner", 0, &a.owner, err) < 0 ||
        assign_int(obj, "preempt_grace_s", 0, 0, 3600, &a.preempt_grace_s, err) < 0 ||
        assign_int(obj, "gpus_per_proc", 0, 0, GPUS_MAX, &a.gpus_per_proc, err) < 0)
        goto out;
    const json_t *ps = json_object_get(obj, "preempt_signal");
    if (ps && !json_is_null(ps)) {
        a.preempt_signo = signame_parse(json_string_value(ps));
        if (a.preempt_signo < 0) {
            err_set(err, DDP_EINVAL, "field 'preempt_signal': expected one of %s",
                    signame_allowed());
            goto out;
        }
    }
    size_t olen = strlen(a.owner);
    if (olen > 63 || strspn(a.owner, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                     "0123456789._-") != olen) { /* it names a local account */
        err_set(err, DDP_EINVAL, "field 'owner': '%.64s' is not a user name", a.owner);
        goto out;
    }
    if (!a.run_id || !*a.run_id) {
        free(a.run_id);
        a.run_id = xstrdup(a.job_id);
    }
    if (a.group_rank >= a.group_world_size) {
        err_set(err, DDP_EINVAL, "field 'group_rank': %d >= group_world_size %d", a.group_rank,
                a.group_world_size);
        goto out;
    }
    if ((int64_t)a.group_rank * a.nproc_per_node + a.nproc_per_node > a.world_size) {
        err_set(err, DDP_EINVAL,
                "field 'world_size': %d is too small for group_rank %d "
                "with nproc_per_node %d",
                a.world_size, a.group_rank, a.nproc_per_node);
        goto out;
    }
    if (!a.master_addr[0]) {
        err_set(err, DDP_EINVAL, "field 'master_addr': expected a non-empty string");
        goto out;
    }
    *out = a;
    memset(&a, 0, sizeof(a));
    rc = 0;
out:
    assign_release(&a);
    return rc;
}

void assign_release(struct assign *a)
{
    if (!a)
        return;
    free(a->job_id);
    free(a->run_id);
    for (size_t i = 0; a->argv && i < a->argc; i++)
        free(a->argv[i]);
    free(a->argv);
    for (size_t i = 0; i < a->nenv; i++) {
        free(a->env_keys[i]);
        free(a->env_vals[i]);
    }
    free(a->env_keys);
    free(a->env_vals);
    free(a->workdir);
    free(a->checkpoint_dir);
    free(a->master_addr);
    free(a->job_token);
    free(a->owner);
    memset(a, 0, sizeof(*a));
}

int assign_rank(const struct assign *a, int local_rank)
{
    return a->group_rank * a->nproc_per_node + local_rank;
}
