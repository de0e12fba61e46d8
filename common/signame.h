/*
 * signame.h - the signals a job may name as its preemption notice (docs/api.md,
 * "preempt_signal"), by name: the job spec, ddpd, the agent and ddp-worker agree on this
 * one table.
 *
 * Allowed: SIGUSR1 (the default, as Slurm's --signal), SIGUSR2, SIGHUP, SIGINT, SIGTERM, SIGURG,
 * SIGWINCH. A name is accepted with or without its "SIG" prefix, in upper case only.
 */
#ifndef DDP_COMMON_SIGNAME_H
#define DDP_COMMON_SIGNAME_H

#define SIGNAME_DEFAULT "SIGUSR1"

/* The signal number of name ("SIGUSR1" or "USR1"), or -1 when name is NULL or not one of
 * the allowed signals. */
int signame_parse(const char *name);

/* The canonical name ("SIGUSR1") of an allowed signal number, or NULL. */
const char *signame_str(int signo);

/* The allowed names, comma separated, for messages ("SIGUSR1, SIGUSR2, ..."). */
const char *signame_allowed(void);

#endif
