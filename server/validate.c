/*
 * validate.c - strict validation of request bodies (job spec, register, heartbeat).
 *
 * Invariants: nothing here touches ddpd's state; a function that fails has written
 * nothing to its out-parameter and has freed whatever it allocated; every message names
 * the field ("field 'workers[2].rank': ...") and the rule.
 */
#include "server/validate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/label.h"
#include "common/signame.h"
#include "common/xalloc.h"

/* Rewrites "field 'k': ..." in err into "field '<prefix>k': ...". */
static int validate_prefix(struct ddp_err *err, const char *prefix, int rc)
{
    if (!err || strncmp(err->msg, "field '", 7) != 0)
        return rc;
    char tmp[DDP_ERR_MSG_MAX];
    snprintf(tmp, sizeof(tmp), "field '%s%s", prefix, err->msg + 7);
    memcpy(err->msg, tmp, sizeof(err->msg));
    return rc;
}

int validate_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int validate_env_name(const char *s)
{
    if (!*s)
        return 0;
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
            return 0;
    }
    return 1;
}

/* Parses a decimal integer in [min, max] from s[0..len); 0 or -1. */
static int validate_decimal(const char *s, size_t len, long min, long max, long *out)
{
    if (len == 0 || len > 9)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int validate_job_id(const char *s, int64_t *out)
{
    if (strncmp(s, "j-", 2) != 0 || s[2] == '0')
        return -1;
    long v;
    if (validate_decimal(s + 2, strlen(s + 2), 1, 999999999, &v) != 0)
        return -1;
    *out = v;
    return 0;
}

static int validate_nnodes(const json_t *v, int *nmin, int *nmax, struct ddp_err *err)
{
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);
        if (n < 1 || n > SPEC_MAX_NODES)
            return err_set(err, DDP_EINVAL, "field 'nnodes': %lld is out of range [1, %d]",
                           (long long)n, SPEC_MAX_NODES);
        *nmin = *nmax = (int)n;
        return 0;
    }
    if (!json_is_string(v))
        return err_set(err, DDP_EINVAL,
                       "field 'nnodes': expected a string \"MIN:MAX\" or \"N\", or an integer");
    const char *s = json_string_value(v);
    const char *colon = strchr(s, ':');
    long lo, hi;
    if (colon) {
        if (validate_decimal(s, (size_t)(colon - s), 0, 999999999, &lo) != 0 ||
            validate_decimal(colon + 1, strlen(colon + 1), 0, 999999999, &hi) != 0)
            return err_set(err, DDP_EINVAL,
                           "field 'nnodes': '%.64s' is not \"MIN:MAX\" or \"N\" with integers", s);
    } else {
        if (validate_decimal(s, strlen(s), 0, 999999999, &lo) != 0)
            return err_set(err, DDP_EINVAL,
                           "field 'nnodes': '%.64s' is not \"MIN:MAX\" or \"N\" with integers", s);
        hi = lo;
    }
    if (lo < 1)
        return err_set(err, DDP_EINVAL, "field 'nnodes': min %ld < 1", lo);
    if (lo > hi)
        return err_set(err, DDP_EINVAL, "field 'nnodes': min %ld > max %ld", lo, hi);
    if (hi > SPEC_MAX_NODES)
        return err_set(err, DDP_EINVAL, "field 'nnodes': max %ld > %d", hi, SPEC_MAX_NODES);
    *nmin = (int)lo;
    *nmax = (int)hi;
    return 0;
}

static int validate_path(const json_t *body, const char *key, const char **out, struct ddp_err *err)
{
    int rc = jsonx_get_string(body, key, 0, out, err);
    if (rc)
        return rc;
    if (**out && **out != '/')
        return err_set(err, DDP_EINVAL, "field '%s': must be an absolute path or empty", key);
    if (strlen(*out) > SPEC_MAX_PATH)
        return err_set(err, DDP_EINVAL, "field '%s': longer than %d bytes", key, SPEC_MAX_PATH);
    return 0;
}

