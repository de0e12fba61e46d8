/*
 * net.h - TCP socket helpers with deadlines, shared by the rendezvous store (rdzv.c) and the
 * CPU comm backend (comm_cpu.c).
 *
 * Every blocking step takes an absolute deadline on the monotonic clock (time_mono_ms());
 * nothing here waits past it. Sockets returned by these helpers are non-blocking and
 * close-on-exec; sends use MSG_NOSIGNAL so a closed peer never raises SIGPIPE.
 *
 * Errors: DDP_ETIMEOUT when the deadline passes, DDP_EPEER when the peer closed or reset the
 * connection, DDP_EUNAVAIL when a connect is refused, the host is unreachable or its name
 * does not resolve (all worth retrying), DDP_EEXIST when a listening port is taken,
 * DDP_EIO/DDP_EINVAL otherwise. Name resolution (getaddrinfo) is not bounded by the deadline:
 * pass addresses, or names the local resolver answers quickly.
 * Messages are short ("connection reset by peer") so callers can prefix the peer's name.
 */
#ifndef DDP_LIBDDP_NET_H
#define DDP_LIBDDP_NET_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Longest "host:port" string these helpers write (IPv6 text + brackets + port + NUL). */
#define NET_ADDR_MAX 80

/* Makes fd non-blocking and close-on-exec; returns 0 or DDP_EIO. */
int net_set_nonblock(int fd);

/* Turns Nagle off (TCP_NODELAY); returns 0 or DDP_EIO. */
int net_set_nodelay(int fd);

/*
 * Listens on port (0 = any free port) on all addresses (IPv6 dual-stack where the kernel has
 * IPv6, IPv4 otherwise) when host is NULL or empty, else on the first of host's addresses
 * that binds, with SO_REUSEADDR. On success *fd_out is the listening socket and *port_out
 * (may be NULL) the bound port. Errors name the address ("127.0.0.2:29500 is already in
 * use", "bind 10.0.0.9:0: Cannot assign requested address"): DDP_EEXIST when the port is
 * taken, DDP_EUNAVAIL when no address of host is this machine's, DDP_EINVAL when host does
 * not resolve.
 */
int net_listen(const char *host, int port, int backlog, int *fd_out, int *port_out,
               struct ddp_err *err);

/*
 * net_listen(host, ...), except where host cannot be bound because it is not this machine's
 * (a name or address behind NAT, a service address) or does not resolve (yet): then it
 * listens on every address, and *every_why (borrowed, static) says why ("is not an address
 * of this host", "does not resolve") for the caller to warn with; it is NULL when the
 * listener is on host's address (or on every address because host is NULL or empty). A
 * port that is taken, or any other failure, is an error as in net_listen.
 */
int net_listen_at(const char *host, int port, int backlog, int *fd_out, int *port_out,
                  const char **every_why, struct ddp_err *err);

/*
 * One connection attempt to host:port (every address host resolves to, in order), waiting at
 * most until deadline_ms. On success *fd_out is a connected non-blocking socket with
 * TCP_NODELAY set.
 */
int net_connect(const char *host, int port, int64_t deadline_ms, int *fd_out, struct ddp_err *err);

/* Accepts one connection on listening socket lfd (non-blocking) before deadline_ms. */
int net_accept(int lfd, int64_t deadline_ms, int *fd_out, struct ddp_err *err);

/* Sends / receives exactly len bytes on non-blocking fd before deadline_ms. A peer that
 * closes before len bytes arrive is DDP_EPEER ("connection closed by peer"). */
int net_send_all(int fd, const void *buf, size_t len, int64_t deadline_ms, struct ddp_err *err);
/* net_send_all with send() flags (MSG_OOB: TCP urgent data). */
int net_send_flags(int fd, const void *buf, size_t len, int flags, int64_t deadline_ms,
                   struct ddp_err *err);
int net_recv_all(int fd, void *buf, size_t len, int64_t deadline_ms, struct ddp_err *err);

/* The local / remote address of a connected socket as text without the port ("10.0.0.2",
 * "::1"); returns 0 or DDP_EIO. */
int net_local_host(int fd, char *buf, size_t size);
/* "host:port" of the remote end ("[::1]:41233" for IPv6); returns 0 or DDP_EIO. */
int net_peer_name(int fd, char *buf, size_t size);

/* Splits "host:port" or "[v6]:port" into host and port; returns 0 or DDP_EINVAL. */
int net_split_hostport(const char *s, char *host, size_t hostsize, int *port);

/* The message for a failed send/recv errno ("connection reset by peer"). */
const char *net_errno_text(int e);

#endif
