/*
 * test_env.c - env_read(): torchrun variables, single-process defaults, strict errors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ddp/env.h"

static const char *const vars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "TORCHELASTIC_RESTART_COUNT",
    "DDP_GENERATION",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DDP_JOB_ID",
    "DDP_JOB_TOKEN",
    "DDP_CHECKPOINT_DIR",
    "DDP_HEARTBEAT_FILE",
    "DDP_METRICS_FD",
};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    return 0;
}

static void set_rank_env(void)
{
    setenv("RANK", "5", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    setenv("GROUP_RANK", "1", 1);
    setenv("GROUP_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
}

/* env_read must fail with DDP_EINVAL and a message containing needle. */
static void expect_einval(const char *needle)
{
    struct ddp_env env;
    struct ddp_err err;
    memset(&env, 0x5a, sizeof(env));
    err_clear(&err);
    assert_int_equal(env_read(&env, &err), DDP_EINVAL);
    assert_int_equal(err.code, DDP_EINVAL);
    if (!strstr(err.msg, needle))
        fail_msg("message '%s' does not name '%s'", err.msg, needle);
    /* Nothing written on failure. */
    assert_int_equal(env.rank, 0x5a5a5a5a);
}

static void test_env_single_process_defaults(void **state)
{
    (void)state;
    struct ddp_env env;
    struct ddp_err err;
    assert_int_equal(env_read(&env, &err), 0);
    assert_int_equal(env.rank, 0);
    assert_int_equal(env.world_size, 1);
    assert_int_equal(env.local_rank, 0);
    assert_int_equal(env.local_world_size, 1);
    assert_int_equal(env.group_rank, 0);
    assert_int_equal(env.group_world_size, 1);
    assert_int_equal(env.restart_count, 0);
    assert_int_equal(env.generation, 0);
    assert_string_equal(env.master_addr, "127.0.0.1");
    assert_int_equal(env.master_port, 0);
    assert_string_equal(env.job_id, "local");
    assert_string_equal(env.job_token, "");
    assert_string_equal(env.checkpoint_dir, "");
    assert_string_equal(env.heartbeat_file, "");
    assert_int_equal(env.metrics_fd, -1);
}

static void test_env_torchrun_variables(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char fdstr[16];
    snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
    set_rank_env();
    setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
    setenv("DDP_GENERATION", "3", 1);
    setenv("DDP_JOB_ID", "j-42", 1);
    setenv("DDP_JOB_TOKEN", "tok", 1);
    setenv("DDP_CHECKPOINT_DIR", "/tmp/ck", 1);
    setenv("DDP_HEARTBEAT_FILE", "/tmp/hb", 1);
    setenv("DDP_METRICS_FD", fdstr, 1);
    struct ddp_env env;
    struct ddp_err err;
    assert_int_equal(env_read(&env, &err), 0);
    assert_int_equal(env.rank, 5);
    assert_int_equal(env.world_size, 8);
    assert_int_equal(env.local_rank, 1);
    assert_int_equal(env.local_world_size, 4);
    assert_int_equal(env.group_rank, 1);
    assert_int_equal(env.group_world_size, 2);
    assert_int_equal(env.restart_count, 2);
    assert_int_equal(env.generation, 3);
    assert_string_equal(env.master_addr, "10.0.0.1");
    assert_int_equal(env.master_port, 29500);
    assert_string_equal(env.job_id, "j-42");
    assert_string_equal(env.job_token, "tok");
    assert_string_equal(env.checkpoint_dir, "/tmp/ck");
    assert_string_equal(env.heartbeat_file, "/tmp/hb");
    assert_int_equal(env.metrics_fd, fds[1]);
    close(fds[0]);
    close(fds[1]);
}

static void test_env_layout_defaults_to_one_node(void **state)
{
    (void)state;
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "1234", 1);
    struct ddp_env env;
    struct ddp_err err;
    assert_int_equal(env_read(&env, &err), 0);
    assert_int_equal(env.local_rank, 2);
    assert_int_equal(env.local_world_size, 3);
    assert_int_equal(env.group_rank, 0);
    assert_int_equal(env.group_world_size, 1);
}

