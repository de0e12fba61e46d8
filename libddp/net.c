/*
 * net.c - TCP helpers with deadlines (see net.h).
 *
 * Invariants: every socket handed out is non-blocking and close-on-exec; every wait is a
 * poll() bounded by the caller's deadline on the monotonic clock, resumed after EINTR; every
 * send passes MSG_NOSIGNAL. A listener given a host listens on one of host's addresses, never
 * on every address, except through net_listen_at, which says when and why it did.
 */
#include "libddp/net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/timeutil.h"

int net_set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
        return DDP_EIO;
    int fdfl = fcntl(fd, F_GETFD);
    if (fdfl < 0 || fcntl(fd, F_SETFD, fdfl | FD_CLOEXEC) < 0)
        return DDP_EIO;
    return 0;
}

int net_set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        return DDP_EIO;
    return 0;
}

const char *net_errno_text(int e)
{
    switch (e) {
    case 0:
        return "connection closed by peer";
    case ECONNRESET:
        return "connection reset by peer";
    case EPIPE:
        return "connection closed by peer (broken pipe)";
    case ETIMEDOUT:
        return "connection timed out";
    case EHOSTUNREACH:
        return "host unreachable";
    case ENETUNREACH:
        return "network unreachable";
    case ECONNREFUSED:
        return "connection refused";
    default:
        return strerror(e);
    }
}

/* Milliseconds left until deadline, clamped to [0, INT32_MAX]. */
static int ms_left(int64_t deadline_ms)
{
    int64_t left = deadline_ms - time_mono_ms();
    if (left < 0)
        return 0;
    if (left > 0x7fffffff)
        return 0x7fffffff;
    return (int)left;
}

/* Polls fd for events until deadline; 1 ready, 0 timed out, DDP_EIO on poll failure. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int n = poll(&p, 1, ms_left(deadline_ms));
        if (n > 0)
            return 1;
        if (n == 0)
            return 0;
        if (errno != EINTR)
            return DDP_EIO;
    }
}

/* "127.0.0.2:29500", "[::1]:29500", or "port 29500" for a wildcard address: the address a
 * listen error names. */
static void listen_name(const struct sockaddr *sa, int port, char *buf, size_t size)
{
    char host[64];
    const void *src = NULL;
    int any = 0;
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
        src = &a6->sin6_addr;
        any = IN6_IS_ADDR_UNSPECIFIED(&a6->sin6_addr);
    } else {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)sa;
        src = &a4->sin_addr;
        any = a4->sin_addr.s_addr == htonl(INADDR_ANY);
    }
    if (any || !inet_ntop(sa->sa_family, src, host, sizeof(host)))
        snprintf(buf, size, "port %d", port);
    else
        snprintf(buf, size, sa->sa_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
}

/* Listens on one address; a failed bind leaves its errno in *bind_errno (may be NULL). */
static int listen_on(int family, const struct sockaddr *sa, socklen_t salen, int backlog,
                     int *fd_out, int *port_out, int port, int *bind_errno, struct ddp_err *err)
{
    int ret = 0;
    char name[NET_ADDR_MAX];
    listen_name(sa, port, name, sizeof(name));
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ret = err_set(err, errno == EAFNOSUPPORT ? DDP_EUNAVAIL : DDP_EIO, "socket: %s",
                      strerror(errno));
        goto out;
    }
    int one = 1, zero = 0;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) {
        ret = err_set(err, DDP_EIO, "setsockopt SO_REUSEADDR: %s", strerror(errno));
        goto out;
    }
    if (family == AF_INET6 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero)) < 0) {
        ret = err_set(err, DDP_EUNAVAIL, "setsockopt IPV6_V6ONLY: %s", strerror(errno));
        goto out;
    }
    if (bind(fd, sa, salen) < 0) {
        if (bind_errno)
            *bind_errno = errno;
        if (errno == EADDRINUSE)
            ret = err_set(err, DDP_EEXIST, "%s is already in use", name);
        else if (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT)
            ret = err_set(err, DDP_EUNAVAIL, "bind %s: %s", name, strerror(errno));
        else
            ret = err_set(err, DDP_EIO, "bind %s: %s", name, strerror(errno));
        goto out;
    }
    if (listen(fd, backlog) < 0) {
        ret = err_set(err, errno == EADDRINUSE ? DDP_EEXIST : DDP_EIO, "listen %s: %s", name,
                      strerror(errno));
        goto out;
    }
    if (net_set_nonblock(fd) < 0) {
        ret = err_set(err, DDP_EIO, "fcntl: %s", strerror(errno));
        goto out;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        ret = err_set(err, DDP_EIO, "getsockname: %s", strerror(errno));
        goto out;
    }
    if (port_out) {
        if (ss.ss_family == AF_INET6)
            *port_out = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        else
            *port_out = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    *fd_out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return ret;
}

