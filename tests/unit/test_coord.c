/*
 * test_coord.c - the elastic rules of ddpd's coordinator, driven through coord_* with a
 * clock of our own (no sleeping): start, success, failure and restart budget, node loss
 * and scale-down, scale-up, cancel, limits, a restart of ddpd, log deduplication and cap,
 * "suspect then confirm" (a node accused by a rank's exit 6, or by any first failure, is
 * LOST unless it beats within the confirm window), and a failed commit of heartbeat data
 * (on a real SQLite file whose writes fail), which must cost a re-send and nothing else;
 * retention: deleting finished jobs, ids never reused, the --job-ttl sweep, the log as gzip;
 * the scheduler's rules (priority, backoff, quotas, cordon and drain, preemption), and
 * reasons kept well-formed UTF-8.
 *
 * Why one file of ~2,400 lines: one cmocka binary per module (docs/style.md), and every case
 * drives the same coordinator through the same clock and fixture helpers at the top.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <zlib.h>

#include "common/exitcodes.h"
#include "common/fsutil.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/coord.h"
#include "server/coord_internal.h" /* the marks held in memory, for the marks test */

/* The credential each node got at its last registration, as its agent keeps it. */
static struct {
    char name[64];
    char cred[80];
} creds[16];

static const struct principal ADMIN = {PRINCIPAL_USER, ROLE_ADMIN, "admin"};

struct fx {
    char dir[64];
    char *db;
    struct coord *c;
    int64_t now;
    struct coord_opts opts;
    int writes_fail; /* writes_fail() is on: teardown lifts it */
    struct rlimit fsize;
};

/* on: from now every write of this process to a file fails (EFBIG, RLIMIT_FSIZE 0; SIGXFSZ
 * ignored), as writes fail on a full disk: SQLite really fails, with no fake store. off: as
 * before. */
static void writes_fail(struct fx *f, int on)
{
    if (on && !f->writes_fail) {
        assert_int_equal(getrlimit(RLIMIT_FSIZE, &f->fsize), 0);
        assert_true(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
        struct rlimit none = {0, f->fsize.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &none), 0);
        f->writes_fail = 1;
    } else if (!on && f->writes_fail) {
        assert_int_equal(setrlimit(RLIMIT_FSIZE, &f->fsize), 0);
        f->writes_fail = 0;
    }
}

static int setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    memset(creds, 0, sizeof(creds));
    log_init("test", LOG_WARN);
    snprintf(f->dir, sizeof(f->dir), "/tmp/ddp-test-coord-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->db = xasprintf("%s/ddp.db", f->dir);
    f->now = 1000000;
    f->opts.node_timeout_ms = 5000;
    f->opts.log_cap = 5;
    if (coord_open(f->db, &f->opts, f->now, &f->c, NULL) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    if (f->writes_fail)
        setrlimit(RLIMIT_FSIZE, &f->fsize);
    coord_close(f->c);
    fs_remove_tree(f->dir, NULL);
    free(f->db);
    free(f);
    return 0;
}

static json_t *parse(const char *text)
{
    json_t *o = json_loads(text, 0, NULL);
    assert_non_null(o);
    return o;
}

static int64_t submit(struct fx *f, const char *spec)
{
    json_t *body = parse(spec);
    char *out = NULL;
    struct ddp_err e;
    int created = 0;
    if (coord_submit(f->c, body, &ADMIN, NULL, f->now, &out, &created, &e) != 0 || !created)
        fail_msg("submit %s: %s", spec, e.msg);
    json_decref(body);
    json_t *j = parse(out);
    int64_t id = strtoll(json_string_value(json_object_get(j, "id")) + 2, NULL, 10);
    json_decref(j);
    free(out);
    return id;
}

static char *cred_of(const char *name)
{
    for (size_t i = 0; i < 16; i++)
        if (strcmp(creds[i].name, name) == 0 || !creds[i].name[0]) {
            snprintf(creds[i].name, sizeof(creds[i].name), "%s", name);
            return creds[i].cred;
        }
    fail_msg("too many nodes");
    return NULL;
}

/* Registers (again) as the node's agent would: with the credential it holds, if any. */
static int reg_rc(struct fx *f, const char *name, int slots, const char *inc, const char *cred,
                  struct ddp_err *e)
{
    char text[512];
    snprintf(text, sizeof(text),
             "{\"name\":\"%s\",\"address\":\"10.0.0.%c\",\"slots\":%d,\"incarnation\":\"%s\","
             "\"port_range\":\"30000-30010\"%s%s%s}",
             name, name[strlen(name) - 1], slots, inc, cred && *cred ? ",\"credential\":\"" : "",
             cred && *cred ? cred : "", cred && *cred ? "\"" : "");
    json_t *body = parse(text);
    char *out = NULL;
    int rc = coord_register(f->c, body, f->now, &out, e);
    json_decref(body);
    if (rc == 0) {
        json_t *o = parse(out);
        const char *c = json_string_value(json_object_get(o, "credential"));
        assert_non_null(c);
        snprintf(cred_of(name), 80, "%s", c);
        json_decref(o);
        free(out);
    }
    return rc;
}

static void reg(struct fx *f, const char *name, int slots, const char *inc)
{
    struct ddp_err e;
    if (reg_rc(f, name, slots, inc, cred_of(name), &e) != 0)
        fail_msg("register %s: %s", name, e.msg);
}

/* One heartbeat; returns the answer (caller decrefs) or NULL with *code set. */
static json_t *beat_rc(struct fx *f, const char *name, const char *inc, const char *extra,
                       int *code)
{
    char text[4096];
    snprintf(text, sizeof(text), "{\"incarnation\":\"%s\"%s%s}", inc, extra ? "," : "",
             extra ? extra : "");
    json_t *body = parse(text);
    char *out = NULL;
    struct ddp_err e;
    *code = coord_beat(f->c, name, body, f->now, &out, &e);
    json_decref(body);
    if (*code)
        return NULL;
    json_t *a = parse(out);
    free(out);
    return a;
}

static json_t *beat(struct fx *f, const char *name, const char *extra)
{
    int code;
    json_t *a = beat_rc(f, name, "inc-1", extra, &code);
    if (!a)
        fail_msg("beat %s failed with %d", name, code);
    return a;
}

static void beat0(struct fx *f, const char *name, const char *extra)
{
    json_decref(beat(f, name, extra));
}

static json_t *job(struct fx *f, int64_t id)
{
    char *out = NULL;
    assert_int_equal(coord_get_job(f->c, id, &out, NULL), 0);
    json_t *j = parse(out);
    free(out);
    return j;
}

static void expect_state(struct fx *f, int64_t id, const char *state, const char *reason_part)
{
    json_t *j = job(f, id);
    const char *s = json_string_value(json_object_get(j, "state"));
    const char *r = json_string_value(json_object_get(j, "reason"));
    if (strcmp(s, state) != 0 || (reason_part && !strstr(r, reason_part)))
        fail_msg("job j-%lld: state %s reason '%s', expected %s '%s'", (long long)id, s, r, state,
                 reason_part ? reason_part : "");
    json_decref(j);
}

/* The job's events contain one in state with a reason containing reason_part. */
static void expect_event(struct fx *f, int64_t id, const char *state, const char *reason_part)
{
    char *out = NULL;
    assert_int_equal(coord_events(f->c, id, 0, &out, NULL), 0);
    json_t *o = parse(out);
    json_t *ev = json_object_get(o, "events");
    int found = 0;
    for (size_t i = 0; i < json_array_size(ev); i++) {
        json_t *e = json_array_get(ev, i);
        if (strcmp(json_string_value(json_object_get(e, "state")), state) == 0 &&
            strstr(json_string_value(json_object_get(e, "reason")), reason_part))
            found = 1;
    }
    if (!found)
        fail_msg("job j-%lld: no %s event with '%s' in %s", (long long)id, state, reason_part, out);
    json_decref(o);
    free(out);
}

static int64_t job_int(struct fx *f, int64_t id, const char *key)
{
    json_t *j = job(f, id);
    int64_t v = json_integer_value(json_object_get(j, key));
    json_decref(j);
    return v;
}

static void tick(struct fx *f, int64_t advance_ms)
{
    f->now += advance_ms;
    coord_tick(f->c, f->now);
}

static char *worker(const char *job, int gen, int rank, const char *state, int code)
{
    return xasprintf("{\"job_id\":\"%s\",\"generation\":%d,\"rank\":%d,\"local_rank\":0,"
                     "\"state\":\"%s\",\"exit_code\":%d}",
                     job, gen, rank, state, code);
}

static void test_coord_start_and_succeed(void **state)
{
    struct fx *f = *state;
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"nproc_per_node\":2}");
    expect_state(f, id, "PENDING", "submitted");
    reg(f, "node-b", 2, "inc-1");
    tick(f, 100);
    expect_state(f, id, "PENDING", NULL); /* gang: one node is not enough */
    reg(f, "node-a", 2, "inc-1");
    tick(f, 100);
    expect_state(f, id, "RUNNING", "started on 2 nodes (world size 4)");
    json_t *j = job(f, id);
    assert_int_equal(json_integer_value(json_object_get(j, "world_size")), 4);
    assert_string_equal(json_string_value(json_object_get(j, "master_addr")), "10.0.0.a");
    assert_int_equal(json_integer_value(json_object_get(j, "master_port")), 30000);
    json_t *n0 = json_array_get(json_object_get(j, "nodes"), 0);
    assert_string_equal(json_string_value(json_object_get(n0, "name")), "node-a");
    json_decref(j);
    json_t *a = beat(f, "node-b", NULL);
    json_t *as = json_array_get(json_object_get(a, "assignments"), 0);
    assert_int_equal(json_integer_value(json_object_get(as, "group_rank")), 1);
    assert_int_equal(json_integer_value(json_object_get(as, "world_size")), 4);
    json_decref(a);
    char *w0 = worker("j-1", 1, 0, "exited", 0), *w1 = worker("j-1", 1, 1, "exited", 0);
    char *w2 = worker("j-1", 1, 2, "exited", 0), *w3 = worker("j-1", 1, 3, "exited", 0);
    char extra[1024];
    snprintf(extra, sizeof(extra), "\"workers\":[%s,%s]", w0, w1);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RUNNING", NULL);
    snprintf(extra, sizeof(extra), "\"workers\":[%s,%s]", w2, w3);
    beat0(f, "node-b", extra);
    expect_state(f, id, "SUCCEEDED", "all 4 ranks exited 0");
    a = beat(f, "node-a", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "assignments")), 0);
    json_decref(a);
    free(w0), free(w1), free(w2), free(w3);
}

static void test_coord_failure_restarts_then_fails(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"max_restarts\":1}");
    expect_state(f, id, "RUNNING", NULL);
    int port1 = (int)job_int(f, id, "master_port");
    char extra[1024];
    char *dead = worker("j-1", 1, 1, "exited", 6), *alive = worker("j-1", 1, 0, "running", 0);
    snprintf(extra, sizeof(extra),
             "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":1,\"seq\":1,\"lines\":"
             "[\"peer 0 went away\"]}],\"workers\":[%s]",
             dead);
    beat0(f, "node-b", extra);
    expect_state(f, id, "RESTARTING", "rank 1 on node-b exited 6 (peer lost)");
    expect_state(f, id, "RESTARTING", "peer 0 went away");
    /* node-a still runs its old worker: the job waits */
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", alive);
    json_t *a = beat(f, "node-a", extra);
    assert_int_equal(json_array_size(json_object_get(a, "assignments")), 0);
    json_decref(a);
    tick(f, 100);
    expect_state(f, id, "RESTARTING", NULL);
    beat0(f, "node-a", NULL);
    tick(f, 100);
    expect_state(f, id, "RUNNING", "generation 2");
    assert_int_equal(job_int(f, id, "restarts"), 1);
    assert_int_equal(job_int(f, id, "generation"), 2);
    assert_int_not_equal(job_int(f, id, "master_port"), port1);
    /* a report for generation 1 now is ignored */
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", dead);
    beat0(f, "node-b", extra);
    expect_state(f, id, "RUNNING", NULL);
    /* the second failure spends the budget: FAILED once the workers are gone */
    free(dead);
    dead = worker("j-1", 2, 0, "exited", 1);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", dead);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RESTARTING", "rank 0 on node-a exited 1");
    beat0(f, "node-b", NULL);
    tick(f, 100);
    expect_state(f, id, "FAILED", "rank 0 on node-a exited 1");
    assert_int_equal(job_int(f, id, "restarts"), 1);
    free(dead);
    free(alive);
}

