/*
 * sdnotify.h - systemd's readiness notification (sd_notify(3)) without libsystemd.
 *
 * A service of Type=notify gets $NOTIFY_SOCKET, the address of a datagram socket: a path
 * ("/run/systemd/notify") or, with a leading '@', a name in the abstract namespace. The
 * service sends it one datagram of newline-separated assignments ("READY=1", "STOPPING=1",
 * "STATUS=..."). Outside systemd the variable is unset and nothing is sent.
 */
#ifndef DDP_COMMON_SDNOTIFY_H
#define DDP_COMMON_SDNOTIFY_H

#include "common/err.h"

/* The longest state sdnotify_send() sends; a longer one is refused with DDP_ETOOBIG. */
#define SDNOTIFY_STATE_MAX 1024

/* Sends state (borrowed, e.g. "READY=1") as one datagram to the socket named by socket_name,
 * which is the value of $NOTIFY_SOCKET (may be NULL or empty: nothing to do). Returns 1 when
 * sent, 0 when there is no socket to send to, or a negative code with err filled: DDP_EINVAL
 * for a name that is neither an absolute path nor '@'-prefixed or too long for sockaddr_un,
 * DDP_ETOOBIG for a state over SDNOTIFY_STATE_MAX, DDP_EIO when the socket or the send fails.
 * Never blocks: the send is non-blocking. */
int sdnotify_send_to(const char *socket_name, const char *state, struct ddp_err *err);

/* sdnotify_send_to() with getenv("NOTIFY_SOCKET"). */
int sdnotify_send(const char *state, struct ddp_err *err);

#endif
