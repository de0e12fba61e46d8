/*
 * coord_fault.c - how the coordinator learns of failures: rank exits and the root cause
 * they name, a node accused by its peers (suspect then confirm), node loss, a node that
 * restarted, and the hang watchdog. Everything here runs with c->mu held.
 *
 * Suspect then confirm (the rule, its exceptions and its cost are told once, in
 * docs/elastic.md, "Suspect then confirm"): an exit 6 naming "peer rank N", or the first
 * failure of another kind in a running generation, accuses nodes (coord_accuse); an accused
 * READY node that has not explained the failure itself becomes NODE_SUSPECT and its held beat
 * is answered at once; its next beat makes it READY again (coord_beat), and with
 * none within suspect_timeout_ms the tick makes it NODE_LOST_CONFIRMED, ended for its jobs
 * as at the node timeout. All of it runs on the `now` passed in, so the clock-driven tests
 * stay deterministic.
 */
#include "server/coord_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exitcodes.h"
#include "common/log.h"

/* The reason a gone node gives its jobs. */
void coord_lost_why(const struct node *n, int64_t now, char *buf, size_t size)
{
    if (n->removed)
        snprintf(buf, size, "node %s removed by an admin", n->name);
    else if (n->state == NODE_LOST_CONFIRMED)
        snprintf(buf, size, "node %s lost (no heartbeat for %.1f s; suspected when %s)", n->name,
                 (double)(now - n->last_seen) / 1000.0, n->suspect_by);
    else
        snprintf(buf, size, "node %s lost (no heartbeat for %lld s)", n->name,
                 (long long)((now - n->last_seen) / 1000));
}

/* The node restarted (new incarnation): its workers are gone. */
void coord_node_restarted(struct coord *c, int ni, int64_t now)
{
    char reason[128];
    snprintf(reason, sizeof(reason), "node %s restarted", c->nodes[ni]->name);
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state == JOB_RUNNING && coord_group_rank(j, ni) >= 0) {
            coord_fail(j, CAUSE_NODE, reason);
            coord_check_ranks(c, j, now);
        } else if (j->st.state == JOB_RESTARTING && coord_group_rank(j, ni) >= 0) {
            for (int p = 0; p < j->st.npl; p++)
                if (j->st.pl[p].node == ni && j->st.pl[p].draining)
                    coord_refine(c, j, CAUSE_NODE, reason, now);
        }
        for (int p = 0; p < j->st.npl; p++)
            if (j->st.pl[p].node == ni)
                j->st.pl[p].draining = 0;
    }
}

/* The peer rank a peer-lost exit names in its last lines ("peer rank N ..."; the last line
 * that names one wins), or -1. */
static int coord_named_peer(const json_t *lines)
{
    for (size_t k = json_array_size(lines); k-- > 0;) {
        const char *t = json_string_value(json_array_get(lines, k));
        const char *p = t ? strstr(t, "peer rank ") : NULL;
        if (!p)
            continue;
        p += strlen("peer rank ");
        char *end = NULL;
        long r = strtol(p, &end, 10);
        if (end != p && r >= 0 && r < INT_MAX)
            return (int)r;
    }
    return -1;
}

/* Rank `rank` of j's current generation, on node ni, failed with `status`: suspects the
 * node of the peer it names when it exited 6 (peer lost), else every other node of the
 * generation (see "Suspect then confirm" at the top). A node is not suspected when its
 * agent has reported the accused rank's exit or a failure of any of its ranks in this
 * generation, when it is not READY, or when it is suspected already (the window does not
 * grow). */
static void coord_accuse(struct coord *c, struct job *j, int ni, int rank, int status, int64_t now)
{
    if (c->opts.suspect_timeout_ms <= 0)
        return;
    int peer = -1;
    if (status == DDP_EXIT_PEER_LOST) {
        json_t *lines = NULL;
        struct ddp_err e;
        pthread_mutex_lock(&c->store_mu);
        int lrc = store_last_lines(c->store, j->id, j->st.generation, rank, 3, &lines, &e);
        pthread_mutex_unlock(&c->store_mu);
        peer = lrc == 0 ? coord_named_peer(lines) : -1;
        json_decref(lines);
    }
    if (peer >= j->st.world_size)
        peer = -1;
    int nproc = j->spec.nproc;
    for (int p = 0; p < j->st.npl; p++) {
        int pn = j->st.pl[p].node, gr = j->st.pl[p].group_rank;
        struct node *n = c->nodes[pn];
        if (pn == ni || (peer >= 0 && peer / nproc != gr) || n->state != NODE_READY)
            continue;
        int reported = peer >= 0 && j->rank_exit[peer] != RANK_RUNNING;
        for (int r = gr * nproc; r < (gr + 1) * nproc && r < j->st.world_size; r++)
            if (j->rank_exit[r] != RANK_RUNNING && j->rank_exit[r] != 0)
                reported = 1;
        if (reported)
            continue;
        if (coord_node_set(n, NODE_SUSPECT) != 0)
            continue;
        n->suspect_since = now;
        if (status == DDP_EXIT_PEER_LOST)
            snprintf(n->suspect_by, sizeof(n->suspect_by), "rank %d on %.60s lost it", rank,
                     c->nodes[ni]->name);
        else
            snprintf(n->suspect_by, sizeof(n->suspect_by), "rank %d on %.60s exited %d", rank,
                     c->nodes[ni]->name, status);
        if (peer >= 0)
            log_info("node %s SUSPECT: rank %d on %s lost its peer rank %d; LOST unless it "
                     "beats within %lld ms",
                     n->name, rank, c->nodes[ni]->name, peer,
                     (long long)c->opts.suspect_timeout_ms);
        else
            log_info("node %s SUSPECT: %s (no peer named); LOST unless it beats within "
                     "%lld ms",
                     n->name, n->suspect_by, (long long)c->opts.suspect_timeout_ms);
        coord_bump(n); /* a held beat is answered now: a live agent beats again at once */
    }
}

