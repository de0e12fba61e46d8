/*
 * nodestate.c - the node state machine.
 *
 *                  accused by a rank's failure
 *      register ─▶ READY ──────────────────────────────▶ SUSPECT
 *                  ▲ ▲ │ ◀── a beat after the accusation ─┘ │ │
 *                  │ │ │     (or a register)                │ │
 *                  │ │ │ silent for node_timeout_ms         │ │ no beat within
 *                  │ │ ▼                                    │ │ suspect_timeout_ms
 *                  │ │ LOST ◀─── silent for node_timeout_ms ┘ ▼
 *                  │ └─ beat or register ─┘          LOST_CONFIRMED
 *                  └─────────────── beat or register ─────────┘
 *
 * Every node loaded from the store at ddpd's start begins LOST, its silence counted from
 * then.
 *
 * Transition table (from -> to: who performs it, in server/coord*.c):
 *
 *   READY          -> SUSPECT         coord_accuse(): a rank's exit 6 names a rank on the
 *                                     node, or another failure of its generation
 *   READY          -> LOST            coord_nodes_expire(): no beat for node_timeout_ms
 *   SUSPECT        -> READY           coord_beat(): a beat that arrived after the accusation;
 *                                     coord_register()
 *   SUSPECT        -> LOST_CONFIRMED  coord_nodes_expire(): no beat within suspect_timeout_ms
 *   SUSPECT        -> LOST            coord_nodes_expire(): silent for node_timeout_ms before
 *                                     the confirm window closed
 *   LOST           -> READY           coord_beat(), coord_register()
 *   LOST_CONFIRMED -> READY           coord_beat(), coord_register()
 *
 * Every other pair is refused: a LOST node is never suspected (it has no held beat to
 * answer, and after a restart of ddpd it may still be in its retry backoff), and the two LOST
 * states differ only in when the node counts as gone for its jobs (coord_node_gone()).
 * READY and SUSPECT show as READY in the API, LOST and LOST_CONFIRMED as LOST.
 */
#include "server/nodestate.h"

static const char *const nodestate_names[NODE_STATE_COUNT] = {
    "READY",
    "SUSPECT",
    "LOST",
    "LOST_CONFIRMED",
};

/* nodestate_table[from][to] = 1 where allowed. */
static const unsigned char nodestate_table[NODE_STATE_COUNT][NODE_STATE_COUNT] = {
    /*                       RDY SUS LST LCF */
    [NODE_READY] = {0, 1, 1, 0},
    [NODE_SUSPECT] = {1, 0, 1, 1},
    [NODE_LOST] = {1, 0, 0, 0},
    [NODE_LOST_CONFIRMED] = {1, 0, 0, 0},
};

static int nodestate_valid(enum node_state s)
{
    return (int)s >= 0 && (int)s < NODE_STATE_COUNT;
}

const char *nodestate_name(enum node_state s)
{
    return nodestate_valid(s) ? nodestate_names[s] : "UNKNOWN";
}

const char *nodestate_api_name(enum node_state s)
{
    return nodestate_is_up(s) ? "READY" : "LOST";
}

int nodestate_allowed(enum node_state from, enum node_state to)
{
    if (!nodestate_valid(from) || !nodestate_valid(to))
        return 0;
    return nodestate_table[from][to];
}

int nodestate_is_up(enum node_state s)
{
    return s == NODE_READY || s == NODE_SUSPECT;
}
