/*
 * httpc.c - HTTP/JSON client over libcurl.
 */
#include "common/httpc.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/backoff.h"
#include "common/jsonx.h"
#include "common/srvlist.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

struct httpc {
    CURL *curl;
    struct srvlist servers; /* ddpd's addresses, at least one */
    size_t cur;             /* the sticky address: tried first by the next call */
    char *auth_header;      /* "Authorization: Bearer ..." or NULL */
    char *extra_header;     /* one more "Name: value" line, or NULL */
    int idempotency_key;    /* extra_header is an Idempotency-Key */
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

struct httpc *httpc_new(const char *servers, const char *token)
{
    pthread_once(&httpc_once, httpc_global_init);
    struct httpc *c = xcalloc(1, sizeof(*c));
    c->curl = curl_easy_init();
    if (!c->curl)
        abort();
    if (srvlist_parse(servers, &c->servers, NULL) < 0) {
        /* Not a list the callers checked: kept as one address, whose calls then fail with
         * curl's own reason. */
        size_t n = strlen(servers);
        while (n > 0 && servers[n - 1] == '/')
            n--;
        c->servers.urls = xcalloc(1, sizeof(*c->servers.urls));
        c->servers.origins = xcalloc(1, sizeof(*c->servers.origins));
        c->servers.urls[0] = xstrndup(servers, n);
        c->servers.n = 1;
    }
    httpc_set_token(c, token);
    return c;
}

void httpc_set_header(struct httpc *c, const char *line)
{
    free(c->extra_header);
    c->extra_header = line ? xstrdup(line) : NULL;
    c->idempotency_key = line && strncasecmp(line, "Idempotency-Key:", 16) == 0;
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
    srvlist_release(&c->servers);
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
    return c->servers.urls[c->cur];
}

size_t httpc_server_count(const struct httpc *c)
{
    return c->servers.n;
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

static void httpc_buf_reset(struct httpc_buf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
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

/* ---- one exchange, and the walk over the addresses ------------------------------------- */

/*
 * Where an exchange's answer body goes. body: the buffer that holds the body of an answer
 * that is not 2xx (for a redirect or not_leader answer) or of every answer (a request);
 * reset() empties the sink before the next try; kept() says how many 2xx bytes went where
 * they cannot be taken back (a download's file): such an exchange is never tried again.
 */
struct httpc_io {
    curl_write_callback fn;
    void *ud;
    struct httpc_buf *body;
    void (*reset)(void *ud);
    unsigned long long (*kept)(void *ud);
};

/* One exchange on the easy handle: METHOD url with payload (may be NULL). */
static CURLcode httpc_perform(struct httpc *c, const char *method, const char *url,
                              const char *payload, int auth, long timeout_ms,
                              const struct httpc_io *io, long *status, char **location, int *sent)
{
    CURL *h = c->curl;
    struct curl_slist *hdrs = NULL;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    /* A connect on the networks ddp runs on takes milliseconds. With one address, wait for
     * it long (a slow start); with several, a replica that does not answer a connect within
     * 500 ms is most likely cut off or gone (a leader behind a cut link, which the others still
     * redirect to until their election): the next address is the better bet. */
    long connect_ms = c->servers.n > 1 ? 500L : 5000L;
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms < connect_ms ? timeout_ms : connect_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, io->fn);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, io->ud);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    if (c->ca_file)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);
    if (strcmp(method, "GET") == 0 && !payload) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    }
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    if (auth && c->auth_header)
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
    long reqsize = 0;
    if (curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &reqsize) != CURLE_OK)
        reqsize = 1; /* unknown: count it as sent */
    *sent = reqsize > 0 && cc != CURLE_COULDNT_CONNECT && cc != CURLE_COULDNT_RESOLVE_HOST;
    *status = 0;
    *location = NULL;
    if (cc == CURLE_OK) {
        char *loc = NULL;
        if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status) != CURLE_OK)
            *status = 0;
        if (curl_easy_getinfo(h, CURLINFO_REDIRECT_URL, &loc) == CURLE_OK && loc)
            *location = xstrdup(loc);
    }
    curl_slist_free_all(hdrs);
    return cc;
}

/* Whether METHOD may be sent again after it may have reached a ddpd. */
static int httpc_resend_ok(const struct httpc *c, const char *method)
{
    if (strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 || strcmp(method, "PUT") == 0 ||
        strcmp(method, "DELETE") == 0)
        return 1;
    return c->idempotency_key; /* POST, PATCH */
}

/* The leader a 503 answer names when its error.code is "not_leader": 1 and *leader (borrowed
 * from ans; NULL when it names none), or 0 for any other 503. */
