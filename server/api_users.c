/*
 * api_users.c - /v1/me, /v1/users* and /v1/groups*: who am I, the admins' user management
 * (add, list, remove, rotate a token) and the groups' quotas. A new token appears once, in the answer that made it.
 */
#include <stdlib.h>

#include "common/jsonx.h"
#include "server/coord.h"
#include "server/http.h"
#include "server/validate.h"

void api_users_me(struct api_req *r)
{
    json_t *o = json_pack("{s:s, s:s}", "name", r->who.name, "role", auth_role_name(r->who.role));
    char *out = jsonx_dumps(o);
    json_decref(o);
    api_reply_json(r, 200, out);
}

void api_users_list(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    int rc = coord_users_list(r->coord, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_users_add(struct api_req *r)
{
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    if (api_parse_body(r, &body) != 0)
        return;
    int rc = coord_user_add(r->coord, body, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 201, out, &e);
}

void api_users_remove(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "user %.64s not found", r->param);
        return;
    }
    int rc = coord_user_remove(r->coord, r->param, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_users_rotate(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "user %.64s not found", r->param);
        return;
    }
    if (r->body_len > 0) {
        json_t *body = NULL;
        if (api_parse_body(r, &body) != 0)
            return;
        int keys = (int)json_object_size(body);
        json_decref(body);
        if (keys) {
            api_reply_errf(r, DDP_EINVAL, "rotate-token takes no fields");
            return;
        }
    }
    int rc = coord_user_rotate(r->coord, r->param, &r->who, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_groups_list(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    int rc = coord_groups_list(r->coord, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_groups_get(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "group %.64s not found", r->param);
        return;
    }
    int rc = coord_group_get(r->coord, r->param, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_groups_put(struct api_req *r)
{
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_EINVAL, "group name: must be 1..63 characters of [A-Za-z0-9._-]");
        return;
    }
    if (api_parse_body(r, &body) != 0)
        return;
    int rc = coord_group_put(r->coord, r->param, body, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 200, out, &e);
}

void api_users_update(struct api_req *r)
{
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    if (!validate_name(r->param)) {
        api_reply_errf(r, DDP_ENOTFOUND, "user %.64s not found", r->param);
        return;
    }
    if (api_parse_body(r, &body) != 0)
        return;
    int rc = coord_user_update(r->coord, r->param, body, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 200, out, &e);
}
