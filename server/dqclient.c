/*
 * dqclient.c - the dqlite client's connection: sockets, deadlines, the leader search and the
 * cluster's membership, around the pure encoders and decoders of dqwire.c. The contract and
 * the state diagram are in dqclient.h.
 *
 * Its statements (SQL, parameters, rows) are in dqclient_sql.c; what the two share is in
 * dqclient_internal.h. The deadline socket helpers (dqclient_tcp_connect, read_all, write_all) repeat
 * what libddp/net.c does for the rendezvous store; the fix is net.c moved to common/ so that
 * server/ may call it (layering.sh keeps server/ off libddp's internals). Not done yet: the
 * error codes differ (a refused connection is DDP_EUNAVAIL here), and test_dqclient asserts
 * them.
 *
 * Invariants:
 *   1. fd >= 0 exactly when CONNECTED; then node holds the address connected to, db_id the
 *      open database, and the socket holds no unread bytes between calls.
 *   2. Every wait on the socket is one poll() bounded by opts.timeout_ms from the start of
 *      that read or write; the leader search is bounded by opts.leader_timeout_ms in all.
 *   3. Any error that could leave bytes of an answer unread (I/O, timeout, malformed answer)
 *      closes the socket (BROKEN); a FAILURE answer, fully read, does not.
 *   4. gen grows on every new connection; a statement is valid only while its gen is the
 *      client's (statement ids are per connection on the node).
 *
 * Leader search (find_leader): for each address in turn, connect, handshake, ask LEADER. An
 * answer naming this node ends the search; naming another node, follow it once and ask again
 * there; an empty answer (no leader known yet, an election under way) or a dead node moves to
 * the next address; after a round without a leader, wait a little and start again, until the
 * deadline.
 */
#include "server/dqclient.h"
#include "server/dqclient_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

#define DEFAULT_TIMEOUT_MS        5000
#define DEFAULT_LEADER_TIMEOUT_MS 10000
#define LEADER_RETRY_MS           50

/* --- sockets ------------------------------------------------------------------------- */

/* Splits "HOST:PORT" / "[V6]:PORT" into host and port; 0 or DDP_EINVAL. */
static int split_addr(const char *addr, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon = strrchr(addr, ':');
    const char *h = addr;
    size_t hlen;
    if (colon == NULL || colon[1] == '\0')
        return DDP_EINVAL;
    hlen = (size_t)(colon - addr);
    if (addr[0] == '[') {
        if (hlen < 2 || addr[hlen - 1] != ']')
            return DDP_EINVAL;
        h = addr + 1;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= hsize || strlen(colon + 1) >= psize)
        return DDP_EINVAL;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    snprintf(port, psize, "%s", colon + 1);
    return 0;
}

/* Waits until fd is ready for events or the deadline passes: 0, DDP_ETIMEOUT, DDP_EIO. */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = time_left_ms(deadline);
        if (left <= 0)
            return DDP_ETIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, left > 60000 ? 60000 : (int)left);
        if (rc > 0)
            return 0;
        if (rc < 0 && errno != EINTR)
            return DDP_EIO;
    }
}

int dqclient_tcp_connect(const char *addr, int64_t timeout_ms, int *out, struct ddp_err *err)
{
    char host[DQCLIENT_ADDR_MAX], port[16];
    struct addrinfo hints = {0}, *ai = NULL;
    int fd = -1, rc;
    if (split_addr(addr, host, sizeof host, port, sizeof port) != 0)
        return err_set(err, DDP_EINVAL, "dqlite address '%s': want HOST:PORT", addr);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    rc = getaddrinfo(host, port, &hints, &ai);
    if (rc != 0)
        return err_set(err, DDP_EINVAL, "dqlite address '%s': %s", addr, gai_strerror(rc));
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        rc = err_set(err, DDP_EIO, "dqlite %s: socket: %s", addr, strerror(errno));
        goto out;
    }
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
        rc = err_set(err, DDP_EIO, "dqlite %s: TCP_NODELAY: %s", addr, strerror(errno));
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
            rc = err_set(err, DDP_EUNAVAIL, "dqlite %s: connect: %s", addr, strerror(errno));
            goto out;
        }
        rc = wait_fd(fd, POLLOUT, time_deadline_ms(timeout_ms));
        if (rc != 0) {
            rc = err_set(err, rc, "dqlite %s: connect: %s", addr,
                         rc == DDP_ETIMEOUT ? "timed out" : strerror(errno));
            goto out;
        }
        int soerr = 0;
        socklen_t len = sizeof soerr;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0)
            soerr = errno;
        if (soerr != 0) {
            rc = err_set(err, DDP_EUNAVAIL, "dqlite %s: connect: %s", addr, strerror(soerr));
            goto out;
        }
    }
    *out = fd;
    fd = -1;
    rc = 0;
