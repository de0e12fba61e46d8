/*
 * test_rdzv.c - the rendezvous store: set/get/wait/add/barrier between ranks running as
 * threads on 127.0.0.1, deadlines, bounds, the job secret, a taken port, the address rank
 * 0's store listens on (MASTER_ADDR's, not every address), rank 0's close;
 * what strangers and misbehaving peers cannot do to rank 0's store (silent connections, a
 * long frame before hello, a second connection for a rank, requests sent but never read);
 * and the wire format on its own (rdzv_wire.h): encode, decode, and each bound.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/buf.h"
#include "ddp/rdzv.h"
#include "libddp/rdzv_server.h"
#include "libddp/rdzv_wire.h"
#include "tests/unit/testutil.h"

static void test_rdzv_set_get_add_wait(void **state)
{
    (void)state;
    struct rdzv *r = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 1, "s", 5000, &r, &err), 0);
    assert_int_equal(rdzv_set(r, "a", "hello", 5, &err), 0);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_get(r, "a", 1000, &v, &len, &err), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(v, "hello", 5);
    free(v);
    /* Overwrite, and an empty value. */
    assert_int_equal(rdzv_set(r, "a", "", 0, &err), 0);
    assert_int_equal(rdzv_get(r, "a", 1000, &v, &len, &err), 0);
    assert_int_equal(len, 0);
    free(v);
    int64_t n = 0;
    assert_int_equal(rdzv_add(r, "cnt", 5, &n, &err), 0);
    assert_int_equal(n, 5);
    assert_int_equal(rdzv_add(r, "cnt", -7, &n, &err), 0);
    assert_int_equal(n, -2);
    assert_int_equal(rdzv_get(r, "cnt", 1000, &v, &len, &err), 0);
    assert_int_equal(len, 2);
    assert_memory_equal(v, "-2", 2);
    free(v);
    /* add on a non-integer value is refused and the connection stays usable. */
    assert_int_equal(rdzv_set(r, "txt", "abc", 3, &err), 0);
    assert_int_equal(rdzv_add(r, "txt", 1, &n, &err), DDP_EINVAL);
    const char *keys[] = {"a", "cnt", "txt"};
    assert_int_equal(rdzv_wait(r, keys, 3, 1000, &err), 0);
    assert_int_equal(rdzv_barrier(r, "solo", 1000, &err), 0);
    rdzv_close(r);
}

static void test_rdzv_deadline_expires(void **state)
{
    (void)state;
    struct rdzv *r = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 1, "", 5000, &r, &err), 0);
    void *v = NULL;
    size_t len = 0;
    int64_t t0 = time_mono_ms();
    assert_int_equal(rdzv_get(r, "missing", 150, &v, &len, &err), DDP_ETIMEOUT);
    assert_true(time_mono_ms() - t0 >= 150);
    assert_non_null(strstr(err.msg, "missing"));
    assert_int_equal(rdzv_set(r, "x", "1", 1, &err), 0);
    const char *keys[] = {"x", "missing"};
    assert_int_equal(rdzv_wait(r, keys, 2, 100, &err), DDP_ETIMEOUT);
    /* The connection is still in step after a timed-out request. */
    assert_int_equal(rdzv_get(r, "x", 100, &v, &len, &err), 0);
    free(v);
    rdzv_close(r);
}

static void test_rdzv_limits(void **state)
{
    (void)state;
    struct rdzv *r = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 1, "", 5000, &r, &err), 0);
    char key[RDZV_KEY_MAX + 2];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    assert_int_equal(rdzv_set(r, key, "v", 1, &err), DDP_EINVAL);
    key[RDZV_KEY_MAX] = '\0'; /* exactly the maximum */
    assert_int_equal(rdzv_set(r, key, "v", 1, &err), 0);
    assert_int_equal(rdzv_set(r, "", "v", 1, &err), DDP_EINVAL);
    char *big = malloc(RDZV_VALUE_MAX + 1);
    assert_non_null(big);
    for (size_t i = 0; i < RDZV_VALUE_MAX + 1; i++)
        big[i] = (char)(i * 31);
    assert_int_equal(rdzv_set(r, "big", big, RDZV_VALUE_MAX + 1, &err), DDP_ETOOBIG);
    assert_int_equal(rdzv_set(r, "big", big, RDZV_VALUE_MAX, &err), 0);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_get(r, "big", 1000, &v, &len, &err), 0);
    assert_int_equal(len, RDZV_VALUE_MAX);
    assert_memory_equal(v, big, RDZV_VALUE_MAX);
    free(v);
    free(big);
    rdzv_close(r);
}

struct rank_arg {
    int port, rank, world;
    int rc;
    char msg[512];
};