static void test_coord_drain_is_bounded(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"grace_period_s\":5,\"nproc_per_node\":2}");
    char *w = worker("j-1", 1, 0, "exited", 9), *w1 = worker("j-1", 1, 1, "running", 0);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"workers\":[%s,%s]", w, w1);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RESTARTING", "(hang)");
    /* the agent keeps reporting a running old worker, but only for grace + 10 s */
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w1);
    free(w1);
    for (int i = 0; i < 14; i++) {
        f->now += 1000;
        beat0(f, "node-a", extra);
        coord_tick(f->c, f->now);
    }
    expect_state(f, id, "RESTARTING", NULL);
    f->now += 1500;
    beat0(f, "node-a", extra);
    coord_tick(f->c, f->now);
    expect_state(f, id, "RUNNING", "generation 2");
}

static void test_coord_node_lost_scales_down(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    reg(f, "node-b", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\",\"nproc_per_node\":2}");
    assert_int_equal(job_int(f, id, "world_size"), 4);
    for (int i = 0; i < 6; i++) {
        f->now += 1000;
        beat0(f, "node-a", NULL);
        coord_tick(f->c, f->now);
    }
    expect_state(f, id, "RESTARTING", "node node-b lost (no heartbeat for");
    char *nodes = NULL;
    assert_int_equal(coord_list_nodes(f->c, f->now, &nodes, NULL), 0);
    assert_non_null(strstr(nodes, "\"LOST\""));
    free(nodes);
    beat0(f, "node-a", NULL); /* no old workers left on node-a */
    tick(f, 100);
    expect_state(f, id, "RUNNING", "generation 2 started on 1 node (world size 2");
    assert_int_equal(job_int(f, id, "restarts"), 0); /* a lost node costs the job no restart */
}

static void test_coord_scale_up_is_not_a_restart(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\"}");
    expect_state(f, id, "RUNNING", "started on 1 node");
    reg(f, "node-c", 1, "inc-1");
    expect_state(f, id, "RESTARTING", "scale up: node-c joined");
    beat0(f, "node-a", NULL);
    tick(f, 100);
    expect_state(f, id, "RUNNING", "on 2 nodes (world size 2");
    assert_int_equal(job_int(f, id, "restarts"), 0);
    /* a pending job that could use a new node blocks scale-up onto it */
    int64_t id2 = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\"}");
    int64_t id3 = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:3\"}");
    (void)id3;
    reg(f, "node-d", 1, "inc-1");
    tick(f, 100);
    expect_state(f, id, "RUNNING", NULL);
    expect_state(f, id2, "PENDING", NULL);
}

static void test_coord_cancel_idempotent(void **state)
{
    struct fx *f = *state;
    int64_t p = submit(f, "{\"command\":[\"w\"]}");
    char *out = NULL;
    assert_int_equal(coord_cancel(f->c, p, "admin", f->now, &out, NULL), 0);
    free(out);
    expect_state(f, p, "CANCELLED", "cancelled by admin"); /* a PENDING one says who too */
    reg(f, "node-a", 1, "inc-1");
    int64_t r = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, r, "RUNNING", NULL);
    assert_int_equal(coord_cancel(f->c, r, "admin", f->now, &out, NULL), 0);
    free(out);
    expect_state(f, r, "CANCELLING", "cancelled by admin");
    assert_int_equal(coord_cancel(f->c, r, "admin", f->now, &out, NULL), 0);
    free(out);
    expect_state(f, r, "CANCELLING", NULL);
    beat0(f, "node-a", NULL);
    expect_state(f, r, "CANCELLED", "cancelled by admin");
    assert_int_equal(coord_cancel(f->c, r, "admin", f->now, &out, NULL), 0);
    free(out);
    expect_state(f, r, "CANCELLED", NULL);
    struct ddp_err e;
    assert_int_equal(coord_cancel(f->c, 99, "admin", f->now, &out, &e), DDP_ENOTFOUND);
    assert_string_equal(e.msg, "job j-99 not found");
    char *ev = NULL;
    assert_int_equal(coord_events(f->c, r, 0, &ev, NULL), 0);
    assert_non_null(strstr(ev, "\"CANCELLING\""));
    assert_non_null(strstr(ev, "\"CANCELLED\""));
    free(ev);
}

static void test_coord_limits_runtime_and_hang(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    int64_t rt = submit(f, "{\"command\":[\"w\"],\"max_runtime_s\":10,\"max_restarts\":5}");
    int64_t hg = submit(f, "{\"command\":[\"w\"],\"hang_timeout_s\":5}");
    expect_state(f, rt, "RUNNING", NULL);
    expect_state(f, hg, "RUNNING", NULL);
    f->now += 4000;
    beat0(f, "node-a",
          "\"progress\":[{\"job_id\":\"j-2\",\"generation\":1,\"rank\":0,"
          "\"age_ms\":4000}]");
    expect_state(f, hg, "RUNNING", NULL);
    beat0(f, "node-a",
          "\"progress\":[{\"job_id\":\"j-2\",\"generation\":1,\"rank\":0,"
          "\"age_ms\":6000}]");
    expect_event(f, hg, "RESTARTING", "rank 0 on node-a hung (no progress for 6 s)");
    expect_state(f, hg, "RUNNING", "generation 2");
    f->now += 7000;
    beat0(f, "node-a", NULL);
    tick(f, 0);
    expect_state(f, rt, "RESTARTING", "max_runtime_s 10 exceeded");
    beat0(f, "node-a", NULL);
    tick(f, 100);
    expect_state(f, rt, "FAILED", "max_runtime_s 10 exceeded");
}

static void test_coord_restart_of_ddpd_keeps_jobs(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"]}");
    int64_t pend = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, id, "RUNNING", NULL);
    coord_close(f->c);
    f->c = NULL;
    f->now += 60000; /* ddpd was down for a minute */
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    expect_state(f, id, "RUNNING", NULL);
    expect_state(f, pend, "PENDING", NULL);
    char *nodes = NULL;
    assert_int_equal(coord_list_nodes(f->c, f->now, &nodes, NULL), 0);
    assert_non_null(strstr(nodes, "\"LOST\""));
    free(nodes);
    tick(f, 3000);
    expect_state(f, id, "RUNNING", NULL); /* not ended before node-timeout from the start */
    beat0(f, "node-a", NULL);
    tick(f, 3000);
    expect_state(f, id, "RUNNING", NULL);
    assert_int_equal(job_int(f, id, "generation"), 1);
    /* and a job id is never reused */
    int64_t next = submit(f, "{\"command\":[\"w\"]}");
    assert_int_equal(next, 3);
}

static void test_coord_restart_then_node_silent(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"]}");
    coord_close(f->c);
    f->c = NULL;
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    tick(f, 4900);
    expect_state(f, id, "RUNNING", NULL);
    tick(f, 200);
    expect_state(f, id, "RESTARTING", "node node-a lost");
}

static void test_coord_logs_dedup_and_cap(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2}");
    const char *l1 = "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
                     "\"lines\":[\"a\",\"b\",\"c\"]}],\"metrics\":[{\"job_id\":\"j-1\","
                     "\"generation\":1,\"seq\":1,\"metric\":{\"epoch\":1,\"loss\":0.5}}]";
    beat0(f, "node-a", l1);
    beat0(f, "node-a", l1); /* a duplicated beat stores nothing twice */
    char *out = NULL;
    assert_int_equal(coord_logs(f->c, id, -1, 0, 100, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "lines")), 3);
    assert_int_equal(json_integer_value(json_object_get(o, "next")), 3);
    assert_int_equal(json_integer_value(json_object_get(o, "dropped")), 0);
    json_decref(o);
    assert_int_equal(coord_metrics(f->c, id, 0, &out, NULL), 0);
    o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "metrics")), 1);
    json_decref(o);
    json_t *j = job(f, id);
    assert_true(json_is_object(json_object_get(j, "last_metrics")));
    json_decref(j);
    /* overlapping batch: seq 2..5, only 4 and 5 are new; then the cap of 5 drops the oldest */
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":2,"
          "\"lines\":[\"b\",\"c\",\"d\",\"e\"]},{\"job_id\":\"j-1\",\"generation\":"
          "1,\"rank\":1,\"seq\":1,\"lines\":[\"x\",\"y\"]}]");
    assert_int_equal(coord_logs(f->c, id, -1, 0, 100, &out, NULL), 0);
    o = parse(out);
    free(out);
    json_t *lines = json_object_get(o, "lines");
    assert_int_equal(json_array_size(lines), 5);
    assert_int_equal(json_integer_value(json_object_get(o, "dropped")), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(lines, 0), "text")), "c");
    json_decref(o);
    assert_int_equal(coord_logs(f->c, id, 1, 0, 100, &out, NULL), 0);
    o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "lines")), 2);
    json_decref(o);
    assert_int_equal(coord_logs(f->c, id, -1, 6, 1, &out, NULL), 0);
    o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "lines")), 1);
    assert_int_equal(json_integer_value(json_object_get(o, "next")), 7);
    json_decref(o);
}

/* The pending reason of job id ("" when not waiting) and its queue position. */
static void expect_pending(struct fx *f, int64_t id, const char *reason, int pos,
                           const char *msg_part)
{
    json_t *j = job(f, id);
    json_t *p = json_object_get(j, "pending");
    if (!reason) {
        if (!json_is_null(p))
            fail_msg("job j-%lld pending %s, expected none", (long long)id,
                     json_string_value(json_object_get(p, "reason")));
    } else {
        const char *r = json_string_value(json_object_get(p, "reason"));
        const char *m = json_string_value(json_object_get(p, "message"));
        if (!r || strcmp(r, reason) != 0 ||
            json_integer_value(json_object_get(p, "position")) != pos ||
            (msg_part && (!m || !strstr(m, msg_part))))
            fail_msg("job j-%lld pending %s #%lld '%s', expected %s #%d '%s'", (long long)id,
                     r ? r : "(none)",
                     (long long)json_integer_value(json_object_get(p, "position")), m ? m : "",
                     reason, pos, msg_part ? msg_part : "");
    }
    json_decref(j);
}

static void cancel(struct fx *f, int64_t id)
{
    char *out = NULL;
    assert_int_equal(coord_cancel(f->c, id, "admin", f->now, &out, NULL), 0);
    free(out);
}

/* Priority orders the queue (then submit order); each waiting job says why and where; a
 * higher priority that cannot be placed preempts a running lower one (not charged). */
static void test_coord_priority_orders_the_queue(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t a = submit(f, "{\"command\":[\"w\"]}");
    int64_t b = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, a, "RUNNING", NULL);
    expect_pending(f, a, NULL, 0, NULL);
    expect_pending(f, b, "Resources", 1, "needs 1 node x 1 free slots; 0 nodes fit now");
    int64_t hi = submit(f, "{\"command\":[\"w\"],\"priority\":5}");
    /* a cannot shrink (MIN 1 = MAX): it is stopped for hi, at no restart's cost */
    expect_state(f, a, "RESTARTING", "preempted for j-3 (priority 5 > 0): stops");
    expect_pending(f, hi, "Resources", 1, "jobs of a lower priority make room");
    beat0(f, "node-a", NULL); /* a's worker is gone */
    tick(f, 100);
    expect_state(f, hi, "RUNNING", NULL);
    assert_int_equal(job_int(f, a, "restarts"), 0);
    expect_pending(f, a, "Resources", 1, NULL); /* a (earlier) before b */
    expect_pending(f, b, "Resources", 2, NULL);
    /* an admin lowers hi below a and b: the order changes, an event says who, and a now
     * preempts hi in turn */
    char *out = NULL;
    json_t *body = parse("{\"priority\":-3}");
    assert_int_equal(coord_update_job(f->c, hi, body, "root-admin", f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    expect_event(f, hi, "RUNNING", "priority 5 -> -3 by root-admin");
    expect_state(f, hi, "RESTARTING", "preempted for j-1 (priority 0 > -3)");
}

/* A waiting job holds the nodes it could use back from lower priorities (not from its own,
 * which backfill as before), so a small low job cannot starve a big important one. */
static void test_coord_priority_holds_nodes_back(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t x = submit(f, "{\"command\":[\"w\"]}"); /* takes node-a */
    expect_state(f, x, "RUNNING", NULL);
    int64_t big = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"priority\":10}");
    int64_t low = submit(f, "{\"command\":[\"w\"],\"priority\":-1}");
    expect_pending(f, big, "Resources", 1, "needs 2 nodes x 1 free slots; 1 node fits now");
    expect_pending(f, low, "Priority", 2, "held for jobs of a higher priority");
    int64_t same = submit(f, "{\"command\":[\"w\"],\"priority\":10}");
    expect_state(f, same, "RUNNING", NULL); /* its own priority backfills */
    cancel(f, x);
    cancel(f, same);
    beat0(f, "node-a", NULL);
    beat0(f, "node-b", NULL);
    tick(f, 100);
    expect_state(f, big, "RUNNING", "on 2 nodes");
    expect_pending(f, low, "Resources", 1, NULL);
}

