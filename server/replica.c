/*
 * replica.c - the embedded dqlite node, the join, the leader poll and the ddp_replicas table
 * (server/replica.h).
 *
 * The ddp_replicas table (node_id, raft_address, api_url, updated_at) belongs to cluster mode
 * alone and so to this file, not to schema/ (the single-file store never has it): a replica
 * writes its own row each time it wins the leadership, before it serves, and followers read
 * the leader's row to redirect to it.
 *
 * Invariant: r->dq (the side connection: membership) is used under r->mu only; r->fence and
 * r->look (the leader's URL) by the main thread only, so an HTTP thread's slow membership call
 * never delays a poll.
 *
 * The ddp_epoch table (one row) counts the wins: each replica that wins raises it before it
 * serves and keeps the value; while it leads, every poll reads it back on its pinned
 * connection, and a different value means another replica led in between (the leadership
 * went away and came back between two polls): the coordinator, loaded before, is stale.
 */
#include "server/replica.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/stat.h>

#ifdef DDP_HAVE_DQLITE
#include <dqlite.h>
#endif

#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/dqclient.h"
#include "server/store.h"

#define REPLICA_DB        "ddp"
#define REPLICA_JOIN_MS   30000
#define REPLICA_PROBE_MS  500  /* the LEADER probe of the own node, each poll */
#define REPLICA_SIDE_MS   1000 /* each call of the side connection */
#define REPLICA_LOOKUP_MS 500  /* between two reads of the leader's URL */
#define REPLICA_REFRESH_MS \
    5000 /* a URL known is read again this often (the leader
                                      * may rewrite it after a follower read its old one) */
#define REPLICA_URL_MAX         512
#define REPLICA_RAFT_CONNECT_MS 2000  /* a raft connection to a peer (a libuv pool thread waits) */
#define REPLICA_RAFT_WARN_MS    10000 /* the least time between two warnings of a failed one */

static const char replica_epoch_sql[] =
    "CREATE TABLE IF NOT EXISTS ddp_epoch (id INTEGER PRIMARY KEY CHECK (id = 1), epoch INTEGER "
    "NOT NULL)";

static const char replica_table_sql[] =
    "CREATE TABLE IF NOT EXISTS ddp_replicas (node_id INTEGER PRIMARY KEY, raft_address TEXT NOT "
    "NULL, api_url TEXT NOT NULL, updated_at INTEGER NOT NULL)";

struct replica {
    uint64_t id;
    char *raft_address;
    char *advertise;
    char *data_dir;
    int latency_ms;
#ifdef DDP_HAVE_DQLITE
    dqlite_node *node;
#endif
    pthread_mutex_t mu;
    struct dqclient *dq; /* the side connection, opened on first use; under mu */
    char **addrs;        /* what the side connection searches: this node, then the joins */
    size_t naddrs;
    /* the leader as last polled (main thread only) */
    uint64_t leader_id;
    char leader_url[REPLICA_URL_MAX];
    int64_t lookup_at; /* monotonic ms of the last read of leader_url */
    /* The fence (main thread only): a pinned connection to this node kept from the last win,
     * and the epoch that win wrote to ddp_epoch. Another replica's win in between (even one
     * this replica's polls did not see) raised the epoch. */
    struct dqclient *fence;
    int64_t epoch;
    struct dqclient *look; /* the leader's URL lookups (main thread only; no r->mu wait) */
    int no_hand_over;      /* replica_stop() stops without a hand-over (main thread only) */
};

#ifdef DDP_HAVE_DQLITE
/* dqlite's connect function for the raft connections to peers (dqlite_node_set_connect_func;
 * it runs on a libuv pool thread, which then writes the handshake on the blocking socket).
 * dqlite's own (IPv4, blocking connect) leaves Nagle's algorithm on: a leader's AppendEntries
 * that follows another before its ACK waited for the follower's delayed ACK, and one submit in
 * seven took 40 ms more (submit p99 45 ms on loopback, 5 to 7 ms with TCP_NODELAY). This one
 * sets TCP_NODELAY and gives up after REPLICA_RAFT_CONNECT_MS (the kernel's SYN retries
 * would hold the pool thread for minutes on a cut link). The addresses are numeric IPv4, as
 * replica_check_address admits and dqlite 1.11 binds. Nonzero on failure, which dqlite counts
 * as no connection and retries; the failure is logged with its peer and cause, at most once
 * per REPLICA_RAFT_WARN_MS (dqlite retries a lost peer many times a second). */
