/*
 * test_validate.c - every bad input of issue 2 gets DDP_EINVAL and a message naming its
 * field; good inputs come out canonical with their defaults.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "common/jsonx.h"
#include "common/xalloc.h"
#include "server/validate.h"

/* Parses text as a job spec the way ddpd does; returns the code and fills err. */
static int spec_of(const char *text, struct job_spec *out, struct ddp_err *err)
{
    json_t *body = NULL;
    int rc = jsonx_parse_object(text, strlen(text), &body, err);
    if (rc)
        return rc;
    rc = validate_job_spec(body, out, err);
    json_decref(body);
    return rc;
}

struct bad_case {
    const char *body;
    const char *msg; /* expected substring */
};

static const struct bad_case bad_specs[] = {
    {"not json", "not valid JSON"},
    {"[1,2]", "must be a JSON object"},
    {"{\"command\":[\"a\"],\"colour\":1}", "unknown field 'colour'"},
    {"{}", "field 'command': required"},
    {"{\"command\":\"python train.py\"}", "field 'command': expected an array"},
    {"{\"command\":[]}", "field 'command': must not be empty"},
    {"{\"command\":[\"a\", 3]}", "field 'command[1]'"},
    {"{\"command\":[\"\"]}", "field 'command[0]'"},
    {"{\"command\":[\"a\"],\"nnodes\":\"0\"}", "field 'nnodes': min 0 < 1"},
    {"{\"command\":[\"a\"],\"nnodes\":\"3:2\"}", "field 'nnodes': min 3 > max 2"},
    {"{\"command\":[\"a\"],\"nnodes\":\"a:b\"}", "field 'nnodes'"},
    {"{\"command\":[\"a\"],\"nnodes\":\"1:2000\"}", "field 'nnodes': max 2000 > 1024"},
    {"{\"command\":[\"a\"],\"nnodes\":0}", "field 'nnodes'"},
    {"{\"command\":[\"a\"],\"nnodes\":1.5}", "field 'nnodes'"},
    {"{\"command\":[\"a\"],\"nproc_per_node\":0}", "field 'nproc_per_node'"},
    {"{\"command\":[\"a\"],\"nproc_per_node\":1025}", "field 'nproc_per_node'"},
    {"{\"command\":[\"a\"],\"nproc_per_node\":\"2\"}",
     "field 'nproc_per_node': expected an integer"},
    {"{\"command\":[\"a\"],\"max_restarts\":-1}", "field 'max_restarts'"},
    {"{\"command\":[\"a\"],\"max_runtime_s\":-5}", "field 'max_runtime_s'"},
    {"{\"command\":[\"a\"],\"grace_period_s\":4000}", "field 'grace_period_s'"},
    {"{\"command\":[\"a\"],\"hang_timeout_s\":true}", "field 'hang_timeout_s'"},
    {"{\"command\":[\"a\"],\"env\":{\"A\":1}}", "field 'env.A': expected a string"},
    {"{\"command\":[\"a\"],\"env\":{\"A=B\":\"x\"}}", "field 'env': name 'A=B'"},
    {"{\"command\":[\"a\"],\"env\":{\"1A\":\"x\"}}", "field 'env': name '1A'"},
    {"{\"command\":[\"a\"],\"env\":[\"A=B\"]}", "field 'env': expected an object"},
    {"{\"command\":[\"a\"],\"name\":\"has space\"}", "field 'name'"},
    {"{\"command\":[\"a\"],\"name\":\"\"}", "field 'name'"},
    {"{\"command\":[\"a\"],\"workdir\":\"relative/dir\"}", "field 'workdir'"},
    {"{\"command\":[\"a\"],\"checkpoint_dir\":7}", "field 'checkpoint_dir'"},
    {"{\"command\":[\"a\"],\"command\":[\"b\"]}", "not valid JSON"}, /* duplicate key */
};

static void test_validate_every_bad_spec(void **state)
{
    for (size_t i = 0; i < sizeof(bad_specs) / sizeof(bad_specs[0]); i++) {
        struct job_spec s = {0};
        struct ddp_err e = {0};
        int rc = spec_of(bad_specs[i].body, &s, &e);
        if (rc != DDP_EINVAL || !strstr(e.msg, bad_specs[i].msg))
            fail_msg("body %s: rc %d message '%s', expected '%s'", bad_specs[i].body, rc, e.msg,
                     bad_specs[i].msg);
        assert_null(s.json); /* nothing written on failure */
    }
}

