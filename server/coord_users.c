/*
 * coord_users.c - users and who may see what: the users table and the groups' quotas (loaded
 * at start, changed by admins), resolving a bearer token to a principal, the first admin, and the owner checks
 * of a job.
 *
 * Invariants:
 *   1. A token is never kept: users hold the hex SHA-256 of theirs, nodes of their
 *      credential. Hashes are compared in constant time, against every user, so the time of a
 *      lookup says nothing about which user (if any) matched.
 *   2. There is always at least one admin once coord_users_bootstrap() has run: removing the
 *      last admin is refused.
 *   3. A job that a principal may not read does not exist for it (404, the same answer as
 *      for an id never used); one it may read but not act on answers 403.
 */
#include "server/coord_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

#define USERS_MAX  10000
#define GROUPS_MAX 10000

static int coord_user_index(struct coord *c, const char *name)
{
    for (size_t i = 0; i < c->nusers; i++)
        if (strcmp(c->users[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* Reads the optional field "role" of body into *role (left as it is when absent); *given says
 * whether it was there. */
static int coord_role_field(const json_t *body, enum role *role, int *given, struct ddp_err *err)
{
    const char *s = NULL;
    int rc = jsonx_get_string(body, "role", 0, &s, err);
    *given = s != NULL;
    if (rc || !s)
        return rc;
    if (auth_role_parse(s, role) != 0)
        return err_set(err, DDP_EINVAL, "field 'role': '%.32s' is not admin, user or viewer", s);
    return 0;
}

/* Reads the optional field "group" of body: "" (no group) or a name of validate_name();
 * *group is left as it is when absent. */
static int coord_group_field(const json_t *body, const char **group, struct ddp_err *err)
{
    const char *s = NULL;
    int rc = jsonx_get_string(body, "group", 0, &s, err);
    if (rc || !s)
        return rc;
    if (*s && !validate_name(s))
        return err_set(err, DDP_EINVAL,
                       "field 'group': must be \"\" or 1..63 characters of [A-Za-z0-9._-]");
    *group = s;
    return 0;
}

/* 1 when user i is the only admin (removing it, or taking its role, is refused). */
static int coord_last_admin(struct coord *c, int i)
{
    size_t admins = 0;
    for (size_t k = 0; k < c->nusers; k++)
        admins += c->users[k].role == ROLE_ADMIN;
    return c->users[i].role == ROLE_ADMIN && admins == 1;
}

static int coord_user_load(void *ctx, const struct store_user *u)
{
    struct coord *c = ctx;
    enum role role;
    if (!u->name || !validate_name(u->name) || auth_role_parse(u->role, &role) != 0 ||
        !u->token_hash || strlen(u->token_hash) != AUTH_HASH_HEX - 1) {
        log_error("users table: skipping the malformed row of '%.64s'", u->name ? u->name : "");
        return 0;
    }
    XGROW(c->users, c->nusers + 1, c->capusers, 8);
    struct user *d = &c->users[c->nusers++];
    snprintf(d->name, sizeof(d->name), "%s", u->name);
    d->role = role;
    snprintf(d->hash, sizeof(d->hash), "%s", u->token_hash);
    d->created_at = u->created_at;
    d->max_slots = u->max_slots > 0 ? u->max_slots : 0;
    snprintf(d->group, sizeof(d->group), "%s", u->group && validate_name(u->group) ? u->group : "");
    return 0;
}

static int coord_group_index(struct coord *c, const char *name)
{
    for (size_t i = 0; i < c->ngroups; i++)
        if (strcmp(c->groups[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int coord_group_load(void *ctx, const char *name, int64_t max_slots)
{
    struct coord *c = ctx;
    if (!name || !validate_name(name)) {
        log_error("groups table: skipping the malformed row of '%.64s'", name ? name : "");
        return 0;
    }
    XGROW(c->groups, c->ngroups + 1, c->capgroups, 8);
    struct group *g = &c->groups[c->ngroups++];
    snprintf(g->name, sizeof(g->name), "%s", name);
    g->max_slots = max_slots > 0 ? max_slots : 0;
    return 0;
}

int coord_users_load(struct coord *c, struct ddp_err *err)
{
    int rc = store_load_users(c->store, coord_user_load, c, err);
    if (!rc)
        rc = store_load_groups(c->store, coord_group_load, c, err);
    return rc;
}

static int coord_user_write(struct coord *c, void *ctx, struct ddp_err *e)
{
    const struct user *u = ctx;
    struct store_user row = {u->name, auth_role_name(u->role), u->hash, u->created_at, u->max_slots,
                             u->group};
    return store_user_put(c->store, &row, e);
}

static int coord_user_delete(struct coord *c, void *ctx, struct ddp_err *e)
{
    return store_user_delete(c->store, ctx, e);
}

/* Stores u (new or changed) and then applies it to memory at index i (-1: appended). */
static int coord_user_put(struct coord *c, const struct user *u, int i, struct ddp_err *err)
{
    struct ddp_err e;
    if (coord_txn_run(c, coord_user_write, (void *)u, &e) != 0) {
        log_error("cannot record user %s: %s", u->name, e.msg);
        return err_set(err, DDP_EINTERNAL, "cannot record the user: %s", e.msg);
    }
    if (i < 0) {
        XGROW(c->users, c->nusers + 1, c->capusers, 8);
        i = (int)c->nusers++;
    }
    c->users[i] = *u;
    return 0;
}

int coord_users_bootstrap(struct coord *c, const char *admin_token, int64_t now,
                          struct ddp_err *err)
{
    char hash[AUTH_HASH_HEX];
    auth_hash(admin_token, hash);
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    int held_by = -1;
    for (size_t i = 0; i < c->nusers; i++)
        if (secret_equal(c->users[i].hash, hash))
            held_by = (int)i;
    if (c->nusers == 0) {
        struct user u = {.role = ROLE_ADMIN, .created_at = coord_wall(c, now)};
        snprintf(u.name, sizeof(u.name), "admin");
        snprintf(u.hash, sizeof(u.hash), "%s", hash);
        rc = coord_user_put(c, &u, -1, err);
        if (!rc)
            log_info("created user admin (role admin) holding the admin token file");
    } else if (held_by < 0) {
        log_warn("the admin token file belongs to no user (rotated?): it opens nothing; "
                 "%zu users are known",
                 c->nusers);
    } else {
        log_info("admin token file belongs to user %s (role %s)", c->users[held_by].name,
                 auth_role_name(c->users[held_by].role));
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_authenticate(struct coord *c, const char *token, const char *node, struct principal *p)
{
    char hash[AUTH_HASH_HEX];
    auth_hash(token, hash);
    memset(p, 0, sizeof(*p));
    pthread_mutex_lock(&c->mu);
    int found = -1;
    for (size_t i = 0; i < c->nusers; i++)
        if (secret_equal(c->users[i].hash, hash))
            found = (int)i;
    if (found >= 0) {
        p->kind = PRINCIPAL_USER;
        p->role = c->users[found].role;
        snprintf(p->name, sizeof(p->name), "%s", c->users[found].name);
    } else {
        /* a node credential: the node of the path first, then any (for a clear 403) */
        int ni = node ? coord_node_index(c, node) : -1;
        if (ni >= 0 && c->nodes[ni]->cred_hash[0] && secret_equal(c->nodes[ni]->cred_hash, hash))
            found = ni;
        for (size_t i = 0; found < 0 && i < c->nnodes; i++)
            if (!c->nodes[i]->removed && c->nodes[i]->cred_hash[0] &&
                secret_equal(c->nodes[i]->cred_hash, hash))
                found = (int)i;
        if (found >= 0) {
            p->kind = PRINCIPAL_NODE;
            snprintf(p->name, sizeof(p->name), "%s", c->nodes[found]->name);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return found >= 0 ? 0 : DDP_EUNAUTH;
}

static json_t *coord_user_json(struct coord *c, const struct user *u)
{
    char t[40];
    time_format_rfc3339(u->created_at, t, sizeof(t));
    (void)c;
    return json_pack("{s:s, s:s, s:s, s:I, s:s}", "name", u->name, "role", auth_role_name(u->role),
                     "created_at", t, "max_slots", (json_int_t)u->max_slots, "group", u->group);
}

/* {"user": {...}, "token": token} */
static char *coord_user_token_text(struct coord *c, const struct user *u, const char *token)
{
    json_t *o = json_pack("{s:o, s:s}", "user", coord_user_json(c, u), "token", token);
    char *s = jsonx_dumps(o);
    json_decref(o);
    return s;
}

/*
 * The jobs kept for owner (only those not ended with live): how many, and the first ids in
 * ids ("j-3, j-7, ..."). Jobs belong to a name, so these decide what a removal or a new
 * user of that name may do. Holds c->mu.
 */
static size_t coord_jobs_named(struct coord *c, const char *owner, int live, char *ids, size_t size)
{
    size_t n = 0, off = 0;
    ids[0] = '\0';
    /* jobs not ended are all in c->live */
    struct job **all = live ? c->live : c->jobs;
    size_t count = live ? c->nlive : c->njobs;
    for (size_t i = 0; i < count; i++) {
        const struct job *j = all[i];
        if (!j || strcmp(j->owner, owner) != 0 || (live && jobstate_is_terminal(j->st.state)))
            continue;
        if (n < 5 && off < size)
            off += (size_t)snprintf(ids + off, size - off, "%sj-%lld", n ? ", " : "",
                                    (long long)j->id);
        else if (n == 5 && off < size)
            off += (size_t)snprintf(ids + off, size - off, ", ...");
        n++;
    }
    return n;
}

int coord_user_add(struct coord *c, const json_t *body, int64_t now, char **out,
                   struct ddp_err *err)
{
    const char *name = NULL;
    enum role role = ROLE_USER;
    int64_t max_slots = 0;
    int given;
    const char *group = "";
    static const char *const keys[] = {"name", "role", "max_slots", "group", NULL};
    int rc = jsonx_check_keys(body, keys, "user", err);
    if (!rc)
        rc = jsonx_get_string(body, "name", 1, &name, err);
    if (!rc)
        rc = jsonx_get_int(body, "max_slots", 0, 0, 1 << 30, &max_slots, err);
    if (!rc)
        rc = coord_group_field(body, &group, err);
    if (rc)
        return rc;
    if (!validate_name(name))
        return err_set(err, DDP_EINVAL, "field 'name': must be 1..63 characters of [A-Za-z0-9._-]");
    rc = coord_role_field(body, &role, &given, err);
    if (rc)
        return rc;
    char token[AUTH_TOKEN_HEX];
    if (auth_new_token(token) != 0)
        return err_set(err, DDP_EINTERNAL, "no randomness for the token");
    struct user u = {.role = role, .max_slots = max_slots};
    snprintf(u.name, sizeof(u.name), "%s", name);
    snprintf(u.group, sizeof(u.group), "%s", group);
    auth_hash(token, u.hash);
    pthread_mutex_lock(&c->mu);
    u.created_at = coord_wall(c, now);
    char ids[96];
    size_t kept = 0;
    if (coord_user_index(c, name) >= 0)
        rc = err_set(err, DDP_EEXIST, "user %s already exists", name);
    else if ((kept = coord_jobs_named(c, name, 0, ids, sizeof(ids))) > 0)
        /* jobs belong to a name: a new user of it would read and cancel a removed one's */
        rc = err_set(err, DDP_EEXIST,
                     "the name %s still owns %zu job%s of a removed user (%s): a new user of "
                     "that name would see them; delete them first (ddpctl delete) or choose "
                     "another name",
                     name, kept, kept == 1 ? "" : "s", ids);
    else if (c->nusers >= USERS_MAX)
        rc = err_set(err, DDP_ELIMIT, "at most %d users", USERS_MAX);
    else
        rc = coord_user_put(c, &u, -1, err);
    if (!rc) {
        *out = coord_user_token_text(c, &u, token);
        log_info("user added name=%s role=%s", u.name, auth_role_name(u.role));
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_users_list(struct coord *c, char **out, struct ddp_err *err)
{
    (void)err;
    json_t *arr = json_array();
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nusers; i++)
        json_array_append_new(arr, coord_user_json(c, &c->users[i]));
    pthread_mutex_unlock(&c->mu);
    json_t *o = json_pack("{s:o}", "users", arr);
    *out = jsonx_dumps(o);
    json_decref(o);
    return 0;
}

int coord_user_remove(struct coord *c, const char *name, char **out, struct ddp_err *err)
{
    int rc = 0;
    struct ddp_err e;
    pthread_mutex_lock(&c->mu);
    int i = coord_user_index(c, name);
    char ids[96];
    size_t live = 0;
    if (i < 0) {
        rc = err_set(err, DDP_ENOTFOUND, "user %.64s not found", name);
    } else if (coord_last_admin(c, i)) {
        rc = err_set(err, DDP_EPRECOND, "user %s is the last admin; add another admin first", name);
    } else if ((live = coord_jobs_named(c, name, 1, ids, sizeof(ids))) > 0) {
        /* as Slurm's sacctmgr: its jobs would run on without a user, out of every quota */
        rc = err_set(err, DDP_EPRECOND,
                     "user %s has %zu job%s not ended (%s): cancel %s first (ddpctl cancel)", name,
                     live, live == 1 ? "" : "s", ids, live == 1 ? "it" : "them");
    } else if (coord_txn_run(c, coord_user_delete, c->users[i].name, &e) != 0) {
        log_error("cannot remove user %s: %s", name, e.msg);
        rc = err_set(err, DDP_EINTERNAL, "cannot remove the user: %s", e.msg);
    } else {
        json_t *o = json_pack("{s:o}", "user", coord_user_json(c, &c->users[i]));
        *out = jsonx_dumps(o);
        json_decref(o);
        log_info("user removed name=%s (its ended jobs stay, still owned by it)", name);
        memmove(&c->users[i], &c->users[i + 1], (c->nusers - (size_t)i - 1) * sizeof(*c->users));
        c->nusers--;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_user_rotate(struct coord *c, const char *name, const struct principal *who, char **out,
                      struct ddp_err *err)
{
    int rc = 0;
    char token[AUTH_TOKEN_HEX];
    if (auth_new_token(token) != 0)
        return err_set(err, DDP_EINTERNAL, "no randomness for the token");
    pthread_mutex_lock(&c->mu);
    int i = coord_user_index(c, name);
    int self = who->kind == PRINCIPAL_USER && strcmp(who->name, name) == 0;
    int admin = who->kind == PRINCIPAL_USER && who->role == ROLE_ADMIN;
    if (!admin && !self) {
        /* a non-admin learns nothing about other users */
        rc = err_set(err, DDP_EPERM, "only an admin may rotate another user's token");
    } else if (i < 0) {
        rc = err_set(err, DDP_ENOTFOUND, "user %.64s not found", name);
    } else {
        struct user u = c->users[i];
        auth_hash(token, u.hash);
        rc = coord_user_put(c, &u, i, err);
        if (!rc) {
            *out = coord_user_token_text(c, &u, token);
            log_info("token rotated for user %s (the old one no longer opens anything)", name);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_user_update(struct coord *c, const char *name, const json_t *body, int64_t now,
                      char **out, struct ddp_err *err)
{
    static const char *const keys[] = {"role", "max_slots", "group", NULL};
    const char *group = NULL;
    int64_t max_slots = -1;
    enum role role = ROLE_USER;
    int role_given = 0;
    int rc = json_is_object(body) ? 0 : err_set(err, DDP_EINVAL, "body must be a JSON object");
    if (!rc)
        rc = jsonx_check_keys(body, keys, NULL, err);
    if (!rc)
        rc = jsonx_get_int(body, "max_slots", 0, 0, 1 << 30, &max_slots, err);
    if (!rc)
        rc = coord_role_field(body, &role, &role_given, err);
    if (!rc)
        rc = coord_group_field(body, &group, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    int i = coord_user_index(c, name);
    if (i < 0) {
        rc = err_set(err, DDP_ENOTFOUND, "user %.64s not found", name);
    } else if (role_given && role != ROLE_ADMIN && coord_last_admin(c, i)) {
        rc = err_set(err, DDP_EPRECOND, "user %s is the last admin; add another admin first", name);
    } else {
        struct user u = c->users[i];
        if (role_given)
            u.role = role;
        if (max_slots >= 0)
            u.max_slots = max_slots;
        if (group)
            snprintf(u.group, sizeof(u.group), "%s", group);
        rc = coord_user_put(c, &u, i, err);
        if (!rc) {
            json_t *o = json_pack("{s:o}", "user", coord_user_json(c, &u));
            *out = jsonx_dumps(o);
            json_decref(o);
            log_info("user changed name=%s role=%s max_slots=%lld group=%s", u.name,
                     auth_role_name(u.role), (long long)u.max_slots, u.group);
            coord_schedule(c, now); /* a raised quota may start waiting jobs */
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

struct tally_user {
    const char *name; /* borrowed from c->users */
    int idx;          /* in c->users */
};

struct quota_tally {
    struct tally_user *by_name; /* c->nusers entries, sorted by name */
    size_t n;
    int64_t *held;       /* per c->users index */
    int64_t *group_held; /* per c->groups index */
};

static int tally_user_cmp(const void *a, const void *b)
{
    return strcmp(((const struct tally_user *)a)->name, ((const struct tally_user *)b)->name);
}

/* owner's index in c->users through t, or -1. */
static int tally_user_index(const struct quota_tally *t, const char *owner)
{
    struct tally_user key = {.name = owner, .idx = -1};
    const struct tally_user *u = bsearch(&key, t->by_name, t->n, sizeof(*u), tally_user_cmp);
    return u ? u->idx : -1;
}

/* The slots job j holds now (coord_entry_holds). */
static int64_t tally_job_slots(const struct job *j)
{
    int64_t n = 0;
    for (int p = 0; p < j->st.npl; p++)
        if (coord_entry_holds(j, &j->st.pl[p]))
            n += j->spec.nproc;
    return n;
}

struct quota_tally *coord_tally_new(struct coord *c)
{
    struct quota_tally *t = xcalloc(1, sizeof(*t));
    t->n = c->nusers;
    t->by_name = xcalloc(t->n + 1, sizeof(*t->by_name));
    for (size_t i = 0; i < t->n; i++)
        t->by_name[i] = (struct tally_user){.name = c->users[i].name, .idx = (int)i};
    qsort(t->by_name, t->n, sizeof(*t->by_name), tally_user_cmp);
    t->held = xcalloc(t->n + 1, sizeof(*t->held));
    t->group_held = xcalloc(c->ngroups + 1, sizeof(*t->group_held));
    for (size_t i = 0; i < c->nlive; i++) {
        const struct job *j = c->live[i];
        int ui = tally_user_index(t, j->owner);
        if (ui >= 0)
            t->held[ui] += tally_job_slots(j);
    }
    for (size_t i = 0; i < t->n; i++) {
        int gi = c->users[i].group[0] ? coord_group_index(c, c->users[i].group) : -1;
        if (gi >= 0)
            t->group_held[gi] += t->held[i];
    }
    return t;
}

void coord_tally_add(struct coord *c, struct quota_tally *t, const struct job *j)
{
    int ui = t ? tally_user_index(t, j->owner) : -1;
    if (ui < 0)
        return;
    int64_t slots = tally_job_slots(j);
    t->held[ui] += slots;
    int gi = c->users[ui].group[0] ? coord_group_index(c, c->users[ui].group) : -1;
    if (gi >= 0)
        t->group_held[gi] += slots;
}

void coord_tally_free(struct quota_tally *t)
{
    if (!t)
        return;
    free(t->by_name);
    free(t->held);
    free(t->group_held);
    free(t);
}

/* Group name as JSON, its slots used counted by t (for c's users as they are now). */
static json_t *coord_group_json(struct coord *c, const struct quota_tally *t, const char *name,
                                int64_t max_slots)
{
    json_t *members = json_array();
    int64_t used = 0;
    for (size_t i = 0; i < c->nusers; i++)
        if (strcmp(c->users[i].group, name) == 0) {
            json_array_append_new(members, json_string(c->users[i].name));
            used += t->held[i];
        }
    return json_pack("{s:s, s:I, s:I, s:o}", "name", name, "max_slots", (json_int_t)max_slots,
                     "slots_used", (json_int_t)used, "users", members);
}

/* 1 when some user names group name, or it has a row. */
static int coord_group_known(struct coord *c, const char *name)
{
    if (coord_group_index(c, name) >= 0)
        return 1;
    for (size_t i = 0; i < c->nusers; i++)
        if (strcmp(c->users[i].group, name) == 0)
            return 1;
    return 0;
}

int coord_groups_list(struct coord *c, char **out, struct ddp_err *err)
{
    (void)err;
    json_t *arr = json_array();
    pthread_mutex_lock(&c->mu);
    struct quota_tally *t = coord_tally_new(c);
    /* the groups with a quota, then those only named by users (no limit), each once */
    for (size_t i = 0; i < c->ngroups; i++)
        json_array_append_new(arr,
                              coord_group_json(c, t, c->groups[i].name, c->groups[i].max_slots));
    for (size_t i = 0; i < c->nusers; i++) {
        const char *g = c->users[i].group;
        int seen = !*g || coord_group_index(c, g) >= 0;
        for (size_t k = 0; !seen && k < i; k++)
            seen = strcmp(c->users[k].group, g) == 0;
        if (!seen)
            json_array_append_new(arr, coord_group_json(c, t, g, 0));
    }
    coord_tally_free(t);
    pthread_mutex_unlock(&c->mu);
    json_t *o = json_pack("{s:o}", "groups", arr);
    *out = jsonx_dumps(o);
    json_decref(o);
    return 0;
}

int coord_group_get(struct coord *c, const char *name, char **out, struct ddp_err *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    int gi = coord_group_index(c, name);
    if (!coord_group_known(c, name)) {
        rc = err_set(err, DDP_ENOTFOUND, "group %.64s not found", name);
    } else {
        struct quota_tally *t = coord_tally_new(c);
        json_t *o = json_pack("{s:o}", "group",
                              coord_group_json(c, t, name, gi >= 0 ? c->groups[gi].max_slots : 0));
        coord_tally_free(t);
        *out = jsonx_dumps(o);
        json_decref(o);
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

struct coord_group_row {
    const char *name;
    int64_t max_slots;
};

static int coord_group_write(struct coord *c, void *ctx, struct ddp_err *e)
{
    const struct coord_group_row *g = ctx;
    return store_group_put(c->store, g->name, g->max_slots, e);
}

int coord_group_put(struct coord *c, const char *name, const json_t *body, int64_t now, char **out,
                    struct ddp_err *err)
{
    static const char *const keys[] = {"max_slots", NULL};
    int64_t max_slots = 0;
    int rc = json_is_object(body) ? 0 : err_set(err, DDP_EINVAL, "body must be a JSON object");
    if (!rc)
        rc = jsonx_check_keys(body, keys, NULL, err);
    if (!rc)
        rc = jsonx_get_int(body, "max_slots", 1, 0, 1 << 30, &max_slots, err);
    if (rc)
        return rc;
    struct ddp_err e;
    pthread_mutex_lock(&c->mu);
    int gi = coord_group_index(c, name);
    struct coord_group_row row = {name, max_slots};
    if (gi < 0 && c->ngroups >= GROUPS_MAX) {
        rc = err_set(err, DDP_ELIMIT, "at most %d groups", GROUPS_MAX);
    } else if (coord_txn_run(c, coord_group_write, &row, &e) != 0) {
        log_error("cannot record group %s: %s", name, e.msg);
        rc = err_set(err, DDP_EINTERNAL, "cannot record the group: %s", e.msg);
    } else {
        if (gi < 0) {
            XGROW(c->groups, c->ngroups + 1, c->capgroups, 8);
            gi = (int)c->ngroups++;
            snprintf(c->groups[gi].name, sizeof(c->groups[gi].name), "%s", name);
        }
        c->groups[gi].max_slots = max_slots;
        struct quota_tally *t = coord_tally_new(c);
        json_t *o = json_pack("{s:o}", "group", coord_group_json(c, t, name, max_slots));
        coord_tally_free(t);
        *out = jsonx_dumps(o);
        json_decref(o);
        log_info("group changed name=%s max_slots=%lld", name, (long long)max_slots);
        coord_schedule(c, now); /* a raised quota may start waiting jobs */
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void coord_quota_of(struct coord *c, struct quota_tally **t, const char *owner,
                    struct sched_quota *q, const char **group)
{
    memset(q, 0, sizeof(*q));
    *group = "";
    int i = coord_user_index(c, owner);
    if (i < 0)
        return;
    q->user_max = c->users[i].max_slots;
    const char *g = c->users[i].group;
    int gi = *g ? coord_group_index(c, g) : -1;
    if (gi >= 0 && c->groups[gi].max_slots > 0) {
        *group = c->groups[gi].name;
        q->group_max = c->groups[gi].max_slots;
    }
    if (q->user_max <= 0 && q->group_max <= 0)
        return; /* no quota: what is held does not matter, and nothing is counted */
    if (!*t)
        *t = coord_tally_new(c);
    q->user_held = (*t)->held[i];
    if (q->group_max > 0)
        q->group_held = (*t)->group_held[gi];
}

int coord_job_access(struct coord *c, int64_t id, const struct principal *who, int act,
                     struct ddp_err *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    if (!j || !auth_may_read(who, j->owner))
        rc = err_set(err, DDP_ENOTFOUND, "job j-%lld not found", (long long)id);
    else if (act && !auth_may_act(who, j->owner))
        rc = err_set(err, DDP_EPERM, "job j-%lld belongs to %s; role %s may not change it",
                     (long long)id, j->owner, auth_role_name(who->role));
    pthread_mutex_unlock(&c->mu);
    return rc;
}

size_t coord_jobs_active_of(struct coord *c, const char *owner)
{
    size_t n = 0;
    for (size_t i = 0; i < c->nlive; i++)
        if (!jobstate_is_terminal(c->live[i]->st.state) && strcmp(c->live[i]->owner, owner) == 0)
            n++;
    return n;
}
