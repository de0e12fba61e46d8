/*
 * test_store.c - migrations on a fresh database and on re-open, and durability: what was
 * committed is read back after closing and re-opening; what was rolled back is not; a
 * transition's row leaves the heartbeat data's columns alone; deleting a job takes all of it
 * and keeps its id from being given out again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "common/buf.h"
#include "common/fsutil.h"
#include "common/xalloc.h"
#include "server/store.h"

struct fixture {
    char dir[64];
    char *db;
};

static int setup(void **state)
{
    struct fixture *f = xcalloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/ddp-test-store-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->db = xasprintf("%s/ddp.db", f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    fs_remove_tree(f->dir, NULL);
    free(f->db);
    free(f);
    return 0;
}

static struct store_job job_row(int64_t id, const char *state)
{
    struct store_job j = {
        .id = id,
        .name = "fashion",
        .spec = "{\"name\":\"fashion\"}",
        .state = state,
        .generation = 2,
        .restarts = 1,
        .world_size = 4,
        .master_addr = "127.0.0.1",
        .master_port = 29500,
        .nodes = "[{\"name\":\"a\",\"group_rank\":0}]",
        .last_metrics = NULL,
        .reason = "rank 3 exited 6",
        .created_at = 1000,
        .started_at = 2000,
        .finished_at = 0,
        .job_token = "tok",
        .log_seq = 5,
        .metric_seq = 1,
        .event_seq = 3,
        .end_kind = 0,
        .end_reason = "",
    };
    return j;
}

static void test_store_migrates_fresh_and_reopen(void **state)
{
    struct fixture *f = *state;
    struct store *st = NULL;
    struct ddp_err e;
    assert_int_equal(store_open(f->db, &st, &e), 0);
    int v = store_schema_version(st);
    assert_true(v >= 1);
    store_close(st);
    st = NULL;
    /* re-open: nothing applied twice (CREATE TABLE would fail), same version */
    assert_int_equal(store_open(f->db, &st, &e), 0);
    assert_int_equal(store_schema_version(st), v);
    store_close(st);
    /* The database holds job tokens: made 0600 whatever the umask, and one another tool left
     * wider is narrowed at open. */
    struct stat sb;
    assert_int_equal(stat(f->db, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(chmod(f->db, 0644), 0);
    assert_int_equal(store_open(f->db, &st, &e), 0);
    store_close(st);
    assert_int_equal(stat(f->db, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
}

struct seen {
    int jobs, nodes, marks;
    char state[32];
    int64_t finished_at, started_at, log_seq;
    int metrics_null;
};

static int on_job(void *ctx, const struct store_job *j)
{
    struct seen *s = ctx;
    s->jobs++;
    snprintf(s->state, sizeof(s->state), "%s", j->state);
    s->finished_at = j->finished_at;
    s->started_at = j->started_at;
    s->log_seq = j->log_seq;
    s->metrics_null = j->last_metrics == NULL;
    return 0;
}

static int on_node(void *ctx, const struct store_node *n)
{
    struct seen *s = ctx;
    s->nodes++;
    /* Every column comes back, the labels (added by migration 004) too. */
    if (strcmp(n->state, "READY") != 0 || !n->labels || strcmp(n->labels, "{\"zone\":\"a\"}"))
        return -1;
    return 0;
}

static int on_mark(void *ctx, int64_t job, int64_t gen, int64_t rank, int64_t last)
{
    struct seen *s = ctx;
    s->marks++;
    return job == 1 && gen == 2 && rank == -1 && last == 9 ? 0 : -1;
}

static void test_store_durable_across_reopen(void **state)
{
    struct fixture *f = *state;
    struct store *st = NULL;
    struct ddp_err e;
    assert_int_equal(store_open(f->db, &st, &e), 0);
    struct store_job j = job_row(1, "RUNNING");
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_put(st, &j, &e), 0);
    assert_int_equal(store_event_add(st, 1, 1, 1000, 0, "PENDING", "submitted", &e), 0);
    assert_int_equal(store_log_add(st, 1, 1, 2, 0, "hello", &e), 0);
    assert_int_equal(store_mark_put(st, 1, 2, -1, 9, &e), 0);
    /* marks of generations below 2 go, generation 2's stay */
    assert_int_equal(store_mark_put(st, 1, 1, 0, 4, &e), 0);
    assert_int_equal(store_mark_put(st, 1, 1, -1, 3, &e), 0);
    assert_int_equal(store_marks_drop(st, 1, 2, &e), 0);
    struct store_node n = {"a", "127.0.0.1",       2, 29500, 29999, "inc", "READY", 1000, 0, "", "",
                           "",  "{\"zone\":\"a\"}"};
    assert_int_equal(store_node_put(st, &n, &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    /* a rolled-back change leaves no trace */
    struct store_job j2 = job_row(2, "PENDING");
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_put(st, &j2, &e), 0);
    store_rollback(st);
    store_close(st);
    st = NULL;

    assert_int_equal(store_open(f->db, &st, &e), 0);
    struct seen s = {0};
    assert_int_equal(store_load_jobs(st, on_job, &s, &e), 0);
    assert_int_equal(store_load_nodes(st, on_node, &s, &e), 0);
    assert_int_equal(store_load_marks(st, on_mark, &s, &e), 0);
    assert_int_equal(s.jobs, 1);
    assert_string_equal(s.state, "RUNNING");
    assert_int_equal(s.started_at, 2000);
    assert_int_equal(s.finished_at, 0);
    assert_int_equal(s.log_seq, 5);
    assert_true(s.metrics_null);
    assert_int_equal(s.nodes, 1);
    assert_int_equal(s.marks, 1);
    json_t *ev = NULL, *logs = NULL;
    assert_int_equal(store_events_json(st, 1, 0, 100, &ev, &e), 0);
    assert_int_equal(json_array_size(ev), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 0), "reason")),
                        "submitted");
    assert_int_equal(store_logs_json(st, 1, 0, 0, 100, &logs, &e), 0);
    assert_int_equal(json_array_size(logs), 1);
    json_decref(ev);
    json_decref(logs);
    store_close(st);
}

