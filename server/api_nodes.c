/*
 * api_nodes.c - /v1/nodes: register (bootstrap token), heartbeat (the node's own credential),
 * list (any user), remove (admin).
 */
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"

#include "server/coord.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/validate.h"

void api_nodes_register(struct api_req *r)
{
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    if (api_parse_body(r, &body) != 0)
        return;
    int rc = coord_register(r->coord, body, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 200, out, &e);
}

void api_nodes_heartbeat(struct api_req *r)
{
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    metrics_beat();
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "node %.64s not registered", r->param);
        return;
    }
    if (api_parse_body(r, &body) != 0)
        return;
    int rc = coord_beat(r->coord, r->param, body, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 200, out, &e);
}

void api_nodes_list(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    int rc = coord_list_nodes(r->coord, r->now, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_nodes_remove(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "node %.64s not registered", r->param);
        return;
    }
    int rc = coord_remove_node(r->coord, r->param, r->now, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

/* POST /v1/nodes/{name}:cordon, :drain, :uncordon (admin), body {"reason"?}. */
static void api_nodes_admin(struct api_req *r, const char *action)
{
    struct ddp_err e;
    char *out = NULL;
    const char *reason = NULL;
    json_t *body = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "node %.64s not registered", r->param);
        return;
    }
    if (r->body_len > 0) {
        static const char *const keys[] = {"reason", NULL};
        if (api_parse_body(r, &body) != 0)
            return;
        if (jsonx_check_keys(body, keys, NULL, &e) != 0 ||
            jsonx_get_string(body, "reason", 0, &reason, &e) != 0) {
            json_decref(body);
            api_reply_err(r, &e);
            return;
        }
        if (reason && strlen(reason) > 255) {
            json_decref(body);
            api_reply_errf(r, DDP_EINVAL, "field 'reason': at most 255 bytes");
            return;
        }
    }
    int rc = coord_node_admin(r->coord, r->param, action, reason, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 200, out, &e);
}

void api_nodes_cordon(struct api_req *r)
{
    api_nodes_admin(r, "cordon");
}

void api_nodes_drain(struct api_req *r)
{
    api_nodes_admin(r, "drain");
}

void api_nodes_uncordon(struct api_req *r)
{
    api_nodes_admin(r, "uncordon");
}
