/*
 * httpc.c - HTTP/JSON client over libcurl.
 */
#include "common/httpc.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/xalloc.h"

struct httpc {
    CURL *curl;
    char *base_url;
    char *auth_header;  /* "Authorization: Bearer ..." or NULL */
    char *extra_header; /* one more "Name: value" line, or NULL */
    char *ca_file;
};

struct httpc_buf {
    char *data;
    size_t len;
    int too_big;
};

static pthread_once_t httpc_once = PTHREAD_ONCE_INIT;

static void httpc_global_init(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct httpc *httpc_new(const char *base_url, const char *token)
{
    pthread_once(&httpc_once, httpc_global_init);
    struct httpc *c = xcalloc(1, sizeof(*c));
    c->curl = curl_easy_init();
    if (!c->curl)
        abort();
    size_t n = strlen(base_url);
    while (n > 0 && base_url[n - 1] == '/')
        n--;
    c->base_url = xstrndup(base_url, n);
    httpc_set_token(c, token);
    return c;
}

void httpc_set_header(struct httpc *c, const char *line)
{
    free(c->extra_header);
    c->extra_header = line ? xstrdup(line) : NULL;
}

void httpc_set_token(struct httpc *c, const char *token)
{
    free(c->auth_header);
    c->auth_header = token && *token ? xasprintf("Authorization: Bearer %s", token) : NULL;
}

void httpc_free(struct httpc *c)
{
    if (!c)
        return;
    curl_easy_cleanup(c->curl);
    free(c->base_url);
    free(c->auth_header);
    free(c->extra_header);
    free(c->ca_file);
    free(c);
}

void httpc_set_ca_file(struct httpc *c, const char *path)
{
    free(c->ca_file);
    c->ca_file = path ? xstrdup(path) : NULL;
}

const char *httpc_base_url(const struct httpc *c)
{
    return c->base_url;
}

static size_t httpc_on_data(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct httpc_buf *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n > HTTPC_MAX_BODY) {
        b->too_big = 1;
        return 0;
    }
    b->data = xrealloc(b->data, b->len + n + 1);
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

static const char *httpc_reason(CURLcode cc)
{
    switch (cc) {
    case CURLE_COULDNT_CONNECT:
        return "connection refused";
    case CURLE_COULDNT_RESOLVE_HOST:
        return "host not found";
    case CURLE_OPERATION_TIMEDOUT:
        return "timed out";
    case CURLE_GOT_NOTHING:
        return "connection closed without an answer";
    case CURLE_RECV_ERROR:
        return "connection reset";
    case CURLE_SEND_ERROR:
        return "connection reset";
    default:
        return curl_easy_strerror(cc);
    }
}

int httpc_request(struct httpc *c, const char *method, const char *path, const json_t *body,
                  long timeout_ms, long *status, json_t **answer, char **text, struct ddp_err *err)
{
    CURL *h = c->curl;
    struct httpc_buf buf = {0};
    struct curl_slist *hdrs = NULL;
    char *url = xasprintf("%s%s", c->base_url, path);
    char *payload = body ? jsonx_dumps(body) : NULL;
    int rc = 0;

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, httpc_on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &buf);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    if (c->auth_header)
        hdrs = curl_slist_append(hdrs, c->auth_header);
    if (c->extra_header)
        hdrs = curl_slist_append(hdrs, c->extra_header);
    if (payload) {
        hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(payload));
    } else if (strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, 0L);
    }
    if (strcmp(method, "HEAD") == 0)
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        if (buf.too_big)
            rc = err_set(err, DDP_ETOOBIG, "answer from %s is larger than %u bytes", url,
                         HTTPC_MAX_BODY);
        else
            rc = err_set(err, cc == CURLE_OPERATION_TIMEDOUT ? DDP_ETIMEOUT : DDP_EUNAVAIL,
                         "cannot reach ddpd at %s: %s", c->base_url, httpc_reason(cc));
        goto out;
    }
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    *status = code;
    if (answer) {
        *answer = NULL;
        if (buf.len > 0)
            *answer = json_loadb(buf.data, buf.len, 0, NULL);
    }
    if (text) {
        *text = buf.data ? buf.data : xstrdup("");
        buf.data = NULL;
    }
