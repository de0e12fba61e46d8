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
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "worker/rdzv.h"

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
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        abort();
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
