/*
 * gate.h - which coordinator answers a request on this replica: the one coordinator of a
 * single ddpd (--db), or in cluster mode (--cluster) the coordinator of the replica that holds
 * the leadership, and none while another replica leads (the request is redirected there) or
 * none is known (503 not_leader).
 *
 * A request holds the coordinator it entered with until it leaves (the whole request,
 * streamed answers included), so that a coordinator retired by a lost leadership is freed by
 * whoever leaves it last: never under a running call.
 *
 *     gate_new(c) ── single ddpd: c answers every request, forever
 *     gate_new(NULL) ── cluster: CANDIDATE ──gate_lead(c)──▶ LEADER ──gate_follow()──▶ FOLLOWER
 *                                   ▲                           │ (c retired, closed when
 *                                   └──────gate_follow(NULL)────┘  its last request leaves)
 *
 * Thread safety: every function takes the gate's mutex. Ownership: the gate owns the
 * coordinator it was given (gate_lead, gate_new) and closes it (coord_close()).
 */
#ifndef DDP_SERVER_GATE_H
#define DDP_SERVER_GATE_H

#include <stddef.h>

struct coord;
struct gate;

enum gate_role {
    GATE_SINGLE,    /* not a cluster: the one coordinator answers */
    GATE_CANDIDATE, /* a cluster replica that knows no leader (an election, no quorum) */
    GATE_FOLLOWER,  /* another replica leads: requests go there */
    GATE_LEADER,    /* this replica leads: its coordinator answers */
};

/* The gate of a single ddpd around c (taken), or of a cluster replica (c NULL), which starts
 * as a CANDIDATE. */
struct gate *gate_new(struct coord *c);
/* Closes the coordinator (no request may be inside) and frees; accepts NULL. */
void gate_free(struct gate *g);

/* Enters: the coordinator that answers (held until gate_leave()), or NULL when this replica
 * does not lead. *leader (size bytes) is the leader's base URL (this replica's own when it
 * leads), "" when unknown or not a cluster. role
 * (may be NULL) receives the role. */
struct coord *gate_enter(struct gate *g, enum gate_role *role, char *leader, size_t size);
/* Leaves what gate_enter() gave (NULL accepted); the last request out of a retired
 * coordinator closes it. */
void gate_leave(struct gate *g, struct coord *c);

/* Cluster: this replica now leads with c (taken); self is its own base URL. */
void gate_lead(struct gate *g, struct coord *c, const char *self);
/* Cluster: another replica leads at URL leader ("" or NULL: none known). A coordinator this
 * replica held is retired at once (coord_retire(): it writes nothing more) and closed when its
 * last request leaves. */
void gate_follow(struct gate *g, const char *leader);
/* The role now, and the leader's URL (size bytes; "" when unknown). */
enum gate_role gate_role(struct gate *g, char *leader, size_t size);
/* "single", "candidate", "follower" or "leader". */
const char *gate_role_name(enum gate_role r);

#endif