static int replica_raft_connect(void *arg, const char *address, int *fd)
{
    static _Atomic int64_t last_warn_ms;
    struct ddp_err err = {0};
    int s = -1;
    (void)arg;
    if (dqclient_tcp_connect(address, REPLICA_RAFT_CONNECT_MS, &s, &err) != 0) {
        int64_t now = time_mono_ms(), last = atomic_load(&last_warn_ms);
        if ((last == 0 || now - last >= REPLICA_RAFT_WARN_MS) &&
            atomic_compare_exchange_strong(&last_warn_ms, &last, now))
            log_warn("raft connection to %s: %s (retried; this warning at most every %d s)",
                     address, err.msg, REPLICA_RAFT_WARN_MS / 1000);
        return 1;
    }
    int fl = fcntl(s, F_GETFL);
    if (fl < 0 || fcntl(s, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        close(s);
        return 1;
    }
    *fd = s;
    return 0;
}
#endif

/* The side connection, (re)connected when broken; under r->mu. */
/* *c (r->dq or r->look) connected to the leader, (re)connected when broken. */
static int replica_conn(struct replica *r, struct dqclient **c, struct ddp_err *err)
{
    if (*c && dqclient_connected(*c))
        return 0;
    if (*c)
        return dqclient_reconnect(*c, err);
    struct dqclient_opts o = {.timeout_ms = REPLICA_SIDE_MS, .leader_timeout_ms = REPLICA_SIDE_MS};
    return dqclient_open((const char *const *)r->addrs, r->naddrs, REPLICA_DB, &o, c, err);
}

/* The side connection; under r->mu. */
static int replica_side(struct replica *r, struct ddp_err *err)
{
    return replica_conn(r, &r->dq, err);
}

#ifdef DDP_HAVE_DQLITE
/* Makes this node a voter through the leader among the join addresses, unless it is one. */
static int replica_join(struct replica *r, const char *const *join, size_t njoin,
                        struct ddp_err *err)
{
    int64_t deadline = time_deadline_ms(REPLICA_JOIN_MS);
    struct ddp_err last;
    err_clear(&last);
    for (int attempt = 0; time_left_ms(deadline) > 0; attempt++) {
        if (attempt)
            time_sleep_ms(200);
        struct dqclient *c = NULL;
        struct dqclient_opts o = {.timeout_ms = 2000, .leader_timeout_ms = 3000};
        if (dqclient_open(join, njoin, REPLICA_DB, &o, &c, &last) != 0)
            continue;
        struct dqclient_server s[DQCLIENT_MAX_NODES];
        size_t n = 0;
        int rc = dqclient_cluster(c, s, DQCLIENT_MAX_NODES, &n, &last);
        int64_t role = -1;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            if (s[i].id != r->id)
                continue;
            if (strcmp(s[i].address, r->raft_address) != 0) {
                dqclient_close(c);
                return err_set(err, DDP_EINVAL,
                               "--node-id %llu is a member at %s, not at --raft-address %s: "
                               "remove it first (ddpctl cluster remove %llu)",
                               (unsigned long long)r->id, s[i].address, r->raft_address,
                               (unsigned long long)r->id);
            }
            role = (int64_t)s[i].role;
        }
        if (rc == 0 && role < 0)
            rc = dqclient_add(c, r->id, r->raft_address, &last);
        if (rc == 0 && role != DQWIRE_VOTER)
            rc = dqclient_assign(c, r->id, DQWIRE_VOTER, &last);
        dqclient_close(c);
        if (rc == 0) {
            log_info("cluster: node %llu is a voter (%s)", (unsigned long long)r->id,
                     role == DQWIRE_VOTER ? "it was one" : "joined now");
            return 0;
        }
    }
    return err_set(err, DDP_EUNAVAIL, "cluster: could not join through --join within %d s: %s",
                   REPLICA_JOIN_MS / 1000, last.msg);
}

