/*
 * nodestate.h - the node state machine of ddpd (see nodestate.c for the diagram and table).
 *
 * Every change of a node's state in ddpd goes through nodestate_allowed() first. The API
 * shows two states only: READY (READY and SUSPECT) and LOST (LOST and LOST_CONFIRMED).
 */
#ifndef DDP_SERVER_NODESTATE_H
#define DDP_SERVER_NODESTATE_H

enum node_state {
    NODE_READY = 0,
    NODE_SUSPECT,        /* accused by a peer's exit, not confirmed either way yet */
    NODE_LOST,           /* silent: gone for its jobs once silent for node_timeout_ms */
    NODE_LOST_CONFIRMED, /* LOST by a confirmed suspicion: gone for its jobs at once */
};
#define NODE_STATE_COUNT 4

/* "READY", "SUSPECT", "LOST", "LOST_CONFIRMED" (for logs and tests); "UNKNOWN" for a value
 * out of range. */
const char *nodestate_name(enum node_state s);

/* The state the API and the store show: "READY" or "LOST" ("LOST" for a value out of
 * range). */
const char *nodestate_api_name(enum node_state s);

/* 1 when the state machine allows from -> to, else 0 (a state never moves to itself). */
int nodestate_allowed(enum node_state from, enum node_state to);

/* 1 for READY and SUSPECT: the agent counts as alive (shown READY, may get work). */
int nodestate_is_up(enum node_state s);

#endif