static void test_env_rank_without_world_size(void **state)
{
    (void)state;
    setenv("RANK", "0", 1);
    expect_einval("WORLD_SIZE");
    clear_env(NULL);
    setenv("WORLD_SIZE", "2", 1);
    expect_einval("RANK");
}

static void test_env_rank_out_of_range(void **state)
{
    (void)state;
    set_rank_env();
    setenv("RANK", "8", 1);
    expect_einval("RANK");
    setenv("RANK", "-1", 1);
    expect_einval("RANK");
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "0", 1);
    expect_einval("WORLD_SIZE");
}

static void test_env_malformed_numbers(void **state)
{
    (void)state;
    set_rank_env();
    setenv("RANK", "1x", 1);
    expect_einval("RANK");
    setenv("RANK", "", 1);
    expect_einval("RANK");
    setenv("RANK", "1", 1);
    setenv("MASTER_PORT", "70000", 1);
    expect_einval("MASTER_PORT");
    setenv("MASTER_PORT", " 29500", 1);
    expect_einval("MASTER_PORT");
    setenv("MASTER_PORT", "29500", 1);
    setenv("DDP_GENERATION", "-3", 1);
    expect_einval("DDP_GENERATION");
    unsetenv("DDP_GENERATION");
    setenv("TORCHELASTIC_RESTART_COUNT", "two", 1);
    expect_einval("TORCHELASTIC_RESTART_COUNT");
}

static void test_env_master_required_with_rank(void **state)
{
    (void)state;
    set_rank_env();
    unsetenv("MASTER_ADDR");
    expect_einval("MASTER_ADDR");
    setenv("MASTER_ADDR", "", 1);
    expect_einval("MASTER_ADDR");
    setenv("MASTER_ADDR", "h", 1);
    unsetenv("MASTER_PORT");
    expect_einval("MASTER_PORT");
}

static void test_env_layout_inconsistent(void **state)
{
    (void)state;
    set_rank_env();
    setenv("LOCAL_RANK", "4", 1);
    expect_einval("LOCAL_RANK");
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "9", 1);
    expect_einval("LOCAL_WORLD_SIZE");
    setenv("LOCAL_WORLD_SIZE", "4", 1);
    setenv("GROUP_RANK", "2", 1);
    expect_einval("GROUP_RANK");
}

static void test_env_strings_bounded(void **state)
{
    (void)state;
    char longid[100];
    memset(longid, 'a', sizeof(longid) - 1);
    longid[sizeof(longid) - 1] = '\0';
    setenv("DDP_JOB_ID", longid, 1);
    expect_einval("DDP_JOB_ID");
    setenv("DDP_JOB_ID", "", 1);
    expect_einval("DDP_JOB_ID");
    unsetenv("DDP_JOB_ID");
    char longtok[200];
    memset(longtok, 't', sizeof(longtok) - 1);
    longtok[sizeof(longtok) - 1] = '\0';
    setenv("DDP_JOB_TOKEN", longtok, 1);
    expect_einval("DDP_JOB_TOKEN");
}

static void test_env_metrics_fd_must_be_open(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char fdstr[16];
    snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
    close(fds[0]);
    close(fds[1]); /* now certainly not open */
    setenv("DDP_METRICS_FD", fdstr, 1);
    expect_einval("DDP_METRICS_FD");
    setenv("DDP_METRICS_FD", "x", 1);
    expect_einval("DDP_METRICS_FD");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_env_single_process_defaults, clear_env),
        cmocka_unit_test_setup(test_env_torchrun_variables, clear_env),
        cmocka_unit_test_setup(test_env_layout_defaults_to_one_node, clear_env),
        cmocka_unit_test_setup(test_env_rank_without_world_size, clear_env),
        cmocka_unit_test_setup(test_env_rank_out_of_range, clear_env),
        cmocka_unit_test_setup(test_env_malformed_numbers, clear_env),
        cmocka_unit_test_setup(test_env_master_required_with_rank, clear_env),
        cmocka_unit_test_setup(test_env_layout_inconsistent, clear_env),
        cmocka_unit_test_setup(test_env_strings_bounded, clear_env),
        cmocka_unit_test_setup(test_env_metrics_fd_must_be_open, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