/* 1 when the data folder holds Raft state (the node was a member before). */
static int replica_has_state(const char *dir)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof(p), "%s/metadata1", dir);
    if (stat(p, &st) == 0)
        return 1;
    snprintf(p, sizeof(p), "%s/metadata2", dir);
    return stat(p, &st) == 0;
}
#endif

int replica_check_address(const char *what, const char *addr, struct ddp_err *err)
{
    const char *colon = strrchr(addr, ':');
    char host[INET_ADDRSTRLEN + 1];
    struct in_addr a;
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 0;
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    if (!colon || hl == 0 || hl >= sizeof(host) || !end || *end || port < 1 || port > 65535)
        return err_set(err, DDP_EINVAL, "%s '%s': want IPv4:PORT, e.g. 10.0.0.1:8471", what, addr);
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (inet_pton(AF_INET, host, &a) != 1)
        return err_set(err, DDP_EINVAL,
                       "%s '%s': want a numeric IPv4 address (dqlite 1.11 takes no names and no "
                       "IPv6)",
                       what, addr);
    return 0;
}

int replica_start(const struct replica_opts *o, struct replica **out, struct ddp_err *err)
{
#ifndef DDP_HAVE_DQLITE
    (void)o;
    (void)out;
    return err_set(err, DDP_EINVAL,
                   "--cluster: this ddpd was built without libdqlite (apt-get install "
                   "libdqlite-dev libraft-dev, then build again)");
#else
    if (fs_mkdir_p(o->data_dir, 0700, err) != 0)
        return DDP_EIO;
    if (o->node_id != 1 && o->njoin == 0 && !replica_has_state(o->data_dir))
        return err_set(err, DDP_EINVAL,
                       "--node-id %llu: a new node other than 1 needs --join (the raft addresses "
                       "of members); only node 1 founds a cluster",
                       (unsigned long long)o->node_id);
    struct replica *r = xcalloc(1, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    r->id = o->node_id;
    r->raft_address = xstrdup(o->raft_address);
    r->advertise = xstrdup(o->advertise);
    r->data_dir = xstrdup(o->data_dir);
    r->latency_ms = o->latency_ms;
    r->addrs = xcalloc(o->njoin + 1, sizeof(*r->addrs));
    r->addrs[r->naddrs++] = xstrdup(o->raft_address);
    for (size_t i = 0; i < o->njoin; i++)
        if (strcmp(o->join[i], o->raft_address) != 0)
            r->addrs[r->naddrs++] = xstrdup(o->join[i]);
    int rc = dqlite_node_create(r->id, r->raft_address, r->data_dir, &r->node);
    if (rc == 0)
        rc = dqlite_node_set_bind_address(r->node, r->raft_address);
    if (rc == 0)
        rc = dqlite_node_set_connect_func(r->node, replica_raft_connect, NULL);
    if (rc == 0 && r->latency_ms > 0)
        rc = dqlite_node_set_network_latency_ms(r->node, (unsigned)r->latency_ms);
    if (rc == 0)
        rc = dqlite_node_start(r->node);
    if (rc != 0) {
        err_set(err, DDP_EUNAVAIL, "cluster: dqlite node %llu at %s (data %s): %s (code %d)",
                (unsigned long long)r->id, r->raft_address, r->data_dir,
                r->node ? dqlite_node_errmsg(r->node) : "cannot create", rc);
        if (r->node)
            dqlite_node_destroy(r->node);
        r->node = NULL;
        replica_stop(r);
        return DDP_EUNAVAIL;
    }
    log_info("cluster: dqlite node %llu listening on %s data=%s%s", (unsigned long long)r->id,
             r->raft_address, r->data_dir,
             r->latency_ms > 0 ? "" : " (dqlite's default timers: election timeout 3 s)");
    if (o->njoin > 0 && replica_join(r, o->join, o->njoin, err) != 0) {
        r->no_hand_over = 1; /* a node that could not join leads nothing */
        replica_stop(r);
        return DDP_EUNAVAIL;
    }
    *out = r;
    return 0;
#endif
}

int replica_recover(uint64_t node_id, const char *raft_address, const char *data_dir,
                    const uint64_t *ids, const char *const *addrs, size_t n, struct ddp_err *err)
{
#ifndef DDP_HAVE_DQLITE
    (void)node_id, (void)raft_address, (void)data_dir, (void)ids, (void)addrs, (void)n;
    return err_set(err, DDP_EINVAL, "--recover: this ddpd was built without libdqlite");
#else
    int self = 0;
    for (size_t i = 0; i < n; i++)
        self |= ids[i] == node_id && strcmp(addrs[i], raft_address) == 0;
    if (!self)
        return err_set(err, DDP_EINVAL, "--recover: the members must include this node (%llu=%s)",
                       (unsigned long long)node_id, raft_address);
    if (!replica_has_state(data_dir))
        return err_set(err, DDP_EINVAL, "--recover: %s holds no Raft state of a node", data_dir);
    dqlite_node *d = NULL;
    int rc = dqlite_node_create(node_id, raft_address, data_dir, &d);
    if (rc == 0) {
        dqlite_node_info_ext *info = xcalloc(n, sizeof(*info));
        for (size_t i = 0; i < n; i++) {
            info[i].size = sizeof(info[i]);
            info[i].id = ids[i];
            info[i].address = (uint64_t)(uintptr_t)addrs[i];
            info[i].dqlite_role = 0; /* voter: dqlite 1.11's header names no roles */
        }
        rc = dqlite_node_recover_ext(d, info, (int)n);
        free(info);
    }
    if (rc != 0)
        err_set(err, DDP_EIO, "--recover: dqlite: %s (code %d)",
                d ? dqlite_node_errmsg(d) : "cannot create the node", rc);
    if (d)
        dqlite_node_destroy(d);
    return rc ? DDP_EIO : 0;
#endif
}

/* The election timeout of this node's timers: dqlite's 3 s, or 15 network latencies (what
 * dqlite_node_set_network_latency_ms sets). */
static int64_t replica_election_ms(const struct replica *r)
{
    return r->latency_ms > 0 ? 15 * (int64_t)r->latency_ms : 3000;
}

/* 1 when the voters other than this node that answer a LEADER probe now are a majority of
 * all voters (as c, on this node while it leads, lists them): they can elect without it. */
static int replica_others_elect(struct replica *r, struct dqclient *c)
{
    struct dqclient_server s[DQCLIENT_MAX_NODES];
    size_t n = 0;
    struct ddp_err e;
    if (dqclient_cluster(c, s, DQCLIENT_MAX_NODES, &n, &e) != 0) {
        log_warn("cluster: could not list the voters: %s", e.msg);
        return 0;
    }
    int voters = 0, up = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i].role != DQWIRE_VOTER)
            continue;
        voters++;
        if (s[i].id == r->id)
            continue;
        uint64_t id = 0;
        char addr[DQCLIENT_ADDR_MAX];
        struct dqclient_opts o = {.timeout_ms = REPLICA_PROBE_MS};
        up += dqclient_leader_of(s[i].address, &o, &id, addr, sizeof(addr), &e) == 0;
    }
    log_info("cluster: %d of the other %d voters answer (a majority of %d is %d)", up, voters - 1,
             voters, voters / 2 + 1);
    return up >= voters / 2 + 1;
}