/* A crash loop backs off (0, 1 s, 2 s, ...) between generations; an exit 5 (port in use) and a
 * lost node are not the job's failures: no restart is charged for them. */
static void test_coord_backoff_and_uncharged_failures(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"max_restarts\":5}");
    char extra[512], *w;
    w = worker("j-1", 1, 0, "exited", DDP_EXIT_PORT_IN_USE);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RUNNING", "generation 2 started on 1 node (world size 1, restarts 0/5)");
    w = worker("j-1", 2, 0, "exited", 1);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RUNNING", "generation 3 started on 1 node (world size 1, restarts 1/5)");
    w = worker("j-1", 3, 0, "exited", 1);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RESTARTING", NULL);
    expect_pending(f, id, "Backoff", 0, "restart 2 of 5 after a backoff of 1 s");
    tick(f, 500);
    expect_state(f, id, "RESTARTING", NULL);
    tick(f, 600);
    expect_state(f, id, "RUNNING", "generation 4 started on 1 node (world size 1, restarts 2/5)");
    expect_pending(f, id, NULL, 0, NULL);
}

/* A job in its backoff waits as a queued job does: the node it left is neither taken by a
 * scale-up of a lower job meanwhile nor lost, and it restarts there when the backoff ends. */
static void test_coord_backoff_keeps_the_node(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t a = submit(f, "{\"command\":[\"w\"],\"max_restarts\":5,\"priority\":5}");
    int64_t b = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\"}");
    expect_state(f, a, "RUNNING", NULL);
    expect_state(f, b, "RUNNING", "on 1 node");
    char extra[512], *w;
    for (int gen = 1; gen <= 2; gen++) {
        w = worker("j-1", gen, 0, "exited", 1);
        snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
        free(w);
        beat0(f, "node-a", extra);
    }
    expect_pending(f, a, "Backoff", 0, "restart 2 of 5 after a backoff of 1 s");
    beat0(f, "node-a", NULL);
    tick(f, 500);
    expect_state(f, b, "RUNNING", NULL);
    assert_int_equal(job_int(f, b, "generation"), 1);
    tick(f, 600);
    expect_state(f, a, "RUNNING", "generation 3 started on 1 node");
    expect_state(f, b, "RUNNING", NULL);
    assert_int_equal(job_int(f, b, "generation"), 1);
}

static void node_admin(struct fx *f, const char *name, const char *action)
{
    char *out = NULL;
    assert_int_equal(coord_node_admin(f->c, name, action, "maintenance", f->now, &out, NULL), 0);
    free(out);
}

/* Cordon takes no new work; drain moves an elastic job off at no restart's cost and leaves a
 * job that cannot re-form without the node where it is; both survive a restart of ddpd. */
static void test_coord_cordon_and_drain(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t el = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\"}");
    expect_state(f, el, "RUNNING", "on 2 nodes");
    node_admin(f, "node-b", "drain");
    expect_state(f, el, "RESTARTING", "node node-b drained by an admin: maintenance");
    beat0(f, "node-a", NULL);
    beat0(f, "node-b", NULL); /* the old workers are gone */
    tick(f, 100);
    expect_state(f, el, "RUNNING", "generation 2 started on 1 node (world size 1, restarts 0");
    /* a job that needs both nodes waits while one is drained, and says why */
    int64_t gang = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1\"}");
    expect_pending(f, gang, "Resources", 1, NULL);
    /* the hold survives a restart of ddpd */
    coord_close(f->c);
    f->c = NULL;
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    char *nodes = NULL;
    assert_int_equal(coord_list_nodes(f->c, f->now, &nodes, NULL), 0);
    assert_non_null(strstr(nodes, "\"admin_state\":\"drain\""));
    assert_non_null(strstr(nodes, "\"admin_reason\":\"maintenance\""));
    free(nodes);
    expect_state(f, gang, "PENDING", NULL);
    node_admin(f, "node-b", "uncordon");
    expect_state(f, gang, "RUNNING", NULL);
    /* cordon: running work stays */
    node_admin(f, "node-b", "cordon");
    expect_state(f, gang, "RUNNING", NULL);
}

/* A user's quota (slots its jobs hold): a job past it waits (Quota); one near it is placed on
 * fewer nodes; raising it starts the waiting job. */
static void test_coord_quota(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    reg(f, "node-b", 2, "inc-1");
    reg(f, "node-c", 2, "inc-1");
    char *out = NULL;
    json_t *body = parse("{\"name\":\"alice\",\"max_slots\":4}");
    assert_int_equal(coord_user_add(f->c, body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    struct principal alice = {PRINCIPAL_USER, ROLE_USER, "alice"};
    int created = 0;
    body = parse("{\"command\":[\"w\"],\"nnodes\":\"1:3\",\"nproc_per_node\":2}");
    assert_int_equal(coord_submit(f->c, body, &alice, NULL, f->now, &out, &created, NULL), 0);
    free(out);
    expect_state(f, 1, "RUNNING", "on 2 nodes (world size 4)"); /* 4 slots, not 6 */
    assert_int_equal(coord_submit(f->c, body, &alice, NULL, f->now, &out, &created, NULL), 0);
    json_decref(body);
    free(out);
    expect_pending(f, 2, "Quota", 1, "user alice holds 4 of its 4 slots; the job needs 2 more");
    body = parse("{\"max_slots\":6}");
    assert_int_equal(coord_user_update(f->c, "alice", body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    expect_state(f, 2, "RUNNING", "on 1 node");
}

/* Group quotas: alice and bob of group ml share its 4 slots; bob's elastic job gets only the
 * nodes the group leaves (partial placement), a second one waits with Quota naming the group,
 * and raising the group's quota starts it. */
static void test_coord_group_quota(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    reg(f, "node-b", 2, "inc-1");
    reg(f, "node-c", 2, "inc-1");
    char *out = NULL;
    const char *users[] = {"{\"name\":\"alice\",\"group\":\"ml\"}",
                           "{\"name\":\"bob\",\"group\":\"ml\"}"};
    for (int i = 0; i < 2; i++) {
        json_t *body = parse(users[i]);
        assert_int_equal(coord_user_add(f->c, body, f->now, &out, NULL), 0);
        json_decref(body);
        free(out);
    }
    json_t *body = parse("{\"max_slots\":4}");
    assert_int_equal(coord_group_put(f->c, "ml", body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    struct principal alice = {PRINCIPAL_USER, ROLE_USER, "alice"};
    struct principal bob = {PRINCIPAL_USER, ROLE_USER, "bob"};
    int created = 0;
    body = parse("{\"command\":[\"w\"],\"nproc_per_node\":2}");
    assert_int_equal(coord_submit(f->c, body, &alice, NULL, f->now, &out, &created, NULL), 0);
    json_decref(body);
    free(out);
    expect_state(f, 1, "RUNNING", "on 1 node");
    body = parse("{\"command\":[\"w\"],\"nnodes\":\"1:3\",\"nproc_per_node\":2}");
    assert_int_equal(coord_submit(f->c, body, &bob, NULL, f->now, &out, &created, NULL), 0);
    free(out);
    expect_state(f, 2, "RUNNING", "on 1 node (world size 2)"); /* 2 of the group's 4 left */
    assert_int_equal(coord_submit(f->c, body, &bob, NULL, f->now, &out, &created, NULL), 0);
    json_decref(body);
    free(out);
    expect_pending(f, 3, "Quota", 1, "group ml (of user bob) holds 4 of its 4 slots");
    assert_int_equal(coord_group_get(f->c, "ml", &out, NULL), 0);
    assert_non_null(strstr(out, "\"slots_used\":4"));
    free(out);
    body = parse("{\"max_slots\":6}");
    assert_int_equal(coord_group_put(f->c, "ml", body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    expect_state(f, 3, "RUNNING", "on 1 node");
}

/* GPUs held by a running job are not free for the next: on a node with 4 GPUs (its gpus label)
 * and 8 slots, a 2 x 2-GPU job runs, a second waits for Resources naming the GPUs, a job of
 * gpus_per_proc 0 still fits by slots, and a GPU job never goes to the CPU node. */
static void test_coord_gpus_held_by_jobs(void **state)
{
    struct fx *f = *state;
    char *out = NULL;
    json_t *body = parse("{\"name\":\"node-g\",\"address\":\"10.0.0.9\",\"slots\":8,"
                         "\"incarnation\":\"inc-1\",\"labels\":{\"gpus\":\"4\"}}");
    assert_int_equal(coord_register(f->c, body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    reg(f, "node-a", 8, "inc-1"); /* no gpus label: a CPU node */
    int64_t a = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2,\"gpus_per_proc\":2}");
    expect_state(f, a, "RUNNING", "on 1 node");
    json_t *j = job(f, a);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "nodes"), 0), "name")),
        "node-g");
    json_decref(j);
    int64_t b = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":1,\"gpus_per_proc\":1}");
    expect_pending(f, b, "Resources", 1, "1 GPUs each (gpus_per_proc 1 x 1 workers");
    int64_t z = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2,\"gpus_per_proc\":0,"
                          "\"node_selector\":{\"gpus\":\"4\"}}");
    expect_state(f, z, "RUNNING", "on 1 node"); /* node-g's 6 free slots, no GPU needed */
}

/* node_selector: a job runs only on nodes whose labels match; one no node can satisfy says
 * so (NodeSelector); labels come with the registration and survive a reopen. */
static void test_coord_node_selector(void **state)
{
    struct fx *f = *state;
    char *out = NULL;
    json_t *body = parse("{\"name\":\"node-g\",\"address\":\"10.0.0.9\",\"slots\":1,"
                         "\"incarnation\":\"inc-1\",\"labels\":{\"gpu\":\"a100\",\"zone\":\"b\"}}");
    assert_int_equal(coord_register(f->c, body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    reg(f, "node-a", 4, "inc-1");
    int64_t h = submit(f, "{\"command\":[\"w\"],\"node_selector\":{\"gpu\":\"h200\"}}");
    expect_pending(f, h, "NodeSelector", 1, "no registered node has the labels {\"gpu\":\"h200\"}");
    int64_t g = submit(f, "{\"command\":[\"w\"],\"node_selector\":{\"gpu\":\"a100\"}}");
    expect_state(f, g, "RUNNING", "on 1 node");
    json_t *j = job(f, g);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "nodes"), 0), "name")),
        "node-g");
    json_decref(j);
    int64_t g2 = submit(f, "{\"command\":[\"w\"],\"node_selector\":{\"gpu\":\"a100\"}}");
    expect_pending(f, g2, "Resources", 2,
                   "0 nodes fit now"); /* node-a's 4 free slots do not count */
    assert_int_equal(coord_list_nodes(f->c, f->now, &out, NULL), 0);
    assert_non_null(strstr(out, "\"labels\":{\"gpu\":\"a100\",\"zone\":\"b\"}"));
    free(out);
}

/* Preemption shrinks before it stops: a low 1:3 job on 3 nodes gives a later high 2-node job
 * its room by re-forming on 1 node (no restart charged), a gang job of the lowest priority is
 * not touched while shrinking suffices, and the low job grows back when the high one ends. */
static void test_coord_preemption_shrinks_first(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    reg(f, "node-c", 1, "inc-1");
    reg(f, "node-d", 1, "inc-1");
    int64_t gang = submit(f, "{\"command\":[\"w\"],\"priority\":-5}"); /* node-a */
    int64_t low = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:3\"}");
    expect_state(f, low, "RUNNING", "on 3 nodes");
    int64_t high = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"priority\":10}");
    expect_state(f, low, "RESTARTING", "preempted for j-3 (priority 10 > 0): shrinks");
    expect_state(f, gang, "RUNNING", NULL); /* shrinking low was enough */
    const char *nodes[] = {"node-b", "node-c", "node-d"};
    for (int i = 0; i < 3; i++)
        beat0(f, nodes[i], NULL); /* low's workers are gone */
    tick(f, 100);
    expect_state(f, high, "RUNNING", "on 2 nodes");
    expect_state(f, low, "RUNNING", "generation 2 started on 1 node (world size 1, restarts 0");
    /* the high job ends: low grows back (a scale-up, not a restart) */
    char extra[512], *w0 = worker("j-3", 1, 0, "exited", 0), *w1 = worker("j-3", 1, 1, "exited", 0);
    json_t *hj = job(f, high);
    const char *n0 =
        json_string_value(json_object_get(json_array_get(json_object_get(hj, "nodes"), 0), "name"));
    const char *n1 =
        json_string_value(json_object_get(json_array_get(json_object_get(hj, "nodes"), 1), "name"));
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w0);
    beat0(f, n0, extra);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w1);
    beat0(f, n1, extra);
    json_decref(hj);
    free(w0);
    free(w1);
    expect_state(f, high, "SUCCEEDED", NULL);
    tick(f, 100);
    expect_event(f, low, "RESTARTING", "scale up");
    assert_int_equal(job_int(f, low, "restarts"), 0);
}