static int httpc_not_leader(json_t *ans, const char **leader)
{
    json_t *e = ans ? json_object_get(ans, "error") : NULL;
    const char *code = e ? json_string_value(json_object_get(e, "code")) : NULL;
    if (!code || strcmp(code, "not_leader") != 0)
        return 0;
    const char *l = json_string_value(json_object_get(e, "leader"));
    *leader = l && *l ? l : NULL;
    return 1;
}

/* Appends "what" to the bounded list of addresses tried, in the first round only (the later
 * rounds try the same ones). */
static void httpc_note(char *tried, size_t cap, int round, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void httpc_note(char *tried, size_t cap, int round, const char *fmt, ...)
{
    size_t len = strlen(tried);
    if (round > 0 || len + 8 >= cap)
        return;
    if (len > 0) {
        memcpy(tried + len, ", ", 3);
        len += 2;
    }
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tried + len, cap - len, fmt, ap);
    va_end(ap);
    if (n < 0)
        tried[len] = '\0';
    else if ((size_t)n >= cap - len && cap > 4)
        memcpy(tried + cap - 4, "...", 4);
}

/* Where a try went: the configured address, or the URL a redirect led to. */
#define HTTPC_WHERE (hop == 0 ? c->servers.urls[idx] : url)

/*
 * Sends METHOD path with payload to the addresses, sticky one first (see httpc.h for the
 * rules). Returns 0 with *status the final answer's status (its body is in io), or a DDP_E*
 * code with err filled.
 */
static int httpc_run(struct httpc *c, const char *method, const char *path, const char *payload,
                     long timeout_ms, struct httpc_io *io, long *status, struct ddp_err *err)
{
    int64_t deadline = time_deadline_ms(timeout_ms > 0 ? timeout_ms : 1);
    size_t n = c->servers.n;
    char tried[DDP_ERR_MSG_MAX] = "";
    const char *last_reason = "no time left to try";
    char refused[DDP_ERR_MSG_MAX];
    int last_timeout = 0, resend = httpc_resend_ok(c, method);
    struct backoff bo;
    backoff_init(&bo, HTTPC_BACKOFF_MIN_MS, HTTPC_BACKOFF_MAX_MS);

    int rounds = 0;
    for (int round = 0; round < HTTPC_ROUNDS; round++) {
        size_t start = c->cur;
        rounds++;
        for (size_t k = 0; k < n; k++) {
            size_t idx = (start + k) % n;
            char *url = xasprintf("%s%s", c->servers.urls[idx], path);
            int auth = 1;
            for (int hop = 0;; hop++) {
                long left = (long)time_left_ms(deadline);
                if (left <= 0) {
                    free(url);
                    goto exhausted;
                }
                long st = 0;
                char *loc = NULL;
                int sent = 0;
                io->reset(io->ud);
                CURLcode cc =
                    httpc_perform(c, method, url, payload, auth, left, io, &st, &loc, &sent);
                if (cc != CURLE_OK) {
                    free(loc);
                    if (io->body->too_big) {
                        int rc = err_set(err, DDP_ETOOBIG, "answer from %s is larger than %u bytes",
                                         url, HTTPC_MAX_BODY);
                        free(url);
                        return rc;
                    }
                    last_reason = httpc_reason(cc);
                    last_timeout = cc == CURLE_OPERATION_TIMEDOUT;
                    int rc = last_timeout ? DDP_ETIMEOUT : DDP_EUNAVAIL;
                    if ((sent && !resend) || io->kept(io->ud) > 0) {
                        /* It may have been done: not sent again, and the next call starts
                         * at the next address. */
                        c->cur = (idx + 1) % n;
                        if (n == 1 && hop == 0)
                            err_set(err, rc, "cannot reach ddpd at %s: %s", c->servers.urls[idx],
                                    last_reason);
                        else
                            err_set(err, rc,
                                    "cannot reach ddpd at %.200s: %s (%s not sent to another "
                                    "address: it may have arrived, and it has no "
                                    "Idempotency-Key%s%.200s)",
                                    HTTPC_WHERE, last_reason, method, tried[0] ? "; before: " : "",
                                    tried);
                        free(url);
                        return rc;
                    }
                    httpc_note(tried, sizeof(tried), round, "%.200s (%s)", HTTPC_WHERE,
                               last_reason);
                    break; /* the next address */
                }
                const char *leader = NULL;
                int named = 0;
                char *target = NULL;
                if ((st == 307 || st == 308) && loc) {
                    target = loc;
                    loc = NULL;
                } else if (st == 503) {
                    json_t *ans = io->body->len > 0
                                      ? json_loadb(io->body->data, io->body->len, 0, NULL)
                                      : NULL;
                    if (httpc_not_leader(ans, &leader)) {
                        named = 1;
                        if (leader) {
                            size_t ll = strlen(leader);
                            while (ll > 0 && leader[ll - 1] == '/')
                                ll--;
                            target = xasprintf("%.*s%s", (int)ll, leader, path);
                        }
                    }
                    json_decref(ans);
                    if (named && !target) {
                        free(loc);
                        last_reason = "not the leader, and it knows none";
                        last_timeout = 0;
                        httpc_note(tried, sizeof(tried), round, "%.200s (%s)", HTTPC_WHERE,
                                   last_reason);
                        break;
                    }
                }
                free(loc);
                if (!target) {
                    /* The answer. The address the walk began at, or the listed one that
                     * answered, comes first next time. */
                    int at = srvlist_find(&c->servers, url);
                    c->cur = at >= 0 ? (size_t)at : idx;
                    *status = st;
                    free(url);
                    return 0;
                }
                struct ddp_err why;
                int next_auth = 0;
                if (hop + 1 >= HTTPC_MAX_HOPS) {
                    httpc_note(tried, sizeof(tried), round, "%.200s (more than %d redirects)",
                               HTTPC_WHERE, HTTPC_MAX_HOPS - 1);
                    last_reason = "too many redirects";
                    free(target);
                    break;
                }
                if (srvlist_redirect_check(&c->servers, url, target, named, &next_auth, &why) < 0) {
                    httpc_note(tried, sizeof(tried), round, "%.200s (%s)", HTTPC_WHERE, why.msg);
                    snprintf(refused, sizeof(refused), "%s", why.msg);
                    last_reason = refused;
                    free(target);
                    break;
                }
                auth = next_auth;
                free(url);
                url = target;
            }
            free(url);
        }
        if (time_left_ms(deadline) <= 0 || round + 1 == HTTPC_ROUNDS)
            break;
        backoff_sleep(&bo, deadline);
    }
exhausted:
    if (n == 1)
        return err_set(err, last_timeout ? DDP_ETIMEOUT : DDP_EUNAVAIL,
                       "cannot reach ddpd at %s: %s", c->servers.urls[0], last_reason);
#undef HTTPC_WHERE
    return err_set(err, last_timeout ? DDP_ETIMEOUT : DDP_EUNAVAIL,
                   "cannot reach ddpd at any of its %zu addresses (%d rounds): %s", n, rounds,
                   tried[0] ? tried : last_reason);
}