static void *rank_main(void *p)
{
    struct rank_arg *a = p;
    struct rdzv *r = NULL;
    struct ddp_err err;
    err_clear(&err);
    int rc = rdzv_open("127.0.0.1", a->port, a->rank, a->world, "tok", 10000, &r, &err);
    char key[32], val[32];
    for (int round = 0; rc == 0 && round < 2; round++) {
        /* Every rank publishes, then reads every other rank's value (blocking get). */
        snprintf(key, sizeof(key), "k/%d/%d", round, a->rank);
        int vl = snprintf(val, sizeof(val), "v%d-%d", round, a->rank * 7);
        rc = rdzv_set(r, key, val, (size_t)vl, &err);
        for (int q = 0; rc == 0 && q < a->world; q++) {
            void *v = NULL;
            size_t len = 0;
            snprintf(key, sizeof(key), "k/%d/%d", round, q);
            rc = rdzv_get(r, key, 10000, &v, &len, &err);
            if (rc == 0) {
                vl = snprintf(val, sizeof(val), "v%d-%d", round, q * 7);
                if (len != (size_t)vl || memcmp(v, val, len) != 0)
                    rc = err_set(&err, DDP_EINTERNAL, "rank %d read a wrong value for %s", a->rank,
                                 key);
            }
            free(v);
        }
        int64_t n = 0;
        if (rc == 0)
            rc = rdzv_add(r, "counter", 1, &n, &err);
        if (rc == 0)
            rc = rdzv_barrier(r, "round", 10000, &err);
        /* After the barrier every rank has added: the counter is complete. */
        if (rc == 0)
            rc = rdzv_add(r, "counter", 0, &n, &err);
        if (rc == 0 && n != (int64_t)a->world * (round + 1))
            rc = err_set(&err, DDP_EINTERNAL, "counter %lld after barrier %d", (long long)n, round);
        if (rc == 0)
            rc = rdzv_barrier(r, "round", 10000, &err);
    }
    a->rc = rc;
    memcpy(a->msg, err.msg, sizeof(a->msg));
    rdzv_close(r);
    return NULL;
}

static void test_rdzv_ranks_exchange_and_barrier(void **state)
{
    (void)state;
    enum { W = 5 };
    struct rank_arg args[W];
    pthread_t th[W];
    int port = testutil_free_port();
    /* Start the non-zero ranks first: they retry until rank 0 serves. */
    for (int i = W - 1; i >= 0; i--) {
        args[i] = (struct rank_arg){.port = port, .rank = i, .world = W};
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &args[i]), 0);
    }
    for (int i = 0; i < W; i++) {
        pthread_join(th[i], NULL);
        if (args[i].rc != 0)
            fail_msg("rank %d: %d %s", i, args[i].rc, args[i].msg);
    }
}

static void test_rdzv_wrong_secret_refused(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL, *bad = NULL, *good = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "right", 5000, &r0, &err), 0);
    int64_t t0 = time_mono_ms();
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 2, "wrong", 5000, &bad, &err), DDP_EPERM);
    assert_null(bad);
    assert_true(time_mono_ms() - t0 < 5000); /* refused, not timed out */
    assert_non_null(strstr(err.msg, "DDP_JOB_TOKEN"));
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 2, "rig", 5000, &bad, &err), DDP_EPERM);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 2, "", 5000, &bad, &err), DDP_EPERM);
    /* A rank that does not fit the world is refused too. */
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 3, "right", 5000, &bad, &err), DDP_EINVAL);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 2, "right", 5000, &good, &err), 0);
    assert_int_equal(rdzv_set(good, "k", "v", 1, &err), 0);
    rdzv_close(good);
    rdzv_close(r0);
}

/* A blocking loopback connection to port whose reads time out after timeout_s (the test
 * fails when it cannot be made). */
