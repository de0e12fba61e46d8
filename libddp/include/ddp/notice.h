/*
 * notice.h - the preemption notice as a worker sees it (docs/worker.md, "Preemption
 * notice"): the agent sends the job's preempt_signal to the worker's process group
 * (DDP_PREEMPT_SIGNAL names it, SIGUSR1 by default) and writes "preempt <grace_s>\n" on the
 * pipe DDP_CONTROL_FD; after preempt_grace_s it stops the worker with its usual SIGTERM.
 *
 * Use: ddp_notice_install() once, then after each training step ddp_notice_agree(), which
 * all-reduces one flag so that every rank learns, at the same step, that any rank got the
 * notice; the ranks then checkpoint that step and exit DDP_EXIT_PREEMPTED.
 *
 * The handler only sets a volatile sig_atomic_t (async-signal-safe); the control
 * descriptor is read without blocking by ddp_notice_pending().
 */
#ifndef DDP_NOTICE_H
#define DDP_NOTICE_H

#include "common/err.h"

struct ddp_group; /* ddp/ddp.h */

/* Installs the handler of the signal that DDP_PREEMPT_SIGNAL names (SIGUSR1 when unset) and
 * takes DDP_CONTROL_FD (non-blocking from now on) when set. DDP_EINVAL for a signal name that
 * signame.h does not allow or a bad descriptor number; nothing is installed then. */
int ddp_notice_install(struct ddp_err *err);

/* The signal the handler was installed for (0 before ddp_notice_install()). */
int ddp_notice_signal(void);

/* 1 when this process got the notice: the signal, or a "preempt" line on the control
 * descriptor (consumed). Stays 1 once it was. */
int ddp_notice_pending(void);

/* Marks the notice as received, as the signal would (tests, --notice-at-step). */
void ddp_notice_raise(void);

/* Every rank of g calls it at the same point: *any = 1 when some rank's notice is pending.
 * At world size 1 no message is sent. The collective's error otherwise. */
int ddp_notice_agree(struct ddp_group *g, int *any, struct ddp_err *err);

#endif
