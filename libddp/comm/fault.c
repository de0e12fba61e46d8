/*
 * fault.c - failure notices of the CPU backend: what a rank tells its ring neighbours and
 * recursive-doubling partners when a collective fails, and the errors that name the rank
 * really at fault.
 *
 * A notice names the rank at fault by its global rank (not its ring index: in a
 * hierarchical ring the fault may be a non-leader behind a leader) and the kind of fault:
 * lost, silent (timed out), or a collective mismatch (then the rank named is the one that
 * found it, whose log has the two collectives). The first error of a comm is sticky: the
 * rank that saw it sends its notice to both ring neighbours - to the right as TCP urgent data on
 * send_fd, to the left in-band on recv_fd's unused reverse direction - and to every
 * recursive-doubling partner as a header with magic ABORT_MAGIC, then shuts the sockets
 * down, so the neighbours fail at once, name the rank at fault, and pass the notice on.
 *
 * A notice is 32 bits: the global rank in bits 0-29 (all ones: not known; a comm has at
 * most 65535 ranks), bit 30 set for a mismatch, bit 31 for silence. On the wire
 * (in host byte order: every rank of a job runs the same build):
 *  - to the left neighbour: the 4 bytes in-band on recv_fd's reverse direction, which
 *    carries nothing else after the set-up;
 *  - to the right neighbour (waiting up to NOTICE_WAIT_MS for room when the failed
 *    collective's data filled the buffer): TCP urgent data is one byte, so one urgent byte
 *    on send_fd
 *    (the short form: the rank when below 0x3f, else 0x3f, | 0x40 for a mismatch, | 0x80
 *    when silent), then the 4 bytes in-band right behind the urgent mark. The receiver drops what precedes the mark
 *    (the failed collective's data) and reads them; when they do not come within
 *    NOTICE_WAIT_MS (the sender's buffer was full) it keeps the short form;
 *  - to a recursive-doubling partner: the 4 bytes as the kind of a header with magic
 *    ABORT_MAGIC.
 *
 * Invariants:
 *  1. Only the thread running the failed collective calls these (comm_cpu.c invariant 1);
 *     cpu->notice is written here and by the ring and recursive doubling, read here.
 *  2. A notice that is passed on is passed on unchanged, except that a rank accused of
 *     silence while it was itself waiting on a neighbour passes on that neighbour.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/fault.h"

#define NOTICE_UNKNOWN  0x3fffffffu
#define NOTICE_MISMATCH 0x40000000u
#define NOTICE_SILENT   0x80000000u
/* The urgent byte's short form. */
#define NOTICE_BYTE_UNKNOWN  0x3f
#define NOTICE_BYTE_MISMATCH 0x40
#define NOTICE_BYTE_SILENT   0x80
/* How long a receiver waits for the 4 bytes behind the urgent mark. */
#define NOTICE_WAIT_MS 1000
/* How long a rank whose left neighbour ended without a notice waits for one from the right. */
#define NOTICE_EOF_WAIT_MS 100

uint32_t fault_notice(int rank, enum fault_kind kind)
{
    uint32_t r = rank >= 0 ? (uint32_t)rank & NOTICE_UNKNOWN : NOTICE_UNKNOWN;
    return r | (kind == FAULT_SILENT ? NOTICE_SILENT : 0) |
           (kind == FAULT_MISMATCH ? NOTICE_MISMATCH : 0);
}

int fault_notice_rank(uint32_t n)
{
    return (n & NOTICE_UNKNOWN) == NOTICE_UNKNOWN ? -1 : (int)(n & NOTICE_UNKNOWN);
}

enum fault_kind fault_notice_kind(uint32_t n)
{
    return (n & NOTICE_MISMATCH) ? FAULT_MISMATCH : (n & NOTICE_SILENT) ? FAULT_SILENT : FAULT_LOST;
}

