/*
 * test_assign.c - parsing of heartbeat-answer assignments: a full one (with its owner),
 * defaults, and each refusal naming its field (a refused assignment is never started).
 */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "agent/assign.h"

static const char *full =
    "{\"job_id\": \"j-7\", \"generation\": 2, \"run_id\": \"run-7\","
    " \"command\": [\"ddp-worker\", \"--epochs\", \"10\"], \"env\": {\"K\": \"V\", \"A\": \"\"},"
    " \"workdir\": \"/w\", \"checkpoint_dir\": \"\", \"grace_period_s\": 5,"
    " \"group_rank\": 1, \"group_world_size\": 2, \"nproc_per_node\": 2, \"world_size\": 4,"
    " \"master_addr\": \"10.0.0.1\", \"master_port\": 29500, \"restart_count\": 1,"
    " \"max_restarts\": 3, \"job_token\": \"9b1f\", \"owner\": \"alice.b-2\","
    " \"preempt_signal\": \"SIGUSR2\", \"preempt_grace_s\": 12, \"a_future_field\": true}";

static int parse(const char *text, struct assign *a, struct ddp_err *err)
{
    json_t *v = json_loads(text, 0, NULL);
    assert_non_null(v);
    memset(a, 0, sizeof(*a));
    int rc = assign_parse(v, a, err);
    json_decref(v);
    return rc;
}

static void test_assign_full(void **state)
{
    (void)state;
    struct assign a;
    struct ddp_err err;
    assert_int_equal(parse(full, &a, &err), 0);
    assert_string_equal(a.job_id, "j-7");
    assert_int_equal(a.generation, 2);
    assert_string_equal(a.run_id, "run-7");
    assert_int_equal(a.argc, 3);
    assert_string_equal(a.argv[2], "10");
    assert_null(a.argv[3]);
    assert_int_equal(a.nenv, 2);
    assert_string_equal(a.env_keys[0], "K");
    assert_string_equal(a.env_vals[1], "");
    assert_string_equal(a.workdir, "/w");
    assert_int_equal(a.grace_period_s, 5);
    assert_int_equal(assign_rank(&a, 1), 3);
    assert_string_equal(a.master_addr, "10.0.0.1");
    assert_int_equal(a.master_port, 29500);
    assert_int_equal(a.restart_count, 1);
    assert_int_equal(a.max_restarts, 3);
    assert_string_equal(a.job_token, "9b1f");
    assert_string_equal(a.owner, "alice.b-2");
    assert_int_equal(a.preempt_signo, SIGUSR2);
    assert_int_equal(a.preempt_grace_s, 12);
    assign_release(&a);
    assign_release(&a); /* twice is harmless */
    assign_release(NULL);
}

static void test_assign_defaults(void **state)
{
    (void)state;
    struct assign a;
    struct ddp_err err;
    assert_int_equal(parse("{\"job_id\": \"j-1\", \"generation\": 1, \"command\": [\"x\"],"
                           " \"group_rank\": 0, \"group_world_size\": 1, \"nproc_per_node\": 1,"
                           " \"world_size\": 1, \"master_addr\": \"h\", \"master_port\": 1}",
                           &a, &err),
                     0);
    assert_string_equal(a.run_id, "j-1");
    assert_int_equal(a.grace_period_s, -1);
    assert_int_equal(a.nenv, 0);
    assert_string_equal(a.workdir, "");
    assert_string_equal(a.checkpoint_dir, "");
    assert_string_equal(a.job_token, "");
    assert_string_equal(a.owner, ""); /* an older ddpd */
    assert_int_equal(a.preempt_signo, SIGUSR1);
    assert_int_equal(a.preempt_grace_s, 30);
    assign_release(&a);
}

/* full with one field replaced ("key": value text, or NULL value = removed). */
static void expect_refused(const char *key, const char *value, const char *want)
{
    json_t *v = json_loads(full, 0, NULL);
    if (value)
        json_object_set_new(v, key, json_loads(value, JSON_DECODE_ANY, NULL));
    else
        json_object_del(v, key);
    struct assign a;
    memset(&a, 0, sizeof(a));
    struct ddp_err err;
    err_clear(&err);
    int rc = assign_parse(v, &a, &err);
    json_decref(v);
    if (rc != DDP_EINVAL || !strstr(err.msg, want))
        print_error("%s=%s: rc %d, message '%s', expected '%s'\n", key, value ? value : "-", rc,
                    err.msg, want);
    assert_int_equal(rc, DDP_EINVAL);
    assert_non_null(strstr(err.msg, want));
    assert_null(a.job_id); /* nothing half-parsed is handed out */
}

static void test_assign_refusals_name_the_field(void **state)
{
    (void)state;
    expect_refused("job_id", NULL, "job_id");
    expect_refused("job_id", "\"a/b\"", "job_id");
    expect_refused("job_id", "\"..\"", "job_id");
    expect_refused("generation", "\"2\"", "generation");
    expect_refused("command", "[]", "command");
    expect_refused("command", "[\"ok\", 3]", "command[1]");
    expect_refused("command", "[\"\"]", "command[0]");
    expect_refused("env", "{\"K\": 1}", "env.K");
    expect_refused("env", "[]", "env");
    expect_refused("group_rank", "2", "group_rank");
    expect_refused("nproc_per_node", "0", "nproc_per_node");
    expect_refused("world_size", "3", "world_size");
    expect_refused("master_addr", "\"\"", "master_addr");
    expect_refused("master_port", "70000", "master_port");
    expect_refused("grace_period_s", "-1", "grace_period_s");
    expect_refused("owner", "1", "owner");
    expect_refused("preempt_signal", "\"SIGKILL\"", "field 'preempt_signal'");
    expect_refused("preempt_signal", "10", "field 'preempt_signal'");
    expect_refused("preempt_grace_s", "-1", "preempt_grace_s");
    expect_refused("preempt_grace_s", "3601", "preempt_grace_s");
    expect_refused("owner", "\"../root\"", "field 'owner': '../root' is not a user name");
    expect_refused("owner", "\"a b\"", "owner");
    expect_refused("owner", "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"",
                   "owner");
    struct assign a;
    struct ddp_err err;
    memset(&a, 0, sizeof(a));
    json_t *arr = json_array();
    assert_int_equal(assign_parse(arr, &a, &err), DDP_EINVAL);
    json_decref(arr);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_assign_full),
        cmocka_unit_test(test_assign_defaults),
        cmocka_unit_test(test_assign_refusals_name_the_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
