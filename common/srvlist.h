/*
 * srvlist.h - ddpd's addresses as the clients take them: a comma-separated list of base URLs
 * ("http://10.0.0.1:8470,http://10.0.0.2:8470"), from --server or $DDP_SERVER, and the rule
 * that says which redirect targets may see the client's Authorization header.
 *
 * A base URL is scheme "http" or "https" (any case), "://", a host (a name of
 * [A-Za-z0-9.-], an IPv4 address, or an IPv6 address in brackets), an optional ":PORT"
 * (1..65535; default 80 for http, 443 for https) and nothing after but slashes. Two URLs have
 * the same origin when scheme, host (compared without case) and port are equal.
 *
 * Bounds: at most SRVLIST_MAX addresses, each at most SRVLIST_URL_MAX bytes.
 */
#ifndef DDP_COMMON_SRVLIST_H
#define DDP_COMMON_SRVLIST_H

#include <stddef.h>

#include "common/err.h"

#define SRVLIST_MAX     16
#define SRVLIST_URL_MAX 2048

/* Scheme, host and port of an absolute http(s) URL. */
struct srv_origin {
    int https;      /* 1: https, 0: http */
    char host[256]; /* lower case, without brackets */
    int port;
};

struct srvlist {
    char **urls; /* n base URLs as given, trailing slashes removed */
    struct srv_origin *origins;
    size_t n;
};

/*
 * Parses an absolute http(s) URL's origin into *o. allow_path: what follows the port may be a
 * path, query or fragment ("/v1/jobs?x=1": a redirect's Location); else only slashes (a base
 * URL). Returns 0, or DDP_EINVAL with err saying what is wrong (o unchanged).
 */
int srvlist_origin_parse(const char *url, int allow_path, struct srv_origin *o,
                         struct ddp_err *err);

int srvlist_origin_equal(const struct srv_origin *a, const struct srv_origin *b);

/*
 * Parses text (borrowed) into *l, which the caller releases with srvlist_release(). Spaces
 * around an element are ignored. An empty text, an empty element ("a,,b", "a,"), more than
 * SRVLIST_MAX elements or an element that is not a base URL is DDP_EINVAL with err naming
 * the element and its position, as in "element 2 'ftp://x:1': scheme must be http or
 * https"; *l is then empty.
 */
int srvlist_parse(const char *text, struct srvlist *l, struct ddp_err *err);
void srvlist_release(struct srvlist *l);

/* The index of the first address with url's origin (url may have a path), or -1. */
int srvlist_find(const struct srvlist *l, const char *url);

/*
 * The redirect rule. A client that asked from_url (an address of l or a target it was sent
 * to) is sent on to target (a 307/308 Location, or the "leader" of a 503 not_leader answer).
 * Returns 0 when the redirect may be followed: target is an absolute http(s) URL, and https
 * when from_url is https (never from https down to http). *auth then says whether the
 * Authorization header goes along: 1 when target's origin is one of l's addresses, or when
 * named_leader is set (target is the leader a listed address named in its not_leader
 * answer) and from_url is one of l's addresses; 0 otherwise. Else DDP_EINVAL with err
 * saying why, *auth unchanged.
 */
int srvlist_redirect_check(const struct srvlist *l, const char *from_url, const char *target,
                           int named_leader, int *auth, struct ddp_err *err);

#endif
