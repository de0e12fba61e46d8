/*
 * test_dqclient.c - server/dqclient.c against real dqlite nodes (libdqlite, built only where
 * pkg-config finds it). The test forks each node into its own process (dqlite_node_create,
 * set_bind_address, start on a loopback port, data in a temporary folder), so that a node can
 * be killed with SIGKILL like a crashed replica; every wait is bounded and every node is
 * stopped at the end of its test.
 *
 * One node: ddpd's schema migrations through EXEC_SQL, every parameter type there and back,
 * prepared statements, a result in several ROWS parts, BEGIN/ROLLBACK/COMMIT on the
 * connection, errors that name the SQL and dqlite's message, a silent peer that times out.
 * Three nodes: joined with ADD and ASSIGN through the client, the leader found from any
 * address, then the leader killed with SIGKILL and a write done on the new leader.
 * Figures (round trips per second, failover time) are printed as "figure:" lines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dqlite.h>

#include "common/timeutil.h"
#include "server/dqclient.h"
#include "server/embed.h"
#include "server/store.h"

#define NODE_START_MS 15000
#define NODE_STOP_MS  10000
#define LATENCY_MS    20 /* dqlite: heartbeat 30 ms, election timeout 300 ms */

struct node {
    pid_t pid;
    unsigned id;
    char addr[64];
    char dir[512];
};

static char tmpdir[256];