/* Records exits of the current generation's ranks on node ni (and, for a generation that
 * just ended after a failure, exits that may be its root cause), and progress reports for
 * the hang watchdog. Returns 1 when anything was newly recorded. */
int coord_beat_workers(struct coord *c, int ni, const struct beat *b, int64_t now)
{
    int changed = 0;
    const char *nname = c->nodes[ni]->name;
    for (size_t i = 0; i < b->nworkers; i++) {
        const struct beat_worker *w = &b->workers[i];
        struct job *j = coord_job(c, w->job);
        if (!j || w->generation != j->st.generation || w->rank >= j->st.world_size || !j->rank_exit)
            continue;
        int draining = j->st.state == JOB_RESTARTING && j->st.end_kind == END_FAILURE;
        if (j->st.state != JOB_RUNNING && !draining)
            continue;
        int gr = coord_group_rank(j, ni);
        if (gr < 0 || w->rank / j->spec.nproc != gr) {
            coord_beat_refused(c, ni, j, "a worker state");
            continue;
        }
        if (!w->exited || j->rank_exit[w->rank] != RANK_RUNNING)
            continue;
        int status = w->signal ? 128 + w->signal : (w->exit_code < 0 ? 1 : w->exit_code);
        j->rank_exit[w->rank] = status;
        changed = 1;
        if (status == 0)
            continue;
        /* A peer-lost exit accuses the node it names; so does the first failure of any
         * other kind (an unmodified torch script whose peer vanished exits 1): a live
         * accused node only beats once more. The stop's own exits while draining do not. */
        if (status == DDP_EXIT_PEER_LOST || !draining)
            coord_accuse(c, j, ni, w->rank, status, now);
        int prio =
            status == DDP_EXIT_PEER_LOST || status == DDP_EXIT_RENDEZVOUS || status == DDP_EXIT_HANG
                ? CAUSE_PEER
                : CAUSE_EXIT;
        if (draining) {
            /* exits caused by the stop itself are no cause: SIGTERM (143), and SIGKILL
             * once the grace period may have run out */
            int grace_ms = j->spec.grace_period_s * 1000;
            if (status == 128 + 15 || status == DDP_EXIT_PREEMPTED ||
                (status == 128 + 9 && now - j->ended_at >= grace_ms))
                continue;
            if (prio <= j->cause_prio)
                continue;
        } else if (j->fail_reason[0] && prio <= j->fail_prio) {
            continue;
        }
        char why[REASON_MAX];
        const char *name = exitcode_str(status);
        size_t off;
        if (w->signal)
            off = (size_t)snprintf(why, sizeof(why), "rank %d on %s killed by signal %d", w->rank,
                                   nname, w->signal);
        else if (name)
            off = (size_t)snprintf(why, sizeof(why), "rank %d on %s exited %d (%s)", w->rank, nname,
                                   status, name);
        else
            off = (size_t)snprintf(why, sizeof(why), "rank %d on %s exited %d", w->rank, nname,
                                   status);
        if (w->err_message) {
            /* the exception the program recorded (torch's @record, TORCHELASTIC_ERROR_FILE)
             * says more than its last lines */
            if (off < sizeof(why))
                off += (size_t)snprintf(why + off, sizeof(why) - off, ": %.600s%s%.300s%s",
                                        w->err_message, w->err_frame ? " (" : "",
                                        w->err_frame ? w->err_frame : "", w->err_frame ? ")" : "");
        } else {
            json_t *lines = NULL;
            struct ddp_err e;
            pthread_mutex_lock(&c->store_mu);
            int lrc = store_last_lines(c->store, j->id, j->st.generation, w->rank, 3, &lines, &e);
            pthread_mutex_unlock(&c->store_mu);
            if (lrc == 0) {
                for (size_t k = 0; k < json_array_size(lines) && off < sizeof(why); k++)
                    off += (size_t)snprintf(
                        why + off, sizeof(why) - off, "%s'%.200s'",
                        k ? " | " : "; last output: ", json_string_value(json_array_get(lines, k)));
                json_decref(lines);
            }
        }
        /* Of ranks that recorded their error, the first by its time is the root cause (as
         * torchrun takes it); a recorded error outranks a bare exit of the same priority. */
        if (!draining && w->err_message && j->fail_reason[0] && prio == j->fail_prio &&
            (!j->fail_err_time || (w->err_time && w->err_time < j->fail_err_time))) {
            j->fail_reason[0] = '\0';
        }
        if (draining)
            coord_refine(c, j, prio, why, now);
        else if (coord_fail(j, prio, why)) {
            j->fail_port = status == DDP_EXIT_PORT_IN_USE;
            j->fail_preempted = status == DDP_EXIT_PREEMPTED;
            j->fail_err_time = w->err_message ? (w->err_time ? w->err_time : 1) : 0;
        }
    }
    for (size_t i = 0; i < b->nprogress; i++) {
        const struct beat_progress *g = &b->progress[i];
        struct job *j = coord_job(c, g->job);
        if (!j || j->st.state != JOB_RUNNING || g->generation != j->st.generation ||
            j->spec.hang_timeout_s <= 0 || g->rank >= j->st.world_size || !j->prog)
            continue;
        if (!coord_node_held_rank(j, ni, g->generation, g->rank)) {
            coord_beat_refused(c, ni, j, "progress");
            continue;
        }
        struct rank_prog *p = &j->prog[g->rank];
        p->age_ms = g->age_ms;
        p->stopped = g->stopped;
        p->has = 1;
        if (g->age_ms > (int64_t)j->spec.hang_timeout_s * 1000 && !j->hang_first) {
            j->hang_first = now;
            j->hang_node = ni;
        }
        if (j->hang_first)
            changed = 1; /* the watchdog decides in coord_beat() / coord_tick() */
    }
    return changed;
}

