/*
 * testutil.c - helpers shared by the loopback cmocka tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

void testutil_fill(uint64_t seed, int rank, void *buf, size_t count, enum comm_dtype dt)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == COMM_F32)
            ((float *)buf)[i] = (float)testutil_input(seed, rank, i);
        else
            ((double *)buf)[i] = testutil_input(seed, rank, i);
    }
}

int testutil_check_sum(uint64_t seed, int world, const void *buf, size_t count, enum comm_dtype dt,
                       struct ddp_err *err)
{
    for (size_t i = 0; i < count; i++) {
        double ref = 0, mag = 0;
        for (int q = 0; q < world; q++) {
            double x = testutil_input(seed, q, i);
            if (dt == COMM_F32)
                x = (double)(float)x;
            ref += x;
            mag += fabs(x);
        }
        double got = dt == COMM_F32 ? (double)((const float *)buf)[i] : ((const double *)buf)[i];
        double tol = (dt == COMM_F32 ? 1e-5 : 1e-12) * (1.0 + mag);
        if (!(fabs(got - ref) <= tol))
            return err_set(err, DDP_EINTERNAL,
                           "W=%d count %zu %s element %zu: got %.17g, reference %.17g", world,
                           count, dt == COMM_F32 ? "f32" : "f64", i, got, ref);
    }
    return 0;
}

uint64_t testutil_fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

void testutil_kill_all(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}