/* A preemption ends the victim's generation with a notice: the answers of its nodes list
 * it (signal, preempt_grace_s) while its workers run, an assignment carries the notice
 * parameters, an exit 10 during the notice is no failure, and the preemptor's events say
 * whom it preempted; the victim re-forms with 0 restarts. An exit 10 of a RUNNING job (a
 * notice the agent relayed) restarts it uncharged. */
static void test_coord_preemption_notice(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t low = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\",\"max_restarts\":0,"
                            "\"preempt_signal\":\"USR2\",\"preempt_grace_s\":7}");
    expect_state(f, low, "RUNNING", "on 2 nodes");
    json_t *a = beat(f, "node-a", NULL);
    json_t *as = json_array_get(json_object_get(a, "assignments"), 0);
    assert_string_equal(json_string_value(json_object_get(as, "preempt_signal")), "SIGUSR2");
    assert_int_equal(json_integer_value(json_object_get(as, "preempt_grace_s")), 7);
    assert_int_equal(json_array_size(json_object_get(a, "notices")), 0);
    json_decref(a);
    int64_t high = submit(f, "{\"command\":[\"w\"],\"priority\":10}");
    expect_state(f, low, "RESTARTING", "preempted for j-2 (priority 10 > 0): shrinks");
    expect_state(f, low, "RESTARTING", "notice SIGUSR2, stopped 7 s later");
    expect_event(f, high, "PENDING", "preempts j-1 (priority 0, shrinks) (priority 10)");
    char extra[512], *w = worker("j-1", 1, 0, "running", 0);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    a = beat(f, "node-a", extra);
    json_t *nt = json_object_get(a, "notices");
    assert_int_equal(json_array_size(nt), 1);
    json_t *n0 = json_array_get(nt, 0);
    assert_string_equal(json_string_value(json_object_get(n0, "job_id")), "j-1");
    assert_int_equal(json_integer_value(json_object_get(n0, "generation")), 1);
    assert_string_equal(json_string_value(json_object_get(n0, "signal")), "SIGUSR2");
    assert_int_equal(json_integer_value(json_object_get(n0, "grace_s")), 7);
    assert_int_equal(json_array_size(json_object_get(a, "assignments")), 0);
    json_decref(a);
    /* the workers answer the notice: exit 10 */
    w = worker("j-1", 1, 0, "exited", DDP_EXIT_PREEMPTED);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    w = worker("j-1", 1, 1, "exited", DDP_EXIT_PREEMPTED);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-b", extra);
    tick(f, 100);
    expect_state(f, high, "RUNNING", "on 1 node");
    expect_state(f, low, "RUNNING", "generation 2 started on 1 node (world size 1, restarts 0/0)");
    a = beat(f, "node-a", NULL);
    assert_int_equal(json_array_size(json_object_get(a, "notices")), 0);
    json_decref(a);
    /* a notice relayed by the agent: low's rank exits 10 while RUNNING, uncharged */
    json_t *lj = job(f, low);
    const char *ln =
        json_string_value(json_object_get(json_array_get(json_object_get(lj, "nodes"), 0), "name"));
    w = worker("j-1", 2, 0, "exited", DDP_EXIT_PREEMPTED);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, ln, extra);
    json_decref(lj);
    tick(f, 100);
    expect_state(f, low, "RUNNING", "generation 3 started on 1 node (world size 1, restarts 0/0)");
    expect_event(f, low, "RESTARTING", "exited 10 (preempted)");
}

/* Two lower jobs share the node the preemptor needs whole: neither alone frees it, so both
 * are stopped (not only the one whose slots completed it, which left the node short and
 * stopped the two in turn for ever). The one that drains first does not take its slots back
 * while the other still drains: the node is held for the preemptor, which starts once both
 * are gone. */
static void test_coord_preemption_takes_every_victim_of_a_node(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 4, "inc-1");
    int64_t a = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2}");
    int64_t b = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2,\"priority\":5}");
    expect_state(f, a, "RUNNING", NULL);
    expect_state(f, b, "RUNNING", NULL);
    int64_t j = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4,\"priority\":10}");
    expect_state(f, a, "RESTARTING", "preempted for j-3");
    expect_state(f, b, "RESTARTING", "preempted for j-3");
    /* a's workers are gone, b's still run: a waits, the node is j's */
    char extra[512], *b0 = worker("j-2", 1, 0, "running", 0),
                     *b1 = worker("j-2", 1, 1, "running", 0);
    snprintf(extra, sizeof(extra), "\"workers\":[%s,%s]", b0, b1);
    free(b0);
    free(b1);
    beat0(f, "node-a", extra);
    tick(f, 100);
    expect_state(f, a, "RESTARTING", NULL);
    expect_state(f, j, "PENDING", NULL);
    assert_int_equal(job_int(f, a, "generation"), 1);
    /* b's are gone too: j starts, a and b wait for room */
    beat0(f, "node-a", NULL);
    tick(f, 100);
    expect_state(f, j, "RUNNING", "on 1 node");
    expect_state(f, a, "RESTARTING", NULL);
    expect_state(f, b, "RESTARTING", NULL);
}

/* A node is made to fit by the fewest victims there: a lower job whose slots the preemptor
 * can do without keeps running (b alone frees enough). And a shrinking victim's room (its
 * nodes above MIN) is spent only on nodes that come to fit: x's first two nodes, shared
 * with a higher job, cannot fit the preemptor, its third can. */
static void test_coord_preemption_takes_the_fewest(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 6, "inc-1");
    int64_t a = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2}");
    int64_t b = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4,\"priority\":5}");
    expect_state(f, b, "RUNNING", NULL);
    int64_t j = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4,\"priority\":10}");
    expect_state(f, b, "RESTARTING", "preempted for j-3");
    expect_state(f, a, "RUNNING", NULL);
    beat0(f, "node-a", NULL);
    tick(f, 100);
    expect_state(f, j, "RUNNING", NULL);
    expect_state(f, a, "RUNNING", NULL);
}

/* Across nodes too: x, stopped to free node-a, frees its slots on node-b as well, so y, the
 * lower job there, keeps running. */
static void test_coord_preemption_reuses_a_victim_across_nodes(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 4, "inc-1");
    reg(f, "node-b", 8, "inc-1");
    int64_t x = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4,\"nnodes\":\"2\","
                          "\"priority\":1}");
    int64_t y = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4}");
    expect_state(f, x, "RUNNING", "on 2 nodes");
    expect_state(f, y, "RUNNING", NULL);
    submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4,\"nnodes\":\"2\",\"priority\":10}");
    expect_state(f, x, "RESTARTING", "preempted for j-3 (priority 10 > 1): stops");
    expect_state(f, y, "RUNNING", NULL);
}

static void test_coord_preemption_room_spent_on_nodes_that_fit(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 4, "inc-1");
    reg(f, "node-b", 4, "inc-1");
    reg(f, "node-c", 4, "inc-1");
    int64_t y = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2,\"nnodes\":\"2\","
                          "\"priority\":20}");
    int64_t x = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2,\"nnodes\":\"1:3\"}");
    expect_state(f, y, "RUNNING", "on 2 nodes");
    expect_state(f, x, "RUNNING", "on 3 nodes");
    int64_t j = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":4,\"priority\":10}");
    expect_state(f, x, "RESTARTING", "preempted for j-3 (priority 10 > 0): shrinks");
    expect_state(f, y, "RUNNING", NULL);
    const char *nodes[] = {"node-a", "node-b", "node-c"};
    for (int i = 0; i < 3; i++)
        beat0(f, nodes[i], NULL);
    tick(f, 100);
    expect_state(f, j, "RUNNING", "on 1 node");
    json_t *jj = job(f, j);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(json_object_get(jj, "nodes"), 0), "name")),
        "node-c");
    json_decref(jj);
    expect_state(f, x, "RUNNING", "on 2 nodes");
}

/* When shrinking is not enough, whole jobs stop too (lowest priority first); the job that
 * shrank in the first round is not taken twice. */
static void test_coord_preemption_stops_when_shrinking_is_not_enough(void **state)
{
    struct fx *f = *state;
    const char *names[] = {"node-a", "node-b", "node-c", "node-d"};
    for (int i = 0; i < 4; i++)
        reg(f, names[i], 1, "inc-1");
    int64_t gang = submit(f, "{\"command\":[\"w\"],\"priority\":-5}");
    int64_t low = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\"}");
    expect_state(f, low, "RUNNING", "on 2 nodes");
    int64_t high = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"3\",\"priority\":10}");
    expect_state(f, low, "RESTARTING", "preempted for j-3 (priority 10 > 0): shrinks");
    expect_state(f, gang, "RESTARTING", "preempted for j-3 (priority 10 > -5): stops");
    for (int i = 0; i < 4; i++)
        beat0(f, names[i], NULL);
    tick(f, 100);
    expect_state(f, high, "RUNNING", "on 3 nodes");
    expect_state(f, low, "RUNNING", "on 1 node");
    expect_pending(f, gang, "Resources", 1, NULL);
}

/* A node speaks only for the ranks it holds: another node's log lines, metrics, progress and
 * exits for the job are dropped, and the job runs on. */
static void test_coord_beat_only_for_held_ranks(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"hang_timeout_s\":5}");
    expect_state(f, id, "RUNNING", NULL);
    reg(f, "node-b", 1, "inc-1");
    beat0(f, "node-b",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
          "\"lines\":[\"fake\"]},{\"job_id\":\"j-1\",\"generation\":1,\"rank\":7,"
          "\"seq\":1000000000000000,\"lines\":[\"beyond\"]}],"
          "\"metrics\":[{\"job_id\":\"j-1\",\"generation\":1,\"seq\":1,"
          "\"metric\":{\"epoch\":1,\"loss\":9}}],"
          "\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
          "\"age_ms\":60000,\"stopped\":true}],"
          "\"workers\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
          "\"local_rank\":0,\"pid\":1,\"state\":\"exited\",\"exit_code\":1}]");
    char *out = NULL;
    assert_int_equal(coord_logs(f->c, id, -1, 0, 100, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "lines")), 0);
    json_decref(o);
    json_t *j = job(f, id);
    assert_true(json_is_null(json_object_get(j, "last_metrics")));
    json_decref(j);
    tick(f, 1000);
    expect_state(f, id, "RUNNING", NULL);
    /* the holder's own line is stored (seq 1: the fake mark did not advance) */
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
          "\"lines\":[\"real\"]}]");
    assert_int_equal(coord_logs(f->c, id, -1, 0, 100, &out, NULL), 0);
    o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "lines")), 1);
    json_decref(o);
}

static void test_coord_beat_errors_and_new_incarnation(void **state)
{
    struct fx *f = *state;
    int code = 0;
    assert_null(beat_rc(f, "ghost", "inc-1", NULL, &code));
    assert_int_equal(code, DDP_ENOTFOUND);
    reg(f, "node-a", 1, "inc-1");
    assert_null(beat_rc(f, "node-a", "inc-other", NULL, &code));
    assert_int_equal(code, DDP_EABORTED);
    int64_t id = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, id, "RUNNING", NULL);
    reg(f, "node-a", 1, "inc-1"); /* same incarnation: nothing happens */
    expect_state(f, id, "RUNNING", NULL);
    /* without the node's credential, its live name cannot be taken */
    struct ddp_err e;
    assert_int_equal(reg_rc(f, "node-a", 1, "inc-evil", NULL, &e), DDP_EEXIST);
    assert_non_null(strstr(e.msg, "registered and up"));
    assert_int_equal(reg_rc(f, "node-a", 1, "inc-evil", "0123456789abcdef0123", &e), DDP_EEXIST);
    expect_state(f, id, "RUNNING", NULL);
    reg(f, "node-a", 1, "inc-2");
    /* the old workers died with the agent: no drain to wait for */
    expect_event(f, id, "RESTARTING", "node node-a restarted");
    expect_state(f, id, "RUNNING", "generation 2");
}

static void test_coord_list_pages(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 5; i++)
        submit(f, "{\"command\":[\"w\"]}");
    char *out = NULL;
    assert_int_equal(coord_list_jobs(f->c, -1, NULL, 2, 0, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    json_t *jobs = json_object_get(o, "jobs");
    assert_int_equal(json_array_size(jobs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(jobs, 0), "id")), "j-5");
    assert_string_equal(json_string_value(json_object_get(o, "next_page_token")), "3");
    json_decref(o);
    assert_int_equal(coord_list_jobs(f->c, -1, NULL, 10, 3, &out, NULL), 0);
    o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "jobs")), 3);
    assert_string_equal(json_string_value(json_object_get(o, "next_page_token")), "");
    json_decref(o);
    assert_int_equal(coord_list_jobs(f->c, JOB_RUNNING, NULL, 10, 0, &out, NULL), 0);
    o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "jobs")), 0);
    json_decref(o);
}