static void test_validate_spec_limits(void **state)
{
    struct job_spec s = {0};
    struct ddp_err e;
    /* 257 arguments */
    json_t *cmd = json_array();
    for (int i = 0; i < 257; i++)
        json_array_append_new(cmd, json_string("x"));
    json_t *body = json_pack("{s:o}", "command", cmd);
    assert_int_equal(validate_job_spec(body, &s, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "at most 256"));
    json_array_remove(cmd, 0);
    assert_int_equal(validate_job_spec(body, &s, &e), 0);
    validate_spec_release(&s);
    /* an argument of 4097 bytes */
    char *big = xmalloc(4098);
    memset(big, 'a', 4097);
    big[4097] = '\0';
    json_array_set_new(cmd, 0, json_string(big));
    assert_int_equal(validate_job_spec(body, &s, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "field 'command[0]'"));
    free(big);
    json_decref(body);
    /* 257 env entries */
    json_t *env = json_object();
    for (int i = 0; i < 257; i++) {
        char k[16];
        snprintf(k, sizeof(k), "V%d", i);
        json_object_set_new(env, k, json_string("1"));
    }
    body = json_pack("{s:[s], s:o}", "command", "a", "env", env);
    assert_int_equal(validate_job_spec(body, &s, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "field 'env'"));
    json_decref(body);
    /* One environment string at the kernel's limit (128 KiB with its NUL) is taken; one byte
     * more would fail every start with E2BIG, so it is refused at submit. */
    size_t room = SPEC_MAX_ENV_STRING - strlen("BIG=") - 1;
    char *val = xmalloc(room + 2);
    memset(val, 'v', room + 1);
    val[room] = '\0';
    body = json_pack("{s:[s], s:{s:s}}", "command", "a", "env", "BIG", val);
    assert_int_equal(validate_job_spec(body, &s, &e), 0);
    validate_spec_release(&s);
    json_decref(body);
    val[room] = 'v';
    val[room + 1] = '\0';
    body = json_pack("{s:[s], s:{s:s}}", "command", "a", "env", "BIG", val);
    assert_int_equal(validate_job_spec(body, &s, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "field 'env.BIG'"));
    assert_non_null(strstr(e.msg, "kernel"));
    json_decref(body);
    free(val);
    body = json_pack("{s:[s], s:{s:o}}", "command", "a", "env", "NUL", json_stringn("a\0b", 3));
    assert_int_equal(validate_job_spec(body, &s, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "NUL"));
    json_decref(body);
}

static void test_validate_spec_defaults(void **state)
{
    struct job_spec s = {0};
    struct ddp_err e;
    assert_int_equal(spec_of("{\"command\":[\"ddp-worker\",\"--epochs\",\"1\"]}", &s, &e), 0);
    assert_string_equal(s.name, "job");
    assert_int_equal(s.nmin, 1);
    assert_int_equal(s.nmax, 1);
    assert_int_equal(s.nproc, 1);
    assert_int_equal(s.max_restarts, 3);
    assert_int_equal(s.max_runtime_s, 0);
    assert_int_equal(s.grace_period_s, 30);
    assert_int_equal(s.hang_timeout_s, 0);
    char *text = jsonx_dumps(s.json);
    assert_string_equal(text,
                        "{\"name\":\"job\",\"command\":[\"ddp-worker\",\"--epochs\",\"1\"],"
                        "\"env\":{},\"nnodes\":\"1:1\",\"nproc_per_node\":1,\"max_restarts\":3,"
                        "\"max_runtime_s\":0,\"grace_period_s\":30,\"hang_timeout_s\":0,"
                        "\"workdir\":\"\",\"checkpoint_dir\":\"\",\"priority\":0,"
                        "\"node_selector\":{},\"preempt_signal\":\"SIGUSR1\","
                        "\"preempt_grace_s\":30,\"gpus_per_proc\":\"auto\"}");
    assert_int_equal(s.gpus_per_proc, SPEC_GPUS_AUTO);
    assert_string_equal(s.preempt_signal, "SIGUSR1");
    assert_int_equal(s.preempt_grace_s, 30);
    free(text);
    validate_spec_release(&s);
    validate_spec_release(&s); /* idempotent on a released spec */
}

/* gpus_per_proc: absent, null or "auto" is auto (canonical "auto"), else an integer 0..64;
 * anything else is a 400 naming the field. */
