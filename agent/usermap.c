/*
 * usermap.c - the agent's isolation decision, the --user-map file (usermap.h has its
 * format) and the resolution of a ddp user to the local account its workers run as.
 *
 * Invariants:
 *   1. a parsed map holds only names within the file's rules (no '/', ':', space or control
 *      character), each ddp user at most once, sorted by name (lookups are a binary search);
 *   2. usermap_resolve() never hands out uid 0: a job never runs as root through the map,
 *      whatever the file or the passwd database say.
 */
#include "agent/usermap.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/xalloc.h"

/* ---- isolation ------------------------------------------------------------------------ */

int usermap_isolation_parse(const char *s, enum usermap_isolation *out, struct ddp_err *err)
{
    static const enum usermap_isolation all[] = {USERMAP_AUTO, USERMAP_PER_USER,
                                                 USERMAP_SINGLE_USER};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcmp(s, usermap_isolation_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return err_set(err, DDP_EINVAL,
                   "--isolation: '%.64s' is not one of auto, per-user, single-user", s);
}

const char *usermap_isolation_name(enum usermap_isolation iso)
{
    switch (iso) {
    case USERMAP_PER_USER:
        return "per-user";
    case USERMAP_SINGLE_USER:
        return "single-user";
    case USERMAP_AUTO:
    default:
        return "auto";
    }
}

int usermap_isolation_decide(enum usermap_isolation want, uid_t euid, int have_map,
                             enum usermap_isolation *out, struct ddp_err *err)
{
    enum usermap_isolation got = want;
    if (got == USERMAP_AUTO)
        got = euid == 0 ? USERMAP_PER_USER : USERMAP_SINGLE_USER;
    if (got == USERMAP_PER_USER && euid != 0)
        return err_set(err, DDP_EPERM,
                       "--isolation per-user: the agent runs as uid %ld, not root, so it "
                       "cannot start jobs as their owners' accounts",
                       (long)euid);
    if (got == USERMAP_SINGLE_USER && have_map)
        return err_set(err, DDP_EINVAL,
                       "--user-map: every job runs as the agent's own user here (%s), so the "
                       "map would not be used",
                       want == USERMAP_SINGLE_USER ? "--isolation single-user"
                                                   : "the agent is not root");
    *out = got;
    return 0;
}

/* ---- the map -------------------------------------------------------------------------- */

struct usermap_entry {
    char *user;    /* a ddp user name, or "*" */
    char *account; /* a local account name, or "=" */
    size_t line;
};

struct usermap {
    struct usermap_entry *v;
    size_t n;
    size_t cap;
};

static int usermap_chars_ok(const char *s, size_t len, size_t max, const char *extra)
{
    if (len == 0 || len > max)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-' || (c && strchr(extra, c));
        if (!ok)
            return 0;
    }
    return 1;
}

/* The next word of [*p, end) (spaces and tabs between words); *p moves past it. */
static size_t usermap_word(const char **p, const char *end, const char **word)
{
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t' || *s == '\r'))
        s++;
    const char *w = s;
    while (s < end && *s != ' ' && *s != '\t' && *s != '\r')
        s++;
    *word = w;
    *p = s;
    return (size_t)(s - w);
}

static int usermap_entry_cmp(const void *x, const void *y)
{
    const struct usermap_entry *a = x, *b = y;
    int c = strcmp(a->user, b->user);
    return c ? c : (a->line > b->line) - (a->line < b->line);
}

