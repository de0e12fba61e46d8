/*
 * auth.h - who is calling: the roles of users, the principal a bearer token resolves to, and
 * how tokens are kept (as the hex SHA-256, never in clear).
 *
 * Roles (docs/security.md has the full matrix):
 *   viewer - reads every job and node; submits and cancels nothing.
 *   user   - submits jobs; reads and cancels its own; lists nodes.
 *   admin  - everything: every user's jobs, users, removing nodes.
 * Node principals come from a node credential (only that node's heartbeat); the bootstrap
 * principal from the bootstrap (agent) token (only registration).
 */
#ifndef DDP_SERVER_AUTH_H
#define DDP_SERVER_AUTH_H

#include <stddef.h>

enum role { ROLE_VIEWER = 0, ROLE_USER = 1, ROLE_ADMIN = 2 };

enum principal_kind { PRINCIPAL_NONE = 0, PRINCIPAL_USER, PRINCIPAL_NODE, PRINCIPAL_BOOTSTRAP };

#define AUTH_NAME_MAX 64

struct principal {
    enum principal_kind kind;
    enum role role;               /* PRINCIPAL_USER only */
    char name[AUTH_NAME_MAX + 1]; /* the user's or node's name; "" for the bootstrap token */
};

/* Hex SHA-256 of a token: 64 characters and a NUL. */
#define AUTH_HASH_HEX 65
void auth_hash(const char *token, char out[AUTH_HASH_HEX]);

/* A new random token (64 hex characters, 256 bits) into out; 0 or DDP_EIO. */
#define AUTH_TOKEN_HEX 65
int auth_new_token(char out[AUTH_TOKEN_HEX]);

/* "admin", "user", "viewer". */
const char *auth_role_name(enum role r);
/* 0 and *out for a role name; -1 for anything else. */
int auth_role_parse(const char *s, enum role *out);

/* 1 when p may see every job (admin, viewer); 0 when only its own. */
int auth_sees_all(const struct principal *p);
/* 1 when p may act on (cancel) the job of owner. */
int auth_may_act(const struct principal *p, const char *owner);
/* 1 when p may read the job of owner. */
int auth_may_read(const struct principal *p, const char *owner);

#endif