static void test_validate_spec_gpus_per_proc(void **state)
{
    (void)state;
    struct job_spec s = {0};
    struct ddp_err e;
    const char *ok[] = {"0", "2", "64", "\"auto\"", "null"};
    const int want[] = {0, 2, 64, SPEC_GPUS_AUTO, SPEC_GPUS_AUTO};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"command\":[\"a\"],\"gpus_per_proc\":%s}", ok[i]);
        assert_int_equal(spec_of(body, &s, &e), 0);
        assert_int_equal(s.gpus_per_proc, want[i]);
        const json_t *g = json_object_get(s.json, "gpus_per_proc");
        if (want[i] == SPEC_GPUS_AUTO)
            assert_string_equal(json_string_value(g), "auto");
        else
            assert_int_equal(json_integer_value(g), want[i]);
        validate_spec_release(&s);
    }
    const char *bad[] = {"-1", "65", "1.5", "\"2\"", "\"AUTO\"", "true", "[]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"command\":[\"a\"],\"gpus_per_proc\":%s}", bad[i]);
        assert_int_equal(spec_of(body, &s, &e), DDP_EINVAL);
        assert_non_null(strstr(e.msg, "field 'gpus_per_proc'"));
    }
}

/* preempt_signal: a name of common/signame.h, canonical with its SIG prefix; anything else
 * is a 400 naming the field and the allowed set. preempt_grace_s: 0..3600. */
static void test_validate_spec_preempt(void **state)
{
    (void)state;
    struct job_spec s = {0};
    struct ddp_err e;
    assert_int_equal(spec_of("{\"command\":[\"a\"],\"preempt_signal\":\"USR2\","
                             "\"preempt_grace_s\":0}",
                             &s, &e),
                     0);
    assert_string_equal(s.preempt_signal, "SIGUSR2");
    assert_string_equal(json_string_value(json_object_get(s.json, "preempt_signal")), "SIGUSR2");
    assert_int_equal(s.preempt_grace_s, 0);
    validate_spec_release(&s);
    const char *bad[] = {"\"SIGKILL\"", "\"SIGSEGV\"", "\"usr1\"", "\"\"", "10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"command\":[\"a\"],\"preempt_signal\":%s}", bad[i]);
        assert_int_equal(spec_of(body, &s, &e), DDP_EINVAL);
        assert_non_null(strstr(e.msg, "field 'preempt_signal'"));
    }
    assert_int_equal(spec_of("{\"command\":[\"a\"],\"preempt_signal\":\"SIGINFO\"}", &s, &e),
                     DDP_EINVAL);
    assert_non_null(strstr(e.msg, "SIGUSR1, SIGUSR2"));
    const char *grace[] = {"-1", "3601", "1.5", "\"30\""};
    for (size_t i = 0; i < sizeof(grace) / sizeof(grace[0]); i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"command\":[\"a\"],\"preempt_grace_s\":%s}", grace[i]);
        assert_int_equal(spec_of(body, &s, &e), DDP_EINVAL);
        assert_non_null(strstr(e.msg, "field 'preempt_grace_s'"));
    }
    assert_int_equal(spec_of("{\"command\":[\"a\"],\"preempt_grace_s\":3600}", &s, &e), 0);
    validate_spec_release(&s);
}

static void test_validate_spec_nnodes_forms(void **state)
{
    const char *forms[] = {"\"2\"", "2", "\"2:4\"", "\"1:1024\""};
    const int lo[] = {2, 2, 2, 1}, hi[] = {2, 2, 4, 1024};
    for (int i = 0; i < 4; i++) {
        char body[128];
        snprintf(body, sizeof(body), "{\"command\":[\"a\"],\"nnodes\":%s}", forms[i]);
        struct job_spec s = {0};
        struct ddp_err e;
        assert_int_equal(spec_of(body, &s, &e), 0);
        assert_int_equal(s.nmin, lo[i]);
        assert_int_equal(s.nmax, hi[i]);
        validate_spec_release(&s);
    }
}

static int reg_of(const char *text, struct node_reg *r, struct ddp_err *e, json_t **keep)
{
    json_t *body = NULL;
    int rc = jsonx_parse_object(text, strlen(text), &body, e);
    if (rc)
        return rc;
    rc = validate_register(body, r, e);
    *keep = body;
    return rc;
}

