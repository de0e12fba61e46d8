/*
 * test_http.c - ddpd's request routing without a network (http_dispatch): 404 for unknown
 * routes, 405 with Allow, 401/403 auth, 413 over the body cap, open routes, the embedded
 * documents, the error body shape, query arguments: unknown, repeated, too many, and an
 * encoded NUL in the request line; and the routes of retention (delete, the streamed log).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "server/coord.h"
#include "server/embed.h"
#include "server/http.h"

#define USER  "user-token-1"
#define AGENT "agent-token-2"

struct fx {
    char dir[64];
    char *db;
    struct coord *c;
};

static int setup(void **state)
{
    struct fx *f = xcalloc(1, sizeof(*f));
    log_init("test", LOG_WARN);
    snprintf(f->dir, sizeof(f->dir), "/tmp/ddp-test-http-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->db = xasprintf("%s/ddp.db", f->dir);
    if (coord_open(f->db, NULL, 1000, &f->c, NULL) != 0 ||
        coord_users_bootstrap(f->c, USER, 1000, NULL) != 0)
        return -1;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    coord_close(f->c);
    fs_remove_tree(f->dir, NULL);
    free(f->db);
    free(f);
    return 0;
}

/* Dispatches one request; returns the status and leaves the answer in *r (caller frees
 * r->out). */
static int call(struct fx *f, struct api_req *r, const char *method, const char *path,
                const char *token, const char *body)
{
    char auth[64];
    memset(r, 0, sizeof(*r));
    r->coord = f->c;
    r->method = method;
    r->path = path;
    r->body = body ? body : "";
    r->body_len = r->body_total = body ? strlen(body) : 0;
    r->now = 2000;
    if (token)
        snprintf(auth, sizeof(auth), "Bearer %s", token);
    int route = -2;
    http_dispatch(r, token ? auth : NULL, AGENT, &route);
    return r->status;
}

static void expect_error(struct api_req *r, int status, const char *grpc, const char *part)
{
    assert_int_equal(r->status, status);
    json_t *o = json_loadb(r->out, r->out_len, 0, NULL);
    assert_non_null(o);
    json_t *e = json_object_get(o, "error");
    assert_int_equal(json_integer_value(json_object_get(e, "code")), status);
    assert_string_equal(json_string_value(json_object_get(e, "status")), grpc);
    const char *msg = json_string_value(json_object_get(e, "message"));
    if (!strstr(msg, part))
        fail_msg("message '%s' lacks '%s'", msg, part);
    json_decref(o);
    free(r->out);
    r->out = NULL;
}

static void test_http_unknown_route_and_method(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    call(f, &r, "GET", "/v1/nope", USER, NULL);
    expect_error(&r, 404, "NOT_FOUND", "no route");
    call(f, &r, "GET", "/v1/jobs/j-1:explode", USER, NULL);
    expect_error(&r, 404, "NOT_FOUND", "no route");
    call(f, &r, "DELETE", "/v1/jobs", USER, NULL);
    assert_string_equal(r.allow, "POST, GET");
    expect_error(&r, 405, "INVALID_ARGUMENT", "DELETE");
    call(f, &r, "GET", "/v1/nodes:register", AGENT, NULL);
    assert_string_equal(r.allow, "POST");
    expect_error(&r, 405, "INVALID_ARGUMENT", "not allowed");
}

static void test_http_auth(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    call(f, &r, "GET", "/v1/jobs", NULL, NULL);
    expect_error(&r, 401, "UNAUTHENTICATED", "missing");
    call(f, &r, "GET", "/v1/jobs", "wrong", NULL);
    expect_error(&r, 401, "UNAUTHENTICATED", "wrong");
    call(f, &r, "GET", "/v1/jobs", AGENT, NULL);
    expect_error(&r, 403, "PERMISSION_DENIED", "user token");
    call(f, &r, "POST", "/v1/nodes:register", USER, "{}");
    expect_error(&r, 403, "PERMISSION_DENIED", "bootstrap (agent) token; you are admin");
    call(f, &r, "GET", "/v1/openapi.json", NULL, NULL);
    expect_error(&r, 401, "UNAUTHENTICATED", "missing");
    /* open routes */
    assert_int_equal(call(f, &r, "GET", "/healthz", NULL, NULL), 200);
    free(r.out);
    assert_int_equal(call(f, &r, "GET", "/metrics", NULL, NULL), 200);
    assert_non_null(strstr(r.out, "ddp_jobs{state=\"PENDING\"} 0"));
    free(r.out);
}