static int raw_connect(int port, int timeout_s)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    struct timeval tv = {.tv_sec = timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void test_rdzv_garbage_client_dropped(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 1, "s", 5000, &r0, &err), 0);
    int fd = raw_connect(port, 5);
    /* A frame announcing 2^31 bytes: over the bound, the server must drop us. */
    unsigned char junk[8] = {0, 0, 0, 0x80, 1, 2, 3, 4};
    assert_int_equal(send(fd, junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
    char b[16];
    assert_int_equal(recv(fd, b, sizeof(b), 0), 0); /* EOF: dropped */
    close(fd);
    /* A request before hello is refused with a reply, then dropped. */
    fd = raw_connect(port, 5);
    unsigned char set[] = {4, 0, 0, 0, 2, 1, 0, 'k'};
    assert_int_equal(send(fd, set, sizeof(set), MSG_NOSIGNAL), (ssize_t)sizeof(set));
    ssize_t n = recv(fd, b, sizeof(b), MSG_WAITALL);
    assert_true(n >= 5);
    assert_int_equal(b[4], 2); /* permission denied */
    close(fd);
    /* The store still serves its real clients. */
    assert_int_equal(rdzv_set(r0, "after", "1", 1, &err), 0);
    rdzv_close(r0);
}

/* Sends one frame (body given) on fd and reads the reply's status byte; -1 on EOF/error. */
static int raw_request(int fd, const unsigned char *body, uint32_t len)
{
    unsigned char hdr[4] = {(unsigned char)len, (unsigned char)(len >> 8),
                            (unsigned char)(len >> 16), (unsigned char)(len >> 24)};
    if (send(fd, hdr, 4, MSG_NOSIGNAL) != 4 || send(fd, body, len, MSG_NOSIGNAL) != (ssize_t)len)
        return -1;
    unsigned char rh[5];
    if (recv(fd, rh, 5, MSG_WAITALL) != 5)
        return -1;
    uint32_t rlen = rh[0] | rh[1] << 8 | (uint32_t)rh[2] << 16 | (uint32_t)rh[3] << 24;
    char skip[256];
    for (uint32_t left = rlen - 1; left > 0;) {
        ssize_t n = recv(fd, skip, left < sizeof(skip) ? left : sizeof(skip), 0);
        if (n <= 0)
            return -1;
        left -= (uint32_t)n;
    }
    return rh[4];
}

static void test_rdzv_silent_connections_evicted(void **state)
{
    (void)state;
    /* 1,100 silent connections (over the store's world + 1,024 = 1,026) on the client side
     * and up to 1,026 on the server's, in this one process. */
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 2400) {
        rl.rlim_cur = rl.rlim_max < 2400 ? rl.rlim_max : 2400;
        if (rl.rlim_cur < 2400 || setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            printf("SKIPPED: test_rdzv_silent_connections_evicted needs 2400 open files "
                   "(RLIMIT_NOFILE hard limit %llu)\n",
                   (unsigned long long)rl.rlim_max);
            skip();
        }
    }
    struct rdzv *r0 = NULL, *r1 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "s", 5000, &r0, &err), 0);
    enum { NSILENT = 1100 };
    int *fds = calloc(NSILENT, sizeof(int));
    assert_non_null(fds);
    for (int i = 0; i < NSILENT; i++)
        fds[i] = raw_connect(port, 3);
    /* A real rank still joins, at once: the oldest silent connections make room. */
    int64_t t0 = time_mono_ms();
    if (rdzv_open("127.0.0.1", port, 1, 2, "s", 10000, &r1, &err) != 0)
        fail_msg("rank 1 could not join past %d silent connections: %s", NSILENT, err.msg);
    assert_true(time_mono_ms() - t0 < 5000);
    assert_int_equal(rdzv_set(r1, "k", "v", 1, &err), 0);
    for (int i = 0; i < NSILENT; i++)
        close(fds[i]);
    free(fds);
    rdzv_close(r1);
    rdzv_close(r0);
}

static void test_rdzv_long_frame_before_hello_dropped(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "s", 5000, &r0, &err), 0);
    int fd = raw_connect(port, 3);
    /* A frame of 1 MiB announced, 2,000 bytes of it sent: longer than any hello, so the
     * connection is dropped at once instead of buffering toward 1 MiB until the hello
     * deadline. */
    unsigned char hdr[4] = {0, 0, 0x10, 0};
    assert_int_equal(send(fd, hdr, 4, MSG_NOSIGNAL), 4);
    unsigned char body[2000];
    memset(body, 1, sizeof(body));
    assert_int_equal(send(fd, body, sizeof(body), MSG_NOSIGNAL), (ssize_t)sizeof(body));
    char b[16];
    /* Dropped within the 3 s receive timeout: EOF, or a reset when the store closed with our
     * bytes still unread (not EAGAIN, the timeout). */
    ssize_t n = recv(fd, b, sizeof(b), 0);
    if (!(n == 0 || (n < 0 && errno == ECONNRESET)))
        fail_msg("not dropped: recv %zd (%s)", n, n < 0 ? strerror(errno) : "data");
    close(fd);
    assert_int_equal(rdzv_set(r0, "after", "1", 1, &err), 0);
    rdzv_close(r0);
}

static void test_rdzv_second_connection_for_a_rank_refused(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL, *a = NULL, *b = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 3, "s", 5000, &r0, &err), 0);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 3, "s", 5000, &a, &err), 0);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 3, "s", 5000, &b, &err), DDP_EINVAL);
    assert_null(b);
    if (!strstr(err.msg, "rank 1 is already connected"))
        fail_msg("message '%s'", err.msg);
    /* The first connection of rank 1 is untouched, and rank 2 joins. */
    assert_int_equal(rdzv_set(a, "k", "v", 1, &err), 0);
    assert_int_equal(rdzv_open("127.0.0.1", port, 2, 3, "s", 5000, &b, &err), 0);
    rdzv_close(b);
    rdzv_close(a);
    rdzv_close(r0);
}

/* Resident bytes of this process. */
static int64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    assert_non_null(f);
    long long size = 0, res = 0;
    assert_int_equal(fscanf(f, "%lld %lld", &size, &res), 2);
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

