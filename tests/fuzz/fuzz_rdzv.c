/*
 * fuzz_rdzv.c - libFuzzer target over the rendezvous store's server, through a real socket:
 * a store (rank 0 of 2, secret "s") serves on a loopback port for the whole run; each input
 * is sent on a fresh connection, after a valid hello when the first byte is even (so the
 * fuzzer reaches set/get/wait/add), raw otherwise; then the client half-closes and reads
 * whatever comes back until the server closes. The server thread is compiled with the
 * fuzzer's coverage, so the parser is explored like any in-process code.
 *
 * Invariants checked: no crash, no undefined behaviour, no hang (a half-closed connection
 * must be dropped even with a request pending), and the store still answers its own client
 * after every input.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "ddp/rdzv.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct rdzv *store;
static int store_port;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct ddp_err err;
    for (int attempt = 0; attempt < 20 && !store; attempt++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof(a));
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t sl = sizeof(a);
        if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
            getsockname(fd, (struct sockaddr *)&a, &sl) != 0)
            abort();
        close(fd);
        store_port = ntohs(a.sin_port);
        if (rdzv_open("127.0.0.1", store_port, 0, 2, "s", 5000, &store, &err) != 0)
            store = NULL;
    }
    if (!store)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        abort();
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)store_port);
    /* Each input is one connection, closed with a reset. The store side still keeps a
     * TIME_WAIT entry per connection, which ties up the client's port for the store's
     * address: the test bounds the runs (-runs) below the ephemeral port range, and a
     * connect() that finds no free port is not a finding. */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    int rc;
    do {
        rc = connect(fd, (struct sockaddr *)&a, sizeof(a));
    } while (rc != 0 && errno == EINTR); /* libFuzzer's timers */
    if (rc != 0 && (errno == EALREADY || errno == EISCONN || errno == EINPROGRESS)) {
        /* Interrupted and still going on: wait for it. */
        struct timeval wt = {.tv_sec = 5};
        fd_set w;
        FD_ZERO(&w);
        FD_SET(fd, &w);
        int e = 0;
        socklen_t el = sizeof(e);
        if (select(fd + 1, NULL, &w, NULL, &wt) == 1 &&
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == 0 && e == 0)
            rc = 0;
        else
            errno = e ? e : ETIMEDOUT;
    }
    if (rc != 0) {
        if (errno != EADDRNOTAVAIL) {
            perror("fuzz_rdzv: connect to the store");
            abort(); /* the store stopped accepting */
        }
        close(fd); /* out of local ports: not a finding */
        return 0;
    }
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (data[0] % 2 == 0) {
        static const unsigned char hello[] = {10, 0, 0, 0, 1, 1, 0, 0, 0, 2, 0, 0, 0, 's'};
        if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL) != (ssize_t)sizeof(hello))
            abort();
    }
    if (size > 1 && send(fd, data + 1, size - 1, MSG_NOSIGNAL) < 0) {
        /* The server may drop us mid-send: fine. */
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n == 0)
            break;
        if (n < 0)
            abort(); /* the server kept a half-closed connection for 5 s: a hang */
    }
    close(fd);
    struct ddp_err err;
    if (rdzv_set(store, "fuzz/alive", "1", 1, &err) != 0)
        abort();
    return 0;
}