static void test_http_body_cap(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    memset(&r, 0, sizeof(r));
    r.coord = f->c;
    r.method = "POST";
    r.path = "/v1/jobs";
    r.body = "";
    r.body_total = 2 * 1024 * 1024;
    int route;
    http_dispatch(&r, "Bearer " USER, AGENT, &route);
    expect_error(&r, 413, "RESOURCE_EXHAUSTED", "over the limit");
    /* nothing was stored */
    assert_int_equal(call(f, &r, "GET", "/v1/jobs/j-1", USER, NULL), 404);
    free(r.out);
}

static void test_http_jobs_round_trip(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    assert_int_equal(call(f, &r, "POST", "/v1/jobs", USER, "{\"command\":[\"w\"]}"), 201);
    assert_non_null(strstr(r.out, "\"id\":\"j-1\""));
    free(r.out);
    call(f, &r, "POST", "/v1/jobs", USER, "{\"command\":[\"w\"],\"nnodes\":\"3:2\"}");
    expect_error(&r, 400, "INVALID_ARGUMENT", "field 'nnodes': min 3 > max 2");
    call(f, &r, "POST", "/v1/jobs", USER, "{\"command\":");
    expect_error(&r, 400, "INVALID_ARGUMENT", "not valid JSON");
    assert_int_equal(call(f, &r, "GET", "/v1/jobs/j-1", USER, NULL), 200);
    free(r.out);
    call(f, &r, "GET", "/v1/jobs/j-2", USER, NULL);
    expect_error(&r, 404, "NOT_FOUND", "job j-2 not found");
    call(f, &r, "GET", "/v1/jobs/bogus/events", USER, NULL);
    expect_error(&r, 404, "NOT_FOUND", "job bogus not found");
    assert_int_equal(call(f, &r, "POST", "/v1/jobs/j-1:cancel", USER, NULL), 200);
    assert_non_null(strstr(r.out, "\"CANCELLED\""));
    free(r.out);
    call(f, &r, "POST", "/v1/nodes/ghost:heartbeat", AGENT, "{\"incarnation\":\"x\"}");
    expect_error(&r, 403, "PERMISSION_DENIED", "the node's own credential");
}

static void test_http_embedded_documents(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    const struct embed_file *api = embed_find("schema/openapi.json");
    call(f, &r, "GET", "/v1/openapi.json", USER, NULL);
    if (api) {
        assert_int_equal(r.status, 200);
        assert_ptr_equal(r.static_out, api->data);
        assert_int_equal(r.out_len, api->len);
    } else {
        expect_error(&r, 503, "UNAVAILABLE", "openapi");
    }
    call(f, &r, "GET", "/", NULL, NULL);
    if (embed_find("web/index.html"))
        assert_string_equal(r.content_type, "text/html; charset=utf-8");
    else
        expect_error(&r, 404, "NOT_FOUND", "index.html");
    call(f, &r, "GET", "/ui/../schema/001_init.sql", NULL, NULL);
    expect_error(&r, 404, "NOT_FOUND", "no file");
    /* every migration is embedded */
    assert_non_null(embed_find("schema/001_init.sql"));
}

/* Dispatches GET path with the given query arguments. */
static int call_args(struct fx *f, struct api_req *r, const char *path, const struct api_arg *args,
                     size_t nargs, int over, int nul)
{
    char auth[64];
    memset(r, 0, sizeof(*r));
    r->coord = f->c;
    r->method = "GET";
    r->path = path;
    r->body = "";
    r->args = args;
    r->nargs = nargs;
    r->args_over = over;
    r->encoded_nul = nul;
    r->now = 2000;
    snprintf(auth, sizeof(auth), "Bearer %s", USER);
    int route = -2;
    http_dispatch(r, auth, AGENT, &route);
    return r->status;
}