int validate_labels(const json_t *obj, const char *key, json_t **out, struct ddp_err *err)
{
    json_t *l = NULL;
    *out = NULL;
    int rc = jsonx_get_object(obj, key, 0, &l, err);
    if (rc || !l)
        return rc;
    if (json_object_size(l) > LABELS_MAX)
        return err_set(err, DDP_EINVAL, "field '%s': %zu labels, at most %d", key,
                       json_object_size(l), LABELS_MAX);
    const char *k;
    json_t *v;
    json_object_foreach(l, k, v)
    {
        if (!label_key_ok(k, strlen(k)))
            return err_set(err, DDP_EINVAL,
                           "field '%s': key '%.64s' must be 1..63 characters of [A-Za-z0-9._/-]",
                           key, k);
        if (!json_is_string(v) || !label_value_ok(json_string_value(v), json_string_length(v)))
            return err_set(err, DDP_EINVAL,
                           "field '%s.%s': expected a string of 0..63 characters of "
                           "[A-Za-z0-9._-]",
                           key, k);
    }
    *out = l;
    return 0;
}

/* gpus_per_proc: absent, null or "auto" (SPEC_GPUS_AUTO), or an integer 0..64. */
static int validate_gpus_per_proc(const json_t *body, int *out, struct ddp_err *err)
{
    const json_t *v = json_object_get(body, "gpus_per_proc");
    if (!v || json_is_null(v) || (json_is_string(v) && strcmp(json_string_value(v), "auto") == 0)) {
        *out = SPEC_GPUS_AUTO;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > SPEC_MAX_GPUS_PER_PROC)
        return err_set(err, DDP_EINVAL,
                       "field 'gpus_per_proc': expected an integer 0..%d or \"auto\"",
                       SPEC_MAX_GPUS_PER_PROC);
    *out = (int)json_integer_value(v);
    return 0;
}