out:
    if (fd >= 0)
        close(fd);
    freeaddrinfo(ai);
    return rc;
}

static int write_all(int fd, const void *p, size_t n, int64_t deadline)
{
    const char *s = p;
    while (n > 0) {
        ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
        if (k > 0) {
            s += k;
            n -= (size_t)k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int rc = wait_fd(fd, POLLOUT, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        return DDP_EPEER;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n, int64_t deadline)
{
    char *s = p;
    while (n > 0) {
        ssize_t k = recv(fd, s, n, 0);
        if (k > 0) {
            s += k;
            n -= (size_t)k;
            continue;
        }
        if (k == 0)
            return DDP_EPEER;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int rc = wait_fd(fd, POLLIN, deadline);
            if (rc != 0)
                return rc;
            continue;
        }
        return DDP_EPEER;
    }
    return 0;
}

/* The deadline of one phase of a roundtrip (the write, the header, the body): timeout_ms
 * from now, but never past c->cap (a search's or a probe's own bound). */
static int64_t phase_deadline(const struct dqclient *c)
{
    int64_t d = time_deadline_ms(c->opts.timeout_ms);
    return c->cap > 0 && c->cap < d ? c->cap : d;
}

/* --- building requests: the first append error sticks in out_rc ------------------- */

void dqc_out_begin(struct dqclient *c, uint8_t type, size_t *start)
{
    *start = 0;
    if (c->out_rc == 0)
        c->out_rc = dqwire_msg_begin(&c->out, type, start);
}

void dqc_out_end(struct dqclient *c, size_t start)
{
    if (c->out_rc == 0)
        c->out_rc = dqwire_msg_end(&c->out, start);
}

void dqc_out_u64(struct dqclient *c, uint64_t v)
{
    if (c->out_rc == 0)
        c->out_rc = dqwire_put_u64(&c->out, v);
}

void dqc_out_u32x2(struct dqclient *c, uint32_t lo, uint32_t hi)
{
    if (c->out_rc == 0)
        c->out_rc = dqwire_put_u32x2(&c->out, lo, hi);
}

void dqc_out_text(struct dqclient *c, const char *s)
{
    if (c->out_rc == 0)
        c->out_rc = dqwire_put_text(&c->out, s);
}

/* --- requests ------------------------------------------------------------------------ */

void dqc_drop(struct dqclient *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->node[0] = '\0';
}

/* The SQL as error messages quote it: cut, on one line. */
void dqc_shown_sql(const char *sql, char *out, size_t size)
{
    size_t n = 0;
    for (; sql[n] != '\0' && n + 4 < size && n < SQL_SHOWN; n++)
        out[n] = (sql[n] == '\n' || sql[n] == '\t') ? ' ' : sql[n];
    if (sql[n] != '\0') {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

static int failure_code_to_err(uint64_t code)
{
    if (code == DQWIRE_CODE_NOT_LEADER || code == DQWIRE_CODE_LEADERSHIP_LOST)
        return DDP_EUNAVAIL;
    if ((code & 0xff) == 5 || (code & 0xff) == 6) /* SQLITE_BUSY, SQLITE_LOCKED */
        return DDP_EABORTED;
    return DDP_EIO;
}

/*
 * Sends c->out (one or more whole messages) and reads one answer into c->in. *type gets its
 * type. A FAILURE answer becomes an error naming what (and sql, when not NULL); any other
 * answer of a type other than want (-1: any) is DDP_EPEER. I/O errors drop the connection.
 */
int dqc_roundtrip(struct dqclient *c, const char *what, const char *sql, int want, int *type,
                  struct ddp_err *err)
{
    char q[SQL_SHOWN + 8] = "";
    char node[DQCLIENT_ADDR_MAX];
    uint8_t h[DQWIRE_HEADER_SIZE];
    struct dqwire_header hd;
    int rc;

    c->failure_code = 0;
    if (sql != NULL)
        dqc_shown_sql(sql, q, sizeof q);
    snprintf(node, sizeof node, "%s", c->node);
    if (c->out_rc != 0) {
        int rc0 = c->out_rc;
        c->out_rc = 0;
        buf_reset(&c->out);
        return err_set(err, rc0, "dqlite: %s%s%s%s: request over %u bytes", what, sql ? " \"" : "",
                       q, sql ? "\"" : "", DQCLIENT_MAX_BODY);
    }
    if (c->fd < 0) {
        buf_reset(&c->out);
        return err_set(err, DDP_EUNAVAIL, "dqlite: %s%s%s%s: not connected (reconnect first)", what,
                       sql ? " \"" : "", q, sql ? "\"" : "");
    }
    int64_t deadline = phase_deadline(c);
    rc = write_all(c->fd, c->out.data, c->out.len, deadline);
    buf_reset(&c->out);
    if (rc == 0)
        rc = read_all(c->fd, h, sizeof h, phase_deadline(c));
    if (rc != 0) {
        dqc_drop(c);
        /* a lost connection is DDP_EUNAVAIL (dqclient.h), a timeout stays one */
        return err_set(err, rc == DDP_ETIMEOUT ? rc : DDP_EUNAVAIL, "dqlite %s: %s%s%s%s: %s", node,
                       what, sql ? " \"" : "", q, sql ? "\"" : "",
                       rc == DDP_ETIMEOUT ? "timed out" : "connection lost");
    }
    dqwire_header_decode(h, &hd);
    if ((uint64_t)hd.words * 8 > DQCLIENT_MAX_BODY) {
        dqc_drop(c);
        return err_set(err, DDP_ETOOBIG, "dqlite %s: %s: answer of %u words over the %u limit",
                       node, what, hd.words, DQCLIENT_MAX_BODY / 8);
    }
    buf_reset(&c->in);
    size_t len = (size_t)hd.words * 8;
    rc = buf_reserve(&c->in, len);
    if (rc == 0)
        rc = read_all(c->fd, c->in.data, len, phase_deadline(c));
    if (rc != 0) {
        dqc_drop(c);
        return err_set(err, rc == DDP_ETIMEOUT ? rc : DDP_EUNAVAIL, "dqlite %s: %s: %s", node, what,
                       rc == DDP_ETIMEOUT ? "timed out" : "connection lost");
    }
    c->in.len = len;
    c->in.data[len] = '\0';
    if (hd.type == DQWIRE_RESP_FAILURE) {
        uint64_t code;
        const char *msg;
        if (dqwire_decode_failure(c->in.data, len, &code, &msg) != 0) {
            dqc_drop(c);
            return err_set(err, DDP_EPEER, "dqlite %s: %s: malformed FAILURE", node, what);
        }
        c->failure_code = code;
        return err_set(err, failure_code_to_err(code), "dqlite %s: %s%s%s%s: %s (code %llu)", node,
                       what, sql ? " \"" : "", q, sql ? "\"" : "", msg, (unsigned long long)code);
    }
    if (want >= 0 && hd.type != want) {
        dqc_drop(c);
        return err_set(err, DDP_EPEER, "dqlite %s: %s: answer %s, want %s", node, what,
                       dqwire_response_name(hd.type), dqwire_response_name(want));
    }
    *type = hd.type;
    return 0;
}

/* A decoder of the answer failed: the node speaks something else. */
int dqc_bad_answer(struct dqclient *c, const char *what, struct ddp_err *err)
{
    int rc = err_set(err, DDP_EPEER, "dqlite %s: %s: malformed answer", c->node, what);
    dqc_drop(c);
    return rc;
}

/* Asks the node on c->fd for the leader: *id and leader (address, "" when unknown). */
static int ask_leader(struct dqclient *c, int handshake, uint64_t *id, char *leader, size_t size,
                      struct ddp_err *err)
{
    size_t start;
    int type;
    const char *addr;
    if (handshake)
        dqc_out_u64(c, DQWIRE_PROTOCOL_VERSION);
    dqc_out_begin(c, DQWIRE_REQ_LEADER, &start);
    dqc_out_u64(c, 0);
    dqc_out_end(c, start);
    int rc = dqc_roundtrip(c, "leader", NULL, DQWIRE_RESP_SERVER, &type, err);
    if (rc != 0)
        return rc;
    if (dqwire_decode_server(c->in.data, c->in.len, id, &addr) != 0)
        return dqc_bad_answer(c, "leader", err);
    snprintf(leader, size, "%s", addr);
    return 0;
}

/* Connects to addr and asks LEADER there. 0 with *is_leader set (1: addr is the leader, the
 * connection stays; 0: *next names the leader or is "", the connection is dropped). */
static int try_node(struct dqclient *c, const char *addr, int64_t deadline, int *is_leader,
                    char *next, size_t size, struct ddp_err *err)
{
    uint64_t id;
    int64_t t = time_left_ms(deadline);
    if (t > c->opts.timeout_ms)
        t = c->opts.timeout_ms;
    if (t <= 0)
        return err_set(err, DDP_ETIMEOUT, "dqlite %s: no time left to connect", addr);
    int rc = dqclient_tcp_connect(addr, t, &c->fd, err);
    if (rc != 0)
        return rc;
    snprintf(c->node, sizeof c->node, "%s", addr);
    c->cap = deadline; /* the search's bound covers the question too */
    rc = ask_leader(c, 1, &id, next, size, err);
    c->cap = 0;
    if (rc != 0) {
        dqc_drop(c);
        return rc;
    }
    *is_leader = strcmp(next, addr) == 0;
    if (!*is_leader)
        dqc_drop(c);
    return 0;
}

static int find_leader(struct dqclient *c, struct ddp_err *err)
{
    int64_t deadline = time_deadline_ms(c->opts.leader_timeout_ms);
    struct ddp_err last;
    err_clear(&last);
    err_set(&last, DDP_EUNAVAIL, "no node answered");
    for (;;) {
        for (size_t i = 0; i < c->naddrs; i++) {
            char next[DQCLIENT_ADDR_MAX];
            int is_leader = 0;
            if (try_node(c, c->addrs[i], deadline, &is_leader, next, sizeof next, &last) != 0)
                continue;
            if (is_leader)
                return 0;
            if (next[0] == '\0') {
                err_set(&last, DDP_EUNAVAIL, "dqlite %s: knows no leader", c->addrs[i]);
                continue;
            }
            if (c->opts.pinned) {
                err_set(&last, DDP_EUNAVAIL, "dqlite %s: not the leader (%s is)", c->addrs[i],
                        next);
                continue;
            }
            char follow[DQCLIENT_ADDR_MAX];
            if (try_node(c, next, deadline, &is_leader, follow, sizeof follow, &last) != 0)
                continue;
            if (is_leader)
                return 0;
            err_set(&last, DDP_EUNAVAIL, "dqlite %s: named leader %s, which names '%s'",
                    c->addrs[i], next, follow);
        }
        if (time_left_ms(deadline) <= LEADER_RETRY_MS)
            break;
        time_sleep_ms(LEADER_RETRY_MS);
    }
    return err_set(err, DDP_EUNAVAIL, "no dqlite leader within %lld ms: %s",
                   (long long)c->opts.leader_timeout_ms, last.msg);
}

/* CLIENT and OPEN on the leader's connection. */
static int register_and_open(struct dqclient *c, struct ddp_err *err)
{
    size_t start;
    int type;
    uint64_t hb;
    dqc_out_begin(c, DQWIRE_REQ_CLIENT, &start);
    dqc_out_u64(c, c->opts.client_id);
    dqc_out_end(c, start);
    int rc = dqc_roundtrip(c, "client", NULL, DQWIRE_RESP_WELCOME, &type, err);
    if (rc != 0)
        return rc;
    if (dqwire_decode_welcome(c->in.data, c->in.len, &hb) != 0)
        return dqc_bad_answer(c, "client", err);
    dqc_out_begin(c, DQWIRE_REQ_OPEN, &start);
    dqc_out_text(c, c->db);
    dqc_out_u64(c, 0);   /* flags */
    dqc_out_text(c, ""); /* the VFS name, which dqlite 1.11 ignores */
    dqc_out_end(c, start);
    rc = dqc_roundtrip(c, "open", NULL, DQWIRE_RESP_DB, &type, err);
    if (rc != 0)
        return rc;
    if (dqwire_decode_db(c->in.data, c->in.len, &c->db_id) != 0)
        return dqc_bad_answer(c, "open", err);
    return 0;
}

/* Adds the cluster's members that addrs lacks (up to DQCLIENT_MAX_NODES), so that a client
 * given one address can still find a new leader after that node died. A FAILURE answer
 * leaves addrs as they were; a lost connection is an error. */
static int learn_members(struct dqclient *c, struct ddp_err *err)
{
    struct dqclient_server s[DQCLIENT_MAX_NODES];
    size_t n = 0;
    int rc = dqclient_cluster(c, s, DQCLIENT_MAX_NODES, &n, err);
    if (rc != 0)
        return dqclient_connected(c) ? 0 : rc;
    for (size_t i = 0; i < n && c->naddrs < DQCLIENT_MAX_NODES; i++) {
        char host[DQCLIENT_ADDR_MAX], port[16];
        int known = split_addr(s[i].address, host, sizeof host, port, sizeof port) != 0;
        for (size_t k = 0; !known && k < c->naddrs; k++)
            known = strcmp(c->addrs[k], s[i].address) == 0;
        if (known)
            continue;
        c->addrs = xrealloc(c->addrs, (c->naddrs + 1) * sizeof *c->addrs);
        c->addrs[c->naddrs++] = xstrdup(s[i].address);
    }
    return 0;
}

int dqclient_reconnect(struct dqclient *c, struct ddp_err *err)
{
    dqc_drop(c);
    c->gen++;
    int rc = find_leader(c, err);
    if (rc == 0)
        rc = register_and_open(c, err);
    if (rc == 0 && !c->opts.pinned)
        rc = learn_members(c, err);
    if (rc != 0)
        dqc_drop(c);
    return rc;
}

int dqclient_leader_of(const char *addr, const struct dqclient_opts *opts, uint64_t *id,
                       char *leader, size_t size, struct ddp_err *err)
{
    struct dqclient c = {.fd = -1};
    if (opts != NULL)
        c.opts = *opts;
    if (c.opts.timeout_ms <= 0)
        c.opts.timeout_ms = DEFAULT_TIMEOUT_MS;
    buf_init_max(&c.out, DQCLIENT_MAX_BODY);
    buf_init_max(&c.in, DQCLIENT_MAX_BODY);
    c.cap = time_deadline_ms(c.opts.timeout_ms); /* the whole probe, as dqclient.h says */
    int rc = dqclient_tcp_connect(addr, c.opts.timeout_ms, &c.fd, err);
    if (rc == 0) {
        snprintf(c.node, sizeof c.node, "%s", addr);
        rc = ask_leader(&c, 1, id, leader, size, err);
    }
    dqc_drop(&c);
    buf_release(&c.out);
    buf_release(&c.in);
    return rc;
}

int dqclient_open(const char *const *addrs, size_t naddrs, const char *db,
                  const struct dqclient_opts *opts, struct dqclient **out, struct ddp_err *err)
{
    if (naddrs == 0 || naddrs > DQCLIENT_MAX_NODES)
        return err_set(err, DDP_EINVAL, "dqlite: %zu addresses: want 1 to %d", naddrs,
                       DQCLIENT_MAX_NODES);
    for (size_t i = 0; i < naddrs; i++) {
        char host[DQCLIENT_ADDR_MAX], port[16];
        if (strlen(addrs[i]) >= DQCLIENT_ADDR_MAX ||
            split_addr(addrs[i], host, sizeof host, port, sizeof port) != 0)
            return err_set(err, DDP_EINVAL, "dqlite address '%s': want HOST:PORT", addrs[i]);
    }
    if (db[0] == '\0' || strlen(db) >= DQCLIENT_ADDR_MAX)
        return err_set(err, DDP_EINVAL, "dqlite database name: want 1 to %d characters",
                       DQCLIENT_ADDR_MAX - 1);
    struct dqclient *c = xcalloc(1, sizeof *c);
    c->fd = -1;
    c->addrs = xcalloc(naddrs, sizeof *c->addrs);
    for (size_t i = 0; i < naddrs; i++)
        c->addrs[i] = xstrdup(addrs[i]);
    c->naddrs = naddrs;
    c->db = xstrdup(db);
    if (opts != NULL)
        c->opts = *opts;
    if (c->opts.timeout_ms <= 0)
        c->opts.timeout_ms = DEFAULT_TIMEOUT_MS;
    if (c->opts.leader_timeout_ms <= 0)
        c->opts.leader_timeout_ms = DEFAULT_LEADER_TIMEOUT_MS;
    if (c->opts.client_id == 0)
        c->opts.client_id = (uint64_t)getpid();
    buf_init_max(&c->out, DQCLIENT_MAX_BODY);
    buf_init_max(&c->in, DQCLIENT_MAX_BODY);
    int rc = dqclient_reconnect(c, err);
    if (rc != 0) {
        dqclient_close(c);
        return rc;
    }
    *out = c;
    return 0;
}

void dqclient_close(struct dqclient *c)
{
    if (c == NULL)
        return;
    dqc_drop(c);
    for (size_t i = 0; i < c->naddrs; i++)
        free(c->addrs[i]);
    free(c->addrs);
    free(c->db);
    buf_release(&c->out);
    buf_release(&c->in);
    free(c);
}

size_t dqclient_naddrs(const struct dqclient *c)
{
    return c->naddrs;
}

const char *dqclient_node(const struct dqclient *c)
{
    return c->node;
}

int dqclient_connected(const struct dqclient *c)
{
    return c->fd >= 0;
}

uint64_t dqclient_failure_code(const struct dqclient *c)
{
    return c->failure_code;
}

/* --- cluster ------------------------------------------------------------------------- */

int dqclient_cluster(struct dqclient *c, struct dqclient_server *s, size_t max, size_t *n,
                     struct ddp_err *err)
{
    size_t start, cnt;
    int type;
    struct dqwire_server ws[DQCLIENT_MAX_NODES];
    dqc_out_begin(c, DQWIRE_REQ_CLUSTER, &start);
    dqc_out_u64(c, 1); /* format 1: id, address, role */
    dqc_out_end(c, start);
    int rc = dqc_roundtrip(c, "cluster", NULL, DQWIRE_RESP_SERVERS, &type, err);
    if (rc != 0)
        return rc;
    rc = dqwire_decode_servers(c->in.data, c->in.len, ws, DQCLIENT_MAX_NODES, &cnt);
    if (rc == DDP_ETOOBIG || (rc == 0 && cnt > max))
        return err_set(err, DDP_ETOOBIG, "dqlite %s: cluster: more than %zu members", c->node,
                       rc == 0 ? max : (size_t)DQCLIENT_MAX_NODES);
    if (rc != 0)
        return dqc_bad_answer(c, "cluster", err);
    for (size_t i = 0; i < cnt; i++) {
        s[i].id = ws[i].id;
        snprintf(s[i].address, sizeof s[i].address, "%s", ws[i].address);
        s[i].role = ws[i].role;
    }
    *n = cnt;
    return 0;
}

/* A membership request with fields already written after the header; answer EMPTY. */
static int member_req(struct dqclient *c, const char *what, size_t start, struct ddp_err *err)
{
    int type;
    dqc_out_end(c, start);
    return dqc_roundtrip(c, what, NULL, DQWIRE_RESP_EMPTY, &type, err);
}

int dqclient_add(struct dqclient *c, uint64_t id, const char *address, struct ddp_err *err)
{
    size_t start;
    dqc_out_begin(c, DQWIRE_REQ_ADD, &start);
    dqc_out_u64(c, id);
    dqc_out_text(c, address);
    return member_req(c, "add", start, err);
}

int dqclient_assign(struct dqclient *c, uint64_t id, enum dqwire_role role, struct ddp_err *err)
{
    size_t start;
    dqc_out_begin(c, DQWIRE_REQ_ASSIGN, &start);
    dqc_out_u64(c, id);
    dqc_out_u64(c, (uint64_t)role);
    return member_req(c, "assign", start, err);
}

int dqclient_remove(struct dqclient *c, uint64_t id, struct ddp_err *err)
{
    size_t start;
    dqc_out_begin(c, DQWIRE_REQ_REMOVE, &start);
    dqc_out_u64(c, id);
    return member_req(c, "remove", start, err);
}

int dqclient_transfer(struct dqclient *c, uint64_t id, struct ddp_err *err)
{
    size_t start;
    dqc_out_begin(c, DQWIRE_REQ_TRANSFER, &start);
    dqc_out_u64(c, id);
    return member_req(c, "transfer", start, err);
}

/* --- values -------------------------------------------------------------------------- */

struct dqwire_value dqclient_int(int64_t v)
{
    return (struct dqwire_value){.type = DQWIRE_INTEGER, .i = v};
}

struct dqwire_value dqclient_float(double v)
{
    return (struct dqwire_value){.type = DQWIRE_FLOAT, .f = v};
}

struct dqwire_value dqclient_text(const char *s)
{
    return (struct dqwire_value){.type = DQWIRE_TEXT, .p = s, .len = strlen(s)};
}

struct dqwire_value dqclient_blob(const void *p, size_t len)
{
    return (struct dqwire_value){.type = DQWIRE_BLOB, .p = p, .len = len};
}

struct dqwire_value dqclient_null(void)
{
    return (struct dqwire_value){.type = DQWIRE_NULL};
}
