/*
 * test_sched.c - gang placement: name order and ranks, MIN/MAX, slots, GPUs, ports.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/err.h"
#include "server/sched.h"

static struct sched_node mk(const char *name, int free_slots)
{
    struct sched_node n = {name, free_slots, 29500, 29999, NULL, 0, 0, 0, 0};
    return n;
}

static void test_sched_orders_by_name(void **state)
{
    struct sched_node nodes[] = {mk("node-c", 2), mk("node-a", 2), mk("node-b", 2)};
    size_t idx[3];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 3, 2, 0};
    assert_int_equal(sched_place(&j, nodes, 3, NULL, &p), 0);
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
    struct sched_job j = {1, 2, 4, 0};
    assert_int_equal(sched_place(&j, nodes, 4, NULL, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(idx[0], 3); /* a */
    assert_int_equal(idx[1], 2); /* b */
}

static void test_sched_gang_needs_min(void **state)
{
    struct sched_node nodes[] = {mk("a", 2), mk("b", 1), mk("c", 0)};
    size_t idx[3] = {7, 7, 7};
    struct sched_placement p = {.n = 42, .idx = idx, .master_port = 9};
    struct sched_job j = {2, 3, 2, 0};
    /* only "a" has 2 free slots: no partial placement */
    assert_int_equal(sched_place(&j, nodes, 3, NULL, &p), DDP_EUNAVAIL);
    assert_int_equal(p.n, 42);
    assert_int_equal(p.master_port, 9);
    assert_int_equal(idx[0], 7);
    struct sched_job j1 = {1, 3, 1, 0};
    assert_int_equal(sched_place(&j1, nodes, 3, NULL, &p), 0);
    assert_int_equal(p.n, 2); /* a and b have >= 1 free slot, c has none */
}