int validate_job_spec(const json_t *body, struct job_spec *out, struct ddp_err *err)
{
    static const char *const keys[] = {
        "command",
        "name",
        "env",
        "nnodes",
        "nproc_per_node",
        "max_restarts",
        "max_runtime_s",
        "grace_period_s",
        "hang_timeout_s",
        "workdir",
        "checkpoint_dir",
        "priority",
        "node_selector",
        "preempt_signal",
        "preempt_grace_s",
        "gpus_per_proc",
        NULL,
    };
    int rc;
    json_t *canon = NULL;
    if (!json_is_object(body))
        return err_set(err, DDP_EINVAL, "body must be a JSON object");
    rc = jsonx_check_keys(body, keys, NULL, err);
    if (rc)
        goto out;

    json_t *command = NULL;
    rc = jsonx_get_array(body, "command", 1, &command, err);
    if (rc)
        goto out;
    size_t nargs = json_array_size(command);
    if (nargs == 0) {
        rc = err_set(err, DDP_EINVAL, "field 'command': must not be empty");
        goto out;
    }
    if (nargs > SPEC_MAX_ARGS) {
        rc = err_set(err, DDP_EINVAL, "field 'command': %zu items, at most %d", nargs,
                     SPEC_MAX_ARGS);
        goto out;
    }
    for (size_t i = 0; i < nargs; i++) {
        json_t *a = json_array_get(command, i);
        if (!json_is_string(a) || json_string_length(a) == 0 ||
            json_string_length(a) > SPEC_MAX_ARG_LEN) {
            rc = err_set(err, DDP_EINVAL,
                         "field 'command[%zu]': expected a non-empty string of at most %d bytes", i,
                         SPEC_MAX_ARG_LEN);
            goto out;
        }
    }

    const char *name = "job";
    rc = jsonx_get_string(body, "name", 0, &name, err);
    if (rc)
        goto out;
    if (!validate_name(name)) {
        rc = err_set(err, DDP_EINVAL, "field 'name': must be 1..63 characters of [A-Za-z0-9._-]");
        goto out;
    }

    json_t *env = NULL;
    rc = jsonx_get_object(body, "env", 0, &env, err);
    if (rc)
        goto out;
    if (env) {
        if (json_object_size(env) > SPEC_MAX_ENV) {
            rc = err_set(err, DDP_EINVAL, "field 'env': %zu entries, at most %d",
                         json_object_size(env), SPEC_MAX_ENV);
            goto out;
        }
        const char *k;
        json_t *v;
        json_object_foreach(env, k, v)
        {
            if (!validate_env_name(k)) {
                rc = err_set(err, DDP_EINVAL,
                             "field 'env': name '%.64s' must match [A-Za-z_][A-Za-z0-9_]*", k);
                goto out;
            }
            if (!json_is_string(v)) {
                rc = err_set(err, DDP_EINVAL, "field 'env.%s': expected a string", k);
                goto out;
            }
            /* The kernel refuses an environment string ("NAME=value" and its NUL) of more
             * than MAX_ARG_STRLEN bytes with E2BIG at every start: refuse it here instead. */
            size_t vlen = json_string_length(v);
            if (strlen(k) + 1 + vlen + 1 > SPEC_MAX_ENV_STRING) {
                rc = err_set(err, DDP_EINVAL,
                             "field 'env.%.64s': %zu bytes; NAME=value must fit in %d bytes (the "
                             "kernel's limit for one environment string)",
                             k, vlen, SPEC_MAX_ENV_STRING - 1);
                goto out;
            }
            if (strlen(json_string_value(v)) != vlen) {
                rc = err_set(err, DDP_EINVAL, "field 'env.%.64s': holds a NUL character", k);
                goto out;
            }
        }
    }

    int nmin = 1, nmax = 1;
    json_t *nn = json_object_get(body, "nnodes");
    if (nn && !json_is_null(nn)) {
        rc = validate_nnodes(nn, &nmin, &nmax, err);
        if (rc)
            goto out;
    }
    int64_t nproc = 1, max_restarts = 3, max_runtime = 0, grace = 30, hang = 0, prio = 0;
    int64_t preempt_grace = SPEC_PREEMPT_GRACE_DEFAULT;
    rc = jsonx_get_int(body, "nproc_per_node", 0, 1, SPEC_MAX_NPROC, &nproc, err);
    if (!rc)
        rc = jsonx_get_int(body, "max_restarts", 0, 0, 1000, &max_restarts, err);
    if (!rc)
        rc = jsonx_get_int(body, "max_runtime_s", 0, 0, 31536000, &max_runtime, err);
    if (!rc)
        rc = jsonx_get_int(body, "grace_period_s", 0, 0, 3600, &grace, err);
    if (!rc)
        rc = jsonx_get_int(body, "hang_timeout_s", 0, 0, 86400, &hang, err);
    if (!rc)
        rc = jsonx_get_int(body, "priority", 0, SPEC_PRIORITY_MIN, SPEC_PRIORITY_MAX, &prio, err);
    if (!rc)
        rc = jsonx_get_int(body, "preempt_grace_s", 0, 0, SPEC_PREEMPT_GRACE_MAX, &preempt_grace,
                           err);
    const char *psig = SIGNAME_DEFAULT;
    if (!rc)
        rc = jsonx_get_string(body, "preempt_signal", 0, &psig, err);
    int psigno = -1;
    if (!rc && (psigno = signame_parse(psig)) < 0)
        rc = err_set(err, DDP_EINVAL, "field 'preempt_signal': '%.32s' is not one of %s", psig,
                     signame_allowed());
    int gpp = SPEC_GPUS_AUTO;
    if (!rc)
        rc = validate_gpus_per_proc(body, &gpp, err);
    json_t *selector = NULL;
    if (!rc)
        rc = validate_labels(body, "node_selector", &selector, err);
    if (rc)
        goto out;
    const char *workdir = "", *ckpt = "";
    rc = validate_path(body, "workdir", &workdir, err);
    if (!rc)
        rc = validate_path(body, "checkpoint_dir", &ckpt, err);
    if (rc)
        goto out;

    char nnodes[32];
    snprintf(nnodes, sizeof(nnodes), "%d:%d", nmin, nmax);
    canon = json_pack("{s:s, s:O, s:o, s:s, s:I, s:I, s:I, s:I, s:I, s:s, s:s, s:I}", "name", name,
                      "command", command, "env", env ? json_deep_copy(env) : json_object(),
                      "nnodes", nnodes, "nproc_per_node", (json_int_t)nproc, "max_restarts",
                      (json_int_t)max_restarts, "max_runtime_s", (json_int_t)max_runtime,
                      "grace_period_s", (json_int_t)grace, "hang_timeout_s", (json_int_t)hang,
                      "workdir", workdir, "checkpoint_dir", ckpt, "priority", (json_int_t)prio);
    if (!canon)
        abort(); /* only out of memory */
    /* command is shared by reference; give the canonical spec its own copy */
    json_object_set_new(canon, "command", json_deep_copy(command));
    json_object_set_new(canon, "node_selector",
                        selector ? json_deep_copy(selector) : json_object());
    json_object_set_new(canon, "preempt_signal", json_string(signame_str(psigno)));
    json_object_set_new(canon, "preempt_grace_s", json_integer(preempt_grace));
    json_object_set_new(canon, "gpus_per_proc",
                        gpp == SPEC_GPUS_AUTO ? json_string("auto") : json_integer(gpp));
    out->json = canon;
    out->name = json_string_value(json_object_get(canon, "name"));
    out->nmin = nmin;
    out->nmax = nmax;
    out->nproc = (int)nproc;
    out->max_restarts = (int)max_restarts;
    out->max_runtime_s = max_runtime;
    out->grace_period_s = (int)grace;
    out->hang_timeout_s = (int)hang;
    out->priority = (int)prio;
    out->node_selector = json_object_get(canon, "node_selector");
    out->preempt_signal = json_string_value(json_object_get(canon, "preempt_signal"));
    out->preempt_grace_s = (int)preempt_grace;
    out->gpus_per_proc = gpp;
    canon = NULL;
    rc = 0;
out:
    json_decref(canon);
    return rc;
}

