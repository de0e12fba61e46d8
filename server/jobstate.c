/*
 * jobstate.c - the job state machine.
 *
 *                 start                end of generation
 *     PENDING ────────────▶ RUNNING ─────────────────────▶ RESTARTING
 *        │                  │  │  ▲                         │   │
 *        │                  │  │  └──── next generation ────┘   │ failure with the restart
 *        │                  │  │                                │ budget spent, or a limit
 *        │                  │  ▼ every rank exited 0            ▼
 *        │                  │ SUCCEEDED                       FAILED
 *        │ cancel           │ cancel                          ▲
 *        ▼                  ▼                                 │
 *     CANCELLING ◀──────────┴────────── cancel ── RESTARTING ─┘
 *        │
 *        ▼ every worker gone (or the bound passed)
 *     CANCELLED
 *
 * Transition table (from -> to: the function that performs it, in server/coord_*.c, and the
 * entry points of coord.h that run it):
 *
 *   PENDING    -> RUNNING     coord_start() in coord_schedule(): the scheduler placed the first
 *                             generation. coord_schedule() runs at the end of coord_submit(),
 *                             coord_cancel(), a coord_beat() that changed anything,
 *                             coord_register() and coord_tick(), so a job starts as soon as
 *                             it fits, not at the next tick.
 *   PENDING    -> CANCELLING  coord_cancel()
 *   RUNNING    -> RESTARTING  coord_end_generation(): a rank exited non-zero, a node was lost
 *                             or restarted, hang, max_runtime_s (coord_beat(),
 *                             coord_register(), coord_tick()), or a scale-up (coord_schedule())
 *   RUNNING    -> SUCCEEDED   coord_check_ranks(): every rank of the generation exited 0
 *                             (coord_beat(), coord_tick())
 *   RUNNING    -> CANCELLING  coord_cancel()
 *   RESTARTING -> RUNNING     coord_start() in coord_schedule(), as PENDING -> RUNNING: the old
 *                             generation is gone, a new one placed
 *   RESTARTING -> FAILED      coord_progress(): the old generation is gone, no restart left
 *                             (coord_beat(), coord_tick())
 *   RESTARTING -> CANCELLING  coord_cancel()
 *   CANCELLING -> CANCELLED   coord_progress(): every worker is gone (coord_cancel(),
 *                             coord_beat(), coord_tick())
 *
 * coord_register() ends with the rules of the tick, so whatever coord_tick() performs, a
 * registration may perform too.
 *
 * Every other pair, and every move out of SUCCEEDED, FAILED and CANCELLED, is refused.
 * Invariant: a job in a terminal state never changes again.
 */
#include "server/jobstate.h"

#include <string.h>

static const char *const jobstate_names[JOB_STATE_COUNT] = {
    "PENDING", "RUNNING", "RESTARTING", "SUCCEEDED", "FAILED", "CANCELLING", "CANCELLED",
};

/* jobstate_table[from][to] = 1 where allowed. */
static const unsigned char jobstate_table[JOB_STATE_COUNT][JOB_STATE_COUNT] = {
    /*                PEN RUN RST SUC FAI CNG CND */
    [JOB_PENDING] = {0, 1, 0, 0, 0, 1, 0},    [JOB_RUNNING] = {0, 0, 1, 1, 0, 1, 0},
    [JOB_RESTARTING] = {0, 1, 0, 0, 1, 1, 0}, [JOB_SUCCEEDED] = {0, 0, 0, 0, 0, 0, 0},
    [JOB_FAILED] = {0, 0, 0, 0, 0, 0, 0},     [JOB_CANCELLING] = {0, 0, 0, 0, 0, 0, 1},
    [JOB_CANCELLED] = {0, 0, 0, 0, 0, 0, 0},
};

const char *jobstate_name(enum job_state s)
{
    if ((int)s < 0 || (int)s >= JOB_STATE_COUNT)
        return "UNKNOWN";
    return jobstate_names[s];
}

int jobstate_parse(const char *s, enum job_state *out)
{
    for (int i = 0; i < JOB_STATE_COUNT; i++)
        if (strcmp(s, jobstate_names[i]) == 0) {
            *out = (enum job_state)i;
            return 0;
        }
    return -1;
}

int jobstate_allowed(enum job_state from, enum job_state to)
{
    if ((int)from < 0 || (int)from >= JOB_STATE_COUNT || (int)to < 0 || (int)to >= JOB_STATE_COUNT)
        return 0;
    return jobstate_table[from][to];
}

int jobstate_is_terminal(enum job_state s)
{
    return s == JOB_SUCCEEDED || s == JOB_FAILED || s == JOB_CANCELLED;
}

int jobstate_is_live(enum job_state s)
{
    return s == JOB_PENDING || s == JOB_RUNNING || s == JOB_RESTARTING;
}