/* The entry of name, or NULL (m sorted). */
static const struct usermap_entry *usermap_find(const struct usermap *m, const char *name)
{
    size_t lo = 0, hi = m->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(name, m->v[mid].user);
        if (c == 0)
            return &m->v[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

void usermap_free(struct usermap *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->n; i++) {
        free(m->v[i].user);
        free(m->v[i].account);
    }
    free(m->v);
    free(m);
}

int usermap_parse(const char *text, size_t len, const char *src, struct usermap **out,
                  struct ddp_err *err)
{
    int rc = 0;
    struct usermap *m = xcalloc(1, sizeof(*m));
    const char *p = text, *end = text + len;
    size_t line = 0;
    if (len > USERMAP_FILE_MAX) {
        rc = err_set(err, DDP_ETOOBIG, "%s: larger than %u bytes", src, USERMAP_FILE_MAX);
        goto out;
    }
    while (p < end) {
        line++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *eol = nl ? nl : end;
        const char *hash = memchr(p, '#', (size_t)(eol - p));
        const char *stop = hash ? hash : eol;
        if (memchr(p, '\0', (size_t)(stop - p))) {
            rc = err_set(err, DDP_EINVAL, "%s:%zu: a NUL byte", src, line);
            goto out;
        }
        const char *w[3];
        size_t wl[3];
        const char *q = p;
        for (int i = 0; i < 3; i++)
            wl[i] = usermap_word(&q, stop, &w[i]);
        p = nl ? nl + 1 : end;
        if (wl[0] == 0)
            continue; /* blank or a comment */
        if (wl[1] == 0 || wl[2] != 0) {
            rc = err_set(err, DDP_EINVAL,
                         "%s:%zu: expected 'DDPUSER ACCOUNT' (or '* =' for the account of the "
                         "same name), got '%.*s'",
                         src, line, (int)((stop - w[0]) > 200 ? 200 : (stop - w[0])), w[0]);
            goto out;
        }
        int star = wl[0] == 1 && w[0][0] == '*';
        if (!star && !usermap_chars_ok(w[0], wl[0], 63, "")) {
            rc = err_set(err, DDP_EINVAL,
                         "%s:%zu: ddp user '%.*s' is not 1..63 of [A-Za-z0-9._-] (or '*')", src,
                         line, (int)(wl[0] > 64 ? 64 : wl[0]), w[0]);
            goto out;
        }
        int same = wl[1] == 1 && w[1][0] == '=';
        if (!same && !usermap_chars_ok(w[1], wl[1], 255, "@$")) {
            rc = err_set(err, DDP_EINVAL,
                         "%s:%zu: local account '%.*s' is not 1..255 of [A-Za-z0-9._@$-] (or '=')",
                         src, line, (int)(wl[1] > 64 ? 64 : wl[1]), w[1]);
            goto out;
        }
        if (m->n >= USERMAP_ENTRIES_MAX) {
            rc = err_set(err, DDP_ETOOBIG, "%s:%zu: more than %d mappings", src, line,
                         USERMAP_ENTRIES_MAX);
            goto out;
        }
        XGROW(m->v, m->n + 1, m->cap, 16);
        struct usermap_entry *e = &m->v[m->n++];
        e->user = xasprintf("%.*s", (int)wl[0], w[0]);
        e->account = xasprintf("%.*s", (int)wl[1], w[1]);
        e->line = line;
    }
    /* Sorted by name (then line) for the lookups; a name twice is then side by side. The
     * error names the first line that repeats a name, as a reader going down the file would
     * meet it. */
    if (m->n > 1)
        qsort(m->v, m->n, sizeof(m->v[0]), usermap_entry_cmp);
    const struct usermap_entry *dup = NULL;
    for (size_t i = 1; i < m->n; i++)
        if (strcmp(m->v[i - 1].user, m->v[i].user) == 0 && (!dup || m->v[i].line < dup[1].line))
            dup = &m->v[i - 1];
    if (dup) {
        rc = err_set(err, DDP_EINVAL, "%s:%zu: ddp user '%s' is mapped already (line %zu)", src,
                     dup[1].line, dup[1].user, dup[0].line);
        goto out;
    }
    *out = m;
    m = NULL;
out:
    usermap_free(m);
    return rc;
}

int usermap_load(const char *path, struct usermap **out, struct ddp_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = fs_read_regular(path, USERMAP_FILE_MAX, &text, &len, err);
    if (rc == 0)
        rc = usermap_parse(text, len, path, out, err);
    free(text);
    return rc;
}

size_t usermap_count(const struct usermap *m)
{
    return m ? m->n : 0;
}

const char *usermap_lookup(const struct usermap *m, const char *user)
{
    if (!m)
        return user;
    const struct usermap_entry *e = usermap_find(m, user);
    if (!e)
        e = usermap_find(m, "*");
    if (!e)
        return NULL;
    return strcmp(e->account, "=") == 0 ? user : e->account;
}

/* ---- accounts ------------------------------------------------------------------------- */

void usermap_account_release(struct usermap_account *acct)
{
    if (!acct)
        return;
    free(acct->name);
    free(acct->home);
    free(acct->groups);
    memset(acct, 0, sizeof(*acct));
}

/* getpwnam_r into a buffer grown on ERANGE (at most 1 MiB). 0 and *pw (pointing into *buf,
 * caller frees *buf), DDP_ENOTFOUND when there is no such account, DDP_EINTERNAL. */
static int usermap_getpw(const char *name, struct passwd *pw, char **buf, struct ddp_err *err)
{
    long hint = sysconf(_SC_GETPW_R_SIZE_MAX);
    size_t size = hint > 0 && hint < (1 << 20) ? (size_t)hint : 16384;
    for (;;) {
        *buf = xmalloc(size);
        struct passwd *res = NULL;
        int e = getpwnam_r(name, pw, *buf, size, &res);
        if (e == 0 && res)
            return 0;
        free(*buf);
        *buf = NULL;
        if (e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM)
            return DDP_ENOTFOUND; /* the values getpwnam_r(3) gives for "no such name" */
        if (e != ERANGE || size >= (1u << 20))
            return err_set(err, DDP_EINTERNAL, "getpwnam_r: %s", strerror(e));
        size *= 2;
    }
}

int usermap_resolve(const struct usermap *m, const char *user, const char *node,
                    struct usermap_account *out, struct ddp_err *err)
{
    struct usermap_account a;
    memset(&a, 0, sizeof(a));
    struct passwd pw;
    char *buf = NULL;
    int rc = 0;
    if (!user || !*user) {
        rc = err_set(err, DDP_ENOTFOUND,
                     "no local account for a job without owner on node %s (ddpd older than "
                     "this agent?)",
                     node);
        goto out;
    }
    const char *local = usermap_lookup(m, user);
    if (!local) {
        rc = err_set(err, DDP_ENOTFOUND,
                     "no local account for ddp user %s on node %s (see --user-map)", user, node);
        goto out;
    }
    struct ddp_err e;
    err_clear(&e);
    rc = usermap_getpw(local, &pw, &buf, &e);
    if (rc == DDP_ENOTFOUND) {
        rc = err_set(err, DDP_ENOTFOUND,
                     "no local account for ddp user %s on node %s (see --user-map): it maps "
                     "to '%s', which does not exist here",
                     user, node, local);
        goto out;
    }
    if (rc < 0) {
        rc = err_set(err, rc, "cannot look up local account '%s' of ddp user %s on node %s: %s",
                     local, user, node, e.msg);
        goto out;
    }
    if (pw.pw_uid == 0) {
        rc = err_set(err, DDP_EPERM,
                     "ddp user %s maps to local account '%s' (uid 0) on node %s: jobs never run "
                     "as uid 0 (see --user-map)",
                     user, local, node);
        goto out;
    }
    a.name = xstrdup(pw.pw_name);
    a.home = xstrdup(pw.pw_dir && *pw.pw_dir ? pw.pw_dir : "/");
    a.uid = pw.pw_uid;
    a.gid = pw.pw_gid;
    int n = 32;
    for (;;) {
        a.groups = xrealloc(a.groups, (size_t)n * sizeof(gid_t));
        int got = n;
        if (getgrouplist(a.name, a.gid, a.groups, &got) >= 0) {
            a.ngroups = (size_t)got;
            break;
        }
        if (n >= USERMAP_GROUPS_MAX) {
            rc = err_set(err, DDP_EINTERNAL,
                         "local account '%s' of ddp user %s is in more than %d groups", a.name,
                         user, USERMAP_GROUPS_MAX);
            goto out;
        }
        n = got > n && got <= USERMAP_GROUPS_MAX
                ? got
                : (n * 2 < USERMAP_GROUPS_MAX ? n * 2 : USERMAP_GROUPS_MAX);
    }
    *out = a;
    memset(&a, 0, sizeof(a));
out:
    usermap_account_release(&a);
    free(buf);
    return rc;
}

static const struct usermap_cache_entry *usermap_cache_find(const struct usermap_cache *c,
                                                            const char *user)
{
    for (size_t i = 0; c && user && i < c->n; i++)
        if (strcmp(c->v[i].user, user) == 0)
            return &c->v[i];
    return NULL;
}

void usermap_cache_fill(struct usermap_cache *c, const struct usermap *m, const char *node,
                        const char *const *users, size_t n)
{
    usermap_cache_release(c);
    c->v = xcalloc(n + 1, sizeof(*c->v));
    for (size_t i = 0; i < n; i++) {
        if (!users[i] || usermap_cache_find(c, users[i]))
            continue;
        struct usermap_cache_entry *e = &c->v[c->n++];
        e->user = xstrdup(users[i]);
        err_clear(&e->err);
        e->rc = usermap_resolve(m, users[i], node, &e->acct, &e->err);
    }
    c->filled = 1;
}

int usermap_cache_resolve(const struct usermap_cache *c, const struct usermap *m, const char *user,
                          const char *node, struct usermap_account *out, struct ddp_err *err)
{
    const struct usermap_cache_entry *e = usermap_cache_find(c, user);
    if (!e)
        return usermap_resolve(m, user, node, out, err);
    if (e->rc < 0)
        return err_set(err, e->rc, "%s", e->err.msg);
    struct usermap_account a = e->acct;
    a.name = xstrdup(e->acct.name);
    a.home = xstrdup(e->acct.home);
    a.groups = xmalloc((e->acct.ngroups + 1) * sizeof(gid_t));
    memcpy(a.groups, e->acct.groups, e->acct.ngroups * sizeof(gid_t));
    *out = a;
    return 0;
}

void usermap_cache_release(struct usermap_cache *c)
{
    for (size_t i = 0; i < c->n; i++) {
        free(c->v[i].user);
        usermap_account_release(&c->v[i].acct);
    }
    free(c->v);
    memset(c, 0, sizeof(*c));
}