static void test_rdzv_requests_never_read_stay_bounded(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "s", 5000, &r0, &err), 0);
    size_t vlen = 256 << 10;
    char *val = malloc(vlen);
    assert_non_null(val);
    memset(val, 'v', vlen);
    assert_int_equal(rdzv_set(r0, "big", val, vlen, &err), 0);
    free(val);
    int fd = raw_connect(port, 3);
    unsigned char hello[] = {1, 1, 0, 0, 0, 2, 0, 0, 0, 's'};
    assert_int_equal(raw_request(fd, hello, sizeof(hello)), 0);
    /* 1,000 GETs of the 256 KiB value sent at once and never read: before, the store answered
     * them all into memory (256 MiB); now it stops decoding while a reply is unsent. */
    unsigned char get[4 + 10] = {10, 0, 0, 0, 3, 0, 0, 0, 0, 3, 0, 'b', 'i', 'g'};
    int64_t before = rss_bytes();
    for (int i = 0; i < 1000; i++)
        assert_int_equal(send(fd, get, sizeof(get), MSG_NOSIGNAL), (ssize_t)sizeof(get));
    int64_t grown = 0;
    for (int i = 0; i < 50; i++) { /* 1 s: the growth, if any, comes at once */
        grown = rss_bytes() - before;
        if (grown > (64 << 20))
            break;
        time_sleep_ms(20);
    }
    if (grown > (64 << 20))
        fail_msg("rank 0 grew by %lld MiB for requests nobody reads", (long long)(grown >> 20));
    close(fd);
    /* The store still serves its ranks. */
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_get(r0, "big", 1000, &v, &len, &err), 0);
    assert_int_equal(len, vlen);
    free(v);
    rdzv_close(r0);
}

static void test_rdzv_malformed_requests_refused(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "s", 5000, &r0, &err), 0);
    int fd = raw_connect(port, 5);
    /* hello: rank 1 of 2, secret "s" */
    unsigned char hello[] = {1, 1, 0, 0, 0, 2, 0, 0, 0, 's'};
    assert_int_equal(raw_request(fd, hello, sizeof(hello)), 0);
    /* SET with an empty key, GET with a 300-byte key length, WAIT with 5000 keys, ADD cut
     * short, SET whose key runs past the frame: each refused, the connection kept. */
    unsigned char set_empty[] = {2, 0, 0, 'v'};
    assert_int_equal(raw_request(fd, set_empty, sizeof(set_empty)), 3);
    unsigned char get_long[] = {3, 0, 0, 0, 0, 0x2c, 0x01, 'k'};
    assert_int_equal(raw_request(fd, get_long, sizeof(get_long)), 3);
    unsigned char wait_many[] = {4, 0, 0, 0, 0, 0x88, 0x13};
    assert_int_equal(raw_request(fd, wait_many, sizeof(wait_many)), 3);
    unsigned char add_short[] = {5, 1, 0, 0};
    assert_int_equal(raw_request(fd, add_short, sizeof(add_short)), 3);
    unsigned char set_past[] = {2, 10, 0, 'k'};
    assert_int_equal(raw_request(fd, set_past, sizeof(set_past)), 3);
    unsigned char set_ok[] = {2, 1, 0, 'k', 'v'};
    assert_int_equal(raw_request(fd, set_ok, sizeof(set_ok)), 0);
    /* A second hello or an unknown op: refused and dropped. */
    unsigned char bad_op[] = {99};
    assert_int_equal(raw_request(fd, bad_op, sizeof(bad_op)), 3);
    char b[4];
    assert_int_equal(recv(fd, b, sizeof(b), 0), 0);
    close(fd);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_get(r0, "k", 1000, &v, &len, &err), 0);
    assert_int_equal(len, 1);
    free(v);
    rdzv_close(r0);
}

static void test_rdzv_port_in_use(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t sl = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    int port = ntohs(a.sin_port);
    struct rdzv *r = NULL;
    struct ddp_err err;
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "", 2000, &r, &err), DDP_EEXIST);
    assert_null(r);
    char want[64];
    snprintf(want, sizeof(want), "MASTER_PORT %d: 127.0.0.1:%d is already in use", port, port);
    assert_string_equal(err.msg, want);
    close(fd);
}

/* connect()'s errno to ip:port (IPv4, blocking: loopback answers at once), 0 on success. */
static int connect_errno(const char *ip, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    a.sin_port = htons((uint16_t)port);
    int rc = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/*
 * Holds a port on ip (0.0.0.0 for every address) for the length of a test: bound with
 * SO_REUSEADDR and never listening. Other processes on this host are then not handed it (an
 * ephemeral bind or connect skips a bound port; tests run in parallel), while a listener that
 * sets SO_REUSEADDR, as net.c's does, still binds and listens over it. port 0 picks one.
 * Returns the socket (the caller closes it) and the port in *port; -1 if ip:port is taken.
 */
static int hold_port(const char *ip, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    int one = 1;
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &a.sin_addr), 1);
    a.sin_port = htons((uint16_t)*port);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        assert_int_equal(errno, EADDRINUSE);
        close(fd);
        return -1;
    }
    socklen_t sl = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* Rank 0's store listens on MASTER_ADDR's address only: all of 127.0.0.0/8 is this host's, so
 * a store on 127.0.0.2 that listened on every address would answer at 127.0.0.3 too. */
