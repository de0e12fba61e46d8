/*
 * sdnotify.c - one datagram to $NOTIFY_SOCKET (sdnotify.h).
 *
 * Invariants: the socket is opened and closed within one call (nothing is kept between
 * calls); the name is copied into sockaddr_un with its length checked first; an abstract
 * name ('@' first) is sent with a leading NUL and an address length that counts only the
 * name's bytes, as systemd's own sd_notify() does.
 */
#include "common/sdnotify.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int sdnotify_send_to(const char *socket_name, const char *state, struct ddp_err *err)
{
    if (!socket_name || !*socket_name)
        return 0;
    size_t n = strlen(socket_name), len = strlen(state);
    if (len > SDNOTIFY_STATE_MAX)
        return err_set(err, DDP_ETOOBIG, "notify state: %zu bytes > %d", len, SDNOTIFY_STATE_MAX);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if ((socket_name[0] != '/' && socket_name[0] != '@') || n >= sizeof(sa.sun_path))
        return err_set(err, DDP_EINVAL, "NOTIFY_SOCKET '%.200s': not a path or @name", socket_name);
    memcpy(sa.sun_path, socket_name, n);
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (socket_name[0] == '@')
        sa.sun_path[0] = '\0';
    else
        salen++; /* a path's address counts its terminating NUL */

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return err_set(err, DDP_EIO, "notify socket: %s", strerror(errno));
    ssize_t w;
    do
        w = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    while (w < 0 && errno == EINTR);
    int saved = errno;
    if (close(fd) != 0 && w >= 0)
        return err_set(err, DDP_EIO, "notify socket: close: %s", strerror(errno));
    if (w < 0)
        return err_set(err, DDP_EIO, "notify %.200s: %s", socket_name, strerror(saved));
    if ((size_t)w != len)
        return err_set(err, DDP_EIO, "notify %.200s: short send (%zd of %zu bytes)", socket_name, w,
                       len);
    return 1;
}

int sdnotify_send(const char *state, struct ddp_err *err)
{
    return sdnotify_send_to(getenv("NOTIFY_SOCKET"), state, err);
}