void validate_spec_release(struct job_spec *spec)
{
    if (!spec)
        return;
    json_decref(spec->json);
    memset(spec, 0, sizeof(*spec));
}

static int validate_port_range(const char *s, int *lo, int *hi, struct ddp_err *err)
{
    const char *dash = strchr(s, '-');
    long a, b;
    if (!dash || validate_decimal(s, (size_t)(dash - s), 1, 65535, &a) != 0 ||
        validate_decimal(dash + 1, strlen(dash + 1), 1, 65535, &b) != 0 || a > b)
        return err_set(err, DDP_EINVAL,
                       "field 'port_range': expected \"A-B\" with 1 <= A <= B <= 65535");
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}

int validate_register(const json_t *body, struct node_reg *out, struct ddp_err *err)
{
    static const char *const keys[] = {"name",       "address",     "slots",
                                       "port_range", "incarnation", "credential",
                                       "isolation",  "labels",      NULL};
    struct node_reg r = {0};
    int rc;
    if (!json_is_object(body))
        return err_set(err, DDP_EINVAL, "body must be a JSON object");
    rc = jsonx_check_keys(body, keys, NULL, err);
    if (!rc)
        rc = jsonx_get_string(body, "name", 1, &r.name, err);
    if (rc)
        return rc;
    if (!validate_name(r.name))
        return err_set(err, DDP_EINVAL, "field 'name': must be 1..63 characters of [A-Za-z0-9._-]");
    rc = jsonx_get_string(body, "address", 1, &r.address, err);
    if (rc)
        return rc;
    size_t alen = strlen(r.address);
    if (alen == 0 || alen > 253 || strpbrk(r.address, " \t\r\n/"))
        return err_set(err, DDP_EINVAL,
                       "field 'address': expected a host name or IP address (1..253 bytes)");
    int64_t slots = 0;
    rc = jsonx_get_int(body, "slots", 1, 1, SPEC_MAX_NPROC, &slots, err);
    if (rc)
        return rc;
    r.slots = (int)slots;
    const char *range = "29500-29999";
    rc = jsonx_get_string(body, "port_range", 0, &range, err);
    if (!rc)
        rc = validate_port_range(range, &r.port_lo, &r.port_hi, err);
    if (!rc)
        rc = jsonx_get_string(body, "incarnation", 1, &r.incarnation, err);
    if (rc)
        return rc;
    size_t ilen = strlen(r.incarnation);
    if (ilen == 0 || ilen > 128)
        return err_set(err, DDP_EINVAL, "field 'incarnation': expected 1..128 bytes");
    rc = jsonx_get_string(body, "credential", 0, &r.credential, err);
    if (rc)
        return rc;
    if (r.credential && (strlen(r.credential) < 16 || strlen(r.credential) > 256))
        return err_set(err, DDP_EINVAL, "field 'credential': expected 16..256 bytes");
    rc = validate_labels(body, "labels", &r.labels, err);
    if (rc)
        return rc;
    rc = jsonx_get_string(body, "isolation", 0, &r.isolation, err);
    if (rc)
        return rc;
    if (r.isolation && strcmp(r.isolation, "per-user") != 0 &&
        strcmp(r.isolation, "single-user") != 0)
        return err_set(err, DDP_EINVAL,
                       "field 'isolation': expected \"per-user\" or \"single-user\"");
    *out = r;
    return 0;
}

