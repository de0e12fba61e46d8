/*
 * exitcodes.h - what a worker's exit code means. ddp-worker exits with these; the agent
 * and ddpd use exitcode_str() to name the cause in events ("rank 3 exited 6 (peer lost)").
 * Codes 0-2 follow the Unix habit (2 = usage); 128+N means killed by signal N.
 */
#ifndef DDP_COMMON_EXITCODES_H
#define DDP_COMMON_EXITCODES_H

enum ddp_exit {
    DDP_EXIT_OK = 0,
    DDP_EXIT_FAILURE = 1,     /* anything not listed below */
    DDP_EXIT_USAGE = 2,       /* bad command-line arguments */
    DDP_EXIT_DATA = 3,        /* data set missing, unreadable or malformed */
    DDP_EXIT_RENDEZVOUS = 4,  /* could not reach the rendezvous store in time */
    DDP_EXIT_PORT_IN_USE = 5, /* MASTER_PORT already taken on rank 0's host */
    DDP_EXIT_PEER_LOST = 6,   /* a peer died or went silent during a collective */
    DDP_EXIT_CHECKPOINT = 7,  /* checkpoint could not be written */
    DDP_EXIT_DEVICE = 8,      /* CUDA or NCCL error */
    DDP_EXIT_HANG = 9,        /* the runtime's own watchdog saw no progress */
    DDP_EXIT_PREEMPTED = 10,  /* stopped on a preemption notice, after a checkpoint */
};

/* A short name for an exit code ("peer lost"), or NULL when it has none. */
const char *exitcode_str(int code);

#endif
