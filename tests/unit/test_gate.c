/*
 * test_gate.c - server/gate.c with real coordinators on real SQLite files: the roles, who a
 * request enters, the redirect target, and a coordinator retired while requests hold it
 * (it answers reads, refuses every write, and is freed by the last request to leave: under
 * ASan a use after free or a leak fails the run); and the epoch fence of coord_opts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>
#include <sqlite3.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "server/coord.h"
#include "server/gate.h"

static const struct principal ADMIN = {PRINCIPAL_USER, ROLE_ADMIN, "admin"};

struct fx {
    char dir[64];
};

static int setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    log_init("test", LOG_WARN);
    snprintf(f->dir, sizeof(f->dir), "/tmp/ddp-test-gate-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    fs_remove_tree(f->dir, NULL);
    free(f);
    return 0;
}

static struct coord *open_coord(struct fx *f, const char *name)
{
    char *db = xasprintf("%s/%s.db", f->dir, name);
    struct coord *c = NULL;
    struct ddp_err e;
    if (coord_open(db, NULL, 1000, &c, &e) != 0)
        fail_msg("coord_open %s: %s", db, e.msg);
    free(db);
    return c;
}

/* 0 when a submit went through c, else the error code (e's message in msg). */
static int try_submit(struct coord *c, char *msg, size_t size)
{
    json_t *body = json_loads("{\"command\": [\"/bin/true\"]}", 0, NULL);
    char *out = NULL;
    int created = 0;
    struct ddp_err e;
    int rc = coord_submit(c, body, &ADMIN, NULL, 2000, &out, &created, &e);
    json_decref(body);
    free(out);
    if (rc && msg)
        snprintf(msg, size, "%.200s", e.msg);
    return rc;
}

static void test_single(void **state)
{
    struct coord *c = open_coord(*state, "single");
    struct gate *g = gate_new(c);
    enum gate_role role;
    char leader[64] = "x";
    struct coord *in = gate_enter(g, &role, leader, sizeof(leader));
    assert_ptr_equal(in, c);
    assert_int_equal(role, GATE_SINGLE);
    assert_string_equal(leader, "");
    gate_follow(g, "http://elsewhere:1"); /* a single ddpd follows nobody */
    assert_int_equal(gate_role(g, NULL, 0), GATE_SINGLE);
    assert_int_equal(try_submit(in, NULL, 0), 0);
    gate_leave(g, in);
    gate_free(g);
}

static void test_roles(void **state)
{
    struct gate *g = gate_new(NULL);
    enum gate_role role;
    char leader[64];
    assert_null(gate_enter(g, &role, leader, sizeof(leader)));
    assert_int_equal(role, GATE_CANDIDATE);
    assert_string_equal(leader, "");
    gate_follow(g, "http://10.0.0.2:8470");
    assert_null(gate_enter(g, &role, leader, sizeof(leader)));
    assert_int_equal(role, GATE_FOLLOWER);
    assert_string_equal(leader, "http://10.0.0.2:8470");
    struct coord *c = open_coord(*state, "lead");
    gate_lead(g, c, "http://10.0.0.1:8470");
    struct coord *in = gate_enter(g, &role, leader, sizeof(leader));
    assert_ptr_equal(in, c);
    assert_int_equal(role, GATE_LEADER);
    assert_string_equal(leader, "http://10.0.0.1:8470");
    gate_leave(g, in);
    gate_follow(g, NULL); /* nobody inside: closed at once */
    assert_int_equal(gate_role(g, leader, sizeof(leader)), GATE_CANDIDATE);
    assert_string_equal(gate_role_name(GATE_LEADER), "leader");
    assert_string_equal(gate_role_name(GATE_FOLLOWER), "follower");
    gate_free(g);
}

/* Two requests inside when the leadership is lost: both keep their coordinator, which
 * refuses writes and still reads; a new leadership's coordinator is another one; the old one
 * is freed only when the second request leaves. */