static void test_validate_register(void **state)
{
    static const struct bad_case bad[] = {
        {"{\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\"}", "field 'name': required"},
        {"{\"name\":\"a b\",\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\"}", "field 'name'"},
        {"{\"name\":\"a\",\"address\":\"\",\"slots\":1,\"incarnation\":\"x\"}", "field 'address'"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":0,\"incarnation\":\"x\"}", "field 'slots'"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":\"2\",\"incarnation\":\"x\"}",
         "field 'slots'"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":1}", "field 'incarnation': required"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\",\"port_range\":\"9-"
         "1\"}",
         "field 'port_range'"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\",\"port_range\":\"0-"
         "70000\"}",
         "field 'port_range'"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\",\"gpus\":2}",
         "unknown field 'gpus'"},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\",\"isolation\":"
         "\"root\"}",
         "field 'isolation': expected \"per-user\" or \"single-user\""},
        {"{\"name\":\"a\",\"address\":\"h\",\"slots\":1,\"incarnation\":\"x\",\"isolation\":1}",
         "field 'isolation'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct node_reg r = {0};
        struct ddp_err e = {0};
        json_t *keep = NULL;
        int rc = reg_of(bad[i].body, &r, &e, &keep);
        if (rc != DDP_EINVAL || !strstr(e.msg, bad[i].msg))
            fail_msg("body %s: rc %d message '%s'", bad[i].body, rc, e.msg);
        assert_null(r.name);
        json_decref(keep);
    }
    struct node_reg r;
    struct ddp_err e;
    json_t *keep = NULL;
    assert_int_equal(reg_of("{\"name\":\"node-a\",\"address\":\"127.0.0.1\",\"slots\":4,"
                            "\"incarnation\":\"3f9c\"}",
                            &r, &e, &keep),
                     0);
    assert_string_equal(r.name, "node-a");
    assert_int_equal(r.slots, 4);
    assert_int_equal(r.port_lo, 29500);
    assert_int_equal(r.port_hi, 29999);
    assert_null(r.isolation);
    json_decref(keep);
    assert_int_equal(reg_of("{\"name\":\"node-a\",\"address\":\"127.0.0.1\",\"slots\":4,"
                            "\"incarnation\":\"3f9c\",\"isolation\":\"per-user\"}",
                            &r, &e, &keep),
                     0);
    assert_string_equal(r.isolation, "per-user");
    json_decref(keep);
}

static int beat_of(const char *text, struct beat *b, struct ddp_err *e, json_t **keep)
{
    json_t *body = NULL;
    int rc = jsonx_parse_object(text, strlen(text), &body, e);
    if (rc)
        return rc;
    rc = validate_beat(body, b, e);
    *keep = body;
    return rc;
}

