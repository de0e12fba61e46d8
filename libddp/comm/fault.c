/*
 * fault.c - failure notices of the CPU backend: what a rank tells its ring neighbours and
 * recursive-doubling partners when a collective fails, and the errors that name the rank
 * really at fault.
 *
 * A notice names the rank at fault by its global rank (not its ring index: in a
 * hierarchical ring the fault may be a non-leader behind a leader), and whether it was
 * silent (timed out) rather than lost. The first error of a comm is sticky: the rank that
 * saw it sends its notice to both ring neighbours - to the right as TCP urgent data on
 * send_fd, to the left in-band on recv_fd's unused reverse direction - and to every
 * recursive-doubling partner as a header with magic ABORT_MAGIC, then shuts the sockets
 * down, so the neighbours fail at once, name the rank at fault, and pass the notice on.
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
#include <sys/socket.h>

#include "common/log.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/fault.h"

/* The notice byte: the rank at fault in bits 0-6 (NOTICE_UNKNOWN when not known), bit 7
 * set when it was silent rather than lost. */
#define NOTICE_UNKNOWN 0x7f
#define NOTICE_SILENT 0x80

uint8_t fault_notice(int rank, int silent)
{
    uint8_t b = rank >= 0 && rank < NOTICE_UNKNOWN ? (uint8_t)rank : NOTICE_UNKNOWN;
    return (uint8_t)(b | (silent ? NOTICE_SILENT : 0));
}

int fault_notice_rank(uint8_t n)
{
    return (n & NOTICE_UNKNOWN) == NOTICE_UNKNOWN ? -1 : n & NOTICE_UNKNOWN;
}

int fault_notice_silent(uint8_t n)
{
    return (n & NOTICE_SILENT) != 0;
}

int fault_peer_lost(struct comm *c, int peer, const char *name, const char *what, int e,
                    struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    cpu->notice = fault_notice(cpu_global_rank(cpu, peer), 0);
    return err_set(err, DDP_EPEER, "peer rank %d (%s) lost during %s: %s",
                   cpu_global_rank(cpu, peer), name, what, net_errno_text(e));
}

int fault_from_notice(struct comm *c, uint8_t b, int via, const char *via_name, const char *what,
                      struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    cpu->notice = b;
    int rank = b & NOTICE_UNKNOWN;
    if (rank == NOTICE_UNKNOWN)
        return err_set(err, DDP_EPEER, "peer rank %d (%s) aborted the %s (see its log)",
                       cpu_global_rank(cpu, via), via_name, what);
    if (rank == c->rank && cpu->wait_peer >= 0) {
        /* A neighbour timed out on this rank, which was itself waiting on wait_peer: in a
         * stalled ring that one is the better suspect; pass it on. */
        int peer = cpu->wait_peer;
        cpu->notice = fault_notice(cpu_global_rank(cpu, peer), 1);
        return err_set(err, DDP_ETIMEOUT,
                       "peer rank %d (%s) silent for %" PRId64 " ms during %s (rank %d timed "
                       "out on this rank while this rank waited for it)",
                       cpu_global_rank(cpu, peer),
                       peer == cpu->left ? cpu->left_name : cpu->right_name, c->opts.timeout_ms,
                       what, cpu_global_rank(cpu, via));
    }
    if (rank == c->rank)
        return err_set(err, b & NOTICE_SILENT ? DDP_ETIMEOUT : DDP_EPEER,
                       "rank %d (%s) gave up on this rank during %s (it was %s)",
                       cpu_global_rank(cpu, via), via_name, what,
                       b & NOTICE_SILENT ? "silent" : "unreachable");
    if (b & NOTICE_SILENT)
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
    uint8_t b = 0;
    if (recv(cpu->recv_fd, &b, 1, MSG_OOB | MSG_DONTWAIT) == 1)
        return fault_from_notice(c, b, cpu->left, cpu->left_name, what, err);
    if (recv(cpu->send_fd, &b, 1, MSG_DONTWAIT) == 1)
        return fault_from_notice(c, b, cpu->right, cpu->right_name, what, err);
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
    uint8_t b = 0;
    ssize_t n = recv(cpu->send_fd, &b, 1, MSG_DONTWAIT);
    if (n == 1)
        return fault_from_notice(c, b, cpu->right, cpu->right_name, what, err);
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && e == 0)
        e = errno;
    return fault_peer_lost(c, cpu->right, cpu->right_name, what, e, err);
}

void fault_abort_ring(struct comm *c, const struct ddp_err *e)
{
    struct cpu *cpu = c->impl;
    /* A failure the shared memory saw names its rank at fault in the ring's notice; one the
     * ring saw names the ring's in the segment. */
    int silent = 0;
    int fault = shm_fault(cpu->shm, &silent);
    if (fault >= 0)
        cpu->notice = fault_notice(fault, silent);
    else
        fault = fault_notice_rank(cpu->notice);
    shm_abort(cpu->shm, e, fault);
    if (!cpu->has_ring) {
        log_debug("comm: rank %d: %s", c->rank, e->msg);
        return;
    }
    uint8_t b = cpu->notice;
    if (send(cpu->send_fd, &b, 1, MSG_OOB | MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
        log_debug("comm: rank %d: notice to the right not sent", c->rank);
    if (send(cpu->recv_fd, &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
        log_debug("comm: rank %d: notice to the left not sent", c->rank);
    shutdown(cpu->send_fd, SHUT_RDWR);
    shutdown(cpu->recv_fd, SHUT_RDWR);
    /* Recursive-doubling partners get the notice as a header (read where they expect one). */
    struct rd_hdr nh = {.magic = ABORT_MAGIC, .kind = b};
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
    uint8_t b = 0;
    if (poll(&up, 1, 0) > 0 && (up.revents & POLLPRI) &&
        recv(cpu->recv_fd, &b, 1, MSG_OOB | MSG_DONTWAIT) == 1)
        return fault_from_notice(c, b, cpu->left, cpu->left_name, what, err);
    return 0;
}