enum fault_kind fault_kind_of(int code)
{
    return code == DDP_ETIMEOUT    ? FAULT_SILENT
           : code == DDP_EINTERNAL ? FAULT_MISMATCH
                                   : FAULT_LOST;
}

static uint8_t short_form(uint32_t n)
{
    int r = fault_notice_rank(n);
    enum fault_kind k = fault_notice_kind(n);
    uint8_t b = r >= 0 && r < NOTICE_BYTE_UNKNOWN ? (uint8_t)r : NOTICE_BYTE_UNKNOWN;
    return (uint8_t)(b | (k == FAULT_SILENT ? NOTICE_BYTE_SILENT : 0) |
                     (k == FAULT_MISMATCH ? NOTICE_BYTE_MISMATCH : 0));
}

static uint32_t from_short_form(uint8_t b)
{
    int r = b & NOTICE_BYTE_UNKNOWN;
    enum fault_kind k = (b & NOTICE_BYTE_MISMATCH) ? FAULT_MISMATCH
                        : (b & NOTICE_BYTE_SILENT) ? FAULT_SILENT
                                                   : FAULT_LOST;
    return fault_notice(r == NOTICE_BYTE_UNKNOWN ? -1 : r, k);
}

/* After urgent byte b was read from fd: the notice behind the urgent mark (what precedes the
 * mark is dropped), or b's short form when it does not come within NOTICE_WAIT_MS. */
static uint32_t behind_mark(int fd, uint8_t b)
{
    int64_t deadline = time_deadline_ms(NOTICE_WAIT_MS);
    char junk[4096];
    for (;;) {
        int at = 0;
        if (ioctl(fd, SIOCATMARK, &at) < 0)
            return from_short_form(b);
        if (at)
            break;
        if (time_left_ms(deadline) == 0)
            return from_short_form(b);
        /* A read that starts before the mark stops at it. */
        ssize_t k = recv(fd, junk, sizeof(junk), MSG_DONTWAIT);
        if (k > 0 || (k < 0 && errno == EINTR))
            continue;
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
            return from_short_form(b);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)time_left_ms(deadline)) <= 0)
            return from_short_form(b);
    }
    uint32_t n = 0;
    struct ddp_err e;
    if (net_recv_all(fd, &n, sizeof(n), deadline, &e) < 0)
        return from_short_form(b);
    return n;
}

/* An urgent notice waiting on fd: 1 with *n set, else 0. */
static int read_urgent(int fd, uint32_t *n)
{
    uint8_t b = 0;
    if (recv(fd, &b, 1, MSG_OOB | MSG_DONTWAIT) != 1)
        return 0;
    *n = behind_mark(fd, b);
    return 1;
}

/* A notice sent in-band on fd's reverse direction: 1 with *n set; 0 when none is there
 * (nothing yet, or the end of the stream); -1 on a socket error, *e = its errno. */
static int read_inband(int fd, uint32_t *n, int *e)
{
    unsigned char buf[4];
    ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (k < 0) {
        *e = errno == EAGAIN || errno == EWOULDBLOCK ? 0 : errno;
        return *e ? -1 : 0;
    }
    if (k == 0)
        return 0;
    struct ddp_err de;
    if (k < (ssize_t)sizeof(buf) && net_recv_all(fd, buf + k, sizeof(buf) - (size_t)k,
                                                 time_deadline_ms(NOTICE_WAIT_MS), &de) < 0)
        return 0;
    memcpy(n, buf, sizeof(*n));
    return 1;
}

int fault_peer_lost(struct comm *c, int peer, const char *name, const char *what, int e,
                    struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    cpu->notice = fault_notice(cpu_global_rank(cpu, peer), FAULT_LOST);
    return err_set(err, DDP_EPEER, "peer rank %d (%s) lost during %s: %s",
                   cpu_global_rank(cpu, peer), name, what, net_errno_text(e));
}