static void test_retire_with_requests_inside(void **state)
{
    struct gate *g = gate_new(NULL);
    struct coord *c1 = open_coord(*state, "one");
    gate_lead(g, c1, "http://a:1");
    struct coord *r1 = gate_enter(g, NULL, NULL, 0);
    struct coord *r2 = gate_enter(g, NULL, NULL, 0);
    assert_ptr_equal(r1, c1);
    assert_int_equal(try_submit(r1, NULL, 0), 0);
    gate_follow(g, "http://b:1");
    assert_null(gate_enter(g, NULL, NULL, 0));
    char msg[256] = "";
    assert_true(coord_retired(r1));
    assert_int_not_equal(try_submit(r1, msg, sizeof(msg)), 0); /* http.c: not_leader */
    assert_non_null(strstr(msg, "lost the leadership"));
    char *out = NULL;
    struct ddp_err e;
    assert_int_equal(coord_get_job(r2, 1, &out, &e), 0); /* reads from memory still answer */
    free(out);
    gate_leave(g, r1);
    struct coord *c2 = open_coord(*state, "two");
    gate_lead(g, c2, "http://a:1"); /* won again, a coordinator loaded afresh */
    struct coord *r3 = gate_enter(g, NULL, NULL, 0);
    assert_ptr_equal(r3, c2);
    assert_int_equal(try_submit(r3, NULL, 0), 0);
    assert_false(coord_retired(r3));
    assert_int_not_equal(try_submit(r2, NULL, 0), 0); /* the old one never writes again */
    gate_leave(g, r2);                                /* frees c1 */
    gate_leave(g, r3);
    gate_free(g); /* closes c2 */
}

static void set_epoch(const char *db, int64_t v)
{
    sqlite3 *h = NULL;
    char sql[128];
    snprintf(sql, sizeof(sql),
             "INSERT INTO ddp_epoch (id, epoch) VALUES (1, %lld) ON CONFLICT(id) DO UPDATE SET "
             "epoch = excluded.epoch",
             (long long)v);
    assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
    sqlite3_busy_timeout(h, 5000);
    assert_int_equal(sqlite3_exec(h, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(h);
}

/* The fence of coord_opts.fence_epoch, on a real SQLite file: writes go through while
 * ddp_epoch holds this coordinator's epoch; once another win raised it, the next write is
 * refused and the coordinator retires, reads still answer. */
static void test_fence_epoch(void **state)
{
    struct fx *f = *state;
    char *db = xasprintf("%s/fence.db", f->dir);
    struct coord *c = NULL;
    struct ddp_err e;
    assert_int_equal(coord_open(db, NULL, 1000, &c, &e), 0); /* migrates: ddp_epoch exists */
    coord_close(c);
    set_epoch(db, 7);
    struct coord_opts o = {.fence_epoch = 7};
    assert_int_equal(coord_open(db, &o, 1000, &c, &e), 0);
    assert_int_equal(try_submit(c, NULL, 0), 0);
    set_epoch(db, 8); /* another replica won */
    char msg[256] = "";
    assert_int_not_equal(try_submit(c, msg, sizeof(msg)), 0);
    assert_non_null(strstr(msg, "another replica led"));
    assert_true(coord_retired(c));
    char *out = NULL;
    assert_int_equal(coord_get_job(c, 1, &out, &e), 0);
    free(out);
    coord_close(c);
    free(db);
}

/* A leader's coordinator that retires itself (here the fence: another replica won) is let
 * in by no request after that, before the main thread replaces it: no coordinator, role
 * candidate, no leader named (a redirect to this same replica would loop). Its refused
 * write was refused before it began: not_leader for the HTTP layer. */
static void test_self_retired_not_entered(void **state)
{
    struct fx *f = *state;
    char *db = xasprintf("%s/self.db", f->dir);
    struct coord *c = NULL;
    struct ddp_err e;
    assert_int_equal(coord_open(db, NULL, 1000, &c, &e), 0);
    coord_close(c);
    set_epoch(db, 3);
    struct coord_opts o = {.fence_epoch = 3};
    assert_int_equal(coord_open(db, &o, 1000, &c, &e), 0);
    struct gate *g = gate_new(NULL);
    gate_lead(g, c, "http://a:1");
    enum gate_role role;
    char leader[64];
    struct coord *in = gate_enter(g, &role, leader, sizeof(leader));
    assert_ptr_equal(in, c);
    set_epoch(db, 4);
    (void)coord_take_refusal();
    assert_int_not_equal(try_submit(in, NULL, 0), 0);
    assert_true(coord_take_refusal());
    assert_true(coord_retired(c));
    assert_null(gate_enter(g, &role, leader, sizeof(leader)));
    assert_int_equal(role, GATE_CANDIDATE);
    assert_string_equal(leader, "");
    gate_leave(g, in);
    gate_follow(g, ""); /* the main thread's next tick */
    gate_free(g);
    free(db);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_single, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_retire_with_requests_inside, setup, teardown),
        cmocka_unit_test_setup_teardown(test_self_retired_not_entered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fence_epoch, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