/* Listens on every address: IPv6 dual-stack where the kernel has IPv6, IPv4 otherwise. */
static int listen_every(int port, int backlog, int *fd_out, int *port_out, struct ddp_err *err)
{
    struct sockaddr_in6 a6;
    memset(&a6, 0, sizeof(a6));
    a6.sin6_family = AF_INET6;
    a6.sin6_addr = in6addr_any;
    a6.sin6_port = htons((uint16_t)port);
    int ret = listen_on(AF_INET6, (struct sockaddr *)&a6, sizeof(a6), backlog, fd_out, port_out,
                        port, NULL, err);
    if (ret != DDP_EUNAVAIL)
        return ret;
    struct sockaddr_in a4;
    memset(&a4, 0, sizeof(a4));
    a4.sin_family = AF_INET;
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    a4.sin_port = htons((uint16_t)port);
    return listen_on(AF_INET, (struct sockaddr *)&a4, sizeof(a4), backlog, fd_out, port_out, port,
                     NULL, err);
}

/* How listen_host failed where a caller may fall back to every address. */
enum host_fail { HOST_OK, HOST_UNRESOLVED, HOST_NOT_LOCAL, HOST_OTHER };

/* Listens on the first of host's addresses that binds. *fail says why none did. */
static int listen_host(const char *host, int port, int backlog, int *fd_out, int *port_out,
                       enum host_fail *fail, struct ddp_err *err)
{
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int g = getaddrinfo(host, portstr, &hints, &res);
    if (g != 0) {
        *fail = HOST_UNRESOLVED;
        return err_set(err, DDP_EINVAL, "cannot resolve '%s': %s", host, gai_strerror(g));
    }
    int ret = err_set(err, DDP_EINVAL, "'%s' has no address", host);
    *fail = HOST_OTHER;
    struct ddp_err first;
    err_clear(&first);
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int be = 0;
        ret = listen_on(ai->ai_family, ai->ai_addr, ai->ai_addrlen, backlog, fd_out, port_out, port,
                        &be, err);
        if (ret != DDP_EUNAVAIL)
            break;
        /* Not this host's (or its family is off): the next address may be. */
        if (be == EADDRNOTAVAIL && !first.code) {
            first = *err;
            *fail = HOST_NOT_LOCAL;
        }
    }
    freeaddrinfo(res);
    if (ret == 0)
        *fail = HOST_OK;
    else if (ret == DDP_EUNAVAIL && first.code)
        *err = first; /* name the first address that is not this host's */
    else if (ret != DDP_EUNAVAIL)
        *fail = HOST_OTHER;
    return ret;
}

int net_listen(const char *host, int port, int backlog, int *fd_out, int *port_out,
               struct ddp_err *err)
{
    if (port < 0 || port > 65535)
        return err_set(err, DDP_EINVAL, "port %d is out of range [0, 65535]", port);
    if (!host || !*host)
        return listen_every(port, backlog, fd_out, port_out, err);
    enum host_fail fail;
    return listen_host(host, port, backlog, fd_out, port_out, &fail, err);
}

