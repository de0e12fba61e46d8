/*
 * coord_views.c - the JSON views of the model: a job (cached in job->json_cache until the
 * job changes), a node, and a node's assignments (its desired set, computed on every beat).
 * Views only read the model; everything here runs with c->mu held.
 */
#include "server/coord_internal.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/jsonx.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/sched.h"

static void coord_time_str(int64_t wall, char *buf, size_t size)
{
    time_format_rfc3339(wall, buf, size);
}

static json_t *coord_time_json(int64_t wall)
{
    char buf[40];
    if (!wall)
        return json_null();
    coord_time_str(wall, buf, sizeof(buf));
    return json_string(buf);
}

json_t *coord_job_json(struct coord *c, const struct job *j)
{
    json_t *nodes = json_array();
    int nproc = j->spec.nproc;
    for (int i = 0; i < j->st.npl; i++) {
        const struct job_node *p = &j->st.pl[i];
        json_t *ranks = json_array();
        for (int r = 0; r < nproc; r++)
            json_array_append_new(ranks, json_integer((json_int_t)p->group_rank * nproc + r));
        json_array_append_new(nodes, json_pack("{s:s, s:i, s:o}", "name", c->nodes[p->node]->name,
                                               "group_rank", p->group_rank, "ranks", ranks));
    }
    char id[32];
    snprintf(id, sizeof(id), "j-%lld", (long long)j->id);
    json_t *o = json_pack(
        "{s:s, s:s, s:O, s:s, s:i, s:i, s:i, s:s, s:i, s:o, s:O, s:s, s:o, "
        "s:o, s:o}",
        "id", id, "name", j->spec.name, "spec", j->spec.json, "state", jobstate_name(j->st.state),
        "generation", j->st.generation, "restarts", j->st.restarts, "world_size", j->st.world_size,
        "master_addr", j->st.master_addr, "master_port", j->st.master_port, "nodes", nodes,
        "last_metrics", j->last_metrics ? j->last_metrics : json_null(), "reason", j->st.reason,
        "created_at", coord_time_json(j->created_at), "started_at",
        coord_time_json(j->st.started_at), "finished_at", coord_time_json(j->st.finished_at));
    if (!o)
        abort();
    json_object_set_new(o, "owner", json_string(j->owner));
    json_object_set_new(o, "pending",
                        j->wait_code[0] ? json_pack("{s:s, s:s, s:i}", "reason", j->wait_code,
                                                    "message", j->wait_msg, "position", j->wait_pos)
                                        : json_null());
    return o;
}

char *coord_job_text(struct coord *c, struct job *j)
{
    if (!j->json_cache) {
        json_t *o = coord_job_json(c, j);
        j->json_cache = jsonx_dumps(o);
        json_decref(o);
    }
    return xstrdup(j->json_cache);
}

json_t *coord_node_json(struct coord *c, int idx, int64_t now)
{
    struct node *n = c->nodes[idx];
    char range[32];
    snprintf(range, sizeof(range), "%d-%d", n->port_lo, n->port_hi);
    int64_t wall = coord_wall(c, now);
    json_t *age = n->last_beat_wall
                      ? json_integer(wall - n->last_beat_wall > 0 ? wall - n->last_beat_wall : 0)
                      : json_null();
    json_t *iso = n->isolation[0] ? json_string(n->isolation) : json_null();
    json_t *o =
        json_pack("{s:s, s:s, s:i, s:i, s:s, s:s, s:o, s:o, s:o, s:o}", "name", n->name, "address",
                  n->address, "slots", n->slots, "slots_used", coord_slots_used(c, idx), "state",
                  nodestate_api_name(n->state), "port_range", range, "last_heartbeat",
                  coord_time_json(n->last_beat_wall), "last_heartbeat_age_ms", age, "registered_at",
                  coord_time_json(n->registered_at), "isolation", iso);
    if (!o)
        abort();
    static const char *const admin[] = {"", "cordon", "drain"};
    json_object_set_new(o, "schedulable", json_boolean(n->admin == NODE_SCHEDULABLE));
    json_object_set_new(o, "admin_state", json_string(admin[n->admin]));
    json_object_set_new(o, "admin_reason", json_string(n->admin_reason));
    json_object_set(o, "labels", n->labels);
    return o;
}

json_t *coord_notices(struct coord *c, int ni)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state != JOB_RESTARTING || !j->notice)
            continue;
        for (int p = 0; p < j->st.npl; p++) {
            if (j->st.pl[p].node != ni || !j->st.pl[p].draining)
                continue;
            char id[32];
            snprintf(id, sizeof(id), "j-%lld", (long long)j->id);
            json_t *o =
                json_pack("{s:s, s:i, s:s, s:i}", "job_id", id, "generation", j->st.generation,
                          "signal", j->spec.preempt_signal, "grace_s", j->spec.preempt_grace_s);
            if (!o)
                abort();
            json_array_append_new(arr, o);
            break;
        }
    }
    return arr;
}

json_t *coord_assignments(struct coord *c, int ni)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state != JOB_RUNNING)
            continue;
        int gr = coord_group_rank(j, ni);
        if (gr < 0)
            continue;
        char id[32];
        snprintf(id, sizeof(id), "j-%lld", (long long)j->id);
        json_t *s = j->spec.json;
        json_t *a = json_pack(
            "{s:s, s:i, s:s, s:O, s:O, s:O, s:O, s:O, s:i, s:i, s:i, s:i, s:s, s:i, s:i, s:i, "
            "s:s, s:s}",
            "job_id", id, "generation", j->st.generation, "run_id", id, "command",
            json_object_get(s, "command"), "env", json_object_get(s, "env"), "workdir",
            json_object_get(s, "workdir"), "checkpoint_dir", json_object_get(s, "checkpoint_dir"),
            "grace_period_s", json_object_get(s, "grace_period_s"), "group_rank", gr,
            "group_world_size", j->st.npl, "nproc_per_node", j->spec.nproc, "world_size",
            j->st.world_size, "master_addr", j->st.master_addr, "master_port", j->st.master_port,
            "restart_count", j->st.restarts, "max_restarts", j->spec.max_restarts, "job_token",
            j->token, "owner", j->owner);
        if (!a)
            abort();
        json_object_set_new(a, "preempt_signal", json_string(j->spec.preempt_signal));
        json_object_set_new(a, "preempt_grace_s", json_integer(j->spec.preempt_grace_s));
        /* what each worker gets on this node: auto resolved (1 with GPUs, 0 without) */
        json_object_set_new(a, "gpus_per_proc",
                            json_integer(sched_gpus_per_proc(j->spec.gpus_per_proc,
                                                             coord_node_gpus(c->nodes[ni]))));
        json_array_append_new(arr, a);
    }
    return arr;
}
