/*
 * test_nodestate.c - the node state machine: every allowed and every refused transition,
 * names, and what the API shows of each state.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "server/nodestate.h"

/* The expected table, written out independently of nodestate.c's. */
struct edge {
    enum node_state from, to;
};
static const struct edge allowed[] = {
    {NODE_READY, NODE_SUSPECT},          {NODE_READY, NODE_LOST},
    {NODE_SUSPECT, NODE_READY},          {NODE_SUSPECT, NODE_LOST},
    {NODE_SUSPECT, NODE_LOST_CONFIRMED}, {NODE_LOST, NODE_READY},
    {NODE_LOST_CONFIRMED, NODE_READY},
};

static int expected(enum node_state from, enum node_state to)
{
    for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
        if (allowed[i].from == from && allowed[i].to == to)
            return 1;
    return 0;
}

static void test_nodestate_every_pair(void **state)
{
    (void)state;
    int n_allowed = 0, n_refused = 0;
    for (int f = 0; f < NODE_STATE_COUNT; f++)
        for (int t = 0; t < NODE_STATE_COUNT; t++) {
            int want = expected((enum node_state)f, (enum node_state)t);
            int got = nodestate_allowed((enum node_state)f, (enum node_state)t);
            if (want != got)
                fail_msg("%s -> %s: expected %d, got %d", nodestate_name((enum node_state)f),
                         nodestate_name((enum node_state)t), want, got);
            if (got)
                n_allowed++;
            else
                n_refused++;
        }
    assert_int_equal(n_allowed, 7);
    assert_int_equal(n_refused, 16 - 7);
}

/* Only a READY node is suspected; a LOST node comes back only by beating (to READY). */
static void test_nodestate_lost_is_never_suspected(void **state)
{
    (void)state;
    assert_false(nodestate_allowed(NODE_LOST, NODE_SUSPECT));
    assert_false(nodestate_allowed(NODE_LOST_CONFIRMED, NODE_SUSPECT));
    assert_false(nodestate_allowed(NODE_READY, NODE_LOST_CONFIRMED));
    assert_false(nodestate_allowed(NODE_LOST, NODE_LOST_CONFIRMED));
    for (int s = 0; s < NODE_STATE_COUNT; s++)
        assert_false(nodestate_allowed((enum node_state)s, (enum node_state)s));
}

/* The API shows READY for READY and SUSPECT, LOST for both LOST states. */
static void test_nodestate_api_shows_two_states(void **state)
{
    (void)state;
    assert_string_equal(nodestate_api_name(NODE_READY), "READY");
    assert_string_equal(nodestate_api_name(NODE_SUSPECT), "READY");
    assert_string_equal(nodestate_api_name(NODE_LOST), "LOST");
    assert_string_equal(nodestate_api_name(NODE_LOST_CONFIRMED), "LOST");
    assert_true(nodestate_is_up(NODE_READY));
    assert_true(nodestate_is_up(NODE_SUSPECT));
    assert_false(nodestate_is_up(NODE_LOST));
    assert_false(nodestate_is_up(NODE_LOST_CONFIRMED));
}

static void test_nodestate_out_of_range_refused(void **state)
{
    (void)state;
    assert_false(nodestate_allowed((enum node_state) - 1, NODE_READY));
    assert_false(nodestate_allowed(NODE_READY, (enum node_state)NODE_STATE_COUNT));
    assert_string_equal(nodestate_name((enum node_state)99), "UNKNOWN");
    assert_string_equal(nodestate_name(NODE_LOST_CONFIRMED), "LOST_CONFIRMED");
    assert_string_equal(nodestate_api_name((enum node_state)99), "LOST");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodestate_every_pair),
        cmocka_unit_test(test_nodestate_lost_is_never_suspected),
        cmocka_unit_test(test_nodestate_api_shows_two_states),
        cmocka_unit_test(test_nodestate_out_of_range_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
