/*
 * gate.c - the role of this replica and the coordinator requests enter (server/gate.h).
 *
 * Invariants (under g->mu):
 *   1. active is set exactly in the roles SINGLE and LEADER, and has no entry in retired[].
 *   2. a retired coordinator is closed by the call that brings its count of requests inside
 *      to 0; gate_follow() holds one of its own while it runs coord_retire(), so the last
 *      leaver is never before the retirement is done.
 */
#include "server/gate.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "server/coord.h"

#define GATE_URL_MAX 512

struct gate_held {
    struct coord *c;
    long inside; /* requests that entered with c and have not left */
};

struct gate {
    pthread_mutex_t mu;
    enum gate_role role;
    struct gate_held active;
    struct gate_held *retired;
    size_t nretired;
    char leader[GATE_URL_MAX];
};

struct gate *gate_new(struct coord *c)
{
    struct gate *g = xcalloc(1, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    g->role = c ? GATE_SINGLE : GATE_CANDIDATE;
    g->active.c = c;
    return g;
}

void gate_free(struct gate *g)
{
    if (!g)
        return;
    coord_close(g->active.c);
    for (size_t i = 0; i < g->nretired; i++)
        coord_close(g->retired[i].c);
    free(g->retired);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

struct coord *gate_enter(struct gate *g, enum gate_role *role, char *leader, size_t size)
{
    pthread_mutex_lock(&g->mu);
    struct coord *c = g->active.c;
    /* A leader's coordinator that retired itself (its store said "not leader", a fence or
     * a commit of unknown outcome) is stale until the main thread replaces it: none answers,
     * and no leader is known (not a redirect to this same replica). */
    int stale = c && g->role == GATE_LEADER && coord_retired(c);
    if (stale)
        c = NULL;
    if (c)
        g->active.inside++;
    if (role)
        *role = stale ? GATE_CANDIDATE : g->role;
    if (leader && size)
        snprintf(leader, size, "%s", stale ? "" : g->leader);
    pthread_mutex_unlock(&g->mu);
    return c;
}

void gate_leave(struct gate *g, struct coord *c)
{
    if (!c)
        return;
    struct coord *close_it = NULL;
    pthread_mutex_lock(&g->mu);
    if (c == g->active.c) {
        g->active.inside--;
    } else {
        for (size_t i = 0; i < g->nretired; i++) {
            if (g->retired[i].c != c)
                continue;
            if (--g->retired[i].inside == 0) {
                close_it = c;
                g->retired[i] = g->retired[--g->nretired];
            }
            break;
        }
    }
    pthread_mutex_unlock(&g->mu);
    coord_close(close_it);
}

void gate_lead(struct gate *g, struct coord *c, const char *self)
{
    pthread_mutex_lock(&g->mu);
    g->active.c = c;
    g->active.inside = 0;
    g->role = GATE_LEADER;
    snprintf(g->leader, sizeof(g->leader), "%s", self ? self : "");
    pthread_mutex_unlock(&g->mu);
}

void gate_follow(struct gate *g, const char *leader)
{
    struct gate_held old = {0};
    pthread_mutex_lock(&g->mu);
    if (g->role == GATE_SINGLE) {
        pthread_mutex_unlock(&g->mu);
        return;
    }
    old = g->active;
    g->active.c = NULL;
    g->active.inside = 0;
    g->role = leader && *leader ? GATE_FOLLOWER : GATE_CANDIDATE;
    snprintf(g->leader, sizeof(g->leader), "%s", leader ? leader : "");
    /* Listed as retired with one more request inside, ours, so that no leaver frees it
     * while coord_retire() runs outside the gate's mutex (it may wait for a transaction of
     * a request inside, up to the store's timeout, and no gate_enter() waits for that). */
    if (old.c) {
        old.inside++;
        g->retired = xrealloc(g->retired, (g->nretired + 1) * sizeof(*g->retired));
        g->retired[g->nretired++] = old;
    }
    pthread_mutex_unlock(&g->mu);
    if (old.c) {
        coord_retire(old.c); /* no request inside writes from here on */
        gate_leave(g, old.c);
    }
}

enum gate_role gate_role(struct gate *g, char *leader, size_t size)
{
    pthread_mutex_lock(&g->mu);
    enum gate_role r = g->role;
    if (leader && size)
        snprintf(leader, size, "%s", g->leader);
    pthread_mutex_unlock(&g->mu);
    return r;
}

const char *gate_role_name(enum gate_role r)
{
    switch (r) {
    case GATE_SINGLE:
        return "single";
    case GATE_CANDIDATE:
        return "candidate";
    case GATE_FOLLOWER:
        return "follower";
    case GATE_LEADER:
        return "leader";
    }
    return "?";
}
