/*
 * test_jobstate.c - the job state machine: every allowed and every refused transition,
 * names, and the terminal/live predicates.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "server/jobstate.h"

/* The expected table, written out independently of jobstate.c's. */
struct edge {
    enum job_state from, to;
};
static const struct edge allowed[] = {
    {JOB_PENDING, JOB_RUNNING},   {JOB_PENDING, JOB_CANCELLING},    {JOB_RUNNING, JOB_RESTARTING},
    {JOB_RUNNING, JOB_SUCCEEDED}, {JOB_RUNNING, JOB_CANCELLING},    {JOB_RESTARTING, JOB_RUNNING},
    {JOB_RESTARTING, JOB_FAILED}, {JOB_RESTARTING, JOB_CANCELLING}, {JOB_CANCELLING, JOB_CANCELLED},
};

static int expected(enum job_state from, enum job_state to)
{
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (allowed[i].from == from && allowed[i].to == to)
            return 1;
    return 0;
}

static void test_jobstate_every_pair(void **state)
{
    int n_allowed = 0, n_refused = 0;
    for (int f = 0; f < JOB_STATE_COUNT; f++)
        for (int t = 0; t < JOB_STATE_COUNT; t++) {
            int want = expected((enum job_state)f, (enum job_state)t);
            int got = jobstate_allowed((enum job_state)f, (enum job_state)t);
            if (want != got)
                fail_msg("%s -> %s: expected %d, got %d", jobstate_name((enum job_state)f),
                         jobstate_name((enum job_state)t), want, got);
            if (got)
                n_allowed++;
            else
                n_refused++;
        }
    assert_int_equal(n_allowed, 9);
    assert_int_equal(n_refused, 49 - 9);
}

static void test_jobstate_terminal_never_moves(void **state)
{
    enum job_state terms[] = {JOB_SUCCEEDED, JOB_FAILED, JOB_CANCELLED};
    for (size_t i = 0; i < 3; i++) {
        assert_true(jobstate_is_terminal(terms[i]));
        assert_false(jobstate_is_live(terms[i]));
        for (int t = 0; t < JOB_STATE_COUNT; t++)
            assert_false(jobstate_allowed(terms[i], (enum job_state)t));
    }
}

static void test_jobstate_cancel_from_every_live_state(void **state)
{
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        assert_int_equal(jobstate_allowed((enum job_state)s, JOB_CANCELLING),
                         jobstate_is_live((enum job_state)s));
}

static void test_jobstate_out_of_range_refused(void **state)
{
    assert_false(jobstate_allowed((enum job_state) - 1, JOB_RUNNING));
    assert_false(jobstate_allowed(JOB_PENDING, (enum job_state)JOB_STATE_COUNT));
    assert_string_equal(jobstate_name((enum job_state)99), "UNKNOWN");
}

static void test_jobstate_names_round_trip(void **state)
{
    for (int s = 0; s < JOB_STATE_COUNT; s++) {
        enum job_state got;
        assert_int_equal(jobstate_parse(jobstate_name((enum job_state)s), &got), 0);
        assert_int_equal(got, s);
    }
    enum job_state x = JOB_RUNNING;
    assert_int_equal(jobstate_parse("running", &x), -1);
    assert_int_equal(jobstate_parse("", &x), -1);
    assert_int_equal(x, JOB_RUNNING);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobstate_every_pair),
        cmocka_unit_test(test_jobstate_terminal_never_moves),
        cmocka_unit_test(test_jobstate_cancel_from_every_live_state),
        cmocka_unit_test(test_jobstate_out_of_range_refused),
        cmocka_unit_test(test_jobstate_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