/* Reads field key of item (an element of array `arr` at index i) as a job id. */
static int validate_item_job(const json_t *item, const char *arr, size_t i, int64_t *out,
                             struct ddp_err *err)
{
    const char *s;
    int rc = jsonx_get_string(item, "job_id", 1, &s, err);
    if (rc) {
        char p[48];
        snprintf(p, sizeof(p), "%s[%zu].", arr, i);
        return validate_prefix(err, p, rc);
    }
    if (validate_job_id(s, out) != 0)
        return err_set(err, DDP_EINVAL, "field '%s[%zu].job_id': expected \"j-<n>\"", arr, i);
    return 0;
}

/* Gets array key of body (optional), checks its size and that items are objects. */
static int validate_items(const json_t *body, const char *key, size_t max, json_t **out,
                          struct ddp_err *err)
{
    json_t *a = NULL;
    int rc = jsonx_get_array(body, key, 0, &a, err);
    if (rc)
        return rc;
    if (a && json_array_size(a) > max)
        return err_set(err, DDP_EINVAL, "field '%s': %zu items, at most %zu", key,
                       json_array_size(a), max);
    if (a)
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_is_object(json_array_get(a, i)))
                return err_set(err, DDP_EINVAL, "field '%s[%zu]': expected an object", key, i);
    *out = a;
    return 0;
}

/* Refuses unknown keys in item i of array arr. */
static int validate_item_keys(const json_t *item, const char *const *keys, const char *arr,
                              size_t i, struct ddp_err *err)
{
    struct ddp_err e;
    int rc = jsonx_check_keys(item, keys, NULL, &e);
    if (rc)
        return err_set(err, DDP_EINVAL, "field '%s[%zu]': %s", arr, i, e.msg);
    return 0;
}

static int validate_beat_worker(const json_t *w, size_t i, struct beat_worker *o,
                                struct ddp_err *err)
{
    static const char *const keys[] = {"job_id", "generation", "rank",   "local_rank", "pid",
                                       "state",  "exit_code",  "signal", "error",      NULL};
    char p[48];
    snprintf(p, sizeof(p), "workers[%zu].", i);
    int64_t gen = 0, rank = 0, lrank = 0, pid = 0, code = -1, sig = 0;
    const char *state = NULL;
    int rc = validate_item_keys(w, keys, "workers", i, err);
    if (!rc)
        rc = validate_item_job(w, "workers", i, &o->job, err);
    if (rc)
        return rc;
    rc = jsonx_get_int(w, "generation", 1, 1, INT32_MAX, &gen, err);
    if (!rc)
        rc = jsonx_get_int(w, "rank", 1, 0, 1 << 20, &rank, err);
    if (!rc)
        rc = jsonx_get_int(w, "local_rank", 0, 0, SPEC_MAX_NPROC, &lrank, err);
    if (!rc)
        rc = jsonx_get_int(w, "pid", 0, 0, INT32_MAX, &pid, err);
    if (!rc)
        rc = jsonx_get_string(w, "state", 1, &state, err);
    if (!rc)
        rc = jsonx_get_int(w, "exit_code", 0, -1, 255, &code, err);
    if (!rc)
        rc = jsonx_get_int(w, "signal", 0, 0, 128, &sig, err);
    if (rc)
        return validate_prefix(err, p, rc);
    if (strcmp(state, "running") == 0)
        o->exited = 0;
    else if (strcmp(state, "exited") == 0)
        o->exited = 1;
    else
        return err_set(err, DDP_EINVAL,
                       "field 'workers[%zu].state': expected \"running\" or "
                       "\"exited\"",
                       i);
    json_t *e = NULL;
    rc = jsonx_get_object(w, "error", 0, &e, err);
    if (rc)
        return validate_prefix(err, p, rc);
    if (e) {
        static const char *const ekeys[] = {"message", "frame", "timestamp", NULL};
        int64_t ts = 0;
        const char *msg = NULL, *frame = NULL;
        rc = jsonx_check_keys(e, ekeys, NULL, err);
        if (!rc)
            rc = jsonx_get_string(e, "message", 1, &msg, err);
        if (!rc)
            rc = jsonx_get_string(e, "frame", 0, &frame, err);
        if (!rc)
            rc = jsonx_get_int(e, "timestamp", 0, 0, INT64_MAX / 2, &ts, err);
        if (rc)
            return validate_prefix(err, p, rc);
        if (strlen(msg) > 1024 || (frame && strlen(frame) > 512))
            return err_set(err, DDP_EINVAL,
                           "field 'workers[%zu].error': message at most 1024 bytes, frame 512", i);
        o->err_message = msg;
        o->err_frame = frame;
        o->err_time = ts;
    }
    o->generation = gen;
    o->rank = (int)rank;
    o->local_rank = (int)lrank;
    o->pid = pid;
    o->exit_code = (int)code;
    o->signal = (int)sig;
    return 0;
}

