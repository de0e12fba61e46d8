/*
 * test_recon.c - the reconcile step, table-driven: each case is a desired set, a worker set
 * and the exact list of actions expected (in recon_compute()'s documented order).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "agent/recon.h"

#define MAXN 8

struct recon_case {
    const char *name;
    struct recon_want want[MAXN];
    size_t nwant;
    struct recon_have have[MAXN];
    size_t nhave;
    int allow_start;
    struct recon_action expect[MAXN];
    size_t nexpect;
};

#define W(j, g, n)                                     \
    {                                                  \
        .job_id = (j), .generation = (g), .nproc = (n) \
    }
#define RUN(j, g, lr)                                                      \
    {                                                                      \
        .job_id = (j), .generation = (g), .local_rank = (lr), .running = 1 \
    }
#define STOPPING(j, g, lr)                                                                \
    {                                                                                     \
        .job_id = (j), .generation = (g), .local_rank = (lr), .running = 1, .stopping = 1 \
    }
#define EXITED(j, g, lr)                                                   \
    {                                                                      \
        .job_id = (j), .generation = (g), .local_rank = (lr), .running = 0 \
    }
#define START(w, lr)                                        \
    {                                                       \
        .op = RECON_START, .index = (w), .local_rank = (lr) \
    }
#define STOP(h, lr)                                        \
    {                                                      \
        .op = RECON_STOP, .index = (h), .local_rank = (lr) \
    }
#define FORGET(h, lr)                                        \
    {                                                        \
        .op = RECON_FORGET, .index = (h), .local_rank = (lr) \
    }

static const struct recon_case cases[] = {
    {"nothing wanted, nothing running", {{0}}, 0, {{0}}, 0, 1, {{0}}, 0},
    {"new assignment starts every local rank",
     {W("j-1", 1, 2)},
     1,
     {{0}},
     0,
     1,
     {START(0, 0), START(0, 1)},
     2},
    {"running as desired: nothing",
     {W("j-1", 1, 2)},
     1,
     {RUN("j-1", 1, 0), RUN("j-1", 1, 1)},
     2,
     1,
     {{0}},
     0},
    {"one local rank missing: start only it",
     {W("j-1", 1, 3)},
     1,
     {RUN("j-1", 1, 0), RUN("j-1", 1, 2)},
     2,
     1,
     {START(0, 1)},
     1},
    {"exited worker of a desired assignment is never re-spawned",
     {W("j-1", 1, 2)},
     1,
     {EXITED("j-1", 1, 0), RUN("j-1", 1, 1)},
     2,
     1,
     {{0}},
     0},
    {"assignment gone: running workers stop",
     {{0}},
     0,
     {RUN("j-1", 1, 0), RUN("j-1", 1, 1)},
     2,
     1,
     {STOP(0, 0), STOP(1, 1)},
     2},
    {"assignment gone: a stopping worker is not stopped twice",
     {{0}},
     0,
     {STOPPING("j-1", 1, 0), RUN("j-1", 1, 1)},
     2,
     1,
     {STOP(1, 1)},
     1},
    {"assignment gone: exited workers are forgotten",
     {{0}},
     0,
     {EXITED("j-1", 1, 0), STOPPING("j-1", 1, 1)},
     2,
     1,
     {FORGET(0, 0)},
     1},
    {"new generation waits for the old one to be gone",
     {W("j-1", 2, 2)},
     1,
     {RUN("j-1", 1, 0), EXITED("j-1", 1, 1)},
     2,
     1,
     {STOP(0, 0), FORGET(1, 1)},
     2},
    {"new generation starts once the old one has exited",
     {W("j-1", 2, 2)},
     1,
     {EXITED("j-1", 1, 0), EXITED("j-1", 1, 1)},
     2,
     1,
     {FORGET(0, 0), FORGET(1, 1), START(0, 0), START(0, 1)},
     4},
    {"another job's workers do not delay a start",
     {W("j-1", 1, 1), W("j-2", 1, 1)},
     2,
     {RUN("j-1", 1, 0)},
     1,
     1,
     {START(1, 0)},
     1},
    {"starts suppressed while shutting down, stops still made",
     {W("j-1", 1, 2)},
     1,
     {RUN("j-2", 1, 0)},
     1,
     0,
     {STOP(0, 0)},
     1},
    {"duplicate (job, generation) in the desired set counts once",
     {W("j-1", 1, 1), W("j-1", 1, 1)},
     2,
     {{0}},
     0,
     1,
     {START(0, 0)},
     1},
    {"local rank outside nproc is not desired",
     {W("j-1", 1, 1)},
     1,
     {RUN("j-1", 1, 0), RUN("j-1", 1, 1)},
     2,
     1,
     {STOP(1, 1)},
     1},
    {"same job id, other generation: generations are distinct",
     {W("j-1", 3, 1)},
     1,
     {EXITED("j-1", 2, 0)},
     1,
     1,
     {FORGET(0, 0), START(0, 0)},
     2},
    {"job ids compare whole strings",
     {W("j-10", 1, 1)},
     1,
     {RUN("j-1", 1, 0)},
     1,
     1,
     {STOP(0, 0), START(0, 0)},
     2},
};

static const char *op_name(enum recon_op op)
{
    return op == RECON_START ? "START" : op == RECON_STOP ? "STOP" : "FORGET";
}

static void test_recon_table(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const struct recon_case *t = &cases[c];
        struct recon_plan plan = {0};
        recon_compute(t->want, t->nwant, t->have, t->nhave, t->allow_start, &plan);
        if (plan.n != t->nexpect)
            print_error("case '%s': %zu actions, expected %zu\n", t->name, plan.n, t->nexpect);
        assert_int_equal(plan.n, t->nexpect);
        for (size_t i = 0; i < plan.n; i++) {
            const struct recon_action *got = &plan.actions[i], *want = &t->expect[i];
            if (got->op != want->op || got->index != want->index ||
                got->local_rank != want->local_rank)
                print_error("case '%s' action %zu: %s(%zu, %d), expected %s(%zu, %d)\n", t->name, i,
                            op_name(got->op), got->index, got->local_rank, op_name(want->op),
                            want->index, want->local_rank);
            assert_int_equal(got->op, want->op);
            assert_int_equal(got->index, want->index);
            assert_int_equal(got->local_rank, want->local_rank);
        }
        recon_plan_release(&plan);
    }
}

/* Applying the plan and reconciling again gives nothing more to do: the function converges
 * (an exited worker stays exited, a started one runs). */