/* The load pages through the jobs (32 a page): 96 rows, a multiple of the page, and 97
 * come back whole and in id order. */
static int on_job_in_order(void *ctx, const struct store_job *j)
{
    int64_t *last = ctx;
    if (j->id != *last + 1)
        return -1;
    *last = j->id;
    return 0;
}

static void test_store_load_pages(void **state)
{
    struct fixture *f = *state;
    struct store *st = NULL;
    struct ddp_err e;
    assert_int_equal(store_open(f->db, &st, &e), 0);
    for (int64_t id = 1; id <= 97; id++) {
        struct store_job j = job_row(id, "SUCCEEDED");
        assert_int_equal(store_begin(st, &e), 0);
        assert_int_equal(store_job_put(st, &j, &e), 0);
        assert_int_equal(store_commit(st, &e), 0);
        if (id == 96 || id == 97) {
            int64_t last = 0;
            assert_int_equal(store_load_jobs(st, on_job_in_order, &last, &e), 0);
            assert_int_equal(last, id);
        }
    }
    store_close(st);
}

static void test_store_trim_and_last_lines(void **state)
{
    struct fixture *f = *state;
    struct store *st = NULL;
    struct ddp_err e;
    assert_int_equal(store_open(f->db, &st, &e), 0);
    assert_int_equal(store_begin(st, &e), 0);
    struct store_job j = job_row(1, "RUNNING");
    assert_int_equal(store_job_put(st, &j, &e), 0); /* lines are kept for a job's row only */
    for (int i = 1; i <= 10; i++) {
        char t[16];
        snprintf(t, sizeof(t), "line %d", i);
        assert_int_equal(store_log_add(st, 1, i, 1, i % 2, t, &e), 0);
    }
    assert_int_equal(store_log_trim(st, 1, 4, &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    json_t *all = NULL, *r1 = NULL, *last = NULL;
    assert_int_equal(store_logs_json(st, 1, -1, 0, 100, &all, &e), 0);
    assert_int_equal(json_array_size(all), 6);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(all, 0), "seq")), 5);
    assert_int_equal(store_logs_json(st, 1, 1, 0, 100, &r1, &e), 0);
    assert_int_equal(json_array_size(r1), 3); /* 5, 7, 9 */
    assert_int_equal(store_last_lines(st, 1, 1, 0, 2, &last, &e), 0);
    assert_int_equal(json_array_size(last), 2);
    assert_string_equal(json_string_value(json_array_get(last, 0)), "line 8");
    assert_string_equal(json_string_value(json_array_get(last, 1)), "line 10");
    json_decref(all);
    json_decref(r1);
    json_decref(last);
    store_close(st);
}

/* A transition rewrites the jobs row but leaves its data columns (log_seq, metric_seq,
 * last_metrics) to store_job_data(): they move with the heartbeat data, in transactions of
 * their own, and a transition must neither move them back nor ahead of the stored lines. */