static void test_http_query_arguments(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    const struct api_arg ok[] = {{"state", "PENDING"}, {"page_size", "5"}};
    assert_int_equal(call_args(f, &r, "/v1/jobs", ok, 2, 0, 0), 200);
    free(r.out);
    const struct api_arg unknown[] = {{"state", "PENDING"}, {"colour", "red"}};
    call_args(f, &r, "/v1/jobs", unknown, 2, 0, 0);
    expect_error(&r, 400, "INVALID_ARGUMENT", "unknown query parameter 'colour'");
    const struct api_arg twice[] = {{"state", "PENDING"}, {"state", "RUNNING"}};
    call_args(f, &r, "/v1/jobs", twice, 2, 0, 0);
    expect_error(&r, 400, "INVALID_ARGUMENT", "'state' given more than once");
    const struct api_arg none[] = {{"x", "1"}};
    call_args(f, &r, "/v1/nodes", none, 1, 0, 0);
    expect_error(&r, 400, "INVALID_ARGUMENT", "takes none");
    call_args(f, &r, "/healthz", none, 1, 0, 0);
    expect_error(&r, 400, "INVALID_ARGUMENT", "unknown query parameter 'x'");
    call_args(f, &r, "/v1/jobs", ok, 2, 1, 0);
    expect_error(&r, 400, "INVALID_ARGUMENT", "more than 16 query parameters");
    /* %00 is refused before the route is looked at: "/v1/jobs/j-1%00x" reached us as j-1 */
    call_args(f, &r, "/v1/jobs/j-1", NULL, 0, 0, 1);
    expect_error(&r, 400, "INVALID_ARGUMENT", "encoded NUL");
    /* an argument the handler checks still reaches it */
    const struct api_arg bad[] = {{"page_size", "0"}};
    call_args(f, &r, "/v1/jobs", bad, 1, 0, 0);
    expect_error(&r, 400, "INVALID_ARGUMENT", "page_size");
}

/* DELETE /v1/jobs/{id} and the streamed GET .../logs:download through the route table. */
static void test_http_delete_and_download(void **state)
{
    struct fx *f = *state;
    struct api_req r;
    assert_int_equal(call(f, &r, "POST", "/v1/jobs", USER, "{\"command\":[\"w\"]}"), 201);
    free(r.out);
    call(f, &r, "DELETE", "/v1/jobs/j-1", USER, NULL);
    expect_error(&r, 400, "FAILED_PRECONDITION", "job j-1 is PENDING");
    call(f, &r, "PUT", "/v1/jobs/j-1", USER, NULL);
    assert_string_equal(r.allow, "GET, PATCH, DELETE");
    expect_error(&r, 405, "INVALID_ARGUMENT", "PUT");
    /* the download: a stream of gzip (the magic bytes first) with its headers */
    assert_int_equal(call(f, &r, "GET", "/v1/jobs/j-1/logs:download", USER, NULL), 200);
    assert_string_equal(r.content_type, "application/gzip");
    assert_string_equal(r.disposition, "attachment; filename=\"j-1.log.gz\"");
    assert_null(r.out);
    assert_non_null(r.stream_read);
    char buf[64];
    long n = r.stream_read(r.stream_ctx, buf, sizeof(buf));
    assert_true(n >= 2);
    assert_int_equal((unsigned char)buf[0], 0x1f);
    assert_int_equal((unsigned char)buf[1], 0x8b);
    api_req_release(&r); /* the stream is freed unsent */
    assert_null(r.stream_ctx);
    call(f, &r, "GET", "/v1/jobs/j-7/logs:download", USER, NULL);
    expect_error(&r, 404, "NOT_FOUND", "job j-7 not found");
    assert_int_equal(call(f, &r, "POST", "/v1/jobs/j-1:cancel", USER, NULL), 200);
    free(r.out);
    assert_int_equal(call(f, &r, "DELETE", "/v1/jobs/j-1", USER, NULL), 200);
    assert_non_null(strstr(r.out, "\"CANCELLED\""));
    free(r.out);
    call(f, &r, "GET", "/v1/jobs/j-1", USER, NULL);
    expect_error(&r, 404, "NOT_FOUND", "job j-1 not found");
    call(f, &r, "DELETE", "/v1/jobs/j-1", NULL, NULL);
    expect_error(&r, 401, "UNAUTHENTICATED", "missing");
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_http_unknown_route_and_method),
        T(test_http_auth),
        T(test_http_body_cap),
        T(test_http_jobs_round_trip),
        T(test_http_embedded_documents),
        T(test_http_query_arguments),
        T(test_http_delete_and_download),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