static void test_recon_converges(void **state)
{
    (void)state;
    struct recon_want want[] = {W("j-1", 4, 3), W("j-2", 1, 2)};
    struct recon_have have[16] = {RUN("j-1", 3, 0), EXITED("j-1", 4, 1), RUN("j-9", 1, 0)};
    size_t nhave = 3;
    for (int round = 0; round < 5; round++) {
        struct recon_plan plan = {0};
        recon_compute(want, 2, have, nhave, 1, &plan);
        if (plan.n == 0) {
            recon_plan_release(&plan);
            /* j-1 gen 4: ranks 0 and 2 started, 1 stays exited; j-2: both started. */
            assert_int_equal(nhave, 5);
            assert_int_equal(round, 2);
            return;
        }
        /* Apply: stopped workers exit, forgotten ones vanish, starts run. */
        struct recon_have next[16];
        size_t nn = 0;
        for (size_t h = 0; h < nhave; h++) {
            int forgotten = 0;
            struct recon_have x = have[h];
            for (size_t i = 0; i < plan.n; i++) {
                if (plan.actions[i].op != RECON_START && plan.actions[i].index == h) {
                    if (plan.actions[i].op == RECON_STOP)
                        x.running = 0;
                    else
                        forgotten = 1;
                }
            }
            if (!forgotten)
                next[nn++] = x;
        }
        for (size_t i = 0; i < plan.n; i++) {
            if (plan.actions[i].op == RECON_START) {
                const struct recon_want *w = &want[plan.actions[i].index];
                struct recon_have x = RUN(w->job_id, w->generation, plan.actions[i].local_rank);
                next[nn++] = x;
            }
        }
        memcpy(have, next, nn * sizeof(have[0]));
        nhave = nn;
        recon_plan_release(&plan);
    }
    fail_msg("reconcile did not converge in 5 rounds");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recon_table),
        cmocka_unit_test(test_recon_converges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