static void test_validate_beat(void **state)
{
    static const struct bad_case bad[] = {
        {"{}", "field 'incarnation': required"},
        {"{\"incarnation\":\"x\",\"version\":-1}", "field 'version'"},
        {"{\"incarnation\":\"x\",\"workers\":{}}", "field 'workers': expected an array"},
        {"{\"incarnation\":\"x\",\"workers\":[1]}", "field 'workers[0]': expected an object"},
        {"{\"incarnation\":\"x\",\"workers\":[{\"job_id\":\"7\",\"generation\":1,\"rank\":0,"
         "\"state\":\"running\"}]}",
         "field 'workers[0].job_id'"},
        {"{\"incarnation\":\"x\",\"workers\":[{\"job_id\":\"j-7\",\"generation\":1,\"rank\":-1,"
         "\"state\":\"running\"}]}",
         "field 'workers[0].rank'"},
        {"{\"incarnation\":\"x\",\"workers\":[{\"job_id\":\"j-7\",\"generation\":1,\"rank\":0,"
         "\"state\":\"zombie\"}]}",
         "field 'workers[0].state'"},
        {"{\"incarnation\":\"x\",\"workers\":[{\"job_id\":\"j-7\",\"generation\":1,\"rank\":0,"
         "\"state\":\"running\",\"cpu\":3}]}",
         "field 'workers[0]': unknown field 'cpu'"},
        {"{\"incarnation\":\"x\",\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
         "\"seq\":0,\"lines\":[]}]}",
         "field 'logs[0].seq'"},
        {"{\"incarnation\":\"x\",\"logs\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
         "\"seq\":1,\"lines\":[\"a\",2]}]}",
         "field 'logs[0].lines[1]'"},
        {"{\"incarnation\":\"x\",\"metrics\":[{\"job_id\":\"j-1\",\"generation\":1,\"seq\":1,"
         "\"metric\":[1]}]}",
         "field 'metrics[0].metric'"},
        {"{\"incarnation\":\"x\",\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0}]}",
         "field 'progress[0].age_ms': required"},
        {"{\"incarnation\":\"x\",\"progress\":[{\"job_id\":\"j-1\",\"generation\":1,\"rank\":0,"
         "\"age_ms\":5,\"stopped\":1}]}",
         "field 'progress[0].stopped'"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct beat b = {0};
        struct ddp_err e = {0};
        json_t *keep = NULL;
        int rc = beat_of(bad[i].body, &b, &e, &keep);
        if (rc != DDP_EINVAL || !strstr(e.msg, bad[i].msg))
            fail_msg("body %s: rc %d message '%s', expected '%s'", bad[i].body, rc, e.msg,
                     bad[i].msg);
        assert_null(b.workers);
        json_decref(keep);
    }
    struct beat b;
    struct ddp_err e;
    json_t *keep = NULL;
    assert_int_equal(
        beat_of("{\"incarnation\":\"x\",\"version\":17,\"wait_ms\":99999,\"workers\":[{\"job_id\":"
                "\"j-7\",\"generation\":2,\"rank\":1,\"local_rank\":1,\"pid\":42,\"state\":"
                "\"exited\",\"exit_code\":6,\"signal\":0}],\"logs\":[{\"job_id\":\"j-7\","
                "\"generation\":2,\"rank\":1,\"seq\":5,\"lines\":[\"a\",\"b\"]}]}",
                &b, &e, &keep),
        0);
    assert_int_equal(b.version, 17);
    assert_int_equal(b.wait_ms, BEAT_MAX_WAIT_MS);
    assert_int_equal(b.nworkers, 1);
    assert_int_equal(b.workers[0].job, 7);
    assert_true(b.workers[0].exited);
    assert_int_equal(b.workers[0].exit_code, 6);
    assert_int_equal(b.nlogs, 1);
    assert_int_equal(b.logs[0].seq, 5);
    validate_beat_release(&b);
    json_decref(keep);

    /* A metric nested 16 levels is taken, 17 (or jansson's 2,000) refused naming it. */
    const int depths[] = {16, 17, 2000};
    for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
        int d = depths[i];
        struct buf text = BUF_INIT;
        assert_int_equal(buf_addstr(&text, "{\"incarnation\":\"x\",\"metrics\":[{\"job_id\":"
                                           "\"j-1\",\"generation\":1,\"seq\":1,\"metric\":"),
                         0);
        for (int l = 0; l < d; l++)
            assert_int_equal(buf_addstr(&text, l + 1 < d ? "{\"a\":" : "{}"), 0);
        for (int l = 0; l + 1 < d; l++)
            assert_int_equal(buf_addstr(&text, "}"), 0);
        assert_int_equal(buf_addstr(&text, "}]}"), 0);
        struct beat bb = {0};
        struct ddp_err ee = {0};
        json_t *kk = NULL;
        int rc = beat_of(text.data, &bb, &ee, &kk);
        if (d <= BEAT_MAX_METRIC_DEPTH) {
            assert_int_equal(rc, 0);
            validate_beat_release(&bb);
        } else if (rc != DDP_EINVAL || !strstr(ee.msg, "field 'metrics[0].metric': nested")) {
            fail_msg("depth %d: rc %d message '%s'", d, rc, ee.msg);
        }
        json_decref(kk);
        buf_release(&text);
    }
}

static void test_validate_job_id(void **state)
{
    int64_t id = 0;
    assert_int_equal(validate_job_id("j-7", &id), 0);
    assert_int_equal(id, 7);
    const char *bad[] = {"j-0", "j-07", "j-", "7", "j-1a", "J-1", "j--1", "j-9999999999", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        id = 99;
        assert_int_equal(validate_job_id(bad[i], &id), -1);
        assert_int_equal(id, 99);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate_every_bad_spec),
        cmocka_unit_test(test_validate_spec_limits),
        cmocka_unit_test(test_validate_spec_defaults),
        cmocka_unit_test(test_validate_spec_preempt),
        cmocka_unit_test(test_validate_spec_gpus_per_proc),
        cmocka_unit_test(test_validate_spec_nnodes_forms),
        cmocka_unit_test(test_validate_register),
        cmocka_unit_test(test_validate_beat),
        cmocka_unit_test(test_validate_job_id),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