/* The hang watchdog of a RUNNING job. When one rank stops, every rank stalls (the others
 * wait for it in the collective), so the first report over hang_timeout_s does not name
 * the culprit. The decision waits until every node of the generation has beaten since
 * that first report (at most 1.5 s), then names a rank the agent saw stopped, else the rank
 * with the largest reported age. */
void coord_check_hang(struct coord *c, struct job *j, int64_t now)
{
    if (!j->hang_first || j->spec.hang_timeout_s <= 0 || !j->prog || !j->rank_exit)
        return;
    int64_t limit = (int64_t)j->spec.hang_timeout_s * 1000;
    int best = -1, any_stopped = 0, any_over = 0;
    for (int r = 0; r < j->st.world_size; r++) {
        const struct rank_prog *g = &j->prog[r];
        if (!g->has || g->age_ms <= limit || j->rank_exit[r] != RANK_RUNNING)
            continue;
        any_over = 1;
        if (g->stopped)
            any_stopped = 1;
    }
    if (!any_over) { /* the rank moved again */
        j->hang_first = 0;
        return;
    }
    int all_beat = 1;
    for (int p = 0; p < j->st.npl; p++) {
        struct node *n = c->nodes[j->st.pl[p].node];
        if (nodestate_is_up(n->state) && j->st.pl[p].node != j->hang_node &&
            n->last_seen <= j->hang_first)
            all_beat = 0;
    }
    if (!any_stopped && !all_beat && now - j->hang_first < 1500)
        return;
    for (int r = 0; r < j->st.world_size; r++) {
        const struct rank_prog *g = &j->prog[r];
        if (!g->has || g->age_ms <= limit || j->rank_exit[r] != RANK_RUNNING)
            continue;
        if (any_stopped && !g->stopped)
            continue;
        if (best < 0 || g->age_ms > j->prog[best].age_ms)
            best = r;
    }
    if (best < 0)
        return;
    int gr = best / j->spec.nproc;
    const char *nname = "?";
    for (int p = 0; p < j->st.npl; p++)
        if (j->st.pl[p].group_rank == gr)
            nname = c->nodes[j->st.pl[p].node]->name;
    char why[200];
    snprintf(why, sizeof(why), "rank %d on %s hung (no progress for %lld s%s)", best, nname,
             (long long)(j->prog[best].age_ms / 1000),
             j->prog[best].stopped ? ", process stopped" : "");
    coord_fail(j, CAUSE_HANG, why);
}

void coord_nodes_expire(struct coord *c, int64_t now)
{
    for (size_t i = 0; i < c->nnodes; i++) {
        struct node *n = c->nodes[i];
        int confirmed = n->state == NODE_SUSPECT && c->opts.suspect_timeout_ms > 0 &&
                        now - n->suspect_since >= c->opts.suspect_timeout_ms;
        int silent = now - n->last_seen > c->opts.node_timeout_ms;
        if (confirmed || (nodestate_is_up(n->state) && silent)) {
            if (coord_put_node(c, n, 0, n->last_beat_wall, NULL) != 0)
                continue;
            coord_node_set(n, confirmed ? NODE_LOST_CONFIRMED : NODE_LOST);
            if (confirmed)
                log_warn("node %s LOST (suspected when %s; no heartbeat within %lld ms "
                         "of that, none for %lld ms)",
                         n->name, n->suspect_by, (long long)c->opts.suspect_timeout_ms,
                         (long long)(now - n->last_seen));
            else
                log_warn("node %s LOST (no heartbeat for %lld ms)", n->name,
                         (long long)(now - n->last_seen));
        }
    }
}