int net_listen_at(const char *host, int port, int backlog, int *fd_out, int *port_out,
                  const char **every_why, struct ddp_err *err)
{
    if (port < 0 || port > 65535)
        return err_set(err, DDP_EINVAL, "port %d is out of range [0, 65535]", port);
    enum host_fail fail = HOST_OK;
    int ret = 0;
    if (!host || !*host)
        ret = listen_every(port, backlog, fd_out, port_out, err);
    else
        ret = listen_host(host, port, backlog, fd_out, port_out, &fail, err);
    const char *why = NULL;
    if (ret < 0 && fail == HOST_UNRESOLVED)
        why = "does not resolve";
    else if (ret < 0 && fail == HOST_NOT_LOCAL)
        why = "is not an address of this host";
    if (why)
        ret = listen_every(port, backlog, fd_out, port_out, err);
    if (ret == 0)
        *every_why = why;
    return ret;
}

/* One non-blocking connect to one address; 0, DDP_EUNAVAIL, DDP_ETIMEOUT or DDP_EIO. */
static int connect_one(const struct addrinfo *ai, int64_t deadline_ms, int *fd_out,
                       struct ddp_err *err)
{
    int ret = 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        ret = err_set(err, DDP_EUNAVAIL, "socket: %s", strerror(errno));
        goto out;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            ret = err_set(err, DDP_EUNAVAIL, "%s", net_errno_text(errno));
            goto out;
        }
        int w = wait_fd(fd, POLLOUT, deadline_ms);
        if (w == 0) {
            ret = err_set(err, DDP_ETIMEOUT, "connect timed out");
            goto out;
        }
        if (w < 0) {
            ret = err_set(err, DDP_EIO, "poll: %s", strerror(errno));
            goto out;
        }
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0) {
            ret = err_set(err, DDP_EIO, "getsockopt: %s", strerror(errno));
            goto out;
        }
        if (soerr != 0) {
            ret = err_set(err, DDP_EUNAVAIL, "%s", net_errno_text(soerr));
            goto out;
        }
    }
    if (net_set_nodelay(fd) < 0) {
        ret = err_set(err, DDP_EIO, "setsockopt TCP_NODELAY: %s", strerror(errno));
        goto out;
    }
    *fd_out = fd;
    fd = -1;
out:
    if (fd >= 0)
        close(fd);
    return ret;
}

int net_connect(const char *host, int port, int64_t deadline_ms, int *fd_out, struct ddp_err *err)
{
    if (port <= 0 || port > 65535)
        return err_set(err, DDP_EINVAL, "port %d is out of range [1, 65535]", port);
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int g = getaddrinfo(host, portstr, &hints, &res);
    if (g != 0) {
        /* A name may not resolve yet (a peer's DNS record appears when it starts): worth
         * retrying until the caller's deadline, like a refused connection. */
        return err_set(err, DDP_EUNAVAIL, "cannot resolve '%s': %s", host, gai_strerror(g));
    }
    int ret = err_set(err, DDP_EUNAVAIL, "'%s' has no address", host);
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        ret = connect_one(ai, deadline_ms, fd_out, err);
        if (ret == 0 || ret == DDP_ETIMEOUT)
            break;
    }
    freeaddrinfo(res);
    return ret;
}

int net_accept(int lfd, int64_t deadline_ms, int *fd_out, struct ddp_err *err)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0) {
            if (net_set_nodelay(fd) < 0) {
                int e = errno;
                close(fd);
                return err_set(err, DDP_EIO, "setsockopt TCP_NODELAY: %s", strerror(e));
            }
            *fd_out = fd;
            return 0;
        }
        if (errno == EINTR || errno == ECONNABORTED)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return err_set(err, DDP_EIO, "accept: %s", strerror(errno));
        int w = wait_fd(lfd, POLLIN, deadline_ms);
        if (w == 0)
            return err_set(err, DDP_ETIMEOUT, "no connection arrived in time");
        if (w < 0)
            return err_set(err, DDP_EIO, "poll: %s", strerror(errno));
    }
}