struct beater {
    struct fx *f;
    int node;
    int failures;
};

/* Beats with two new log lines each, every beat sent twice (a lost answer). */
static void *beater_main(void *arg)
{
    struct beater *b = arg;
    char name[16], body[512];
    snprintf(name, sizeof(name), "node-%c", 'a' + b->node);
    for (int k = 0; k < 25; k++) {
        snprintf(body, sizeof(body),
                 "{\"incarnation\":\"inc-1\",\"logs\":[{\"job_id\":\"j-%d\",\"generation\":1,"
                 "\"rank\":0,\"seq\":%d,\"lines\":[\"l%d\",\"m%d\"]}]}",
                 b->node + 1, 2 * k + 1, k, k);
        for (int rep = 0; rep < 2; rep++) {
            json_t *o = json_loads(body, 0, NULL);
            char *out = NULL;
            if (!o || coord_beat(b->f->c, name, o, b->f->now, &out, NULL) != 0)
                b->failures++;
            free(out);
            json_decref(o);
        }
    }
    return NULL;
}

static int64_t log_count(struct fx *f, int64_t id)
{
    char *out = NULL;
    assert_int_equal(coord_logs(f->c, id, -1, 0, 1000, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    int64_t n = (int64_t)json_array_size(json_object_get(o, "lines"));
    json_decref(o);
    return n;
}

static void test_coord_group_commit_concurrent(void **state)
{
    struct fx *f = *state;
    coord_close(f->c);
    f->c = NULL;
    f->opts.log_cap = 1000;
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    char name[16];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof(name), "node-%c", 'a' + i);
        reg(f, name, 1, "inc-1");
    }
    for (int i = 0; i < 4; i++)
        submit(f, "{\"command\":[\"w\"]}");
    struct beater b[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
        b[i] = (struct beater){f, i, 0};
        assert_int_equal(pthread_create(&t[i], NULL, beater_main, &b[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(t[i], NULL), 0);
        assert_int_equal(b[i].failures, 0);
    }
    for (int64_t id = 1; id <= 4; id++)
        assert_int_equal(log_count(f, id), 50);
    coord_close(f->c);
    f->c = NULL;
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    for (int64_t id = 1; id <= 4; id++) {
        assert_int_equal(log_count(f, id), 50);
        assert_int_equal(job_int(f, id, "generation"), 1);
    }
    /* after the restart the marks still deduplicate */
    reg(f, "node-a", 1, "inc-1");
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":49,"
          "\"lines\":[\"l24\",\"m24\",\"new\"]}]");
    assert_int_equal(log_count(f, 1), 51);
}

/* Reopens the coordinator with other options (same database). */
static void reopen(struct fx *f)
{
    coord_close(f->c);
    f->c = NULL;
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
}

/* A user's group and a group's quota are kept in the database (migration 005). */
static void test_coord_groups_survive_reopen(void **state)
{
    struct fx *f = *state;
    char *out = NULL;
    json_t *body = parse("{\"name\":\"alice\",\"group\":\"ml\"}");
    assert_int_equal(coord_user_add(f->c, body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    body = parse("{\"max_slots\":16}");
    assert_int_equal(coord_group_put(f->c, "ml", body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    body = parse("{\"max_slots\":2}");
    assert_int_equal(coord_group_put(f->c, "empty", body, f->now, &out, NULL), 0);
    json_decref(body);
    free(out);
    reopen(f);
    assert_int_equal(coord_groups_list(f->c, &out, NULL), 0);
    assert_non_null(
        strstr(out, "{\"name\":\"empty\",\"max_slots\":2,\"slots_used\":0,\"users\":[]}"));
    assert_non_null(strstr(out, "{\"name\":\"ml\",\"max_slots\":16,\"slots_used\":0,"
                                "\"users\":[\"alice\"]}"));
    free(out);
    assert_int_equal(coord_users_list(f->c, &out, NULL), 0);
    assert_non_null(strstr(out, "\"group\":\"ml\""));
    free(out);
    struct ddp_err e;
    assert_int_equal(coord_group_get(f->c, "nobody", &out, &e), DDP_ENOTFOUND);
    body = parse("{\"group\":\"bad name\"}");
    assert_int_equal(coord_user_update(f->c, "alice", body, f->now, &out, &e), DDP_EINVAL);
    json_decref(body);
    assert_non_null(strstr(e.msg, "field 'group'"));
}

static void test_coord_root_cause_node_lost_after_peer_exit(void **state)
{
    struct fx *f = *state;
    f->opts.suspect_timeout_ms = -1; /* no suspicion: b is found at the node timeout */
    reopen(f);
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\",\"max_restarts\":1}");
    expect_state(f, id, "RUNNING", "on 2 nodes");
    /* agent b dies; rank 0 on a sees its peer go first */
    f->now += 500;
    char *w = worker("j-1", 1, 0, "exited", 6);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RESTARTING", "rank 0 on node-a exited 6 (peer lost)");
    for (int i = 0; i < 6; i++) {
        f->now += 1000;
        beat0(f, "node-a", NULL);
        coord_tick(f->c, f->now);
    }
    expect_event(f, id, "RESTARTING",
                 "root cause: node node-b lost (no heartbeat for 5 s); "
                 "rank 0 on node-a exited 6 (peer lost) followed");
    expect_state(f, id, "RUNNING", "generation 2 started on 1 node (world size 1, restarts 0/1)");
    /* the lost node was not charged: the next failure is the first restart... */
    w = worker("j-1", 2, 0, "exited", 1);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RUNNING", "generation 3 started on 1 node (world size 1, restarts 1/1)");
    /* ...and the one after spends the budget: FAILED names the root cause */
    w = worker("j-1", 3, 0, "exited", 1);
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "FAILED", "rank 0 on node-a exited 1 (failure)");
}

static void test_coord_root_cause_signal_beats_peer_lost(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"max_restarts\":0}");
    expect_state(f, id, "RUNNING", NULL);
    /* node ranks: a = rank 0, b = rank 1; a's rank exits 6 first */
    char *w = worker("j-1", 1, 0, "exited", 6);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    expect_state(f, id, "RESTARTING", "peer lost");
    /* an exit by our own SIGTERM is no cause */
    snprintf(extra, sizeof(extra),
             "\"workers\":[{\"job_id\":\"j-1\",\"generation\":1,"
             "\"rank\":1,\"local_rank\":0,\"state\":\"exited\",\"exit_code\":-1,"
             "\"signal\":15}]");
    beat0(f, "node-b", extra);
    expect_state(f, id, "FAILED", "rank 0 on node-a exited 6 (peer lost)");
}

static void test_coord_root_cause_kill_reported_late(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"max_restarts\":0}");
    char *w = worker("j-1", 1, 0, "exited", 6);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w);
    free(w);
    beat0(f, "node-a", extra);
    snprintf(extra, sizeof(extra),
             "\"workers\":[{\"job_id\":\"j-1\",\"generation\":1,"
             "\"rank\":1,\"local_rank\":0,\"state\":\"exited\",\"exit_code\":-1,"
             "\"signal\":9}]");
    beat0(f, "node-b", extra);
    expect_event(f, id, "RESTARTING", "root cause: rank 1 on node-b killed by signal 9");
    expect_state(f, id, "FAILED", "rank 1 on node-b killed by signal 9");
}

static void test_coord_hang_names_the_stopped_rank(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    reg(f, "node-b", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"nproc_per_node\":2,"
                           "\"hang_timeout_s\":5}");
    expect_state(f, id, "RUNNING", NULL);
    for (int i = 0; i < 6; i++) {
        f->now += 1000;
        beat0(f, "node-a", NULL);
        beat0(f, "node-b", NULL);
    }
    /* every rank stalls; a's beat comes first */
    beat0(f, "node-a",
          "\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
          "\"age_ms\":6010},{\"job_id\":\"j-1\",\"generation\":1,\"rank\":1,"
          "\"age_ms\":6012}]");
    tick(f, 100);
    expect_state(f, id, "RUNNING", NULL); /* waits for node-b's beat */
    f->now += 300;
    beat0(f, "node-b",
          "\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":2,"
          "\"age_ms\":6400},{\"job_id\":\"j-1\",\"generation\":1,\"rank\":3,"
          "\"age_ms\":6390,\"stopped\":true}]");
    expect_event(f, id, "RESTARTING",
                 "rank 3 on node-b hung (no progress for 6 s, process "
                 "stopped)");
}

static void test_coord_hang_without_stop_flag_takes_oldest(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"2\",\"hang_timeout_s\":5}");
    for (int i = 0; i < 6; i++) {
        f->now += 1000;
        beat0(f, "node-a", NULL);
        beat0(f, "node-b", NULL);
    }
    beat0(f, "node-a",
          "\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
          "\"age_ms\":5100}]");
    /* node-b stays silent: the decision comes at most 1.5 s later */
    tick(f, 1000);
    expect_state(f, id, "RUNNING", NULL);
    f->now += 200;
    beat0(f, "node-b",
          "\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":1,"
          "\"age_ms\":7000}]");
    expect_event(f, id, "RESTARTING", "rank 1 on node-b hung (no progress for 7 s)");
}