static void test_rdzv_store_listens_on_master_addr(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL, *r1 = NULL;
    struct ddp_err err;
    /* One port held on the three addresses the test speaks of, so that no test running
     * beside this one takes it on 127.0.0.3 before the store is started there below. */
    int port = 0, held[3] = {-1, -1, -1};
    const char *addrs[3] = {"127.0.0.2", "127.0.0.3", "127.0.0.1"};
    for (int tries = 0; tries < 50 && held[2] < 0; tries++) {
        for (int i = 0; i < 3; i++)
            if (held[i] >= 0) {
                close(held[i]);
                held[i] = -1;
            }
        port = 0;
        held[0] = hold_port(addrs[0], &port);
        assert_true(held[0] >= 0);
        if ((held[1] = hold_port(addrs[1], &port)) >= 0)
            held[2] = hold_port(addrs[2], &port);
    }
    if (held[2] < 0)
        fail_msg("no port free on 127.0.0.1-3 in 50 tries");
    assert_int_equal(rdzv_open("127.0.0.2", port, 0, 2, "s", 5000, &r0, &err), 0);
    assert_int_equal(connect_errno("127.0.0.3", port), ECONNREFUSED);
    assert_int_equal(connect_errno("127.0.0.1", port), ECONNREFUSED);
    assert_int_equal(connect_errno("127.0.0.2", port), 0);
    /* A rank that joins at MASTER_ADDR still joins. */
    if (rdzv_open("127.0.0.2", port, 1, 2, "s", 5000, &r1, &err) != 0)
        fail_msg("rank 1 could not join the store on 127.0.0.2: %s", err.msg);
    assert_int_equal(rdzv_set(r1, "k", "v", 1, &err), 0);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_get(r0, "k", 1000, &v, &len, &err), 0);
    free(v);
    rdzv_close(r1);
    rdzv_close(r0);

    /* A taken port names the address it is taken on. */
    struct rdzv_server *srv = NULL;
    assert_int_equal(rdzv_open("127.0.0.2", port, 0, 1, "s", 5000, &r0, &err), 0);
    assert_int_equal(rdzv_server_start("127.0.0.2", port, 2, "s", &srv, &err), DDP_EEXIST);
    assert_null(srv);
    char want[80];
    snprintf(want, sizeof(want), "MASTER_PORT %d: 127.0.0.2:%d is already in use", port, port);
    assert_string_equal(err.msg, want);
    /* 127.0.0.3 is another address: the same port is free there. */
    if (rdzv_server_start("127.0.0.3", port, 2, "s", &srv, &err) != 0)
        fail_msg("store on 127.0.0.3 beside one on 127.0.0.2, port %d: %s", port, err.msg);
    assert_int_equal(connect_errno("127.0.0.3", port), 0);
    rdzv_server_stop(srv, 0);
    rdzv_close(r0);
    for (int i = 0; i < 3; i++)
        close(held[i]);

    /* A MASTER_ADDR that is not this host's (behind NAT, a service address) or does not
     * resolve yet: the store listens on every address, as before (with a warning). */
    const char *elsewhere[] = {"192.0.2.1", "no-such-host.invalid"};
    for (size_t i = 0; i < sizeof(elsewhere) / sizeof(elsewhere[0]); i++) {
        port = 0;
        int any = hold_port("0.0.0.0", &port);
        assert_true(any >= 0);
        srv = NULL;
        if (rdzv_server_start(elsewhere[i], port, 2, "s", &srv, &err) != 0)
            fail_msg("store for MASTER_ADDR %s: %s", elsewhere[i], err.msg);
        assert_int_equal(connect_errno("127.0.0.3", port), 0);
        rdzv_server_stop(srv, 0);
        close(any);
    }
}

struct open_args {
    int port;
    int rc;
    struct rdzv *r;
    struct ddp_err err;
};

static void *open_rank1(void *p)
{
    struct open_args *a = p;
    a->rc = rdzv_open("127.0.0.1", a->port, 1, 2, "s", 10000, &a->r, &a->err);
    return NULL;
}

/* A store that closes a rank's connection before answering its hello (full of strangers, or
 * restarting): the rank connects again and joins the store that then answers. */
static void test_rdzv_reconnects_after_a_connection_closed_before_hello(void **state)
{
    (void)state;
    int port = 0;
    int fake = hold_port("127.0.0.1", &port);
    assert_true(fake >= 0);
    assert_int_equal(listen(fake, 4), 0);
    struct open_args a = {.port = port, .rc = 1, .r = NULL};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, open_rank1, &a), 0);
    /* The first connection is taken and closed without an answer. */
    struct pollfd pfd = {.fd = fake, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 5000), 1);
    int c = accept(fake, NULL, NULL);
    assert_true(c >= 0);
    char buf[256];
    pfd.fd = c;
    assert_int_equal(poll(&pfd, 1, 5000), 1); /* its hello */
    assert_true(read(c, buf, sizeof(buf)) > 0);
    close(c);
    close(fake);
    /* Now the real store on that port. */
    struct rdzv *r0 = NULL;
    struct ddp_err err;
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "s", 10000, &r0, &err), 0);
    assert_int_equal(pthread_join(th, NULL), 0);
    if (a.rc != 0)
        fail_msg("rank 1 did not join after its first connection was closed: %s", a.err.msg);
    assert_int_equal(rdzv_set(a.r, "k", "v", 1, &err), 0);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(rdzv_get(r0, "k", 1000, &v, &len, &err), 0);
    assert_int_equal(len, 1);
    free(v);
    rdzv_close(a.r);
    rdzv_close(r0);
}