/* The voters c's node lists, or -1 when it cannot tell. */
static int replica_voters(struct dqclient *c)
{
    struct dqclient_server s[DQCLIENT_MAX_NODES];
    size_t n = 0;
    struct ddp_err e;
    if (dqclient_cluster(c, s, DQCLIENT_MAX_NODES, &n, &e) != 0)
        return -1;
    int voters = 0;
    for (size_t i = 0; i < n; i++)
        voters += s[i].role == DQWIRE_VOTER;
    return voters;
}

/* replica_hand_over; stopping: for replica_stop(), where the node goes whatever happens, so a
 * failed transfer needs no look at whether the others can elect (they will, an election
 * timeout later, or the cluster had no quorum without this node anyway), and a node that is
 * the only voter has no one to hand over to. */
static int hand_over(struct replica *r, int stopping)
{
    uint64_t id = 0;
    char addr[DQCLIENT_ADDR_MAX] = "";
    struct ddp_err e;
    struct dqclient_opts probe = {.timeout_ms = REPLICA_PROBE_MS};
    int rc = dqclient_leader_of(r->raft_address, &probe, &id, addr, sizeof(addr), &e);
    if (rc != 0) {
        log_warn("cluster: could not ask the own node who leads: %s", e.msg);
        return rc;
    }
    if (id != r->id)
        return 0;
    /* A connection of its own, pinned to this node: the leader the transfer must go through
     * (a side connection may still be on a node that led before). libraft answers once the
     * leadership moved or after an election timeout without a target caught up. */
    const char *self = r->raft_address;
    struct dqclient_opts o = {
        .timeout_ms = 2 * replica_election_ms(r) + 1000, .leader_timeout_ms = 1000, .pinned = 1};
    struct dqclient *c = NULL;
    rc = dqclient_open(&self, 1, REPLICA_DB, &o, &c, &e);
    if (rc == 0 && stopping && replica_voters(c) == 1) {
        log_info("cluster: this node, the only voter, stops: no one to hand the leadership to");
        dqclient_close(c);
        return 0;
    }
    if (rc == 0)
        rc = dqclient_transfer(c, 0, &e);
    if (rc == 0) {
        log_info("cluster: leadership handed over");
        dqclient_close(c);
        return 0;
    }
    if (stopping) {
        log_warn("cluster: the leadership was not handed over before this node stops (%s): the "
                 "other voters elect a leader after an election timeout (%lld ms)",
                 e.msg, (long long)replica_election_ms(r));
        dqclient_close(c);
        return rc;
    }
    log_warn("cluster: could not hand the leadership over: %s", e.msg);
    /* lost to an election meanwhile: nothing left to hand over */
    if (dqclient_leader_of(r->raft_address, &probe, &id, addr, sizeof(addr), &e) == 0 &&
        id != r->id) {
        log_info("cluster: this node no longer leads");
        dqclient_close(c);
        return 0;
    }
    int others = c && replica_others_elect(r, c);
    dqclient_close(c);
    if (!others) {
        log_warn("cluster: the other voters that answer are no majority without this node: it "
                 "stays up rather than take the quorum away, and leads again when it can "
                 "serve");
        return REPLICA_HAND_OVER_STAY;
    }
    return rc;
}