out:
    curl_slist_free_all(hdrs);
    free(buf.data);
    free(payload);
    free(url);
    return rc;
}

/* The error of a non-2xx answer with JSON body ans (may be NULL): its DDP_E* code, err
 * filled with ddpd's message. */
static int httpc_answer_err(const char *method, const char *path, long status, json_t *ans,
                            struct ddp_err *err)
{
    int rc;
    json_t *e = ans ? json_object_get(ans, "error") : NULL;
    const char *st = e ? json_string_value(json_object_get(e, "status")) : NULL;
    const char *msg = e ? json_string_value(json_object_get(e, "message")) : NULL;
    int code = st ? err_from_status_name(st) : DDP_EINTERNAL;
    if (status == 404 && !st)
        code = DDP_ENOTFOUND;
    if (code == DDP_OK)
        code = DDP_EINTERNAL;
    rc = err_set(err, code, "%s", msg ? msg : "unexpected answer from ddpd");
    if (!msg && err)
        err_set(err, code, "ddpd answered %s %s with HTTP %ld", method, path, status);
    return rc;
}

int httpc_call(struct httpc *c, const char *method, const char *path, const json_t *body,
               long timeout_ms, json_t **answer, struct ddp_err *err)
{
    long status = 0;
    json_t *ans = NULL;
    int rc = httpc_request(c, method, path, body, timeout_ms, &status, &ans, NULL, err);
    if (rc < 0)
        return rc;
    if (status >= 200 && status < 300) {
        if (answer)
            *answer = ans;
        else
            json_decref(ans);
        return 0;
    }
    rc = httpc_answer_err(method, path, status, ans, err);
    json_decref(ans);
    return rc;
}

/* Where a download's bytes go: out for a 2xx answer, err_body (bounded) for any other. */
struct httpc_sink {
    CURL *h;
    FILE *out;
    unsigned long long max, written;
    int too_big, write_failed;
    struct httpc_buf err_body;
};

static size_t httpc_on_file(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    struct httpc_sink *s = userdata;
    size_t n = size * nmemb;
    long code = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
        if (s->err_body.len + n > 64 * 1024)
            return n; /* an error body past 64 KiB: the rest is not needed for the message */
        return httpc_on_data(ptr, size, nmemb, &s->err_body);
    }
    if (s->written + n > s->max) {
        s->too_big = 1;
        return 0;
    }
    if (fwrite(ptr, 1, n, s->out) != n) {
        s->write_failed = 1;
        return 0;
    }
    s->written += n;
    return n;
}

int httpc_download(struct httpc *c, const char *path, long timeout_ms, FILE *out,
                   unsigned long long max, unsigned long long *written, struct ddp_err *err)
{
    CURL *h = c->curl;
    struct httpc_sink sink = {.h = h, .out = out, .max = max};
    struct curl_slist *hdrs = NULL;
    char *url = xasprintf("%s%s", c->base_url, path);
    int rc = 0;

    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, httpc_on_file);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (c->auth_header)
        hdrs = curl_slist_append(hdrs, c->auth_header);
    if (c->extra_header)
        hdrs = curl_slist_append(hdrs, c->extra_header);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);

    CURLcode cc = curl_easy_perform(h);
    if (cc != CURLE_OK) {
        if (sink.too_big)
            rc = err_set(err, DDP_ETOOBIG, "answer from %s is larger than %llu bytes", url, max);
        else if (sink.write_failed)
            rc = err_set(err, DDP_EIO, "cannot write the download: %s", strerror(errno));
        else
            rc = err_set(err, cc == CURLE_OPERATION_TIMEDOUT ? DDP_ETIMEOUT : DDP_EUNAVAIL,
                         "cannot reach ddpd at %s: %s", c->base_url, httpc_reason(cc));
        goto out;
    }
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300) {
        json_t *ans = sink.err_body.len > 0
                          ? json_loadb(sink.err_body.data, sink.err_body.len, 0, NULL)
                          : NULL;
        rc = httpc_answer_err("GET", path, code, ans, err);
        json_decref(ans);
        goto out;
    }
    if (written)
        *written = sink.written;
out:
    curl_slist_free_all(hdrs);
    free(sink.err_body.data);
    free(url);
    return rc;
}