/* The state ("READY"/"LOST") of a node in GET /v1/nodes. */
static char *node_state(struct fx *f, const char *name)
{
    char *out = NULL;
    assert_int_equal(coord_list_nodes(f->c, f->now, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    json_t *ns = json_object_get(o, "nodes");
    char *st = NULL;
    for (size_t i = 0; i < json_array_size(ns); i++) {
        json_t *n = json_array_get(ns, i);
        if (strcmp(json_string_value(json_object_get(n, "name")), name) == 0)
            st = xstrdup(json_string_value(json_object_get(n, "state")));
    }
    json_decref(o);
    assert_non_null(st);
    return st;
}

static void expect_node(struct fx *f, const char *name, const char *state)
{
    char *st = node_state(f, name);
    if (strcmp(st, state) != 0)
        fail_msg("node %s is %s, expected %s", name, st, state);
    free(st);
}

/* No event of the job has reason_part in its reason. */
static void expect_no_event(struct fx *f, int64_t id, const char *reason_part)
{
    char *out = NULL;
    assert_int_equal(coord_events(f->c, id, 0, &out, NULL), 0);
    if (strstr(out, reason_part))
        fail_msg("job j-%lld: unexpected '%s' in %s", (long long)id, reason_part, out);
    free(out);
}

/* A beat of node `node` reporting that rank `rank` exited with `code` (signal when code
 * is negative), with its last line `line` (NULL: none). */
static void beat_exit(struct fx *f, const char *node, int gen, int rank, int code, const char *line)
{
    char extra[1024], logs[512] = "";
    static int seq = 100;
    if (line)
        snprintf(logs, sizeof(logs),
                 "\"logs\":[{\"job_id\":\"j-1\",\"generation\":%d,\"rank\":%d,\"seq\":%d,"
                 "\"lines\":[\"%s\"]}],",
                 gen, rank, ++seq, line);
    char sig[32] = "";
    if (code < 0)
        snprintf(sig, sizeof(sig), ",\"signal\":%d", -code);
    snprintf(extra, sizeof(extra),
             "%s\"workers\":[{\"job_id\":\"j-1\",\"generation\":%d,\"rank\":%d,"
             "\"local_rank\":%d,\"state\":\"exited\",\"exit_code\":%d%s}]",
             logs, gen, rank, rank % 2, code < 0 ? -1 : code, sig);
    beat0(f, node, extra);
}

/* 2 nodes x 2 ranks (a: ranks 0-1, b: ranks 2-3), nnodes 1:2; both beat at f->now. */
static int64_t two_by_two(struct fx *f)
{
    reg(f, "node-a", 2, "inc-1");
    reg(f, "node-b", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"1:2\",\"nproc_per_node\":2,"
                           "\"max_restarts\":3}");
    expect_state(f, id, "RUNNING", "on 2 nodes (world size 4)");
    f->now += 1000;
    beat0(f, "node-a", NULL);
    beat0(f, "node-b", NULL);
    return id;
}

#define PEER_LINE(r)                                           \
    "2026-11-29T10:00:00.000Z ERROR ddp-worker: peer rank " #r \
    " (10.0.0.b:30001) lost during all-reduce: Connection reset by peer (exit 6)"

/* Agent b dies: a's ranks exit 6 naming b's ranks; b never beats again. b is LOST at the
 * first tick after the confirm window counted from the first accusation (a second
 * accuser does not extend it), long before the node timeout, and the job re-forms on a
 * with the same root cause as a timeout loss. */
static void test_coord_suspect_then_lost(void **state)
{
    struct fx *f = *state;
    int64_t id = two_by_two(f);
    f->now += 300;
    int64_t t0 = f->now;
    beat_exit(f, "node-a", 1, 1, 6, PEER_LINE(2));
    expect_state(f, id, "RESTARTING", "rank 1 on node-a exited 6 (peer lost)");
    tick(f, 600);
    beat_exit(f, "node-a", 1, 0, 6, PEER_LINE(3)); /* second accuser, same node */
    tick(f, 300);
    expect_node(f, "node-b", "READY"); /* t0 + 900: still within the window */
    expect_state(f, id, "RESTARTING", NULL);
    tick(f, t0 + 1000 - f->now);
    expect_node(f, "node-b", "LOST");
    expect_event(f, id, "RESTARTING",
                 "root cause: node node-b lost (no heartbeat for 1.3 s; "
                 "suspected when rank 1 on node-a lost it); rank 1 on "
                 "node-a exited 6 (peer lost)");
    /* a lost node is no failure of the job's: no restart is charged */
    expect_state(f, id, "RUNNING", "generation 2 started on 1 node (world size 2, restarts 0");
    assert_true(f->now - t0 < f->opts.node_timeout_ms);
    /* b comes back (same agent): READY again, and the job may grow onto it */
    beat0(f, "node-b", NULL);
    expect_node(f, "node-b", "READY");
}

/* A program that is not ddp-worker (an unmodified torch script) exits 1 when its peer
 * vanishes, naming nobody: that first failure accuses every other node of the generation,
 * and a silent one is LOST at the end of the window, long before the node timeout. */
static void test_coord_suspect_on_plain_failure(void **state)
{
    struct fx *f = *state;
    int64_t id = two_by_two(f);
    f->now += 300;
    int64_t t0 = f->now;
    beat_exit(f, "node-a", 1, 1, 1, "RuntimeError: Connection closed by peer");
    expect_state(f, id, "RESTARTING", "rank 1 on node-a exited 1");
    tick(f, 900);
    expect_node(f, "node-b", "READY");
    tick(f, t0 + 1000 - f->now);
    expect_node(f, "node-b", "LOST");
    expect_event(f, id, "RESTARTING", "suspected when rank 1 on node-a exited 1)");
    assert_true(f->now - t0 < f->opts.node_timeout_ms);
}

/* The accused node is alive (its worker crashed, or it was merely slow to report): it beats
 * within the window and stays READY; the job re-forms on both nodes once b reports its
 * workers gone, and no event speaks of a lost node. */
static void test_coord_suspect_beats_stays_ready(void **state)
{
    struct fx *f = *state;
    int64_t id = two_by_two(f);
    json_t *a = beat(f, "node-b", NULL);
    int64_t v0 = json_integer_value(json_object_get(a, "version"));
    json_decref(a);
    f->now += 200;
    beat_exit(f, "node-a", 1, 1, 6, PEER_LINE(2));
    expect_state(f, id, "RESTARTING", "peer lost");
    f->now += 150; /* b's held beat was answered with a new version: it beats at once */
    char *w2 = worker("j-1", 1, 2, "running", 0);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", w2);
    free(w2);
    a = beat(f, "node-b", extra);
    assert_true(json_integer_value(json_object_get(a, "version")) > v0);
    json_decref(a);
    for (int i = 0; i < 8; i++) { /* long past the window: b keeps beating at 1 s */
        tick(f, 250);
        if (i % 4 == 3)
            beat0(f, "node-b", extra);
        expect_node(f, "node-b", "READY");
    }
    beat_exit(f, "node-b", 1, 2, -15, NULL);
    beat_exit(f, "node-b", 1, 3, -15, NULL);
    beat0(f, "node-a", NULL);
    tick(f, 100);
    expect_state(f, id, "RUNNING", "generation 2 started on 2 nodes (world size 4");
    expect_no_event(f, id, "lost (");
    expect_node(f, "node-b", "READY");
}

/* Agent b reported the accused rank's exit itself (its worker was killed): a's exit 6 that
 * names it accuses nobody; b stays READY though it does not beat for a while, and the root
 * cause is the kill. Likewise when a names none but b reported a failure. */
static void test_coord_no_suspicion_when_reported(void **state)
{
    struct fx *f = *state;
    int64_t id = two_by_two(f);
    f->now += 100;
    char *w3 = worker("j-1", 1, 3, "running", 0);
    char extra[512];
    snprintf(extra, sizeof(extra),
             "\"workers\":[{\"job_id\":\"j-1\",\"generation\":1,"
             "\"rank\":2,\"local_rank\":0,\"state\":\"exited\",\"exit_code\":-1,"
             "\"signal\":9},%s]",
             w3);
    free(w3);
    beat0(f, "node-b", extra); /* rank 3 still runs: b's drain goes on */
    expect_state(f, id, "RESTARTING", "rank 2 on node-b killed by signal 9");
    f->now += 100;
    beat_exit(f, "node-a", 1, 1, 6, PEER_LINE(2));
    beat_exit(f, "node-a", 1, 0, 6, "peer went away"); /* names none */
    for (int i = 0; i < 12; i++) {
        tick(f, 250);
        if (i % 4 == 3)
            beat0(f, "node-a", NULL);
    }
    expect_node(f, "node-b", "READY"); /* 3 s without a beat, below the node timeout */
    expect_state(f, id, "RESTARTING", "rank 2 on node-b killed by signal 9");
    expect_no_event(f, id, "lost (");
}

/* After a restart of ddpd no node has beaten yet: an accusation of a node that has not
 * beaten since (it may still be in its retry backoff) does not hurry its loss; the node
 * timeout counted from ddpd's start applies. */
static void test_coord_no_suspicion_after_restart(void **state)
{
    struct fx *f = *state;
    int64_t id = two_by_two(f);
    reopen(f);
    int64_t start = f->now;
    f->now += 500;
    beat0(f, "node-a", NULL);
    beat_exit(f, "node-a", 1, 1, 6, PEER_LINE(2));
    expect_state(f, id, "RESTARTING", "peer lost");
    beat_exit(f, "node-a", 1, 0, 6, PEER_LINE(3));
    for (int i = 0; i < 8; i++)
        tick(f, 250);
    expect_state(f, id, "RESTARTING", NULL); /* b's drain still counts: no generation 2 */
    assert_int_equal(job_int(f, id, "generation"), 1);
    tick(f, start + f->opts.node_timeout_ms - f->now);
    expect_event(f, id, "RESTARTING", "root cause: node node-b lost (no heartbeat for 5 s)");
    expect_state(f, id, "RUNNING", "generation 2 started on 1 node");
}

/* PENDING -> RUNNING is not the tick's alone (jobstate.c's table): a job starts at its
 * submit when it fits, and a beat that frees the slots starts the next one. */
static void test_coord_start_without_tick(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t first = submit(f, "{\"command\":[\"w\"]}");
    int64_t second = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, first, "RUNNING", "started on 1 node");
    expect_state(f, second, "PENDING", "submitted");
    char *done = worker("j-1", 1, 0, "exited", 0);
    char extra[512];
    snprintf(extra, sizeof(extra), "\"workers\":[%s]", done);
    free(done);
    beat0(f, "node-a", extra);
    expect_state(f, first, "SUCCEEDED", NULL);
    expect_state(f, second, "RUNNING", "started on 1 node");
}

/* Marks rows of job id in the store, and the lowest generation among them (-1: none). */
static int store_marks(struct fx *f, int64_t id, int64_t *min_gen)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT count(*), coalesce(min(generation), -1) "
                                        "FROM marks WHERE job_id = ?1",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_int64(st, 1, id);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    *min_gen = sqlite3_column_int64(st, 1);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* The seq of the newest stored log line of job id (0: none). */
static int64_t last_log_seq(struct fx *f, int64_t id)
{
    char *out = NULL;
    assert_int_equal(coord_logs(f->c, id, -1, 0, 100, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    int64_t next = json_integer_value(json_object_get(o, "next"));
    json_decref(o);
    return next;
}

/* The deduplication marks of generations that ended are dropped, in memory and in the store
 * (they used to pile up, one per generation and rank, with every restart): after eight
 * restarts only the current and the previous generation keep marks, the previous one still
 * deduplicates a late re-send, and a restart of ddpd loads no more than that. */
static void test_coord_marks_of_ended_generations_dropped(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"max_restarts\":20}");
    char extra[1024];
    for (int g = 1; g <= 8; g++) {
        char *dead = worker("j-1", g, 0, "exited", 1);
        snprintf(extra, sizeof(extra),
                 "\"logs\":[{\"job_id\":\"j-1\",\"generation\":%d,\"rank\":0,\"seq\":1,"
                 "\"lines\":[\"line of %d\"]}],\"metrics\":[{\"job_id\":\"j-1\","
                 "\"generation\":%d,\"seq\":1,\"metric\":{\"epoch\":%d}}],\"workers\":[%s]",
                 g, g, g, g, dead);
        free(dead);
        beat0(f, "node-a", extra);
        /* the restart's backoff (1 s, 2 s, ... up to 60 s): beat and tick through it */
        for (int s = 0; s < 70 && job_int(f, id, "generation") == g; s++) {
            f->now += 1000;
            beat0(f, "node-a", NULL);
            coord_tick(f->c, f->now);
        }
        assert_int_equal(job_int(f, id, "generation"), g + 1);
    }
    expect_state(f, id, "RUNNING", "generation 9");
    int64_t min_gen = 0;
    int n = store_marks(f, id, &min_gen);
    if (n > 4 || min_gen < 8)
        fail_msg("marks table: %d rows from generation %lld on, expected at most 4 from "
                 "generation 8 on",
                 n, (long long)min_gen);
    pthread_mutex_lock(&f->c->mu);
    size_t in_memory = coord_job(f->c, id)->nmarks;
    pthread_mutex_unlock(&f->c->mu);
    if (in_memory > 4)
        fail_msg("%zu marks in memory, expected at most 4", in_memory);
    /* a late re-send of the previous generation's line stores nothing twice */
    int64_t seq = last_log_seq(f, id);
    snprintf(extra, sizeof(extra),
             "\"logs\":[{\"job_id\":\"j-1\",\"generation\":8,\"rank\":0,\"seq\":1,"
             "\"lines\":[\"line of 8\"]}]");
    beat0(f, "node-a", extra);
    assert_int_equal(last_log_seq(f, id), seq);
    coord_close(f->c);
    f->c = NULL;
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    pthread_mutex_lock(&f->c->mu);
    in_memory = coord_job(f->c, id)->nmarks;
    pthread_mutex_unlock(&f->c->mu);
    if (in_memory > 4)
        fail_msg("%zu marks loaded, expected at most 4", in_memory);
}

/* Every stored log line of job id as "seq:text" separated by spaces (caller frees). */
static char *log_lines(struct fx *f, int64_t id)
{
    char *out = NULL;
    assert_int_equal(coord_logs(f->c, id, -1, 0, 1000, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    json_t *lines = json_object_get(o, "lines");
    char *s = xstrdup("");
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *l = json_array_get(lines, i);
        char *t = xasprintf("%s%s%lld:%s", s, i ? " " : "",
                            (long long)json_integer_value(json_object_get(l, "seq")),
                            json_string_value(json_object_get(l, "text")));
        free(s);
        s = t;
    }
    json_decref(o);
    return s;
}

static void expect_lines(struct fx *f, int64_t id, const char *want)
{
    char *got = log_lines(f, id);
    if (strcmp(got, want) != 0)
        fail_msg("job j-%lld logs '%s', expected '%s'", (long long)id, got, want);
    free(got);
}

/* One failed commit of heartbeat data (the disk full for a moment) used to make every later
 * data beat fail until ddpd restarted. Now the beat fails, the marks, seqs and last_metrics
 * go back to what the disk holds, /readyz's state says the store fails, and the agent's
 * re-send after the disk recovered stores every line once, without a gap in seq. */
static void test_coord_failed_data_commit_rolls_back(void **state)
{
    struct fx *f = *state;
    f->opts.log_cap = 1000;
    reopen(f);
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, id, "RUNNING", NULL);
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
          "\"lines\":[\"a\",\"b\",\"c\"]}],\"metrics\":[{\"job_id\":\"j-1\","
          "\"generation\":1,\"seq\":1,\"metric\":{\"epoch\":1}}]");
    const char *next = "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":4,"
                       "\"lines\":[\"d\",\"e\",\"f\"]}],\"metrics\":[{\"job_id\":\"j-1\","
                       "\"generation\":1,\"seq\":2,\"metric\":{\"epoch\":2}}]";
    struct coord_health h;
    coord_health(f->c, &h);
    assert_true(h.store_ok);
    assert_int_equal(h.store_failures, 0);

    writes_fail(f, 1);
    int code = 0;
    assert_null(beat_rc(f, "node-a", "inc-1", next, &code));
    writes_fail(f, 0);
    assert_int_equal(code, DDP_EINTERNAL);
    coord_health(f->c, &h);
    assert_false(h.store_ok);
    assert_int_equal(h.store_failures, 1);
    assert_true(h.store_failed_at > 0);
    assert_true(strlen(h.store_error) > 0);
    /* memory is what the disk holds again */
    pthread_mutex_lock(&f->c->mu);
    struct job *j = coord_job(f->c, id);
    int64_t log_seq = j->log_seq, metric_seq = j->metric_seq;
    int64_t epoch = json_integer_value(json_object_get(j->last_metrics, "epoch"));
    struct mark *m = coord_mark(j, 1, 0, 0), *mm = coord_mark(j, 1, -1, 0);
    int64_t mark = m ? m->last_seq : -1, metric_mark = mm ? mm->last_seq : -1;
    pthread_mutex_unlock(&f->c->mu);
    assert_int_equal(log_seq, 3);
    assert_int_equal(metric_seq, 1);
    assert_int_equal(epoch, 1);
    assert_int_equal(mark, 3);
    assert_int_equal(metric_mark, 1);
    expect_lines(f, id, "1:a 2:b 3:c");

    /* the disk takes writes again: the agent's re-send is stored, once, and nothing else
     * needed a restart */
    beat0(f, "node-a", next);
    beat0(f, "node-a", next); /* its answer was lost: sent again, stored once */
    expect_lines(f, id, "1:a 2:b 3:c 4:d 5:e 6:f");
    json_t *jj = job(f, id);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(jj, "last_metrics"), "epoch")), 2);
    json_decref(jj);
    char *out = NULL;
    assert_int_equal(coord_metrics(f->c, id, 0, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    assert_int_equal(json_array_size(json_object_get(o, "metrics")), 2);
    json_decref(o);
    coord_health(f->c, &h);
    assert_true(h.store_ok);
    assert_int_equal(h.store_failures, 1);
    /* and the disk agrees: a restart of ddpd loads the same marks and seqs */
    reopen(f);
    reg(f, "node-a", 1, "inc-1");
    beat0(f, "node-a", next);
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":7,"
          "\"lines\":[\"g\"]}]");
    expect_lines(f, id, "1:a 2:b 3:c 4:d 5:e 6:f 7:g");
}

