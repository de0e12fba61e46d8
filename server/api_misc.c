/*
 * api_misc.c - /healthz, /readyz, /metrics, /v1/openapi.json and the dashboard files (/ and
 * /ui/<file>), all served from memory (the documents are embedded at build time).
 */
#include <string.h>

#include "common/jsonx.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/coord.h"
#include "server/embed.h"
#include "server/gate.h"
#include "server/http.h"
#include "server/metrics.h"
#include "server/replica.h"

/* Liveness: the process is up and answers; a cluster replica adds its role, the leader's
 * URL when known, and its node (server/replica.h). */
void api_misc_healthz(struct api_req *r)
{
    if (r->role == GATE_SINGLE) {
        api_reply_json(r, 200, xstrdup("{\"status\":\"ok\"}"));
        return;
    }
    json_t *o = json_pack("{s:s, s:s}", "status", "ok", "role", gate_role_name(r->role));
    json_object_set_new(o, "leader", r->leader[0] ? json_string(r->leader) : json_null());
    if (r->replica)
        replica_describe(r->replica, o);
    api_reply_json(r, 200, jsonx_dumps(o));
    json_decref(o);
}

/* Readiness: 503 naming the part that fails (today the one part is the store) while the last
 * write of the store failed and none succeeded since. */
void api_misc_readyz(struct api_req *r)
{
    if (!r->coord) {
        api_reply_errf(r, DDP_EUNAVAIL, "this replica is a %s, not the leader%s%s",
                       gate_role_name(r->role), r->leader[0] ? ": the leader is " : "", r->leader);
        return;
    }
    struct coord_health h;
    coord_health(r->coord, &h);
    if (!h.store_ok) {
        char when[40];
        time_format_rfc3339(h.store_failed_at, when, sizeof(when));
        api_reply_errf(r, DDP_EUNAVAIL, "storage: last write failed at %s: %.400s", when,
                       h.store_error);
        return;
    }
    json_t *o = json_pack("{s:s, s:s}", "status", "ok", "storage", "ok");
    api_reply_json(r, 200, jsonx_dumps(o));
    json_decref(o);
}

void api_misc_metrics(struct api_req *r)
{
    api_reply_json(r, 200, metrics_render(r->coord, r->now));
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
}

void api_misc_openapi(struct api_req *r)
{
    const struct embed_file *f = embed_find("schema/openapi.json");
    if (!f) {
        api_reply_errf(r, DDP_EUNAVAIL, "this ddpd was built without schema/openapi.json");
        return;
    }
    api_reply_static(r, 200, "application/json", f->data, f->len);
}

static const char *api_content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
        {".txt", "text/plain; charset=utf-8"},
    };
    const char *dot = strrchr(name, '.');
    if (dot)
        for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
            if (strcmp(dot, types[i].ext) == 0)
                return types[i].type;
    return "application/octet-stream";
}

static void api_web_file(struct api_req *r, const char *file)
{
    char name[512];
    const struct embed_file *f = NULL;
    if (!strstr(file, "..") && strlen(file) < sizeof(name) - 8) {
        memcpy(name, "web/", 4);
        memcpy(name + 4, file, strlen(file) + 1);
        f = embed_find(name);
    }
    if (!f) {
        api_reply_errf(r, DDP_ENOTFOUND, "no file %.200s in the dashboard", file);
        return;
    }
    api_reply_static(r, 200, api_content_type(file), f->data, f->len);
}

void api_misc_index(struct api_req *r)
{
    api_web_file(r, "index.html");
}

void api_misc_ui(struct api_req *r)
{
    api_web_file(r, r->param);
}