static void test_sched_skips_nodes_without_slots(void **state)
{
    struct sched_node nodes[] = {mk("a", 1), mk("b", 4), mk("c", -1), mk("d", 4)};
    size_t idx[4];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {2, 4, 2, 0};
    assert_int_equal(sched_place(&j, nodes, 4, NULL, &p), 0);
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
    struct sched_job j = {2, 2, 1, 0};
    assert_int_equal(sched_place(&j, nodes, 2, NULL, &p), 0);
    assert_int_equal(p.master_port, 29502);
    /* and not the port of the job's previous generation there */
    nodes[0].avoid_port = 29502;
    assert_int_equal(sched_place(&j, nodes, 2, NULL, &p), 0);
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
    size_t idx[2];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 1, 1, 0};
    /* the avoided port is the only one left: taken all the same (a start on the previous
     * generation's port beats none) */
    assert_int_equal(sched_place(&j, &n, 1, NULL, &p), 0);
    assert_int_equal(p.master_port, 40002);
    int all[] = {40000, 40001, 40002};
    n.used_ports = all;
    n.nused = 3;
    assert_int_equal(sched_place(&j, &n, 1, NULL, &p), DDP_EUNAVAIL);
    /* the first node by name has none: group rank 0 is the next one that has, the others
     * keep their order */
    struct sched_node two[2] = {n, mk("b", 2)};
    struct sched_job j2 = {2, 2, 1, 0};
    assert_int_equal(sched_place(&j2, two, 2, NULL, &p), 0);
    assert_int_equal(p.n, 2);
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 0);
    assert_int_equal(p.master_port, 29500);
    /* one node wanted: the first by name with a port, not the first by name */
    struct sched_job j1 = {1, 1, 1, 0};
    assert_int_equal(sched_place(&j1, two, 2, NULL, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(idx[0], 1);
    /* the order given once per pass gives the same */
    size_t *by = sched_by_name(two, 2);
    assert_int_equal(by[0], 0);
    assert_int_equal(sched_place(&j2, two, 2, by, &p), 0);
    assert_int_equal(idx[0], 1);
    free(by);
}

static void test_sched_refuses_bad_job(void **state)
{
    struct sched_node n = mk("a", 2);
    size_t idx[1];
    struct sched_placement p = {.idx = idx};
    struct sched_job bad = {3, 2, 1, 0};
    assert_int_equal(sched_place(&bad, &n, 1, NULL, &p), DDP_EINVAL);
    struct sched_job none = {1, 1, 1, 0};
    assert_int_equal(sched_place(&none, NULL, 0, NULL, &p), DDP_EUNAVAIL);
}

static void test_sched_is_deterministic(void **state)
{
    struct sched_node a[] = {mk("n2", 2), mk("n10", 2), mk("n1", 2)};
    struct sched_node b[] = {mk("n1", 2), mk("n2", 2), mk("n10", 2)};
    size_t ia[3], ib[3];
    struct sched_placement pa = {.idx = ia}, pb = {.idx = ib};
    struct sched_job j = {3, 3, 1, 0};
    assert_int_equal(sched_place(&j, a, 3, NULL, &pa), 0);
    assert_int_equal(sched_place(&j, b, 3, NULL, &pb), 0);
    for (int r = 0; r < 3; r++)
        assert_string_equal(a[ia[r]].name, b[ib[r]].name);
    assert_string_equal(a[ia[0]].name, "n1");
    assert_string_equal(a[ia[1]].name, "n10"); /* strcmp order */
}

static struct sched_node mk_gpu(const char *name, int free_slots, int gpus, int free_gpus)
{
    struct sched_node n = mk(name, free_slots);
    n.gpus = gpus;
    n.free_gpus = free_gpus;
    return n;
}

static void test_sched_gpus_per_proc_counts_gpus(void **state)
{
    /* 2 workers x 2 GPUs: a 4-GPU node fits, a 3-GPU one does not, slots to spare on both */
    struct sched_node four = mk_gpu("a", 8, 4, 4), three = mk_gpu("b", 8, 3, 3);
    size_t idx[1];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 1, 2, 2};
    assert_int_equal(sched_node_fits(&j, &four), 1);
    assert_int_equal(sched_place(&j, &four, 1, NULL, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(sched_node_fits(&j, &three), 0);
    assert_int_equal(sched_place(&j, &three, 1, NULL, &p), DDP_EUNAVAIL);
    /* free GPUs count, not the node's total: 4 GPUs of which 1 is held */
    struct sched_node busy = mk_gpu("c", 8, 4, 3);
    assert_int_equal(sched_place(&j, &busy, 1, NULL, &p), DDP_EUNAVAIL);
    /* and slots still count: 2 workers need 2 free slots even with GPUs to spare */
    struct sched_node one_slot = mk_gpu("d", 1, 8, 8);
    assert_int_equal(sched_place(&j, &one_slot, 1, NULL, &p), DDP_EUNAVAIL);
}

static void test_sched_gpus_zero_uses_slots_only(void **state)
{
    /* gpus_per_proc 0 on a GPU node whose GPUs are all held: slots decide */
    struct sched_node n = mk_gpu("a", 4, 4, 0);
    size_t idx[1];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 1, 4, 0};
    assert_int_equal(sched_place(&j, &n, 1, NULL, &p), 0);
    assert_int_equal(sched_gpus_per_proc(0, 4), 0);
    struct sched_job five = {1, 1, 5, 0};
    assert_int_equal(sched_place(&five, &n, 1, NULL, &p), DDP_EUNAVAIL);
}

static void test_sched_gpu_job_never_on_cpu_node(void **state)
{
    /* a CPU node with many slots comes first by name, and is skipped */
    struct sched_node nodes[] = {mk("a-cpu", 64), mk_gpu("b-gpu", 8, 8, 8)};
    size_t idx[2];
    struct sched_placement p = {.idx = idx};
    struct sched_job j = {1, 2, 2, 1};
    assert_int_equal(sched_node_fits(&j, &nodes[0]), 0);
    assert_int_equal(sched_place(&j, nodes, 2, NULL, &p), 0);
    assert_int_equal(p.n, 1);
    assert_int_equal(idx[0], 1);
    /* with only the CPU node: no placement */
    assert_int_equal(sched_place(&j, nodes, 1, NULL, &p), DDP_EUNAVAIL);
    /* a job asking 0 GPUs, or auto, goes to the CPU node */
    struct sched_job cpu = {1, 1, 2, 0}, any = {1, 1, 2, SCHED_GPUS_AUTO};
    assert_int_equal(sched_node_fits(&cpu, &nodes[0]), 1);
    assert_int_equal(sched_node_fits(&any, &nodes[0]), 1);
}

static void test_sched_gpus_auto_is_one_per_worker(void **state)
{
    assert_int_equal(sched_gpus_per_proc(SCHED_GPUS_AUTO, 4), 1);
    assert_int_equal(sched_gpus_per_proc(SCHED_GPUS_AUTO, 0), 0);
    assert_int_equal(sched_gpus_per_proc(3, 0), 0);
    assert_int_equal(sched_gpus_per_proc(3, 8), 3);
    /* auto on a 4-GPU node with 8 slots: 4 workers fit, 5 do not */
    struct sched_node n = mk_gpu("a", 8, 4, 4);
    struct sched_job four = {1, 1, 4, SCHED_GPUS_AUTO}, five = {1, 1, 5, SCHED_GPUS_AUTO};
    assert_int_equal(sched_node_fits(&four, &n), 1);
    assert_int_equal(sched_node_fits(&five, &n), 0);
    /* a value below auto is refused */
    size_t idx[1];
    struct sched_placement p = {.idx = idx};
    struct sched_job bad = {1, 1, 1, -2};
    assert_int_equal(sched_place(&bad, &n, 1, NULL, &p), DDP_EINVAL);
}

static void test_sched_quota_user_and_group(void **state)
{
    int by = -1;
    /* no quota: MAX */
    struct sched_quota none = {0, 0, 0, 0};
    assert_int_equal(sched_quota_nodes(&none, 4, 3, &by), 3);
    assert_int_equal(by, SCHED_QUOTA_NONE);
    /* user 16 holding 8, 4 slots a node: 2 nodes left */
    struct sched_quota user = {16, 8, 0, 0};
    assert_int_equal(sched_quota_nodes(&user, 4, 3, &by), 2);
    assert_int_equal(by, SCHED_QUOTA_USER);
    /* the group is tighter: 10 of 16 held by the group's jobs leave 1 node of 4 */
    struct sched_quota group = {16, 8, 16, 10};
    assert_int_equal(sched_quota_nodes(&group, 4, 3, &by), 1);
    assert_int_equal(by, SCHED_QUOTA_GROUP);
    /* the group full (another user holds it all): 0, and it names the group */
    struct sched_quota full = {0, 0, 4, 4};
    assert_int_equal(sched_quota_nodes(&full, 2, 2, &by), 0);
    assert_int_equal(by, SCHED_QUOTA_GROUP);
    /* over its quota (lowered while running): 0, never negative */
    struct sched_quota over = {4, 8, 0, 0};
    assert_int_equal(sched_quota_nodes(&over, 1, 5, &by), 0);
    assert_int_equal(by, SCHED_QUOTA_USER);
    /* quotas that leave MAX or more bind nothing */
    struct sched_quota loose = {100, 0, 100, 50};
    assert_int_equal(sched_quota_nodes(&loose, 2, 4, &by), 4);
    assert_int_equal(by, SCHED_QUOTA_NONE);
    /* raising the group's quota lets the job fit */
    full.group_max = 8;
    assert_int_equal(sched_quota_nodes(&full, 2, 2, NULL), 2);
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
        cmocka_unit_test(test_sched_gpus_per_proc_counts_gpus),
        cmocka_unit_test(test_sched_gpus_zero_uses_slots_only),
        cmocka_unit_test(test_sched_gpu_job_never_on_cpu_node),
        cmocka_unit_test(test_sched_gpus_auto_is_one_per_worker),
        cmocka_unit_test(test_sched_quota_user_and_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