int validate_beat(const json_t *body, struct beat *out, struct ddp_err *err)
{
    static const char *const keys[] = {"incarnation", "version", "wait_ms",  "workers",
                                       "logs",        "metrics", "progress", NULL};
    struct beat b = {0};
    json_t *workers = NULL, *logs = NULL, *metrics = NULL, *progress = NULL;
    int64_t version = 0, wait_ms = 0;
    int rc;
    char p[48];
    if (!json_is_object(body))
        return err_set(err, DDP_EINVAL, "body must be a JSON object");
    rc = jsonx_check_keys(body, keys, NULL, err);
    if (!rc)
        rc = jsonx_get_string(body, "incarnation", 1, &b.incarnation, err);
    if (!rc)
        rc = jsonx_get_int(body, "version", 0, 0, INT64_MAX, &version, err);
    if (!rc)
        rc = jsonx_get_int(body, "wait_ms", 0, 0, 600000, &wait_ms, err);
    if (!rc)
        rc = validate_items(body, "workers", BEAT_MAX_ITEMS, &workers, err);
    if (!rc)
        rc = validate_items(body, "logs", BEAT_MAX_ITEMS, &logs, err);
    if (!rc)
        rc = validate_items(body, "metrics", BEAT_MAX_ITEMS, &metrics, err);
    if (!rc)
        rc = validate_items(body, "progress", BEAT_MAX_ITEMS, &progress, err);
    if (rc)
        goto out;
    b.version = version;
    b.wait_ms = wait_ms > BEAT_MAX_WAIT_MS ? BEAT_MAX_WAIT_MS : (int)wait_ms;

    b.nworkers = json_array_size(workers);
    b.workers = xcalloc(b.nworkers + 1, sizeof(*b.workers));
    for (size_t i = 0; i < b.nworkers; i++) {
        rc = validate_beat_worker(json_array_get(workers, i), i, &b.workers[i], err);
        if (rc)
            goto out;
    }

    static const char *const log_keys[] = {"job_id", "generation", "rank", "seq", "lines", NULL};
    b.nlogs = json_array_size(logs);
    b.logs = xcalloc(b.nlogs + 1, sizeof(*b.logs));
    size_t total_lines = 0;
    for (size_t i = 0; i < b.nlogs; i++) {
        json_t *l = json_array_get(logs, i);
        struct beat_log *o = &b.logs[i];
        int64_t gen = 0, rank = 0, seq = 0;
        json_t *lines = NULL;
        snprintf(p, sizeof(p), "logs[%zu].", i);
        rc = validate_item_keys(l, log_keys, "logs", i, err);
        if (rc)
            goto out;
        rc = validate_item_job(l, "logs", i, &o->job, err);
        if (rc)
            goto out;
        rc = jsonx_get_int(l, "generation", 1, 1, INT32_MAX, &gen, err);
        if (!rc)
            rc = jsonx_get_int(l, "rank", 1, 0, 1 << 20, &rank, err);
        if (!rc)
            rc = jsonx_get_int(l, "seq", 1, 1, INT64_MAX / 2, &seq, err);
        if (!rc)
            rc = jsonx_get_array(l, "lines", 1, &lines, err);
        if (rc) {
            rc = validate_prefix(err, p, rc);
            goto out;
        }
        for (size_t k = 0; k < json_array_size(lines); k++)
            if (!json_is_string(json_array_get(lines, k))) {
                rc = err_set(err, DDP_EINVAL, "field 'logs[%zu].lines[%zu]': expected a string", i,
                             k);
                goto out;
            }
        total_lines += json_array_size(lines);
        if (total_lines > BEAT_MAX_LINES) {
            rc = err_set(err, DDP_EINVAL, "field 'logs': more than %d lines in one beat",
                         BEAT_MAX_LINES);
            goto out;
        }
        o->generation = gen;
        o->rank = (int)rank;
        o->seq = seq;
        o->lines = lines;
    }

    static const char *const met_keys[] = {"job_id", "generation", "seq", "metric", NULL};
    b.nmetrics = json_array_size(metrics);
    b.metrics = xcalloc(b.nmetrics + 1, sizeof(*b.metrics));
    for (size_t i = 0; i < b.nmetrics; i++) {
        json_t *m = json_array_get(metrics, i);
        struct beat_metric *o = &b.metrics[i];
        int64_t gen = 0, seq = 0;
        json_t *metric = NULL;
        snprintf(p, sizeof(p), "metrics[%zu].", i);
        rc = validate_item_keys(m, met_keys, "metrics", i, err);
        if (rc)
            goto out;
        rc = validate_item_job(m, "metrics", i, &o->job, err);
        if (rc)
            goto out;
        rc = jsonx_get_int(m, "generation", 1, 1, INT32_MAX, &gen, err);
        if (!rc)
            rc = jsonx_get_int(m, "seq", 1, 1, INT64_MAX / 2, &seq, err);
        if (!rc)
            rc = jsonx_get_object(m, "metric", 1, &metric, err);
        if (rc) {
            rc = validate_prefix(err, p, rc);
            goto out;
        }
        if (jsonx_depth(metric, BEAT_MAX_METRIC_DEPTH) > BEAT_MAX_METRIC_DEPTH) {
            rc = err_set(err, DDP_EINVAL, "field '%smetric': nested more than %d levels", p,
                         BEAT_MAX_METRIC_DEPTH);
            goto out;
        }
        o->generation = gen;
        o->seq = seq;
        o->metric = metric;
    }

    static const char *const prog_keys[] = {"job_id", "generation", "rank",
                                            "age_ms", "stopped",    NULL};
    b.nprogress = json_array_size(progress);
    b.progress = xcalloc(b.nprogress + 1, sizeof(*b.progress));
    for (size_t i = 0; i < b.nprogress; i++) {
        json_t *g = json_array_get(progress, i);
        struct beat_progress *o = &b.progress[i];
        int64_t gen = 0, rank = 0, age = 0;
        snprintf(p, sizeof(p), "progress[%zu].", i);
        rc = validate_item_keys(g, prog_keys, "progress", i, err);
        if (rc)
            goto out;
        rc = validate_item_job(g, "progress", i, &o->job, err);
        if (rc)
            goto out;
        rc = jsonx_get_int(g, "generation", 1, 1, INT32_MAX, &gen, err);
        if (!rc)
            rc = jsonx_get_int(g, "rank", 1, 0, 1 << 20, &rank, err);
        if (!rc)
            rc = jsonx_get_int(g, "age_ms", 1, 0, INT64_MAX / 2, &age, err);
        int stopped = 0;
        if (!rc)
            rc = jsonx_get_bool(g, "stopped", 0, &stopped, err);
        if (rc) {
            rc = validate_prefix(err, p, rc);
            goto out;
        }
        o->generation = gen;
        o->rank = (int)rank;
        o->age_ms = age;
        o->stopped = stopped;
    }
    *out = b;
    memset(&b, 0, sizeof(b));
    rc = 0;
out:
    validate_beat_release(&b);
    return rc;
}

void validate_beat_release(struct beat *b)
{
    if (!b)
        return;
    free(b->workers);
    free(b->logs);
    free(b->metrics);
    free(b->progress);
    memset(b, 0, sizeof(*b));
}