/* Every node process started and not yet reaped, so that a failed test still stops them. */
static pid_t started[8];
static size_t nstarted;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup_dir(void **state)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/ddp-dqclient-XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int teardown_dir(void **state)
{
    assert_int_equal(nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    return 0;
}

/* A loopback port free now (the kernel's pick). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* The node's process: start, say so on fd, run until SIGTERM, stop. */
static void node_main(const struct node *n, int fd, const sigset_t *term)
{
    dqlite_node *d = NULL;
    char ok = 'E';
    int sig = 0;
    /* A write to a dead peer must fail, not kill the node (libuv leaves SIGPIPE alone). */
    if (signal(SIGPIPE, SIG_IGN) == SIG_ERR)
        _exit(1);
    if (dqlite_node_create(n->id, n->addr, n->dir, &d) == 0 &&
        dqlite_node_set_bind_address(d, n->addr) == 0 &&
        dqlite_node_set_network_latency_ms(d, LATENCY_MS) == 0 && dqlite_node_start(d) == 0)
        ok = 'R';
    else
        fprintf(stderr, "dqlite node %u: %s\n", n->id, d ? dqlite_node_errmsg(d) : "create");
    if (write(fd, &ok, 1) != 1 || ok != 'R')
        _exit(1);
    if (sigwait(term, &sig) != 0)
        _exit(1);
    int rc = dqlite_node_stop(d);
    dqlite_node_destroy(d);
    _exit(rc == 0 ? 0 : 1);
}

static void node_start(struct node *n, unsigned id)
{
    n->id = id;
    snprintf(n->addr, sizeof n->addr, "127.0.0.1:%d", free_port());
    snprintf(n->dir, sizeof n->dir, "%s/node%u-%d", tmpdir, id, free_port());
    assert_int_equal(mkdir(n->dir, 0700), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    sigset_t term, old;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    assert_int_equal(sigprocmask(SIG_BLOCK, &term, &old), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        node_main(n, p[1], &term);
    }
    assert_int_equal(sigprocmask(SIG_SETMASK, &old, NULL), 0);
    close(p[1]);
    n->pid = pid;
    assert_true(nstarted < sizeof started / sizeof started[0]);
    started[nstarted++] = pid;
    struct pollfd pf = {.fd = p[0], .events = POLLIN};
    char c = 0;
    assert_int_equal(poll(&pf, 1, NODE_START_MS), 1);
    assert_int_equal(read(p[0], &c, 1), 1);
    close(p[0]);
    assert_int_equal(c, 'R');
}

/* Waits for the node's process to end (bounded); SIGKILL if it will not. */
static void node_reap(struct node *n)
{
    int64_t deadline = time_deadline_ms(NODE_STOP_MS);
    int st;
    while (waitpid(n->pid, &st, WNOHANG) == 0) {
        if (time_left_ms(deadline) <= 0) {
            kill(n->pid, SIGKILL);
            assert_int_equal(waitpid(n->pid, &st, 0), n->pid);
            break;
        }
        time_sleep_ms(10);
    }
    for (size_t i = 0; i < nstarted; i++) {
        if (started[i] == n->pid)
            started[i] = started[--nstarted];
    }
    n->pid = 0;
}

/* After each test: SIGKILL and reap what a failed test left running. */
static int stop_all(void **state)
{
    for (size_t i = 0; i < nstarted; i++) {
        int st;
        kill(started[i], SIGKILL);
        waitpid(started[i], &st, 0);
    }
    nstarted = 0;
    return 0;
}

static void node_stop(struct node *n)
{
    if (n->pid <= 0)
        return;
    assert_int_equal(kill(n->pid, SIGTERM), 0);
    node_reap(n);
}

static void node_kill(struct node *n)
{
    assert_int_equal(kill(n->pid, SIGKILL), 0);
    node_reap(n);
}

static void exec_ok(struct dqclient *c, const char *sql)
{
    struct ddp_err e;
    int rc = dqclient_exec(c, sql, NULL, 0, NULL, &e);
    if (rc != 0)
        fail_msg("%s: %s", sql, e.msg);
}

static int64_t query_int(struct dqclient *c, const char *sql)
{
    struct dqclient_rows *r = NULL;
    struct ddp_err e;
    int rc = dqclient_query(c, sql, NULL, 0, &r, &e);
    if (rc != 0)
        fail_msg("%s: %s", sql, e.msg);
    assert_int_equal(r->nrows, 1);
    assert_int_equal(r->vals[0].type, DQWIRE_INTEGER);
    int64_t v = r->vals[0].i;
    dqclient_rows_free(r);
    return v;
}

/* ddpd's migrations, as store.c applies them: each with its user_version in one transaction. */
static int apply_migrations(struct dqclient *c)
{
    int last = 0;
    for (size_t i = 0; i < embed_nfiles; i++) {
        const char *name = embed_files[i].name;
        int num = 0;
        if (sscanf(name, "schema/%3d_", &num) != 1 || strstr(name, ".sql") == NULL)
            continue;
        char pragma[64];
        snprintf(pragma, sizeof pragma, "PRAGMA user_version = %d", num);
        exec_ok(c, "BEGIN");
        exec_ok(c, (const char *)embed_files[i].data);
        exec_ok(c, pragma);
        exec_ok(c, "COMMIT");
        last = num;
    }
    return last;
}

static double rate(int n, int64_t ns)
{
    return n / ((double)ns / 1e9);
}

/* n small EXECs in a row; returns the rate per second. */
static double exec_rate(struct dqclient *c, int first, int n)
{
    struct ddp_err e;
    int64_t t0 = time_mono_ns();
    for (int i = first; i < first + n; i++) {
        struct dqwire_value v[2] = {dqclient_int(i), dqclient_text("x")};
        int rc = dqclient_exec(c, "INSERT INTO bench (k, v) VALUES (?, ?)", v, 2, NULL, &e);
        if (rc != 0)
            fail_msg("bench insert %d: %s", i, e.msg);
    }
    return rate(n, time_mono_ns() - t0);
}

static void test_dqclient_one_node(void **state)
{
    struct node n = {0};
    node_start(&n, 1);
    const char *addrs[] = {n.addr};
    struct dqclient_opts o = {.timeout_ms = 5000, .leader_timeout_ms = 10000};
    struct dqclient *c = NULL;
    struct ddp_err e;
    int rc = dqclient_open(addrs, 1, "ddp", &o, &c, &e);
    if (rc != 0)
        fail_msg("open: %s", e.msg);
    assert_string_equal(dqclient_node(c), n.addr);

    /* ddpd's schema, and the tables it makes. */
    int version = apply_migrations(c);
    assert_true(version >= 4);
    assert_int_equal(query_int(c, "PRAGMA user_version"), version);
    assert_int_equal(
        query_int(c, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                     "('jobs', 'nodes', 'users', 'events')"),
        4);

    /* Every parameter type, there and back. */
    exec_ok(c, "CREATE TABLE vals (i INTEGER, f REAL, t TEXT, b BLOB, n TEXT)");
    const uint8_t blob[5] = {0, 1, 2, 0xff, 0};
    struct dqwire_value in[5] = {dqclient_int(-9007199254740993LL), dqclient_float(-0.125),
                                 dqclient_text("héllo, 8 bytes+"), dqclient_blob(blob, 5),
                                 dqclient_null()};
    struct dqclient_result res;
    rc = dqclient_exec(c, "INSERT INTO vals VALUES (?, ?, ?, ?, ?)", in, 5, &res, &e);
    if (rc != 0)
        fail_msg("insert: %s", e.msg);
    assert_int_equal(res.rows_affected, 1);
    assert_int_equal(res.last_insert_id, 1);
    struct dqclient_rows *r = NULL;
    rc = dqclient_query(c, "SELECT i, f, t, b, n FROM vals WHERE i = ?", in, 1, &r, &e);
    if (rc != 0)
        fail_msg("select: %s", e.msg);
    assert_int_equal(r->ncols, 5);
    assert_string_equal(r->cols[3], "b");
    assert_int_equal(r->nrows, 1);
    assert_true(r->vals[0].i == -9007199254740993LL);
    assert_true(r->vals[1].f == -0.125);
    assert_string_equal(r->vals[2].p, "héllo, 8 bytes+");
    assert_int_equal(r->vals[3].type, DQWIRE_BLOB);
    assert_int_equal(r->vals[3].len, 5);
    assert_memory_equal(r->vals[3].p, blob, 5);
    assert_int_equal(r->vals[4].type, DQWIRE_NULL);
    dqclient_rows_free(r);

    /* Prepared statements, and a result long enough to come in several ROWS parts. */
    exec_ok(c, "CREATE TABLE bench (k INTEGER PRIMARY KEY, v TEXT)");
    struct dqclient_stmt *ins = NULL, *sel = NULL;
    assert_int_equal(dqclient_prepare(c, "INSERT INTO many VALUES (?, ?)", &ins, &e),
                     DDP_EIO); /* no such table yet */
    assert_non_null(strstr(e.msg, "no such table: many"));
    assert_non_null(strstr(e.msg, "\"INSERT INTO many VALUES (?, ?)\""));
    exec_ok(c, "CREATE TABLE many (k INTEGER PRIMARY KEY, v TEXT)");
    assert_int_equal(dqclient_prepare(c, "INSERT INTO many VALUES (?, ?)", &ins, &e), 0);
    assert_int_equal(dqclient_stmt_nparams(ins), 2);
    exec_ok(c, "BEGIN");
    int64_t tx0 = time_mono_ns();
    for (int i = 0; i < 3000; i++) {
        char v[32];
        snprintf(v, sizeof v, "value %d", i);
        struct dqwire_value p[2] = {dqclient_int(i), dqclient_text(v)};
        rc = dqclient_stmt_exec(ins, p, 2, &res, &e);
        if (rc != 0)
            fail_msg("many %d: %s", i, e.msg);
    }
    print_message("figure: dqlite 1 node: %.0f prepared EXEC/s inside one transaction\n",
                  rate(3000, time_mono_ns() - tx0));
    exec_ok(c, "COMMIT");
    assert_int_equal(dqclient_prepare(c, "SELECT k, v FROM many WHERE k >= ? ORDER BY k", &sel, &e),
                     0);
    struct dqwire_value from = dqclient_int(0);
    assert_int_equal(dqclient_stmt_query(sel, &from, 1, &r, &e), 0);
    assert_int_equal(r->nrows, 3000);
    assert_true(r->nbodies > 1); /* the node cut it into parts */
    assert_true(r->vals[2 * 2999].i == 2999);
    assert_string_equal(r->vals[2 * 2999 + 1].p, "value 2999");
    dqclient_rows_free(r);
    dqclient_stmt_free(ins);
    dqclient_stmt_free(sel);
    dqclient_stmt_free(NULL);

    /* Transactions on the connection. */
    exec_ok(c, "BEGIN");
    exec_ok(c, "INSERT INTO bench (k, v) VALUES (-1, 'rolled back')");
    exec_ok(c, "ROLLBACK");
    assert_int_equal(query_int(c, "SELECT count(*) FROM bench WHERE k = -1"), 0);
    exec_ok(c, "BEGIN");
    exec_ok(c, "INSERT INTO bench (k, v) VALUES (-2, 'committed')");
    exec_ok(c, "COMMIT");
    assert_int_equal(query_int(c, "SELECT count(*) FROM bench WHERE k = -2"), 1);

    /* Errors name the SQL and carry dqlite's message and code; the connection stays. */
    struct dqwire_value dup[2] = {dqclient_int(-2), dqclient_text("again")};
    rc = dqclient_exec(c, "INSERT INTO bench (k, v) VALUES (?, ?)", dup, 2, NULL, &e);
    assert_int_equal(rc, DDP_EIO);
    assert_true(dqclient_failure_code(c) == 1555); /* SQLITE_CONSTRAINT_PRIMARYKEY */
    assert_non_null(strstr(e.msg, "UNIQUE constraint failed: bench.k"));
    assert_non_null(strstr(e.msg, "INSERT INTO bench"));
    rc = dqclient_exec(c, "SELEC nothing", NULL, 0, NULL, &e);
    assert_int_equal(rc, DDP_EIO);
    assert_non_null(strstr(e.msg, "syntax error"));
    assert_true(dqclient_connected(c));
    assert_int_equal(query_int(c, "SELECT 7"), 7);
    struct dqwire_value many[DQWIRE_MAX_PARAMS + 1];
    for (int i = 0; i <= DQWIRE_MAX_PARAMS; i++)
        many[i] = dqclient_null();
    assert_int_equal(dqclient_exec(c, "SELECT 1", many, DQWIRE_MAX_PARAMS + 1, NULL, &e),
                     DDP_EINVAL);
    assert_int_equal(query_int(c, "SELECT 8"), 8);

    double one = exec_rate(c, 0, 1000);
    print_message("figure: dqlite 1 node: %.0f EXEC/s (INSERT, 2 parameters, autocommit)\n", one);
    int64_t t0 = time_mono_ns();
    for (int i = 0; i < 1000; i++)
        assert_int_equal(query_int(c, "SELECT 1"), 1);
    print_message("figure: dqlite 1 node: %.0f QUERY/s (SELECT 1)\n",
                  rate(1000, time_mono_ns() - t0));

    /* The node goes away: the next call says so and the client is BROKEN until reconnect. */
    node_stop(&n);
    rc = dqclient_exec(c, "SELECT 1", NULL, 0, NULL, &e);
    assert_true(rc == DDP_EPEER || rc == DDP_EUNAVAIL);
    assert_false(dqclient_connected(c));
    assert_int_equal(dqclient_exec(c, "SELECT 1", NULL, 0, NULL, &e), DDP_EUNAVAIL);
    assert_non_null(strstr(e.msg, "not connected"));
    dqclient_close(c);
}

static void test_dqclient_timeouts(void **state)
{
    /* Nobody listens: refused at once. */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", free_port());
    const char *addrs[] = {addr};
    struct dqclient_opts o = {.timeout_ms = 300, .leader_timeout_ms = 500};
    struct dqclient *c = NULL;
    struct ddp_err e;
    int64_t t0 = time_mono_ms();
    assert_int_equal(dqclient_open(addrs, 1, "ddp", &o, &c, &e), DDP_EUNAVAIL);
    assert_non_null(strstr(e.msg, "no dqlite leader within 500 ms"));
    assert_true(time_mono_ms() - t0 < 3000);
    assert_null(c);

    /* A peer that accepts and never answers: each read gives up after timeout_ms, the search
     * after leader_timeout_ms. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 8), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(a.sin_port));
    t0 = time_mono_ms();
    assert_int_equal(dqclient_open(addrs, 1, "ddp", &o, &c, &e), DDP_EUNAVAIL);
    int64_t took = time_mono_ms() - t0;
    assert_non_null(strstr(e.msg, "timed out"));
    assert_true(took >= 250 && took < 3000);
    close(fd);

    /* Addresses that are not HOST:PORT. */
    const char *bad[] = {"localhost"};
    assert_int_equal(dqclient_open(bad, 1, "ddp", &o, &c, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "want HOST:PORT"));
    assert_int_equal(dqclient_open(addrs, 0, "ddp", &o, &c, &e), DDP_EINVAL);
}

static int voters(struct dqclient *c)
{
    struct dqclient_server s[8];
    size_t n = 0;
    struct ddp_err e;
    int rc = dqclient_cluster(c, s, 8, &n, &e);
    if (rc != 0)
        fail_msg("cluster: %s", e.msg);
    int v = 0;
    for (size_t i = 0; i < n; i++)
        v += s[i].role == DQWIRE_VOTER;
    return v;
}

static void test_dqclient_three_nodes(void **state)
{
    struct node n[3] = {{0}};
    for (unsigned i = 0; i < 3; i++)
        node_start(&n[i], i + 1);
    struct dqclient_opts o = {.timeout_ms = 2000, .leader_timeout_ms = 15000};
    struct dqclient *c = NULL;
    struct ddp_err e;
    const char *first[] = {n[0].addr};
    int rc = dqclient_open(first, 1, "ddp", &o, &c, &e);
    if (rc != 0)
        fail_msg("open: %s", e.msg);
    /* Node 1 bootstrapped alone; the others join through the leader as voters. */
    for (unsigned i = 1; i < 3; i++) {
        rc = dqclient_add(c, n[i].id, n[i].addr, &e);
        if (rc != 0)
            fail_msg("add %u: %s", n[i].id, e.msg);
        rc = dqclient_assign(c, n[i].id, DQWIRE_VOTER, &e);
        if (rc != 0)
            fail_msg("assign %u: %s", n[i].id, e.msg);
    }
    assert_int_equal(voters(c), 3);
    assert_int_equal(dqclient_add(c, 2, n[1].addr, &e), DDP_EIO); /* already a member */
    assert_non_null(strstr(e.msg, "add"));
    dqclient_close(c);

    /* From a follower's address, the client follows LEADER to node 1. */
    const char *all[] = {n[2].addr, n[1].addr, n[0].addr};
    rc = dqclient_open(all, 3, "ddp", &o, &c, &e);
    if (rc != 0)
        fail_msg("open all: %s", e.msg);
    assert_string_equal(dqclient_node(c), n[0].addr);
    exec_ok(c, "CREATE TABLE bench (k INTEGER PRIMARY KEY, v TEXT)");
    double three = exec_rate(c, 0, 300);
    print_message("figure: dqlite 3 nodes: %.0f EXEC/s (INSERT, 2 parameters, autocommit)\n",
                  three);
    /* A client told only node 1's address learns the others from CLUSTER. */
    struct dqclient *one = NULL;
    rc = dqclient_open(first, 1, "ddp", &o, &one, &e);
    if (rc != 0)
        fail_msg("open one: %s", e.msg);
    assert_int_equal(dqclient_naddrs(one), 3);
    exec_ok(c, "BEGIN");
    exec_ok(c, "INSERT INTO bench (k, v) VALUES (-1, 'in the open transaction')");

    /* kill -9 the leader mid-transaction: the transaction is lost, a write on the new leader
     * succeeds after dqclient_reconnect(). */
    int64_t t0 = time_mono_ns();
    node_kill(&n[0]);
    rc = dqclient_exec(c, "INSERT INTO bench (k, v) VALUES (-2, 'x')", NULL, 0, NULL, &e);
    assert_true(rc == DDP_EPEER || rc == DDP_ETIMEOUT || rc == DDP_EUNAVAIL);
    assert_false(dqclient_connected(c));
    rc = dqclient_reconnect(c, &e);
    if (rc != 0)
        fail_msg("reconnect: %s", e.msg);
    int64_t t_leader = time_mono_ns();
    assert_string_not_equal(dqclient_node(c), n[0].addr);
    struct dqwire_value v[2] = {dqclient_int(-3), dqclient_text("after failover")};
    rc = dqclient_exec(c, "INSERT INTO bench (k, v) VALUES (?, ?)", v, 2, NULL, &e);
    if (rc != 0)
        fail_msg("write after failover: %s", e.msg);
    int64_t t_write = time_mono_ns();
    print_message("figure: failover after kill -9 of the leader: new leader %s found in %.0f ms,"
                  " first write done at %.0f ms\n",
                  dqclient_node(c), (double)(t_leader - t0) / 1e6, (double)(t_write - t0) / 1e6);
    assert_int_equal(query_int(c, "SELECT count(*) FROM bench WHERE k >= 0 AND k < 1000"), 300);
    assert_int_equal(query_int(c, "SELECT count(*) FROM bench WHERE k = -1"), 0);
    assert_int_equal(query_int(c, "SELECT count(*) FROM bench WHERE k = -3"), 1);
    rc = dqclient_reconnect(one, &e);
    if (rc != 0)
        fail_msg("reconnect of the one-address client: %s", e.msg);
    assert_string_equal(dqclient_node(one), dqclient_node(c));
    assert_int_equal(query_int(one, "SELECT count(*) FROM bench WHERE k = -3"), 1);
    dqclient_close(one);
    double two = exec_rate(c, 1000, 100);
    print_message("figure: dqlite 2 of 3 nodes: %.0f EXEC/s\n", two);
    dqclient_close(c);
    for (unsigned i = 0; i < 3; i++)
        node_stop(&n[i]);
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
        .reason = "rank 3 exited 6",
        .created_at = 1000,
        .started_at = 2000,
        .job_token = "tok",
        .log_seq = 5,
        .owner = "admin",
    };
    return j;
}

struct seen {
    int jobs;
    int64_t last_id, started_at, finished_at, log_seq;
    char state[32];
};

static int on_job(void *ctx, const struct store_job *j)
{
    struct seen *s = ctx;
    s->jobs++;
    s->last_id = j->id;
    s->started_at = j->started_at;
    s->finished_at = j->finished_at;
    s->log_seq = j->log_seq;
    snprintf(s->state, sizeof s->state, "%s", j->state);
    return 0;
}

/* ddpd's store on dqlite (store_open_dqlite): the same calls as on the SQLite file, and after
 * a kill -9 of the leader the next transaction runs on the new one. */
static void test_dqclient_store(void **state)
{
    struct node n[3] = {{0}};
    for (unsigned i = 0; i < 3; i++)
        node_start(&n[i], i + 1);
    struct dqclient_opts o = {.timeout_ms = 2000, .leader_timeout_ms = 15000};
    struct dqclient *c = NULL;
    struct ddp_err e;
    const char *first[] = {n[0].addr};
    int rc = dqclient_open(first, 1, "admin", &o, &c, &e);
    if (rc != 0)
        fail_msg("open: %s", e.msg);
    for (unsigned i = 1; i < 3; i++) {
        assert_int_equal(dqclient_add(c, n[i].id, n[i].addr, &e), 0);
        assert_int_equal(dqclient_assign(c, n[i].id, DQWIRE_VOTER, &e), 0);
    }
    dqclient_close(c);

    const char *all[] = {n[0].addr, n[1].addr, n[2].addr};
    struct store *st = NULL;
    rc = store_open_dqlite(all, 3, "ddp", NULL, &st, &e);
    if (rc != 0)
        fail_msg("store_open_dqlite: %s", e.msg);
    assert_true(store_schema_version(st) >= 4);
    struct store_job j = job_row(1, "RUNNING");
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_put(st, &j, &e), 0);
    assert_int_equal(store_event_add(st, 1, 1, 1000, 0, "PENDING", "submitted", &e), 0);
    for (int i = 1; i <= 3; i++) {
        char t[16];
        snprintf(t, sizeof t, "line %d", i);
        assert_int_equal(store_log_add(st, 1, i, 2, 0, t, &e), 0);
    }
    assert_int_equal(store_commit(st, &e), 0);
    struct store_job j2 = job_row(2, "PENDING");
    assert_int_equal(store_begin(st, &e), 0);
    assert_int_equal(store_job_put(st, &j2, &e), 0);
    store_rollback(st);

    struct seen s = {0};
    assert_int_equal(store_load_jobs(st, on_job, &s, &e), 0);
    assert_int_equal(s.jobs, 1);
    assert_string_equal(s.state, "RUNNING");
    assert_int_equal(s.started_at, 2000);
    assert_int_equal(s.finished_at, 0); /* NULL */
    assert_int_equal(s.log_seq, 5);
    json_t *ev = NULL, *logs = NULL, *tail = NULL;
    assert_int_equal(store_events_json(st, 1, 0, 100, &ev, &e), 0);
    assert_int_equal(json_array_size(ev), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ev, 0), "reason")),
                        "submitted");
    assert_int_equal(store_logs_json(st, 1, 0, 0, 100, &logs, &e), 0);
    assert_int_equal(json_array_size(logs), 3);
    assert_int_equal(store_last_lines(st, 1, 2, 0, 2, &tail, &e), 0);
    assert_string_equal(json_string_value(json_array_get(tail, 1)), "line 3");
    json_decref(ev);
    json_decref(logs);
    json_decref(tail);
    int64_t last = 0;
    assert_int_equal(store_last_job_id(st, &last, &e), 0);
    assert_int_equal(last, 1);

    /* The leader dies inside a transaction: the transaction's statements fail, the rollback
     * ends it, and the next one finds the new leader. */
    assert_int_equal(store_begin(st, &e), 0);
    node_kill(&n[0]);
    struct store_job j3 = job_row(3, "PENDING");
    rc = store_job_put(st, &j3, &e);
    assert_true(rc == DDP_EPEER || rc == DDP_ETIMEOUT || rc == DDP_EUNAVAIL);
    assert_int_equal(store_event_add(st, 3, 1, 1000, 0, "PENDING", "x", &e), DDP_EUNAVAIL);
    assert_non_null(strstr(e.msg, "inside a transaction"));
    store_rollback(st);
    int64_t t0 = time_mono_ns();
    rc = store_begin(st, &e);
    if (rc != 0)
        fail_msg("begin after failover: %s", e.msg);
    assert_int_equal(store_job_put(st, &j3, &e), 0);
    assert_int_equal(store_commit(st, &e), 0);
    print_message("figure: store on dqlite: first transaction after kill -9 of the leader "
                  "committed in %.0f ms\n",
                  (double)(time_mono_ns() - t0) / 1e6);
    memset(&s, 0, sizeof s);
    assert_int_equal(store_load_jobs(st, on_job, &s, &e), 0);
    assert_int_equal(s.jobs, 2);
    assert_int_equal(s.last_id, 3);

    /* More than a query's 64 MiB result of jobs (70 specs of 1 MiB, what a submit may send):
     * the load pages, so a new leader can still load them all. */
    char *big = malloc((1u << 20) + 1);
    assert_non_null(big);
    memset(big, 'x', 1u << 20);
    big[1u << 20] = '\0';
    for (int id = 4; id < 74; id++) {
        struct store_job jb = job_row(id, "SUCCEEDED");
        jb.spec = big;
        /* 2 of 3 voters (one was killed), 1 MiB entries: a slow machine (ASan) may see an
         * election meanwhile; as ddpd does (a new coordinator on the new leader), the store
         * is opened again and the transaction begun again (the put is an upsert), at most
         * 10 times */
        int tries = 0;
        for (;;) {
            rc = st ? store_begin(st, &e) : DDP_EUNAVAIL;
            if (rc == 0)
                rc = store_job_put(st, &jb, &e);
            if (rc == 0)
                rc = store_commit(st, &e);
            if (rc == 0 || (rc != DDP_EUNAVAIL && rc != DDP_ETIMEOUT) || ++tries >= 10)
                break;
            if (st)
                store_rollback(st);
            store_close(st);
            st = NULL;
            time_sleep_ms(200);
            if (store_open_dqlite(all, 3, "ddp", NULL, &st, &e) != 0)
                st = NULL;
        }
        if (rc != 0) {
            free(big);
            fail_msg("job %d of 1 MiB: %s", id, e.msg);
        }
    }
    free(big);
    memset(&s, 0, sizeof s);
    t0 = time_mono_ns();
    rc = store_load_jobs(st, on_job, &s, &e);
    if (rc != 0)
        fail_msg("load of 72 jobs, 70 MiB: %s", e.msg);
    assert_int_equal(s.jobs, 72);
    assert_int_equal(s.last_id, 73);
    print_message("figure: store on dqlite: 72 jobs (70 MiB of specs) loaded in %.0f ms\n",
                  (double)(time_mono_ns() - t0) / 1e6);
    store_close(st);
    for (unsigned i = 0; i < 3; i++)
        node_stop(&n[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_dqclient_timeouts, stop_all),
        cmocka_unit_test_teardown(test_dqclient_one_node, stop_all),
        cmocka_unit_test_teardown(test_dqclient_three_nodes, stop_all),
        cmocka_unit_test_teardown(test_dqclient_store, stop_all),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