/* The worker states of a beat whose data cannot be stored still count: the job whose rank
 * exited ends (its transition waits for the disk like any other write), and the beat fails so
 * that the agent sends its lines again. */
static void test_coord_failed_data_commit_still_ends_the_job(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, id, "RUNNING", NULL);
    char *done = worker("j-1", 1, 0, "exited", 0);
    char extra[1024];
    snprintf(extra, sizeof(extra),
             "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
             "\"lines\":[\"last words\"]}],\"workers\":[%s]",
             done);
    free(done);
    writes_fail(f, 1);
    int code = 0;
    assert_null(beat_rc(f, "node-a", "inc-1", extra, &code));
    tick(f, 200); /* the transition fails too, and is tried again at the next tick */
    writes_fail(f, 0);
    assert_int_equal(code, DDP_EINTERNAL);
    expect_state(f, id, "RUNNING", NULL);
    tick(f, 200);
    expect_state(f, id, "SUCCEEDED", "all 1 ranks exited 0");
    expect_lines(f, id, "");
    beat0(f, "node-a", extra); /* the agent's re-send */
    expect_lines(f, id, "1:last words");
    expect_state(f, id, "SUCCEEDED", NULL);
}

struct racer {
    struct fx *f;
    const char *node, *extra;
    int code;
    int refused; /* coord_take_refusal() in its thread after the beat */
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    (void)coord_take_refusal();
    json_decref(beat_rc(r->f, r->node, "inc-1", r->extra, &r->code));
    r->refused = coord_take_refusal();
    return NULL;
}

/* Polls (5000 times, 1 ms apart) until a leader commits a batch and, with open, a batch
 * on top of it holds rows. */
static void wait_batches(struct fx *f, int open)
{
    for (int i = 0; i < 5000; i++) {
        pthread_mutex_lock(&f->c->mu);
        int there = f->c->flush && (!open || f->c->open);
        pthread_mutex_unlock(&f->c->mu);
        if (there)
            return;
        time_sleep_ms(1);
    }
    fail_msg("no batch being committed%s within 5 s", open ? " with one on top" : "");
}

/* Several beats' rows in one batch, and a batch prepared on top of it while it commits: when
 * the commit fails, both batches' beats fail (the one on top had advanced the marks past the
 * failed rows) and both jobs go back to the disk's marks, so both re-sends store every line
 * once without a gap. */
static void test_coord_failed_commit_fails_the_batch_on_top(void **state)
{
    struct fx *f = *state;
    f->opts.log_cap = 1000;
    reopen(f);
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t j1 = submit(f, "{\"command\":[\"w\"]}");
    int64_t j2 = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, j2, "RUNNING", NULL);
    const char *la = "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
                     "\"lines\":[\"a1\",\"a2\"]}]";
    const char *lb = "\"logs\":[{\"job_id\":\"j-2\",\"generation\":1,\"rank\":0,\"seq\":1,"
                     "\"lines\":[\"b1\",\"b2\"]}]";
    /* The store's mutex held: a's beat becomes the leader and waits in its commit, b's rows
     * open the next batch. Then writes fail and the commit goes on. */
    struct racer ra = {f, "node-a", la, 0, 0}, rb = {f, "node-b", lb, 0, 0};
    pthread_t ta, tb;
    pthread_mutex_lock(&f->c->store_mu);
    assert_int_equal(pthread_create(&ta, NULL, racer_main, &ra), 0);
    wait_batches(f, 0);
    assert_int_equal(pthread_create(&tb, NULL, racer_main, &rb), 0);
    wait_batches(f, 1);
    writes_fail(f, 1);
    pthread_mutex_unlock(&f->c->store_mu);
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    writes_fail(f, 0);
    assert_int_equal(ra.code, DDP_EINTERNAL);
    assert_int_equal(rb.code, DDP_EINTERNAL);
    assert_int_equal(ra.refused, 0);
    assert_int_equal(rb.refused, 0);
    pthread_mutex_lock(&f->c->mu);
    int64_t s1 = coord_job(f->c, j1)->log_seq, s2 = coord_job(f->c, j2)->log_seq;
    size_t m1 = coord_job(f->c, j1)->nmarks, m2 = coord_job(f->c, j2)->nmarks;
    pthread_mutex_unlock(&f->c->mu);
    assert_int_equal(s1, 0);
    assert_int_equal(s2, 0);
    assert_int_equal(m1, 0);
    assert_int_equal(m2, 0);
    expect_lines(f, j1, "");
    expect_lines(f, j2, "");
    /* the agents send the same again, and more */
    beat0(f, "node-b", lb);
    beat0(f, "node-a", la);
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":2,"
          "\"lines\":[\"a2\",\"a3\"]}]");
    expect_lines(f, j1, "1:a1 2:a2 3:a3");
    expect_lines(f, j2, "1:b1 2:b2");
}

/* The leadership lost while a batch commits, with a batch on top: the leader's commit is
 * refused before it began, and so is the batch on top, though the beat waiting for it ran no
 * transaction itself: both beats' threads are marked refused, so that both are answered
 * not_leader (the agents go to the new leader) and not 500. A commit failing otherwise marks
 * neither (the test above). */
static void test_coord_refused_commit_refuses_the_batch_on_top(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    submit(f, "{\"command\":[\"w\"]}");
    int64_t j2 = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, j2, "RUNNING", NULL);
    struct racer ra = {f, "node-a",
                       "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
                       "\"seq\":1,\"lines\":[\"a1\"]}]",
                       0, 0};
    struct racer rb = {f, "node-b",
                       "\"logs\":[{\"job_id\":\"j-2\",\"generation\":1,\"rank\":0,"
                       "\"seq\":1,\"lines\":[\"b1\"]}]",
                       0, 0};
    pthread_t ta, tb;
    pthread_mutex_lock(&f->c->store_mu);
    assert_int_equal(pthread_create(&ta, NULL, racer_main, &ra), 0);
    wait_batches(f, 0);
    assert_int_equal(pthread_create(&tb, NULL, racer_main, &rb), 0);
    wait_batches(f, 1);
    f->c->retired = 1; /* as coord_retire(), which takes store_mu itself */
    pthread_mutex_unlock(&f->c->store_mu);
    assert_int_equal(pthread_join(ta, NULL), 0);
    assert_int_equal(pthread_join(tb, NULL), 0);
    assert_int_equal(ra.code, DDP_EINTERNAL);
    assert_int_equal(rb.code, DDP_EINTERNAL);
    assert_int_equal(ra.refused, 1);
    assert_int_equal(rb.refused, 1);
}

/* ---- retention: delete, ids never reused, --job-ttl, the log as gzip ------------------- */

static int delete_rc(struct fx *f, int64_t id, struct ddp_err *e)
{
    char *out = NULL;
    int rc = coord_delete_job(f->c, id, "admin", &out, e);
    if (rc == 0) {
        json_t *o = parse(out); /* the job as it was */
        char want[32];
        snprintf(want, sizeof(want), "j-%lld", (long long)id);
        assert_string_equal(json_string_value(json_object_get(o, "id")), want);
        json_decref(o);
        free(out);
    }
    return rc;
}

/* 1 when job id answers (get), 0 when it is not found. */
static int job_exists(struct fx *f, int64_t id)
{
    char *out = NULL;
    struct ddp_err e;
    int rc = coord_get_job(f->c, id, &out, &e);
    free(out);
    if (rc)
        assert_int_equal(rc, DDP_ENOTFOUND);
    return rc == 0;
}

static size_t listed(struct fx *f)
{
    char *out = NULL;
    assert_int_equal(coord_list_jobs(f->c, -1, NULL, 100, 0, &out, NULL), 0);
    json_t *o = parse(out);
    free(out);
    size_t n = json_array_size(json_object_get(o, "jobs"));
    json_decref(o);
    return n;
}

static void test_coord_delete_finished_only(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t run = submit(f, "{\"command\":[\"w\"]}");
    int64_t pend = submit(f, "{\"command\":[\"w\"]}");
    expect_state(f, run, "RUNNING", NULL);
    expect_state(f, pend, "PENDING", NULL);
    struct ddp_err e;
    assert_int_equal(delete_rc(f, run, &e), DDP_EPRECOND);
    assert_non_null(strstr(e.msg, "job j-1 is RUNNING"));
    assert_non_null(strstr(e.msg, "cancel it first"));
    assert_int_equal(delete_rc(f, pend, &e), DDP_EPRECOND);
    assert_non_null(strstr(e.msg, "PENDING"));
    cancel(f, pend);
    expect_state(f, pend, "CANCELLED", NULL);
    assert_int_equal(delete_rc(f, pend, &e), 0);
    /* gone everywhere: get, events, logs, access, the listing, the counts */
    assert_false(job_exists(f, pend));
    char *out = NULL;
    assert_int_equal(coord_events(f->c, pend, 0, &out, &e), DDP_ENOTFOUND);
    assert_int_equal(coord_logs(f->c, pend, -1, 0, 10, &out, &e), DDP_ENOTFOUND);
    assert_int_equal(coord_job_access(f->c, pend, &ADMIN, 0, &e), DDP_ENOTFOUND);
    assert_int_equal(delete_rc(f, pend, &e), DDP_ENOTFOUND);
    assert_string_equal(e.msg, "job j-2 not found");
    assert_int_equal(listed(f), 1);
    int64_t counts[JOB_STATE_COUNT], ready, lost;
    coord_counts(f->c, counts, &ready, &lost);
    assert_int_equal(counts[JOB_CANCELLED], 0);
    assert_int_equal(counts[JOB_RUNNING], 1);
    /* a job that just ended (still in the live list until the next compaction) */
    cancel(f, run);
    beat0(f, "node-a", NULL);
    expect_state(f, run, "CANCELLED", NULL);
    assert_int_equal(delete_rc(f, run, &e), 0);
    assert_false(job_exists(f, run));
    tick(f, 100);
    assert_int_equal(listed(f), 0);
    /* the next job takes a new id, and runs on the freed node */
    int64_t next = submit(f, "{\"command\":[\"w\"]}");
    assert_int_equal(next, 3);
    expect_state(f, next, "RUNNING", NULL);
}

/* Ids are never reused: not after deleting the newest job, not after a restart of ddpd
 * (where the jobs table alone would say the highest id is lower), and the gaps load. */
