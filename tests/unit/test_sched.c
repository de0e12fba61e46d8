/*
 * test_sched.c - gang placement: name order and ranks, MIN/MAX, slots, ports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "common/err.h"
#include "server/sched.h"

static struct sched_node mk(const char *name, int free_slots)
{
    struct sched_node n = {name, free_slots, 29500, 29999, NULL, 0, 0};
    return n;
}

static void test_sched_orders_by_name(void **state)
{
    struct sched_node nodes[] = {mk("node-c", 2), mk("node-a", 2), mk("node-b", 2)};
    size_t idx[3];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 3, 2};
    assert_int_equal(sched_place(&j, nodes, 3, &p), 0);
    assert_int_equal(p.n, 3);
    assert_int_equal(idx[0], 1); /* node-a is group rank 0 */
    assert_int_equal(idx[1], 2);
    assert_int_equal(idx[2], 0);
    assert_int_equal(p.master_port, 29500);
}

static void test_sched_takes_at_most_max(void **state)
{
    struct sched_node nodes[] = {mk("d", 4), mk("c", 4), mk("b", 4), mk("a", 4)};
    size_t idx[4];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 2, 4};
    assert_int_equal(sched_place(&j, nodes, 4, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(idx[0], 3); /* a */
    assert_int_equal(idx[1], 2); /* b */
}

static void test_sched_gang_needs_min(void **state)
{
    struct sched_node nodes[] = {mk("a", 2), mk("b", 1), mk("c", 0)};
    size_t idx[3] = {7, 7, 7};
    struct sched_placement p = {.n = 42, .idx = idx, .master_port = 9};
    struct sched_job j = {2, 3, 2};
    /* only "a" has 2 free slots: no partial placement */
    assert_int_equal(sched_place(&j, nodes, 3, &p), DDP_EUNAVAIL);
    assert_int_equal(p.n, 42);
    assert_int_equal(p.master_port, 9);
    assert_int_equal(idx[0], 7);
    struct sched_job j1 = {1, 3, 1};
    assert_int_equal(sched_place(&j1, nodes, 3, &p), 0);
    assert_int_equal(p.n, 2); /* a and b have >= 1 free slot, c has none */
}

static void test_sched_skips_nodes_without_slots(void **state)
{
    struct sched_node nodes[] = {mk("a", 1), mk("b", 4), mk("c", -1), mk("d", 4)};
    size_t idx[4];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {2, 4, 2};
    assert_int_equal(sched_place(&j, nodes, 4, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 3);
}

static void test_sched_port_avoids_live_jobs(void **state)
{
    int used[] = {29500, 29501, 29503};
    struct sched_node nodes[] = {mk("a", 2), mk("b", 2)};
    nodes[0].used_ports = used;
    nodes[0].nused = 3;
    size_t idx[2];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {2, 2, 1};
    assert_int_equal(sched_place(&j, nodes, 2, &p), 0);
    assert_int_equal(p.master_port, 29502);
    /* and not the port of the job's previous generation there */
    nodes[0].avoid_port = 29502;
    assert_int_equal(sched_place(&j, nodes, 2, &p), 0);
    assert_int_equal(p.master_port, 29504);
}

static void test_sched_port_range_exhausted(void **state)
{
    int used[] = {40000, 40001};
    struct sched_node n = mk("a", 2);
    n.port_lo = 40000;
    n.port_hi = 40002;
    n.used_ports = used;
    n.nused = 2;
    assert_int_equal(sched_pick_port(&n), 40002);
    n.avoid_port = 40002;
    assert_int_equal(sched_pick_port(&n), 0);
    size_t idx[1];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 1, 1};
    assert_int_equal(sched_place(&j, &n, 1, &p), DDP_EUNAVAIL);
}

static void test_sched_refuses_bad_job(void **state)
{
    struct sched_node n = mk("a", 2);
    size_t idx[1];
    struct sched_placement p = {.idx = idx};
    struct sched_job bad = {3, 2, 1};
    assert_int_equal(sched_place(&bad, &n, 1, &p), DDP_EINVAL);
    struct sched_job none = {1, 1, 1};
    assert_int_equal(sched_place(&none, NULL, 0, &p), DDP_EUNAVAIL);
}

static void test_sched_is_deterministic(void **state)
{
    struct sched_node a[] = {mk("n2", 2), mk("n10", 2), mk("n1", 2)};
    struct sched_node b[] = {mk("n1", 2), mk("n2", 2), mk("n10", 2)};
    size_t ia[3], ib[3];
    struct sched_placement pa = {.idx = ia}, pb = {.idx = ib};
    struct sched_job j = {3, 3, 1};
    assert_int_equal(sched_place(&j, a, 3, &pa), 0);
    assert_int_equal(sched_place(&j, b, 3, &pb), 0);
    for (int r = 0; r < 3; r++)
        assert_string_equal(a[ia[r]].name, b[ib[r]].name);
    assert_string_equal(a[ia[0]].name, "n1");
    assert_string_equal(a[ia[1]].name, "n10"); /* strcmp order */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sched_orders_by_name),
        cmocka_unit_test(test_sched_takes_at_most_max),
        cmocka_unit_test(test_sched_gang_needs_min),
        cmocka_unit_test(test_sched_skips_nodes_without_slots),
        cmocka_unit_test(test_sched_port_avoids_live_jobs),
        cmocka_unit_test(test_sched_port_range_exhausted),
        cmocka_unit_test(test_sched_refuses_bad_job),
        cmocka_unit_test(test_sched_is_deterministic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
