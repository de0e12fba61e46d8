/*
 * fault.h - failure notices between the CPU backend's TCP peers (fault.c), and the errors
 * that name the rank at fault. Private to libddp/comm/.
 *
 * Every function here takes the comm whose collective failed, is called only by the thread
 * running it, and returns the (negative) error it wrote into err, after setting
 * cpu->notice to what fault_abort_ring() will tell the neighbours.
 */
#ifndef DDP_LIBDDP_COMM_FAULT_H
#define DDP_LIBDDP_COMM_FAULT_H

#include <stdint.h>

#include "common/err.h"
#include "libddp/comm/comm_internal.h"

/* What a notice says of the rank it names. */
enum fault_kind {
    FAULT_LOST,     /* died, or its connection broke */
    FAULT_SILENT,   /* timed out */
    FAULT_MISMATCH, /* found a collective mismatch (it is the finder, not a culprit) */
};

/* The notice naming global rank `rank` (< 0: unknown) with `kind`. Its format and how it
 * travels: fault.c. */
uint32_t fault_notice(int rank, enum fault_kind kind);
/* The rank a notice names (-1: unknown), and its kind. */
int fault_notice_rank(uint32_t n);
enum fault_kind fault_notice_kind(uint32_t n);
/* The kind a failure of DDP error `code` is: DDP_ETIMEOUT silent, DDP_EINTERNAL (what a
 * collective mismatch is) a mismatch, any other lost. */
enum fault_kind fault_kind_of(int code);

/* Ring index `peer` (named `name`) was lost during `what` (e = errno, 0 for EOF). */
int fault_peer_lost(struct comm *c, int peer, const char *name, const char *what, int e,
                    struct ddp_err *err);
/* The error for notice b that ring index `via` (named via_name) sent; it is passed on. */
int fault_from_notice(struct comm *c, uint32_t b, int via, const char *via_name, const char *what,
                      struct ddp_err *err);
/* The left neighbour's stream ended or broke (e = errno, 0 for EOF). */
int fault_recv_failed(struct comm *c, const char *what, int e, struct ddp_err *err);
/* Sending to the right neighbour failed, or its reverse direction woke up: a notice, or
 * gone (e = errno or 0). */
int fault_send_failed(struct comm *c, const char *what, int e, struct ddp_err *err);
/* An urgent notice from the left neighbour waiting on recv_fd: its error; 0 when none. */
int fault_urgent_notice(struct comm *c, const char *what, struct ddp_err *err);

/* After a failed collective (e): records it in the shared memory, tells the neighbours and
 * partners at once (the right neighbour waited for up to NOTICE_WAIT_MS where the
 * collective's data filled the buffer; a partner's full buffer still loses the notice, and
 * then it sees the end of the stream) and shuts the sockets down, so they fail in turn. */
void fault_abort_ring(struct comm *c, const struct ddp_err *e);

#endif
