/*
 * testutil.c - helpers shared by the loopback cmocka tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/unit/testutil.h"

int testutil_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t sl = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd);
    return ntohs(a.sin_port);
}

double testutil_input(uint64_t s, int r, size_t i)
{
    uint64_t x = s * 0x9E3779B97F4A7C15ull ^ ((uint64_t)r << 40) ^ (uint64_t)i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}