int replica_hand_over(struct replica *r)
{
    return hand_over(r, 0);
}

void replica_forgo_hand_over(struct replica *r)
{
    if (r)
        r->no_hand_over = 1;
}

void replica_stop(struct replica *r)
{
    if (!r)
        return;
#ifdef DDP_HAVE_DQLITE
    if (r->node) {
        if (!r->no_hand_over)
            (void)hand_over(r, 1); /* each outcome is logged; the node stops either way */
        pthread_mutex_lock(&r->mu);
        dqclient_close(r->dq);
        r->dq = NULL;
        pthread_mutex_unlock(&r->mu);
        if (dqlite_node_stop(r->node) != 0)
            log_warn("cluster: stopping the dqlite node: %s", dqlite_node_errmsg(r->node));
        dqlite_node_destroy(r->node);
    }
#endif
    dqclient_close(r->fence);
    dqclient_close(r->look);
    dqclient_close(r->dq);
    for (size_t i = 0; i < r->naddrs; i++)
        free(r->addrs[i]);
    free(r->addrs);
    free(r->raft_address);
    free(r->advertise);
    free(r->data_dir);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

/* Reads the API URL of node id from ddp_replicas into r->leader_url; under r->mu. */
static int replica_lookup(struct replica *r, uint64_t id, struct ddp_err *err)
{
    int rc = replica_conn(r, &r->look, err);
    struct dqclient_rows *rows = NULL;
    struct dqwire_value p = dqclient_int((int64_t)id);
    if (rc == 0)
        rc = dqclient_query(r->look, "SELECT api_url FROM ddp_replicas WHERE node_id = ?", &p, 1,
                            &rows, err);
    if (rc != 0)
        return rc;
    r->leader_url[0] = '\0';
    if (rows->nrows == 1 && rows->ncols == 1 && rows->vals[0].type == DQWIRE_TEXT)
        snprintf(r->leader_url, sizeof(r->leader_url), "%s", (const char *)rows->vals[0].p);
    dqclient_rows_free(rows);
    return 0;
}

int replica_poll(struct replica *r, int *self, char *leader, size_t size, struct ddp_err *err)
{
    uint64_t id = 0;
    char addr[DQCLIENT_ADDR_MAX] = "";
    struct dqclient_opts o = {.timeout_ms = REPLICA_PROBE_MS};
    *self = 0;
    if (size)
        leader[0] = '\0';
    int rc = dqclient_leader_of(r->raft_address, &o, &id, addr, sizeof(addr), err);
    if (rc != 0)
        return rc;
    if (id == r->id && strcmp(addr, r->raft_address) == 0) {
        *self = 1;
        r->leader_id = id;
        snprintf(r->leader_url, sizeof(r->leader_url), "%s", r->advertise);
        snprintf(leader, size, "%s", r->advertise);
        return 0;
    }
    if (id == 0) {
        r->leader_id = 0;
        r->leader_url[0] = '\0';
        return 0;
    }
    int64_t now = time_mono_ms();
    int other = id != r->leader_id;
    int64_t every = r->leader_url[0] ? REPLICA_REFRESH_MS : REPLICA_LOOKUP_MS;
    if (other || now - r->lookup_at >= every) {
        r->leader_id = id;
        if (other)
            r->leader_url[0] = '\0'; /* a refresh that fails keeps the URL it had */
        r->lookup_at = now;
        struct ddp_err e;
        rc = replica_lookup(r, id, &e);
        if (rc == DDP_EUNAVAIL && r->look) /* connected to the old leader: find the new one */
            rc = dqclient_reconnect(r->look, &e) == 0 ? replica_lookup(r, id, &e) : DDP_EUNAVAIL;
        /* Another node leads whatever the lookup gave: this one follows, naming no URL
         * until a later poll reads it. */
        if (rc != 0)
            log_debug("cluster: the URL of leader %llu: %s", (unsigned long long)id, e.msg);
    }
    snprintf(leader, size, "%s", r->leader_url);
    return 0;
}

/* Raises ddp_epoch on the fence connection and keeps the value in r->epoch. */
static int replica_raise_epoch(struct replica *r, struct ddp_err *err)
{
    struct dqclient_rows *rows = NULL;
    int rc = dqclient_exec(r->fence, replica_epoch_sql, NULL, 0, NULL, err);
    /* The raise and its read-back in one transaction: a tenure of another replica in
     * between would otherwise give this one that tenure's epoch. */
    int began = rc == 0 && (rc = dqclient_exec(r->fence, "BEGIN", NULL, 0, NULL, err)) == 0;
    if (rc == 0)
        rc = dqclient_exec(r->fence,
                           "INSERT INTO ddp_epoch (id, epoch) VALUES (1, 1) ON CONFLICT(id) DO "
                           "UPDATE SET epoch = epoch + 1",
                           NULL, 0, NULL, err);
    if (rc == 0)
        rc = dqclient_query(r->fence, "SELECT epoch FROM ddp_epoch WHERE id = 1", NULL, 0, &rows,
                            err);
    if (rc == 0)
        rc = dqclient_exec(r->fence, "COMMIT", NULL, 0, NULL, err);
    if (rc != 0) {
        struct ddp_err e;
        if (began && dqclient_connected(r->fence))
            (void)dqclient_exec(r->fence, "ROLLBACK", NULL, 0, NULL, &e);
        dqclient_rows_free(rows);
        return rc;
    }
    int ok = rows->nrows == 1 && rows->ncols == 1 && rows->vals[0].type == DQWIRE_INTEGER;
    r->epoch = ok ? rows->vals[0].i : 0;
    dqclient_rows_free(rows);
    return ok ? 0 : err_set(err, DDP_EPEER, "cluster: ddp_epoch: unexpected answer");
}

int64_t replica_epoch(const struct replica *r)
{
    return r->epoch;
}

int replica_still_ours(struct replica *r)
{
    if (!r->fence || r->epoch == 0)
        return 1;
    struct dqclient_rows *rows = NULL;
    struct ddp_err e;
    if (!dqclient_connected(r->fence) && dqclient_reconnect(r->fence, &e) != 0)
        return 1; /* cannot tell now; the poll and the writes will */
    if (dqclient_query(r->fence, "SELECT epoch FROM ddp_epoch WHERE id = 1", NULL, 0, &rows, &e) !=
        0)
        return 1;
    int same = !(rows->nrows == 1 && rows->ncols == 1 && rows->vals[0].type == DQWIRE_INTEGER &&
                 rows->vals[0].i != r->epoch);
    if (!same)
        log_warn("cluster: another replica led since this one won (epoch %lld, now %lld)",
                 (long long)r->epoch, (long long)rows->vals[0].i);
    dqclient_rows_free(rows);
    return same;
}

int replica_open_store(struct replica *r, struct store **out, struct ddp_err *err)
{
    const char *self[1] = {r->raft_address};
    struct dqclient_opts o = {.timeout_ms = 5000, .leader_timeout_ms = 1000, .pinned = 1};
    struct dqclient *c = NULL;
    dqclient_close(r->fence);
    r->fence = NULL;
    r->epoch = 0;
    int rc = dqclient_open(self, 1, REPLICA_DB, &o, &r->fence, err);
    if (rc == 0)
        rc = replica_raise_epoch(r, err);
    if (rc == 0)
        rc = dqclient_open(self, 1, REPLICA_DB, &o, &c, err);
    struct dqwire_value p[4] = {dqclient_int((int64_t)r->id), dqclient_text(r->raft_address),
                                dqclient_text(r->advertise), dqclient_int(time_wall_ms())};
    if (rc == 0)
        rc = dqclient_exec(c, replica_table_sql, NULL, 0, NULL, err);
    if (rc == 0)
        rc = dqclient_exec(c,
                           "INSERT INTO ddp_replicas (node_id, raft_address, api_url, updated_at) "
                           "VALUES (?, ?, ?, ?) ON CONFLICT(node_id) DO UPDATE SET raft_address "
                           "= excluded.raft_address, api_url = excluded.api_url, updated_at = "
                           "excluded.updated_at",
                           p, 4, NULL, err);
    dqclient_close(c);
    if (rc != 0)
        return rc;
    return store_open_dqlite(self, 1, REPLICA_DB, &o, out, err);
}

void replica_describe(struct replica *r, json_t *o)
{
    json_object_set_new(o, "node_id", json_integer((json_int_t)r->id));
    json_object_set_new(o, "raft_address", json_string(r->raft_address));
    json_object_set_new(o, "advertise", json_string(r->advertise));
}

int replica_members(struct replica *r, json_t **out, struct ddp_err *err)
{
    struct dqclient_server s[DQCLIENT_MAX_NODES];
    size_t n = 0;
    struct dqclient_rows *rows = NULL;
    pthread_mutex_lock(&r->mu);
    int rc = replica_side(r, err);
    if (rc == 0)
        rc = dqclient_cluster(r->dq, s, DQCLIENT_MAX_NODES, &n, err);
    if (rc == DDP_EUNAVAIL && r->dq) /* connected to an old leader: find the new one */
        rc = dqclient_reconnect(r->dq, err) == 0
                 ? dqclient_cluster(r->dq, s, DQCLIENT_MAX_NODES, &n, err)
                 : DDP_EUNAVAIL;
    if (rc == 0 && dqclient_query(r->dq, "SELECT node_id, api_url FROM ddp_replicas", NULL, 0,
                                  &rows, err) != 0)
        rows = NULL; /* no table yet: the members without their URLs */
    uint64_t leader = 0;
    char laddr[DQCLIENT_ADDR_MAX] = "";
    struct dqclient_opts o = {.timeout_ms = REPLICA_PROBE_MS};
    struct ddp_err e;
    if (rc == 0)
        (void)dqclient_leader_of(r->raft_address, &o, &leader, laddr, sizeof(laddr), &e);
    pthread_mutex_unlock(&r->mu);
    if (rc != 0)
        return rc;
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *url = NULL;
        for (size_t k = 0; rows && k < rows->nrows; k++)
            if (rows->vals[2 * k].type == DQWIRE_INTEGER &&
                (uint64_t)rows->vals[2 * k].i == s[i].id &&
                rows->vals[2 * k + 1].type == DQWIRE_TEXT)
                url = rows->vals[2 * k + 1].p;
        const char *role = s[i].role == DQWIRE_VOTER     ? "voter"
                           : s[i].role == DQWIRE_STANDBY ? "standby"
                                                         : "spare";
        json_array_append_new(a, json_pack("{s:I, s:s, s:s, s:o, s:b}", "id", (json_int_t)s[i].id,
                                           "raft_address", s[i].address, "role", role, "url",
                                           url ? json_string(url) : json_null(), "leader",
                                           s[i].id == leader));
    }
    dqclient_rows_free(rows);
    *out = json_pack("{s:o}", "members", a);
    return 0;
}

