/*
 * test_sdnotify.c - common/sdnotify: READY=1 reaches a path socket and an abstract one, as
 * one datagram; no socket means nothing sent; a bad name, an oversized state and a socket
 * nobody listens on are errors, never a hang.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/sdnotify.h"

/* A datagram socket bound to name (a path, or '@' then an abstract name); returns its fd. */
static int listen_at(const char *name)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    size_t n = strlen(name);
    assert_true(n < sizeof(sa.sun_path));
    memcpy(sa.sun_path, name, n);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    if (name[0] == '@')
        sa.sun_path[0] = '\0';
    else
        len++;
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, len), 0);
    return fd;
}

/* The one datagram waiting on fd, NUL-terminated in buf. */
static void recv_one(int fd, char *buf, size_t cap)
{
    ssize_t n = recv(fd, buf, cap - 1, MSG_DONTWAIT);
    assert_true(n >= 0);
    buf[n] = '\0';
    char more;
    assert_true(recv(fd, &more, 1, MSG_DONTWAIT) < 0); /* exactly one datagram */
}

static void test_sdnotify_path_socket_gets_ready(void **state)
{
    (void)state;
    char dir[] = "/tmp/ddp-sdnotify-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    assert_true(snprintf(path, sizeof(path), "%s/notify", dir) < (int)sizeof(path));
    int fd = listen_at(path);
    struct ddp_err err;
    assert_int_equal(sdnotify_send_to(path, "READY=1\nSTATUS=listening", &err), 1);
    char buf[256];
    recv_one(fd, buf, sizeof(buf));
    assert_string_equal(buf, "READY=1\nSTATUS=listening");
    assert_int_equal(close(fd), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_sdnotify_abstract_socket_gets_ready(void **state)
{
    (void)state;
    char name[64];
    assert_true(snprintf(name, sizeof(name), "@ddp-test-sdnotify-%ld", (long)getpid()) > 0);
    int fd = listen_at(name);
    struct ddp_err err;
    assert_int_equal(setenv("NOTIFY_SOCKET", name, 1), 0);
    assert_int_equal(sdnotify_send("READY=1", &err), 1);
    assert_int_equal(unsetenv("NOTIFY_SOCKET"), 0);
    char buf[64];
    recv_one(fd, buf, sizeof(buf));
    assert_string_equal(buf, "READY=1");
    assert_int_equal(close(fd), 0);
}

static void test_sdnotify_no_socket_sends_nothing(void **state)
{
    (void)state;
    struct ddp_err err;
    assert_int_equal(unsetenv("NOTIFY_SOCKET"), 0);
    assert_int_equal(sdnotify_send("READY=1", &err), 0);
    assert_int_equal(sdnotify_send_to("", "READY=1", &err), 0);
    assert_int_equal(sdnotify_send_to(NULL, "READY=1", &err), 0);
}

static void test_sdnotify_errors(void **state)
{
    (void)state;
    struct ddp_err err;
    assert_int_equal(sdnotify_send_to("relative/notify", "READY=1", &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "not a path or @name"));
    char longname[200];
    memset(longname, 'x', sizeof(longname) - 1);
    longname[0] = '/';
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(sdnotify_send_to(longname, "READY=1", &err), DDP_EINVAL);
    char big[SDNOTIFY_STATE_MAX + 2];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    assert_int_equal(sdnotify_send_to("@x", big, &err), DDP_ETOOBIG);
    /* Nobody listens there: an error at once, not a hang. */
    assert_int_equal(sdnotify_send_to("/nonexistent-ddp-dir/notify", "READY=1", &err), DDP_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent-ddp-dir/notify"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sdnotify_path_socket_gets_ready),
        cmocka_unit_test(test_sdnotify_abstract_socket_gets_ready),
        cmocka_unit_test(test_sdnotify_no_socket_sends_nothing),
        cmocka_unit_test(test_sdnotify_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