static void httpc_io_buf_reset(void *ud)
{
    httpc_buf_reset(ud);
}

static unsigned long long httpc_io_buf_kept(void *ud)
{
    (void)ud;
    return 0;
}

int httpc_request(struct httpc *c, const char *method, const char *path, const json_t *body,
                  long timeout_ms, long *status, json_t **answer, char **text, struct ddp_err *err)
{
    struct httpc_buf buf = {0};
    struct httpc_io io = {.fn = httpc_on_data,
                          .ud = &buf,
                          .body = &buf,
                          .reset = httpc_io_buf_reset,
                          .kept = httpc_io_buf_kept};
    char *payload = body ? jsonx_dumps(body) : NULL;
    long code = 0;
    int rc = httpc_run(c, method, path, payload, timeout_ms, &io, &code, err);
    if (rc < 0)
        goto out;
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
    free(buf.data);
    free(payload);
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

static void httpc_io_sink_reset(void *ud)
{
    struct httpc_sink *s = ud;
    httpc_buf_reset(&s->err_body);
}

static unsigned long long httpc_io_sink_kept(void *ud)
{
    const struct httpc_sink *s = ud;
    return s->written + (unsigned long long)(s->too_big || s->write_failed);
}

int httpc_download(struct httpc *c, const char *path, long timeout_ms, FILE *out,
                   unsigned long long max, unsigned long long *written, struct ddp_err *err)
{
    struct httpc_sink sink = {.h = c->curl, .out = out, .max = max};
    struct httpc_io io = {.fn = httpc_on_file,
                          .ud = &sink,
                          .body = &sink.err_body,
                          .reset = httpc_io_sink_reset,
                          .kept = httpc_io_sink_kept};
    long code = 0;
    int rc = httpc_run(c, "GET", path, NULL, timeout_ms, &io, &code, err);
    if (rc < 0) {
        if (sink.too_big)
            rc = err_set(err, DDP_ETOOBIG, "answer from %s%s is larger than %llu bytes",
                         httpc_base_url(c), path, max);
        else if (sink.write_failed)
            rc = err_set(err, DDP_EIO, "cannot write the download: %s", strerror(errno));
        goto out;
    }
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
    free(sink.err_body.data);
    return rc;
}