static void test_rdzv_unreachable_times_out(void **state)
{
    (void)state;
    int port = testutil_free_port();
    struct rdzv *r = NULL;
    struct ddp_err err;
    int64_t t0 = time_mono_ms();
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 2, "", 300, &r, &err), DDP_ETIMEOUT);
    assert_true(time_mono_ms() - t0 >= 300);
    assert_null(r);
    assert_int_equal(rdzv_open("127.0.0.1", 0, 1, 2, "", 300, &r, &err), DDP_EINVAL);
    assert_int_equal(rdzv_open("127.0.0.1", port, 2, 2, "", 300, &r, &err), DDP_EINVAL);
}

struct closer {
    struct rdzv *r;
    int done;
    pthread_mutex_t mu;
};

static void *close_main(void *p)
{
    struct closer *c = p;
    rdzv_close(c->r);
    pthread_mutex_lock(&c->mu);
    c->done = 1;
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void test_rdzv_rank0_close_waits_for_others(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL, *r1 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 2, "", 10000, &r0, &err), 0);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 2, "", 10000, &r1, &err), 0);
    struct closer c = {.r = r0};
    pthread_mutex_init(&c.mu, NULL);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, close_main, &c), 0);
    /* While rank 1 is still open, rank 0's close keeps serving it. */
    for (int i = 0; i < 20; i++) {
        assert_int_equal(rdzv_set(r1, "still", "here", 4, &err), 0);
        pthread_mutex_lock(&c.mu);
        int done = c.done;
        pthread_mutex_unlock(&c.mu);
        assert_int_equal(done, 0);
        time_sleep_ms(5);
    }
    rdzv_close(r1);
    pthread_join(th, NULL);
    pthread_mutex_destroy(&c.mu);
}

static void test_rdzv_rank0_close_is_bounded(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL, *r1 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 3, "", 200, &r0, &err), 0);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 3, "", 200, &r1, &err), 0);
    /* Rank 2 never comes and rank 1 stays: the close still returns (after ~200 ms). */
    rdzv_close(r0);
    assert_int_equal(rdzv_set(r1, "gone", "1", 1, &err), DDP_EPEER);
    assert_int_equal(rdzv_set(r1, "gone", "1", 1, &err), DDP_EPEER);
    rdzv_close(r1);
}

static void test_rdzv_rank0_close_skips_ranks_never_seen(void **state)
{
    (void)state;
    struct rdzv *r0 = NULL, *r1 = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 3, "", 30000, &r0, &err), 0);
    assert_int_equal(rdzv_open("127.0.0.1", port, 1, 3, "", 30000, &r1, &err), 0);
    rdzv_close(r1);
    /* Rank 2 never came (died before connecting): rank 0 does not wait the 10 s cap for it. */
    int64_t t0 = time_mono_ms();
    rdzv_close(r0);
    assert_true(time_mono_ms() - t0 < 10000);
}

/* Heavy: the store holds at most 256 MiB of keys and values; past that a set is refused
 * and the store keeps serving. */
static void test_rdzv_total_bytes_bounded(void **state)
{
    (void)state;
    struct rdzv *r = NULL;
    struct ddp_err err;
    int port = testutil_free_port();
    assert_int_equal(rdzv_open("127.0.0.1", port, 0, 1, "", 30000, &r, &err), 0);
    char *big = calloc(1, RDZV_VALUE_MAX);
    assert_non_null(big);
    int refused_at = -1;
    for (int i = 0; i < 300 && refused_at < 0; i++) {
        char key[32];
        snprintf(key, sizeof(key), "v%d", i);
        int rc = rdzv_set(r, key, big, RDZV_VALUE_MAX, &err);
        if (rc != 0) {
            assert_int_equal(rc, DDP_EINVAL);
            assert_non_null(strstr(err.msg, "full"));
            refused_at = i;
        }
    }
    /* 255 values of 1 MiB plus their keys fit; the 256th does not. */
    assert_int_equal(refused_at, 255);
    /* Replacing a value by a smaller one frees room. */
    assert_int_equal(rdzv_set(r, "v0", "x", 1, &err), 0);
    assert_int_equal(rdzv_set(r, "v255", big, RDZV_VALUE_MAX, &err), 0);
    free(big);
    rdzv_close(r);
}

/* Decodes the frame at *off of b (advancing *off) and checks its length prefix. */
static int next_frame(const struct buf *b, size_t *off, struct rdzv_req *q)
{
    uint32_t len = 0;
    assert_true(*off + 4 <= b->len);
    assert_int_equal(rdzv_wire_frame_len((const uint8_t *)b->data + *off, &len), 0);
    assert_true(*off + 4 + len <= b->len);
    int ret = rdzv_wire_decode((const uint8_t *)b->data + *off + 4, len, q);
    *off += 4 + len;
    return ret;
}