int fault_from_notice(struct comm *c, uint32_t b, int via, const char *via_name, const char *what,
                      struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    cpu->notice = b;
    int rank = fault_notice_rank(b);
    enum fault_kind kind = fault_notice_kind(b);
    if (kind == FAULT_MISMATCH) {
        /* No rank's data is lost: the program issued different collectives. Every rank fails
         * with the finder's kind of error, so none of them reads as a dead peer. */
        char finder[32] = "a rank";
        if (rank >= 0)
            snprintf(finder, sizeof(finder), "rank %d", rank);
        return err_set(err, DDP_EINTERNAL,
                       "collective mismatch during %s: %s found it (its log names both "
                       "collectives; reported by rank %d)",
                       what, finder, cpu_global_rank(cpu, via));
    }
    if (rank < 0)
        return err_set(err, DDP_EPEER, "peer rank %d (%s) aborted the %s (see its log)",
                       cpu_global_rank(cpu, via), via_name, what);
    if (rank == c->rank && cpu->wait_peer >= 0) {
        /* A neighbour timed out on this rank, which was itself waiting on wait_peer: in a
         * stalled ring that one is the better suspect; pass it on. */
        int peer = cpu->wait_peer;
        cpu->notice = fault_notice(cpu_global_rank(cpu, peer), FAULT_SILENT);
        return err_set(err, DDP_ETIMEOUT,
                       "peer rank %d (%s) silent for %" PRId64 " ms during %s (rank %d timed "
                       "out on this rank while this rank waited for it)",
                       cpu_global_rank(cpu, peer),
                       peer == cpu->left ? cpu->left_name : cpu->right_name, c->opts.timeout_ms,
                       what, cpu_global_rank(cpu, via));
    }
    if (rank == c->rank)
        return err_set(err, kind == FAULT_SILENT ? DDP_ETIMEOUT : DDP_EPEER,
                       "rank %d (%s) gave up on this rank during %s (it was %s)",
                       cpu_global_rank(cpu, via), via_name, what,
                       kind == FAULT_SILENT ? "silent" : "unreachable");
    if (kind == FAULT_SILENT)
        return err_set(err, DDP_ETIMEOUT,
                       "peer rank %d silent for %" PRId64 " ms during %s (reported by rank %d)",
                       rank, c->opts.timeout_ms, what, cpu_global_rank(cpu, via));
    return err_set(err, DDP_EPEER, "peer rank %d lost during %s (reported by rank %d)", rank, what,
                   cpu_global_rank(cpu, via));
}

/* The left neighbour's stream ended or broke (see fault.h). Its urgent notice is usually
 * gone by now (reading past the urgent mark drops it; the poll loop catches it while
 * blocked), but a notice from the right may already be waiting: either names the rank
 * really at fault better than "the left closed". */
