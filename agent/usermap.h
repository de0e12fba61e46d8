/*
 * usermap.h - whose local account runs a ddp user's jobs on this node: the agent's isolation
 * (per-user when it runs as root, else single-user), the --user-map file, and a mapped
 * account resolved into the credentials a worker takes (uid, gid, supplementary groups).
 *
 * The file, like slurmd's mapping of users to uids, is configured on each node:
 *
 *     # ddp user   local account
 *     alice        nobody
 *     bob          bob
 *     *            =
 *
 * One mapping a line: a ddp user name (1..63 of [A-Za-z0-9._-]) or `*` (every user no other
 * line names), then a local account name (1..255 of [A-Za-z0-9._@$-]) or `=` (the account of
 * the same name). `#` starts a comment; blank lines are ignored. A user named twice, a
 * missing or extra word, or a name outside those rules is an error naming the file and line.
 * Without a file every user maps to the account of the same name (as `* =`); with one, a
 * user it does not map has no account. The file is at most USERMAP_FILE_MAX bytes and
 * USERMAP_ENTRIES_MAX mappings.
 *
 * Threads: a struct usermap is read-only once parsed, so any thread may look users up.
 * usermap_resolve() calls getpwnam_r and getgrouplist (NSS): never between fork and exec.
 */
#ifndef DDP_AGENT_USERMAP_H
#define DDP_AGENT_USERMAP_H

#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

#define USERMAP_FILE_MAX    (1u << 20)
#define USERMAP_ENTRIES_MAX 100000
#define USERMAP_GROUPS_MAX  65536 /* supplementary groups of one account (NGROUPS_MAX) */

/* ---- isolation ------------------------------------------------------------------------ */

enum usermap_isolation {
    USERMAP_AUTO,        /* per-user when the agent runs as root, else single-user */
    USERMAP_PER_USER,    /* each job runs as its owner's local account */
    USERMAP_SINGLE_USER, /* every job runs as the agent's own user */
};

/* "auto", "per-user", "single-user" -> *out; else DDP_EINVAL naming --isolation. */
int usermap_isolation_parse(const char *s, enum usermap_isolation *out, struct ddp_err *err);
/* "auto", "per-user", "single-user" (static). */
const char *usermap_isolation_name(enum usermap_isolation iso);
/*
 * The isolation the agent runs with, for the requested one and the agent's effective uid:
 * AUTO is PER_USER for euid 0, else SINGLE_USER. Errors: PER_USER without euid 0
 * (DDP_EPERM: the agent cannot start processes as other accounts), a user map with
 * SINGLE_USER (DDP_EINVAL: the map would not be used). *out is written only on success.
 */
int usermap_isolation_decide(enum usermap_isolation want, uid_t euid, int have_map,
                             enum usermap_isolation *out, struct ddp_err *err);

/* ---- the map -------------------------------------------------------------------------- */

struct usermap;

/*
 * Parses a map from text (len bytes, need not be NUL-terminated); src names it in errors
 * ("FILE:LINE: ..."). On success *out is a new map (caller frees with usermap_free()); on
 * failure (DDP_EINVAL, DDP_ETOOBIG) *out is untouched.
 */
int usermap_parse(const char *text, size_t len, const char *src, struct usermap **out,
                  struct ddp_err *err);
/* Reads path (a regular file of at most USERMAP_FILE_MAX bytes) and parses it. */
int usermap_load(const char *path, struct usermap **out, struct ddp_err *err);
/* Accepts NULL. */
void usermap_free(struct usermap *m);
/* Mappings in the file (the `*` line counts). */
size_t usermap_count(const struct usermap *m);

/*
 * The local account name of ddp user `user`: its line, else the `*` line, else NULL (no
 * account). A map of NULL maps every user to the same name. The result is borrowed from m
 * or is user itself.
 */
const char *usermap_lookup(const struct usermap *m, const char *user);

/* ---- accounts ------------------------------------------------------------------------- */

/* A local account a worker runs as. */
struct usermap_account {
    char *name; /* the local account's name */
    char *home; /* its home folder ("/" when passwd has none) */
    uid_t uid;
    gid_t gid;
    gid_t *groups; /* supplementary groups (getgrouplist: gid among them), ngroups of them */
    size_t ngroups;
};

/*
 * Resolves the account of ddp user `user` on node `node` (the name for messages): the map's
 * account, looked up with getpwnam_r, and its groups with getgrouplist. Errors, each naming
 * the user and the node: `user` "" (an assignment without owner) or not mapped, or an account
 * that does not exist here: DDP_ENOTFOUND "no local account for ddp user U on node N (see
 * --user-map)..."; an account with uid 0: DDP_EPERM (jobs never run as uid 0); a failed
 * lookup: DDP_EINTERNAL. On success *out holds copies (release with
 * usermap_account_release()); on failure it is left zeroed.
 */
int usermap_resolve(const struct usermap *m, const char *user, const char *node,
                    struct usermap_account *out, struct ddp_err *err);
/* Frees what usermap_resolve() stored; accepts a zeroed or NULL struct. */
void usermap_account_release(struct usermap_account *acct);

/*
 * The accounts of a desired set's job owners, resolved ahead: NSS may wait on a directory
 * server (LDAP, SSSD), so the agent resolves them with no lock held when an answer brings a
 * new desired set, and starts workers under its lock from the cache. Each entry holds what
 * usermap_resolve() gave: the account, or its error (a user without an account runs nothing,
 * and says why at each start). A cache owns its entries; zeroed is empty.
 */
struct usermap_cache_entry {
    char *user;
    int rc;                      /* usermap_resolve()'s result: 0, or the negative code */
    struct ddp_err err;          /* rc < 0: why */
    struct usermap_account acct; /* rc == 0 */
};
struct usermap_cache {
    struct usermap_cache_entry *v;
    size_t n;
    int filled; /* usermap_cache_fill() ran: the cache stands for a desired set */
};
/* Resolves every distinct user of users[0..n) (NULL entries skipped) into c, which it empties
 * first. Never call it under a lock that others wait on. */
void usermap_cache_fill(struct usermap_cache *c, const struct usermap *m, const char *node,
                        const char *const *users, size_t n);
/* The account of user: a copy of its cache entry (or the entry's error) when c has one, else
 * resolved now by usermap_resolve(). The caller releases *out on success. */
int usermap_cache_resolve(const struct usermap_cache *c, const struct usermap *m, const char *user,
                          const char *node, struct usermap_account *out, struct ddp_err *err);
/* Frees the entries; c is empty afterwards. */
void usermap_cache_release(struct usermap_cache *c);

#endif
