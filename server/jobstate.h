/*
 * jobstate.h - the job state machine of ddpd (see jobstate.c for the diagram and table).
 *
 * Every change of a job's state anywhere in ddpd goes through jobstate_allowed() first.
 */
#ifndef DDP_SERVER_JOBSTATE_H
#define DDP_SERVER_JOBSTATE_H

enum job_state {
    JOB_PENDING = 0,
    JOB_RUNNING,
    JOB_RESTARTING,
    JOB_SUCCEEDED,
    JOB_FAILED,
    JOB_CANCELLING,
    JOB_CANCELLED,
};
#define JOB_STATE_COUNT 7

/* "PENDING", "RUNNING", ...; "UNKNOWN" for a value out of range. */
const char *jobstate_name(enum job_state s);

/* Parses a state name; returns 0 and writes *out, or -1 if s names no state. */
int jobstate_parse(const char *s, enum job_state *out);

/* 1 when the state machine allows from -> to, else 0 (a state never moves to itself). */
int jobstate_allowed(enum job_state from, enum job_state to);

/* 1 for SUCCEEDED, FAILED and CANCELLED. */
int jobstate_is_terminal(enum job_state s);

/* 1 for PENDING, RUNNING and RESTARTING: the states a cancel may leave. */
int jobstate_is_live(enum job_state s);

#endif
