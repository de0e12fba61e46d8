/*
 * srvlist.c - ddpd's address list and the redirect rule (see srvlist.h).
 *
 * Invariants: every element of a parsed list is a valid base URL and origins[i] is the
 * origin of urls[i]; an invalid text leaves no partial list behind.
 */
#include "common/srvlist.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/xalloc.h"

static int srvlist_host_char(char ch)
{
    return isalnum((unsigned char)ch) || ch == '.' || ch == '-';
}

int srvlist_origin_parse(const char *url, int allow_path, struct srv_origin *o, struct ddp_err *err)
{
    struct srv_origin r;
    const char *p;
    memset(&r, 0, sizeof(r));
    if (strlen(url) > SRVLIST_URL_MAX)
        return err_set(err, DDP_EINVAL, "longer than %d bytes", SRVLIST_URL_MAX);
    if (strncasecmp(url, "http://", 7) == 0) {
        p = url + 7;
    } else if (strncasecmp(url, "https://", 8) == 0) {
        r.https = 1;
        p = url + 8;
    } else {
        return err_set(err, DDP_EINVAL, "scheme must be http or https");
    }
    size_t hl;
    const char *after;
    if (*p == '[') {
        hl = strspn(p + 1, "0123456789abcdefABCDEF:.");
        if (p[1 + hl] != ']')
            return err_set(err, DDP_EINVAL, "an IPv6 host must be in brackets: [::1]");
        after = p + hl + 2;
        p++;
    } else {
        hl = 0;
        while (srvlist_host_char(p[hl]))
            hl++;
        after = p + hl;
    }
    if (hl == 0)
        return err_set(err, DDP_EINVAL, "no host");
    if (hl >= sizeof(r.host))
        return err_set(err, DDP_EINVAL, "host longer than %zu bytes", sizeof(r.host) - 1);
    for (size_t i = 0; i < hl; i++)
        r.host[i] = (char)tolower((unsigned char)p[i]);
    r.port = r.https ? 443 : 80;
    if (*after == ':') {
        long port = 0;
        size_t dl = 0;
        while (isdigit((unsigned char)after[1 + dl]) && dl < 6) {
            port = port * 10 + (after[1 + dl] - '0');
            dl++;
        }
        if (dl == 0 || isdigit((unsigned char)after[1 + dl]) || port < 1 || port > 65535)
            return err_set(err, DDP_EINVAL, "port must be a number 1..65535");
        r.port = (int)port;
        after += 1 + dl;
    }
    if (allow_path) {
        if (*after && *after != '/' && *after != '?' && *after != '#')
            return err_set(err, DDP_EINVAL, "unexpected '%c' after the host", *after);
    } else {
        while (*after == '/')
            after++;
        if (*after)
            return err_set(err, DDP_EINVAL,
                           "a server address has no path, query or user: "
                           "give scheme://host:port");
    }
    *o = r;
    return 0;
}

int srvlist_origin_equal(const struct srv_origin *a, const struct srv_origin *b)
{
    return a->https == b->https && a->port == b->port && strcmp(a->host, b->host) == 0;
}

void srvlist_release(struct srvlist *l)
{
    if (!l)
        return;
    for (size_t i = 0; i < l->n; i++)
        free(l->urls[i]);
    free(l->urls);
    free(l->origins);
    memset(l, 0, sizeof(*l));
}

int srvlist_parse(const char *text, struct srvlist *l, struct ddp_err *err)
{
    struct srvlist r = {0};
    int rc = 0;
    const char *p = text;
    size_t pos = 0;
    memset(l, 0, sizeof(*l));
    while (*p && isspace((unsigned char)*p))
        p++;
    if (!*p)
        return err_set(err, DDP_EINVAL, "empty list: give at least one http(s)://host:port");
    for (;;) {
        size_t len = strcspn(p, ",");
        const char *s = p, *e = p + len;
        pos++;
        while (s < e && isspace((unsigned char)*s))
            s++;
        while (e > s && isspace((unsigned char)e[-1]))
            e--;
        while (e > s && e[-1] == '/')
            e--;
        if (e == s) {
            rc = err_set(err, DDP_EINVAL, "element %zu is empty", pos);
            goto out;
        }
        if (pos > SRVLIST_MAX) {
            rc = err_set(err, DDP_EINVAL, "more than %d addresses", SRVLIST_MAX);
            goto out;
        }
        char *url = xstrndup(s, (size_t)(e - s));
        struct srv_origin o;
        struct ddp_err why;
        if (srvlist_origin_parse(url, 0, &o, &why) < 0) {
            rc = err_set(err, DDP_EINVAL, "element %zu '%.200s': %s", pos, url, why.msg);
            free(url);
            goto out;
        }
        r.urls = xrealloc(r.urls, (r.n + 1) * sizeof(*r.urls));
        r.origins = xrealloc(r.origins, (r.n + 1) * sizeof(*r.origins));
        r.urls[r.n] = url;
        r.origins[r.n] = o;
        r.n++;
        if (!p[len])
            break;
        p += len + 1;
    }
    *l = r;
    return 0;
out:
    srvlist_release(&r);
    return rc;
}

int srvlist_find(const struct srvlist *l, const char *url)
{
    struct srv_origin o;
    if (srvlist_origin_parse(url, 1, &o, NULL) < 0)
        return -1;
    for (size_t i = 0; i < l->n; i++)
        if (srvlist_origin_equal(&l->origins[i], &o))
            return (int)i;
    return -1;
}

int srvlist_redirect_check(const struct srvlist *l, const char *from_url, const char *target,
                           int named_leader, int *auth, struct ddp_err *err)
{
    struct srv_origin from, to;
    struct ddp_err why;
    if (srvlist_origin_parse(from_url, 1, &from, &why) < 0)
        return err_set(err, DDP_EINVAL, "redirect from '%.200s': %s", from_url, why.msg);
    if (srvlist_origin_parse(target, 1, &to, &why) < 0)
        return err_set(err, DDP_EINVAL, "redirect to '%.200s' refused: %s", target, why.msg);
    if (from.https && !to.https)
        return err_set(err, DDP_EINVAL, "redirect to '%.200s' refused: from https down to http",
                       target);
    int listed = srvlist_find(l, target) >= 0;
    *auth = listed || (named_leader && srvlist_find(l, from_url) >= 0);
    return 0;
}
