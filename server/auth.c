/*
 * auth.c - token hashing and the role rules of auth.h.
 */
#include "server/auth.h"

#include <nettle/sha2.h>
#include <string.h>

#include "common/randutil.h"

void auth_hash(const char *token, char out[AUTH_HASH_HEX])
{
    static const char hex[] = "0123456789abcdef";
    struct sha256_ctx ctx;
    unsigned char d[SHA256_DIGEST_SIZE];
    sha256_init(&ctx);
    sha256_update(&ctx, strlen(token), (const unsigned char *)token);
    sha256_digest(&ctx, sizeof(d), d);
    for (size_t i = 0; i < sizeof(d); i++) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    out[2 * sizeof(d)] = '\0';
}

int auth_new_token(char out[AUTH_TOKEN_HEX])
{
    return rand_hex(out, 32);
}

static const char *const role_names[] = {"viewer", "user", "admin"};

const char *auth_role_name(enum role r)
{
    return r >= ROLE_VIEWER && r <= ROLE_ADMIN ? role_names[r] : "?";
}

int auth_role_parse(const char *s, enum role *out)
{
    for (int i = 0; i <= ROLE_ADMIN; i++)
        if (s && strcmp(s, role_names[i]) == 0) {
            *out = (enum role)i;
            return 0;
        }
    return -1;
}

int auth_sees_all(const struct principal *p)
{
    return p->kind == PRINCIPAL_USER && (p->role == ROLE_ADMIN || p->role == ROLE_VIEWER);
}

int auth_may_read(const struct principal *p, const char *owner)
{
    return p->kind == PRINCIPAL_USER && (auth_sees_all(p) || strcmp(p->name, owner) == 0);
}

int auth_may_act(const struct principal *p, const char *owner)
{
    return p->kind == PRINCIPAL_USER &&
           (p->role == ROLE_ADMIN || (p->role == ROLE_USER && strcmp(p->name, owner) == 0));
}