static void test_store_job_put_keeps_data_columns(void **state)
{
    struct fixture *f = *state;
    struct store *st = NULL;
    struct ddp_err e;
    assert_int_equal(store_open(f->db, &st, &e), 0);
    struct store_job j = job_row(1, "RUNNING");
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_put(st, &j, &e), 0);
    assert_int_equal(store_job_data(st, 1, 9, 2, "{\"loss\":1}", &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    j.state = "RESTARTING";
    j.log_seq = 12; /* ahead of the disk: a batch of lines not committed (yet) */
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_put(st, &j, &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    struct seen s = {0};
    assert_int_equal(store_load_jobs(st, on_job, &s, &e), 0);
    assert_int_equal(s.jobs, 1);
    assert_string_equal(s.state, "RESTARTING");
    assert_int_equal(s.log_seq, 9);
    assert_false(s.metrics_null);
    store_close(st);
}

static int count_rows(const char *db, const char *sql)
{
    sqlite3 *h = NULL;
    sqlite3_stmt *s = NULL;
    int n = -1;
    if (sqlite3_open(db, &h) == SQLITE_OK &&
        sqlite3_prepare_v2(h, sql, -1, &s, NULL) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW)
        n = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    sqlite3_close(h);
    return n;
}

/* Deleting a job takes its row, events, metrics, logs and marks, and only its; the highest
 * id ever given out survives it (and a re-open); data written for it afterwards (a heartbeat
 * batch that was built before) leaves nothing behind. */
static void test_store_job_delete(void **state)
{
    struct fixture *f = *state;
    struct store *st = NULL;
    struct ddp_err e;
    int64_t last = -1;
    assert_int_equal(store_open(f->db, &st, &e), 0);
    assert_int_equal(store_last_job_id(st, &last, &e), 0);
    assert_int_equal(last, 0);
    assert_int_equal(store_begin(st, &e), 0);
    for (int64_t id = 1; id <= 3; id++) {
        struct store_job j = job_row(id, "SUCCEEDED");
        assert_int_equal(store_job_put(st, &j, &e), 0);
        assert_int_equal(store_event_add(st, id, 1, 1000, 0, "PENDING", "submitted", &e), 0);
        assert_int_equal(store_metric_add(st, id, 1, 1000, 1, "{\"loss\":1}", &e), 0);
        assert_int_equal(store_log_add(st, id, 1, 1, 0, "one", &e), 0);
        assert_int_equal(store_log_add(st, id, 2, 1, 1, "two", &e), 0);
        assert_int_equal(store_mark_put(st, id, 1, 0, 2, &e), 0);
    }
    assert_int_equal(store_commit(st, &e), 0);
    /* the whole log as text, in pages, up to a seq */
    struct buf b = BUF_INIT;
    int n = 0;
    assert_int_equal(store_logs_text(st, 2, 0, 100, 1, &b, &last, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(last, 1);
    assert_int_equal(store_logs_text(st, 2, last, 100, 10, &b, &last, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_int_equal(last, 2);
    assert_string_equal(b.data, "one\ntwo\n");
    buf_reset(&b);
    assert_int_equal(store_logs_text(st, 2, 0, 1, 10, &b, &last, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_string_equal(b.data, "one\n");
    buf_release(&b);

    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_delete(st, 3, &e), 0);
    assert_int_equal(store_job_delete(st, 2, &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    /* a batch built before the deletion, committed after it */
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_log_add(st, 3, 3, 1, 0, "late", &e), 0);
    assert_int_equal(store_metric_add(st, 3, 2, 1000, 1, "{}", &e), 0);
    assert_int_equal(store_mark_put(st, 3, 1, 0, 3, &e), 0);
    assert_int_equal(store_job_data(st, 3, 3, 2, NULL, &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    store_close(st);
    st = NULL;
    static const char *const tables[] = {"jobs", "events", "metrics", "logs", "marks"};
    for (size_t i = 0; i < 5; i++) {
        char sql[128];
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s WHERE %s = 1", tables[i],
                 i ? "job_id" : "id");
        assert_int_equal(count_rows(f->db, sql), i == 3 ? 2 : 1);
        snprintf(sql, sizeof(sql), "SELECT COUNT(*) FROM %s WHERE %s > 1", tables[i],
                 i ? "job_id" : "id");
        assert_int_equal(count_rows(f->db, sql), 0);
    }
    assert_int_equal(store_open(f->db, &st, &e), 0);
    assert_int_equal(store_last_job_id(st, &last, &e), 0);
    assert_int_equal(last, 3);
    store_close(st);
}

static void test_store_open_fails_cleanly(void **state)
{
    struct store *st = (struct store *)0x1;
    struct ddp_err e = {0};
    assert_int_equal(store_open("/nonexistent-dir-ddp/x/ddp.db", &st, &e), DDP_EIO);
    assert_ptr_equal(st, (struct store *)0x1);
    assert_true(strlen(e.msg) > 0);
    store_close(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_store_migrates_fresh_and_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_durable_across_reopen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_load_pages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_trim_and_last_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_job_put_keeps_data_columns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_job_delete, setup, teardown),
        cmocka_unit_test(test_store_open_fails_cleanly),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