/* After a side-connection call failed with rc: 1 when it was a "not leader" answer (the
 * connection is up, on a node that led before: nothing was done) and the connection found
 * the new leader, so the caller may send the call once more. Holds r->mu. */
static int replica_side_moved(struct replica *r, int rc, struct ddp_err *err)
{
    /* "not leader" only: after "leadership lost" the change may have been applied */
    return rc == DDP_EUNAVAIL && r->dq && dqclient_connected(r->dq) &&
           dqclient_failure_code(r->dq) == DQWIRE_CODE_NOT_LEADER &&
           dqclient_reconnect(r->dq, err) == 0;
}

int replica_add(struct replica *r, uint64_t id, const char *address, struct ddp_err *err)
{
    pthread_mutex_lock(&r->mu);
    int rc = replica_side(r, err);
    if (rc == 0)
        rc = dqclient_add(r->dq, id, address, err);
    if (replica_side_moved(r, rc, err))
        rc = dqclient_add(r->dq, id, address, err);
    if (rc == 0)
        rc = dqclient_assign(r->dq, id, DQWIRE_VOTER, err);
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int replica_remove(struct replica *r, uint64_t id, struct ddp_err *err)
{
    if (id == r->id)
        return err_set(err, DDP_EINVAL,
                       "cannot remove node %llu: it is the replica answering; stop it and "
                       "remove it through another",
                       (unsigned long long)id);
    pthread_mutex_lock(&r->mu);
    int rc = replica_side(r, err);
    if (rc == 0)
        rc = dqclient_remove(r->dq, id, err);
    if (replica_side_moved(r, rc, err))
        rc = dqclient_remove(r->dq, id, err);
    if (rc == 0) {
        struct dqwire_value p = dqclient_int((int64_t)id);
        struct ddp_err e;
        if (dqclient_exec(r->dq, "DELETE FROM ddp_replicas WHERE node_id = ?", &p, 1, NULL, &e) !=
            0)
            log_warn("cluster: node %llu removed, its URL row stays: %s", (unsigned long long)id,
                     e.msg);
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}