int net_send_all(int fd, const void *buf, size_t len, int64_t deadline_ms, struct ddp_err *err)
{
    return net_send_flags(fd, buf, len, 0, deadline_ms, err);
}

int net_send_flags(int fd, const void *buf, size_t len, int flags, int64_t deadline_ms,
                   struct ddp_err *err)
{
    const char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(fd, p + done, len - done, flags | MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return err_set(err, DDP_EPEER, "%s", net_errno_text(errno));
        int w = wait_fd(fd, POLLOUT, deadline_ms);
        if (w == 0)
            return err_set(err, DDP_ETIMEOUT, "send timed out");
        if (w < 0)
            return err_set(err, DDP_EIO, "poll: %s", strerror(errno));
    }
    return 0;
}

int net_recv_all(int fd, void *buf, size_t len, int64_t deadline_ms, struct ddp_err *err)
{
    char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = recv(fd, p + done, len - done, MSG_DONTWAIT);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n == 0)
            return err_set(err, DDP_EPEER, "%s", net_errno_text(0));
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return err_set(err, DDP_EPEER, "%s", net_errno_text(errno));
        int w = wait_fd(fd, POLLIN, deadline_ms);
        if (w == 0)
            return err_set(err, DDP_ETIMEOUT, "receive timed out");
        if (w < 0)
            return err_set(err, DDP_EIO, "poll: %s", strerror(errno));
    }
    return 0;
}

static int sockaddr_host(const struct sockaddr_storage *ss, char *buf, size_t size, int *port)
{
    const void *src;
    int fam = ss->ss_family;
    if (fam == AF_INET6) {
        const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)ss;
        /* A v4-mapped address (dual-stack socket) is written as plain IPv4. */
        if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr)) {
            fam = AF_INET;
            src = &a6->sin6_addr.s6_addr[12];
        } else {
            src = &a6->sin6_addr;
        }
        *port = ntohs(a6->sin6_port);
    } else if (fam == AF_INET) {
        const struct sockaddr_in *a4 = (const struct sockaddr_in *)ss;
        src = &a4->sin_addr;
        *port = ntohs(a4->sin_port);
    } else {
        return DDP_EIO;
    }
    if (!inet_ntop(fam, src, buf, (socklen_t)size))
        return DDP_EIO;
    return fam == AF_INET6 ? 6 : 4;
}

int net_local_host(int fd, char *buf, size_t size)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int port = 0;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return DDP_EIO;
    return sockaddr_host(&ss, buf, size, &port) < 0 ? DDP_EIO : 0;
}

int net_peer_name(int fd, char *buf, size_t size)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[64];
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return DDP_EIO;
    int fam = sockaddr_host(&ss, host, sizeof(host), &port);
    if (fam < 0)
        return DDP_EIO;
    int n = snprintf(buf, size, fam == 6 ? "[%s]:%d" : "%s:%d", host, port);
    return n < 0 || (size_t)n >= size ? DDP_EIO : 0;
}

int net_split_hostport(const char *s, char *host, size_t hostsize, int *port)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        return DDP_EINVAL;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (h[0] == '[') {
        if (hl < 2 || h[hl - 1] != ']')
            return DDP_EINVAL;
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= hostsize)
        return DDP_EINVAL;
    long p = 0;
    const char *q = colon + 1;
    if (!*q)
        return DDP_EINVAL;
    for (; *q; q++) {
        if (*q < '0' || *q > '9')
            return DDP_EINVAL;
        p = p * 10 + (*q - '0');
        if (p > 65535)
            return DDP_EINVAL;
    }
    if (p == 0)
        return DDP_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    *port = (int)p;
    return 0;
}