static void test_rdzv_wire_round_trip(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    assert_int_equal(rdzv_wire_hello(&b, 1, 2, "s"), 0);
    /* The bytes are the format's (the fuzz target sends these by hand). */
    static const unsigned char hello[] = {10, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 0, 0, 's'};
    assert_int_equal(b.len, sizeof(hello));
    assert_memory_equal(b.data, hello, sizeof(hello));
    const char *keys[] = {"a", "bc"};
    assert_int_equal(rdzv_wire_set(&b, "key", "value", 5), 0);
    assert_int_equal(rdzv_wire_set(&b, "empty", NULL, 0), 0);
    assert_int_equal(rdzv_wire_get(&b, 1234, "key"), 0);
    assert_int_equal(rdzv_wire_wait(&b, 77, keys, 2), 0);
    assert_int_equal(rdzv_wire_add(&b, -5, "cnt"), 0);

    struct rdzv_req q;
    size_t off = 0;
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.op, RDZV_OP_HELLO);
    assert_int_equal(q.rank, 1);
    assert_int_equal(q.world, 2);
    assert_int_equal(q.secret_len, 1);
    assert_memory_equal(q.secret, "s", 1);
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.op, RDZV_OP_SET);
    assert_int_equal(q.klen, 3);
    assert_memory_equal(q.key, "key", 3);
    assert_int_equal(q.len, 5);
    assert_memory_equal(q.value, "value", 5);
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.op, RDZV_OP_SET);
    assert_int_equal(q.len, 0);
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.op, RDZV_OP_GET);
    assert_int_equal(q.timeout_ms, 1234);
    assert_memory_equal(q.key, "key", 3);
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.op, RDZV_OP_WAIT);
    assert_int_equal(q.timeout_ms, 77);
    assert_int_equal(q.nkeys, 2);
    size_t pos = 0, klen = 0;
    const uint8_t *k = rdzv_wire_next_key(&q, &pos, &klen);
    assert_non_null(k);
    assert_int_equal(klen, 1);
    assert_memory_equal(k, "a", 1);
    k = rdzv_wire_next_key(&q, &pos, &klen);
    assert_non_null(k);
    assert_int_equal(klen, 2);
    assert_memory_equal(k, "bc", 2);
    assert_null(rdzv_wire_next_key(&q, &pos, &klen));
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.op, RDZV_OP_ADD);
    assert_int_equal(q.delta, -5);
    assert_memory_equal(q.key, "cnt", 3);
    assert_int_equal(off, b.len);

    /* Replies: status first, then the payload; ADD's is a little-endian i64. */
    buf_reset(&b);
    assert_int_equal(rdzv_wire_reply_text(&b, RDZV_ST_INVAL, "no"), 0);
    static const unsigned char refusal[] = {3, 0, 0, 0, RDZV_ST_INVAL, 'n', 'o'};
    assert_int_equal(b.len, sizeof(refusal));
    assert_memory_equal(b.data, refusal, sizeof(refusal));
    buf_reset(&b);
    assert_int_equal(rdzv_wire_reply_i64(&b, -2), 0);
    assert_int_equal(b.len, 4 + 9);
    assert_int_equal((unsigned char)b.data[4], RDZV_ST_OK);
    int64_t v = 0;
    assert_int_equal(rdzv_wire_i64((const uint8_t *)b.data + 5, 8, &v), 0);
    assert_int_equal(v, -2);
    assert_int_equal(rdzv_wire_i64((const uint8_t *)b.data + 5, 7, &v), -1);
    buf_release(&b);
}

/* Decodes body (len bytes); the result of rdzv_wire_decode. */
static int decode(const void *body, size_t len)
{
    struct rdzv_req q;
    return rdzv_wire_decode(body, len, &q);
}

