/*
 * api_cluster.c - /v1/cluster: the replicas of a cluster-mode ddpd (docs/ha.md), answered by
 * the leader (the others redirect there, as for every call): members, and an admin's add and
 * remove. A single ddpd (--db) answers FAILED_PRECONDITION.
 */
#include <errno.h>
#include <stdlib.h>

#include "common/args.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "server/http.h"
#include "server/replica.h"

static int api_cluster_mode(struct api_req *r)
{
    if (r->replica)
        return 1;
    api_reply_errf(r, DDP_EPRECOND,
                   "this ddpd is not a cluster (--db): it has no replicas; see ddpd --cluster");
    return 0;
}

void api_cluster_get(struct api_req *r)
{
    struct ddp_err e;
    json_t *o = NULL;
    if (!api_cluster_mode(r))
        return;
    if (replica_members(r->replica, &o, &e) != 0) {
        api_reply_err(r, &e);
        return;
    }
    api_reply_json(r, 200, jsonx_dumps(o));
    json_decref(o);
}

/* Body {"id": N, "raft_address": "HOST:PORT"}. */
void api_cluster_add(struct api_req *r)
{
    struct ddp_err e;
    json_t *body = NULL;
    if (!api_cluster_mode(r) || api_parse_body(r, &body) != 0)
        return;
    json_t *id = json_object_get(body, "id"), *addr = json_object_get(body, "raft_address");
    if (!json_is_integer(id) || json_integer_value(id) < 1 || !json_is_string(addr) ||
        json_object_size(body) != 2) {
        json_decref(body);
        api_reply_errf(r, DDP_EINVAL,
                       "body: want {\"id\": N (1 or more), \"raft_address\": \"HOST:PORT\"}");
        return;
    }
    char host[256];
    int port;
    if (args_parse_hostport("raft_address", json_string_value(addr), host, (int)sizeof(host), &port,
                            &e) != 0 ||
        replica_check_address("raft_address", json_string_value(addr), &e) != 0) {
        json_decref(body);
        api_reply_err(r, &e);
        return;
    }
    uint64_t nid = (uint64_t)json_integer_value(id);
    if (replica_add(r->replica, nid, json_string_value(addr), &e) != 0) {
        json_decref(body);
        api_reply_err(r, &e);
        return;
    }
    log_info("cluster: node %llu at %s added by %s", (unsigned long long)nid,
             json_string_value(addr), r->who.name);
    json_decref(body);
    api_cluster_get(r);
}

void api_cluster_remove(struct api_req *r)
{
    struct ddp_err e;
    if (!api_cluster_mode(r))
        return;
    char *end = NULL;
    errno = 0;
    unsigned long long id = strtoull(r->param, &end, 10);
    if (errno || !end || *end || r->param[0] < '1' || r->param[0] > '9') {
        api_reply_errf(r, DDP_EINVAL, "member id '%.40s': want a number, 1 or more", r->param);
        return;
    }
    if (replica_remove(r->replica, (uint64_t)id, &e) != 0) {
        api_reply_err(r, &e);
        return;
    }
    log_info("cluster: node %llu removed by %s", id, r->who.name);
    api_cluster_get(r);
}