static void test_coord_delete_ids_never_reused(void **state)
{
    struct fx *f = *state;
    int64_t a = submit(f, "{\"command\":[\"w\"]}");
    int64_t b = submit(f, "{\"command\":[\"w\"]}");
    int64_t c = submit(f, "{\"command\":[\"w\"]}");
    cancel(f, b);
    cancel(f, c);
    struct ddp_err e;
    assert_int_equal(delete_rc(f, c, &e), 0); /* the newest */
    reopen(f);
    assert_true(job_exists(f, a));
    assert_true(job_exists(f, b));
    assert_false(job_exists(f, c));
    assert_int_equal(submit(f, "{\"command\":[\"w\"]}"), 4);
    assert_int_equal(delete_rc(f, b, &e), 0); /* a gap in the middle */
    reopen(f);
    assert_true(job_exists(f, a));
    assert_false(job_exists(f, b));
    assert_true(job_exists(f, 4));
    assert_int_equal(listed(f), 2);
    /* an Idempotency-Key lookup walks past the deleted slots */
    json_t *body = parse("{\"command\":[\"w\"]}");
    char *out = NULL;
    int created = 0;
    assert_int_equal(coord_submit(f->c, body, &ADMIN, "key-1", f->now, &out, &created, &e), 0);
    assert_int_equal(created, 1);
    free(out);
    assert_int_equal(coord_submit(f->c, body, &ADMIN, "key-1", f->now, &out, &created, &e), 0);
    assert_int_equal(created, 0);
    assert_non_null(strstr(out, "\"j-5\""));
    free(out);
    json_decref(body);
}

/* --job-ttl: the tick deletes finished jobs once finished_at is that long ago (the fake
 * clock), never a live one. */
static void test_coord_job_ttl_sweep(void **state)
{
    struct fx *f = *state;
    f->opts.job_ttl_ms = 10000;
    reopen(f);
    int64_t first = submit(f, "{\"command\":[\"w\"]}");
    int64_t second = submit(f, "{\"command\":[\"w\"]}");
    int64_t live = submit(f, "{\"command\":[\"w\"]}");
    cancel(f, first);
    tick(f, 5000);
    cancel(f, second);
    tick(f, 4900);
    assert_true(job_exists(f, first));
    tick(f, 200); /* first: 10.1 s since it ended */
    assert_false(job_exists(f, first));
    assert_true(job_exists(f, second));
    tick(f, 5000);
    assert_false(job_exists(f, second));
    tick(f, 60000);
    expect_state(f, live, "PENDING", NULL);
    /* and after a restart of ddpd the ids go on */
    reopen(f);
    assert_int_equal(submit(f, "{\"command\":[\"w\"]}"), 4);
}

/* Reads the whole gzip stream of job id with reads of at most chunk bytes and inflates it. */
static char *download(struct fx *f, int64_t id, size_t chunk)
{
    struct coord_log_gz *g = NULL;
    assert_int_equal(coord_log_gz_open(f->c, id, &g, NULL), 0);
    char *gz = xmalloc(1 << 16), *plain = xcalloc(1, 1 << 16);
    size_t n = 0;
    for (int i = 0; i < 100000; i++) {
        long r = coord_log_gz_read(g, gz + n, chunk);
        assert_true(r >= 0);
        if (r == 0)
            break;
        n += (size_t)r;
        assert_true(n + chunk < (1 << 16));
    }
    coord_log_gz_close(g);
    z_stream z = {0};
    assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK);
    z.next_in = (Bytef *)gz;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)plain;
    z.avail_out = (1 << 16) - 1;
    assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
    inflateEnd(&z);
    free(gz);
    return plain;
}

static void test_coord_logs_download_gzip(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2}");
    /* empty log: a valid gzip of nothing */
    char *got = download(f, id, 4096);
    assert_string_equal(got, "");
    free(got);
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
          "\"lines\":[\"a\",\"\",\"c d\"]},{\"job_id\":\"j-1\",\"generation\":1,\"rank\":1,"
          "\"seq\":1,\"lines\":[\"x\"]}]");
    got = download(f, id, 4096);
    assert_string_equal(got, "a\n\nc d\nx\n");
    free(got);
    got = download(f, id, 1); /* a byte a read */
    assert_string_equal(got, "a\n\nc d\nx\n");
    free(got);
    /* the cap of 5 dropped the oldest ("a"): the kept lines only */
    beat0(f, "node-a",
          "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":4,"
          "\"lines\":[\"e\",\"f\"]}]");
    got = download(f, id, 4096);
    assert_string_equal(got, "\nc d\nx\ne\nf\n");
    free(got);
    /* kept after the job ended; a stream of a job deleted meanwhile fails */
    cancel(f, id);
    beat0(f, "node-a", NULL);
    expect_state(f, id, "CANCELLED", NULL);
    got = download(f, id, 4096);
    assert_string_equal(got, "\nc d\nx\ne\nf\n");
    free(got);
    struct coord_log_gz *g = NULL;
    assert_int_equal(coord_log_gz_open(f->c, id, &g, NULL), 0);
    assert_int_equal(delete_rc(f, id, NULL), 0);
    char buf[256];
    assert_true(coord_log_gz_read(g, buf, sizeof(buf)) < 0);
    coord_log_gz_close(g);
    struct ddp_err e;
    assert_int_equal(coord_log_gz_open(f->c, id, &g, &e), DDP_ENOTFOUND);
    coord_log_gz_close(NULL);
}

/* A rank's last line of 100 euro signs (3 bytes each) quoted in the reason, which cuts it to
 * 200 bytes inside a character: the reason stays well-formed UTF-8 (the cut bytes become
 * '?'), so the job, its events and the list still serve (jansson refuses others), also
 * after a restart of ddpd from the store. */
static void test_coord_reason_cut_inside_a_character(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 1, "inc-1");
    int64_t id = submit(f, "{\"command\":[\"w\"],\"max_restarts\":0}");
    expect_state(f, id, "RUNNING", NULL);
    char line[301] = "", extra[1024];
    for (int i = 0; i < 100; i++)
        memcpy(line + 3 * i, "\xe2\x82\xac", 4); /* and the NUL */
    char *dead = worker("j-1", 1, 0, "exited", 1);
    snprintf(extra, sizeof(extra),
             "\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,\"seq\":1,"
             "\"lines\":[\"%s\"]}],\"workers\":[%s]",
             line, dead);
    free(dead);
    beat0(f, "node-a", extra);
    tick(f, 100);
    expect_state(f, id, "FAILED", "last output: '\xe2\x82\xac");
    expect_state(f, id, "FAILED",
                 "\xe2\x82\xac?"
                 "?'");
    expect_event(f, id, "FAILED",
                 "\xe2\x82\xac?"
                 "?'");
    assert_int_equal(listed(f), 1);
    reopen(f);
    expect_state(f, id, "FAILED",
                 "\xe2\x82\xac?"
                 "?'");
    /* a store written before reasons were kept well-formed: its job and its events still
     * serve once loaded (the cut bytes become '?') */
    coord_close(f->c);
    f->c = NULL;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE jobs SET reason = 'old \xe2\x82', end_reason = 'old "
                                  "\xe2\x82'; UPDATE events SET reason = 'old \xe2\x82'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(coord_open(f->db, &f->opts, f->now, &f->c, NULL), 0);
    expect_state(f, id, "FAILED",
                 "old ?"
                 "?");
    expect_event(f, id, "FAILED",
                 "old ?"
                 "?");
    expect_event(f, id, "RUNNING",
                 "old ?"
                 "?");
}

/* coord_stats(): live jobs only (a cancelled one leaves), the numbers of the last metrics
 * rank 0 reported (a key that is not a number is absent), nodes with their slots used and
 * heartbeat age at the now passed in, a removed node left out. */
static void test_coord_stats_live_only(void **state)
{
    struct fx *f = *state;
    reg(f, "node-a", 2, "inc-1");
    reg(f, "node-b", 1, "inc-1");
    int64_t run = submit(f, "{\"command\":[\"w\"],\"nproc_per_node\":2}");
    int64_t gone = submit(f, "{\"command\":[\"w\"],\"nnodes\":\"4\"}");
    expect_state(f, run, "RUNNING", NULL);
    expect_state(f, gone, "PENDING", NULL);
    beat0(f, "node-a",
          "\"metrics\":[{\"job_id\":\"j-1\",\"generation\":1,\"seq\":1,"
          "\"metric\":{\"epoch\":3,\"loss\":0.5,\"samples_per_s\":\"fast\"}}]");
    char *out = NULL;
    assert_int_equal(coord_cancel(f->c, gone, "admin", f->now, &out, NULL), 0);
    free(out);
    expect_state(f, gone, "CANCELLED", NULL);
    assert_int_equal(coord_remove_node(f->c, "node-b", f->now, &out, NULL), 0);
    free(out);

    struct coord_job_stat *js = NULL;
    struct coord_node_stat *ns = NULL;
    size_t nj = 0, nn = 0;
    coord_stats(f->c, f->now + 2500, &js, &nj, &ns, &nn);
    assert_int_equal(nj, 1);
    assert_int_equal(js[0].id, run);
    assert_string_equal(js[0].owner, "admin");
    assert_int_equal(js[0].state, JOB_RUNNING);
    assert_int_equal(js[0].generation, 1);
    assert_int_equal(js[0].restarts, 0);
    assert_int_equal(js[0].world_size, 2);
    assert_true(js[0].has_loss && js[0].loss == 0.5);
    assert_true(js[0].has_epoch && js[0].epoch == 3);
    assert_false(js[0].has_samples_per_s);
    assert_int_equal(nn, 1);
    assert_string_equal(ns[0].name, "node-a");
    assert_true(ns[0].up);
    assert_int_equal(ns[0].slots, 2);
    assert_int_equal(ns[0].used, 2);
    assert_true(ns[0].beat_age_s == 2.5);
    free(js);
    free(ns);
    assert_true(coord_db_bytes(f->c) > 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_coord_start_and_succeed),
        T(test_coord_stats_live_only),
        T(test_coord_failure_restarts_then_fails),
        T(test_coord_reason_cut_inside_a_character),
        T(test_coord_drain_is_bounded),
        T(test_coord_node_lost_scales_down),
        T(test_coord_scale_up_is_not_a_restart),
        T(test_coord_cancel_idempotent),
        T(test_coord_limits_runtime_and_hang),
        T(test_coord_restart_of_ddpd_keeps_jobs),
        T(test_coord_restart_then_node_silent),
        T(test_coord_logs_dedup_and_cap),
        T(test_coord_beat_errors_and_new_incarnation),
        T(test_coord_beat_only_for_held_ranks),
        T(test_coord_priority_orders_the_queue),
        T(test_coord_priority_holds_nodes_back),
        T(test_coord_backoff_and_uncharged_failures),
        T(test_coord_backoff_keeps_the_node),
        T(test_coord_cordon_and_drain),
        T(test_coord_quota),
        T(test_coord_group_quota),
        T(test_coord_gpus_held_by_jobs),
        T(test_coord_groups_survive_reopen),
        T(test_coord_node_selector),
        T(test_coord_preemption_shrinks_first),
        T(test_coord_preemption_notice),
        T(test_coord_preemption_takes_every_victim_of_a_node),
        T(test_coord_preemption_takes_the_fewest),
        T(test_coord_preemption_room_spent_on_nodes_that_fit),
        T(test_coord_preemption_reuses_a_victim_across_nodes),
        T(test_coord_preemption_stops_when_shrinking_is_not_enough),
        T(test_coord_list_pages),
        T(test_coord_group_commit_concurrent),
        T(test_coord_root_cause_node_lost_after_peer_exit),
        T(test_coord_root_cause_signal_beats_peer_lost),
        T(test_coord_root_cause_kill_reported_late),
        T(test_coord_hang_names_the_stopped_rank),
        T(test_coord_hang_without_stop_flag_takes_oldest),
        T(test_coord_suspect_then_lost),
        T(test_coord_suspect_beats_stays_ready),
        T(test_coord_suspect_on_plain_failure),
        T(test_coord_no_suspicion_when_reported),
        T(test_coord_no_suspicion_after_restart),
        T(test_coord_marks_of_ended_generations_dropped),
        T(test_coord_start_without_tick),
        T(test_coord_failed_data_commit_rolls_back),
        T(test_coord_failed_commit_fails_the_batch_on_top),
        T(test_coord_refused_commit_refuses_the_batch_on_top),
        T(test_coord_failed_data_commit_still_ends_the_job),
        T(test_coord_delete_finished_only),
        T(test_coord_delete_ids_never_reused),
        T(test_coord_job_ttl_sweep),
        T(test_coord_logs_download_gzip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