static void test_rdzv_wire_bounds(void **state)
{
    (void)state;
    /* Frames: 1 to RDZV_FRAME_MAX body bytes. */
    uint32_t len = 0;
    const uint8_t zero[4] = {0, 0, 0, 0};
    assert_int_equal(rdzv_wire_frame_len(zero, &len), -1);
    uint8_t hdr[4];
    for (uint32_t n = RDZV_FRAME_MAX, i = 0; i < 4; i++)
        hdr[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(rdzv_wire_frame_len(hdr, &len), 0);
    assert_int_equal(len, RDZV_FRAME_MAX);
    for (uint32_t n = RDZV_FRAME_MAX + 1, i = 0; i < 4; i++)
        hdr[i] = (uint8_t)(n >> (8 * i));
    assert_int_equal(rdzv_wire_frame_len(hdr, &len), -1);

    /* Keys: 1 to RDZV_KEY_MAX bytes; a request decodes only when exact. */
    uint8_t body[8 + RDZV_KEY_MAX + 2];
    memset(body, 'k', sizeof(body));
    body[0] = RDZV_OP_GET;
    memset(body + 1, 0, 4);
    body[5] = RDZV_KEY_MAX & 0xff;
    body[6] = RDZV_KEY_MAX >> 8;
    assert_int_equal(decode(body, 7 + RDZV_KEY_MAX), RDZV_DEC_OK);
    assert_int_equal(decode(body, 7 + RDZV_KEY_MAX + 1), RDZV_DEC_MALFORMED); /* trailing */
    assert_int_equal(decode(body, 7 + RDZV_KEY_MAX - 1), RDZV_DEC_MALFORMED); /* short */
    body[5] = (RDZV_KEY_MAX + 1) & 0xff;
    body[6] = (RDZV_KEY_MAX + 1) >> 8;
    assert_int_equal(decode(body, 7 + RDZV_KEY_MAX + 1), RDZV_DEC_MALFORMED);
    body[5] = body[6] = 0;
    assert_int_equal(decode(body, 7), RDZV_DEC_MALFORMED); /* empty key */

    /* WAIT: at most RDZV_WAIT_KEYS_MAX keys. */
    uint8_t wait[7] = {RDZV_OP_WAIT, 0, 0, 0, 0, 0, 0};
    assert_int_equal(decode(wait, sizeof(wait)), RDZV_DEC_OK);
    wait[5] = (RDZV_WAIT_KEYS_MAX + 1) & 0xff;
    wait[6] = (RDZV_WAIT_KEYS_MAX + 1) >> 8;
    assert_int_equal(decode(wait, sizeof(wait)), RDZV_DEC_MALFORMED);

    /* HELLO: a secret under RDZV_SECRET_MAX bytes. */
    uint8_t *hello = calloc(1, 9 + RDZV_SECRET_MAX);
    assert_non_null(hello);
    hello[0] = RDZV_OP_HELLO;
    assert_int_equal(decode(hello, 9 + RDZV_SECRET_MAX - 1), RDZV_DEC_OK);
    assert_int_equal(decode(hello, 9 + RDZV_SECRET_MAX), RDZV_DEC_MALFORMED);
    assert_int_equal(decode(hello, 8), RDZV_DEC_MALFORMED);
    free(hello);

    /* Unknown ops are told apart from malformed ones. */
    uint8_t op = 99;
    assert_int_equal(decode(&op, 1), RDZV_DEC_UNKNOWN_OP);

    /* Encoders refuse what the decoder would, and leave the buffer as it was. */
    struct buf b = BUF_INIT;
    char *big = calloc(1, RDZV_VALUE_MAX + 1);
    assert_non_null(big);
    assert_int_equal(rdzv_wire_set(&b, "k", big, RDZV_VALUE_MAX + 1), DDP_ETOOBIG);
    assert_int_equal(b.len, 0);
    assert_int_equal(rdzv_wire_set(&b, "k", big, RDZV_VALUE_MAX), 0);
    size_t off = 0;
    struct rdzv_req q;
    assert_int_equal(next_frame(&b, &off, &q), RDZV_DEC_OK);
    assert_int_equal(q.len, RDZV_VALUE_MAX);
    buf_reset(&b);
    const char *keys[RDZV_WAIT_KEYS_MAX + 1];
    for (int i = 0; i <= RDZV_WAIT_KEYS_MAX; i++)
        keys[i] = "k";
    assert_int_equal(rdzv_wire_wait(&b, 0, keys, RDZV_WAIT_KEYS_MAX + 1), DDP_ETOOBIG);
    assert_int_equal(b.len, 0);
    memset(big, 's', RDZV_SECRET_MAX);
    big[RDZV_SECRET_MAX] = '\0';
    assert_int_equal(rdzv_wire_hello(&b, 0, 1, big), DDP_ETOOBIG);
    assert_int_equal(b.len, 0);
    free(big);
    buf_release(&b);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest heavy[] = {
        cmocka_unit_test(test_rdzv_total_bytes_bounded),
    };
    if (argc > 1 && strcmp(argv[1], "heavy") == 0)
        return cmocka_run_group_tests_name("rdzv_heavy", heavy, NULL, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rdzv_set_get_add_wait),
        cmocka_unit_test(test_rdzv_deadline_expires),
        cmocka_unit_test(test_rdzv_limits),
        cmocka_unit_test(test_rdzv_ranks_exchange_and_barrier),
        cmocka_unit_test(test_rdzv_wrong_secret_refused),
        cmocka_unit_test(test_rdzv_garbage_client_dropped),
        cmocka_unit_test(test_rdzv_malformed_requests_refused),
        cmocka_unit_test(test_rdzv_silent_connections_evicted),
        cmocka_unit_test(test_rdzv_long_frame_before_hello_dropped),
        cmocka_unit_test(test_rdzv_second_connection_for_a_rank_refused),
        cmocka_unit_test(test_rdzv_requests_never_read_stay_bounded),
        cmocka_unit_test(test_rdzv_port_in_use),
        cmocka_unit_test(test_rdzv_store_listens_on_master_addr),
        cmocka_unit_test(test_rdzv_reconnects_after_a_connection_closed_before_hello),
        cmocka_unit_test(test_rdzv_unreachable_times_out),
        cmocka_unit_test(test_rdzv_rank0_close_waits_for_others),
        cmocka_unit_test(test_rdzv_rank0_close_is_bounded),
        cmocka_unit_test(test_rdzv_rank0_close_skips_ranks_never_seen),
        cmocka_unit_test(test_rdzv_wire_round_trip),
        cmocka_unit_test(test_rdzv_wire_bounds),
    };
    return cmocka_run_group_tests_name("rdzv", tests, NULL, NULL);
}