int fault_recv_failed(struct comm *c, const char *what, int e, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    uint32_t n = 0;
    int ignored = 0;
    if (read_urgent(cpu->recv_fd, &n))
        return fault_from_notice(c, n, cpu->left, cpu->left_name, what, err);
    if (read_inband(cpu->send_fd, &n, &ignored) == 1)
        return fault_from_notice(c, n, cpu->right, cpu->right_name, what, err);
    /* A clean end from the left with no notice yet: a read that began right at the left
     * neighbour's urgent mark passes it (and takes the notice's bytes for data), so its
     * notice is lost here. The right neighbour, told in-band by it, passes the notice on
     * to this rank within moments: wait for that a little (a ring of two has no other
     * neighbour to ask). */
    if (e == 0 && cpu->left != cpu->right) {
        struct pollfd rp = {.fd = cpu->send_fd, .events = POLLIN};
        if (poll(&rp, 1, NOTICE_EOF_WAIT_MS) > 0 && read_inband(cpu->send_fd, &n, &ignored) == 1)
            return fault_from_notice(c, n, cpu->right, cpu->right_name, what, err);
    }
    /* No notice. A reset on the send socket means the right neighbour died (a live rank that
     * gives up sends a notice and a FIN), and the left one only passed that on. */
    struct pollfd sp = {.fd = cpu->send_fd, .events = POLLOUT};
    if (poll(&sp, 1, 0) > 0 && (sp.revents & (POLLERR | POLLHUP))) {
        int soerr = 0;
        socklen_t sl = sizeof(soerr);
        if (getsockopt(cpu->send_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr == 0)
            soerr = ECONNRESET;
        return fault_peer_lost(c, cpu->right, cpu->right_name, what, soerr, err);
    }
    return fault_peer_lost(c, cpu->left, cpu->left_name, what, e, err);
}

int fault_send_failed(struct comm *c, const char *what, int e, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    uint32_t n = 0;
    int re = 0, got = read_inband(cpu->send_fd, &n, &re);
    if (got == 1)
        return fault_from_notice(c, n, cpu->right, cpu->right_name, what, err);
    if (got < 0 && e == 0)
        e = re;
    return fault_peer_lost(c, cpu->right, cpu->right_name, what, e, err);
}

void fault_abort_ring(struct comm *c, const struct ddp_err *e)
{
    struct cpu *cpu = c->impl;
    /* A failure the shared memory saw names its rank at fault in the ring's notice; one the
     * ring saw names the ring's in the segment. */
    int code = 0;
    int fault = shm_fault(cpu->shm, &code);
    if (fault >= 0)
        cpu->notice = fault_notice(fault, fault_kind_of(code));
    else
        fault = fault_notice_rank(cpu->notice);
    shm_abort(cpu->shm, e, fault);
    if (!cpu->has_ring) {
        log_debug("comm: rank %d: %s", c->rank, e->msg);
        return;
    }
    uint32_t n = cpu->notice;
    uint8_t b = short_form(n);
    /* Bounded by NOTICE_WAIT_MS: a full buffer (a large collective's data) delays this
     * rank's exit by at most that, where a lost notice would name the wrong fault. */
    int64_t deadline = time_deadline_ms(NOTICE_WAIT_MS);
    struct ddp_err se;
    if (net_send_flags(cpu->send_fd, &b, 1, MSG_OOB, deadline, &se) != 0 ||
        net_send_flags(cpu->send_fd, &n, sizeof(n), 0, deadline, &se) != 0)
        log_debug("comm: rank %d: notice to the right not sent", c->rank);
    if (send(cpu->recv_fd, &n, sizeof(n), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(n))
        log_debug("comm: rank %d: notice to the left not sent", c->rank);
    shutdown(cpu->send_fd, SHUT_RDWR);
    shutdown(cpu->recv_fd, SHUT_RDWR);
    /* Recursive-doubling partners get the notice as a header (read where they expect one). */
    struct rd_hdr nh = {.magic = ABORT_MAGIC, .kind = n};
    for (int i = 0; cpu->rd_fd && i < cpu->rworld; i++) {
        if (cpu->rd_fd[i] < 0)
            continue;
        if (send(cpu->rd_fd[i], &nh, sizeof(nh), MSG_NOSIGNAL | MSG_DONTWAIT) !=
            (ssize_t)sizeof(nh))
            log_debug("comm: rank %d: notice to partner %d not sent", c->rank,
                      cpu_global_rank(cpu, i));
        shutdown(cpu->rd_fd[i], SHUT_RDWR);
    }
    log_debug("comm: rank %d: %s", c->rank, e->msg);
}

int fault_urgent_notice(struct comm *c, const char *what, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    struct pollfd up = {.fd = cpu->recv_fd, .events = POLLPRI};
    uint32_t n = 0;
    if (poll(&up, 1, 0) > 0 && (up.revents & POLLPRI) && read_urgent(cpu->recv_fd, &n))
        return fault_from_notice(c, n, cpu->left, cpu->left_name, what, err);
    return 0;
}
