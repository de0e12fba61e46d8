/*
 * test_usermap.c - the --user-map file (names, '*', '=', comments, every refusal naming its
 * file and line, the bounds), the isolation decision for root and other users, and the
 * resolution of ddp users to local accounts that exist on every machine (root, nobody).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <pwd.h>
#include <unistd.h>

#include "agent/usermap.h"
#include "common/xalloc.h"

static struct usermap *parse_ok(const char *text)
{
    struct usermap *m = NULL;
    struct ddp_err err;
    err_clear(&err);
    int rc = usermap_parse(text, strlen(text), "map", &m, &err);
    if (rc != 0)
        fail_msg("'%s': rc %d: %s", text, rc, err.msg);
    assert_non_null(m);
    return m;
}

/* len 0: strlen(text). */
static void expect_refused(const char *text, size_t len, int code, const char *want)
{
    if (len == 0)
        len = strlen(text);
    struct usermap *m = (struct usermap *)(uintptr_t)1; /* must stay untouched */
    struct ddp_err err;
    err_clear(&err);
    int rc = usermap_parse(text, len, "/etc/ddp/user-map", &m, &err);
    if (rc != code || !strstr(err.msg, want))
        fail_msg("'%.60s': rc %d, message '%s', expected %d '%s'", text, rc, err.msg, code, want);
    assert_true(m == (struct usermap *)(uintptr_t)1);
}

static void test_usermap_parse_and_lookup(void **state)
{
    (void)state;
    struct usermap *m = parse_ok("# ddp user -> local account\n"
                                 "\n"
                                 "alice   nobody   # a comment after a mapping\n"
                                 "\tbob\t=\r\n"
                                 "   \n"
                                 "c.d-e_f  svc@corp$\n"
                                 "* =");
    assert_int_equal(usermap_count(m), 4);
    assert_string_equal(usermap_lookup(m, "alice"), "nobody");
    assert_string_equal(usermap_lookup(m, "bob"), "bob");
    assert_string_equal(usermap_lookup(m, "c.d-e_f"), "svc@corp$");
    assert_string_equal(usermap_lookup(m, "zed"), "zed"); /* '* =' */
    usermap_free(m);

    m = parse_ok("alice nobody\n");
    assert_string_equal(usermap_lookup(m, "alice"), "nobody");
    assert_null(usermap_lookup(m, "carol")); /* a file without '*' maps only whom it names */
    assert_null(usermap_lookup(m, "nobody"));
    usermap_free(m);

    m = parse_ok("* nobody\nroot =\n"); /* '*' maps everybody else to one account */
    assert_string_equal(usermap_lookup(m, "anyone"), "nobody");
    assert_string_equal(usermap_lookup(m, "root"), "root");
    usermap_free(m);

    m = parse_ok(""); /* an empty file maps nobody */
    assert_int_equal(usermap_count(m), 0);
    assert_null(usermap_lookup(m, "alice"));
    usermap_free(m);

    /* No file: every user is the account of the same name. */
    assert_string_equal(usermap_lookup(NULL, "alice"), "alice");
    assert_int_equal(usermap_count(NULL), 0);
    usermap_free(NULL);
}

static void test_usermap_refusals_name_file_and_line(void **state)
{
    (void)state;
    expect_refused("alice\n", 0, DDP_EINVAL, "/etc/ddp/user-map:1: expected 'DDPUSER ACCOUNT'");
    expect_refused("# c\nalice nobody extra\n", 0, DDP_EINVAL,
                   "/etc/ddp/user-map:2: expected 'DDPUSER ACCOUNT' (or '* =' for the account "
                   "of the same name), got 'alice nobody extra'");
    expect_refused("al/ice nobody\n", 0, DDP_EINVAL,
                   ":1: ddp user 'al/ice' is not 1..63 of [A-Za-z0-9._-] (or '*')");
    expect_refused("** nobody\n", 0, DDP_EINVAL, ":1: ddp user '**'");
    expect_refused("alice ../root\n", 0, DDP_EINVAL,
                   ":1: local account '../root' is not 1..255 of [A-Za-z0-9._@$-] (or '=')");
    expect_refused("alice no:body\n", 0, DDP_EINVAL, "local account 'no:body'");
    expect_refused("alice ==\n", 0, DDP_EINVAL, "local account '=='");
    expect_refused("alice nobody\n\nalice daemon\n", 0, DDP_EINVAL,
                   "/etc/ddp/user-map:3: ddp user 'alice' is mapped already (line 1)");
    expect_refused("* nobody\n* =\n", 0, DDP_EINVAL, ":2: ddp user '*' is mapped already");
    expect_refused("alice no\0body\n", 14, DDP_EINVAL, ":1: a NUL byte");
    char longname[80];
    memset(longname, 'a', 64);
    memcpy(longname + 64, " nobody\n", 9);
    expect_refused(longname, 0, DDP_EINVAL, ":1: ddp user 'aaaa");

    /* The bounds: USERMAP_FILE_MAX bytes, USERMAP_ENTRIES_MAX mappings. */
    size_t big = USERMAP_FILE_MAX + 1;
    char *text = xmalloc(big);
    memset(text, '#', big);
    expect_refused(text, big, DDP_ETOOBIG, "larger than 1048576 bytes");
    free(text);
    size_t n = USERMAP_ENTRIES_MAX + 1, len = 0;
    text = xmalloc(n * 12 + 1);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, n * 12 + 1 - len, "u%zx a\n", i);
    char want[64];
    snprintf(want, sizeof(want), ":%zu: more than %d mappings", n, USERMAP_ENTRIES_MAX);
    expect_refused(text, len, DDP_ETOOBIG, want);
    /* One fewer fits. */
    struct usermap *m = NULL;
    struct ddp_err err;
    size_t cut = len - strlen(strrchr(text, 'u'));
    assert_int_equal(usermap_parse(text, cut, "map", &m, &err), 0);
    assert_int_equal(usermap_count(m), USERMAP_ENTRIES_MAX);
    usermap_free(m);
    free(text);
}

static void test_usermap_load(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_usermap.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *path = xasprintf("%s/map", dir), *link = xasprintf("%s/link", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs("alice nobody\nbad line here\n", f) >= 0);
    assert_int_equal(fclose(f), 0);
    struct usermap *m = NULL;
    struct ddp_err err;
    err_clear(&err);
    assert_int_equal(usermap_load(path, &m, &err), DDP_EINVAL);
    char *want = xasprintf("%s:2: expected", path);
    assert_non_null(strstr(err.msg, want));
    free(want);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_true(fputs("alice nobody\n", f) >= 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(usermap_load(path, &m, &err), 0);
    assert_string_equal(usermap_lookup(m, "alice"), "nobody");
    usermap_free(m);
    m = NULL;
    assert_int_equal(symlink(path, link), 0); /* a link is refused, as token files are */
    assert_true(usermap_load(link, &m, &err) < 0);
    assert_null(m);
    char *missing = xasprintf("%s/none", dir);
    assert_int_equal(usermap_load(missing, &m, &err), DDP_ENOTFOUND);
    free(missing);
    assert_int_equal(unlink(link), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
    free(link);
    free(path);
}

static void test_usermap_isolation_decide(void **state)
{
    (void)state;
    enum usermap_isolation got = USERMAP_AUTO;
    struct ddp_err err;
    err_clear(&err);
    /* root: per-user by default, single-user when asked (the map then is an error). */
    assert_int_equal(usermap_isolation_decide(USERMAP_AUTO, 0, 0, &got, &err), 0);
    assert_int_equal(got, USERMAP_PER_USER);
    assert_int_equal(usermap_isolation_decide(USERMAP_AUTO, 0, 1, &got, &err), 0);
    assert_int_equal(got, USERMAP_PER_USER);
    assert_int_equal(usermap_isolation_decide(USERMAP_SINGLE_USER, 0, 0, &got, &err), 0);
    assert_int_equal(got, USERMAP_SINGLE_USER);
    got = USERMAP_AUTO;
    assert_int_equal(usermap_isolation_decide(USERMAP_SINGLE_USER, 0, 1, &got, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "--user-map: every job runs as the agent's own user here "
                                    "(--isolation single-user)"));
    assert_int_equal(got, USERMAP_AUTO); /* untouched on error */
    /* Not root: single-user, the one message at start says so; per-user cannot be. */
    assert_int_equal(usermap_isolation_decide(USERMAP_AUTO, 1000, 0, &got, &err), 0);
    assert_int_equal(got, USERMAP_SINGLE_USER);
    assert_int_equal(usermap_isolation_decide(USERMAP_AUTO, 1000, 1, &got, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "(the agent is not root)"));
    assert_int_equal(usermap_isolation_decide(USERMAP_PER_USER, 1000, 0, &got, &err), DDP_EPERM);
    assert_non_null(strstr(err.msg, "--isolation per-user: the agent runs as uid 1000, not root"));
    assert_int_equal(usermap_isolation_decide(USERMAP_PER_USER, 0, 1, &got, &err), 0);
    assert_int_equal(got, USERMAP_PER_USER);

    assert_int_equal(usermap_isolation_parse("per-user", &got, &err), 0);
    assert_int_equal(got, USERMAP_PER_USER);
    assert_int_equal(usermap_isolation_parse("single-user", &got, &err), 0);
    assert_int_equal(got, USERMAP_SINGLE_USER);
    assert_int_equal(usermap_isolation_parse("auto", &got, &err), 0);
    assert_int_equal(got, USERMAP_AUTO);
    assert_int_equal(usermap_isolation_parse("root", &got, &err), DDP_EINVAL);
    assert_string_equal(err.msg, "--isolation: 'root' is not one of auto, per-user, single-user");
    assert_string_equal(usermap_isolation_name(USERMAP_SINGLE_USER), "single-user");
}

static void test_usermap_resolve(void **state)
{
    (void)state;
    struct passwd *nb = getpwnam("nobody");
    if (!nb) {
        print_message("no account 'nobody' here: resolve of a real account not tested\n");
        return;
    }
    uid_t nobody_uid = nb->pw_uid;
    gid_t nobody_gid = nb->pw_gid;
    struct usermap *m = parse_ok("alice nobody\nadmin root\nghost no-such-account-x\n");
    struct usermap_account acct;
    memset(&acct, 0, sizeof(acct));
    struct ddp_err err;
    err_clear(&err);
    assert_int_equal(usermap_resolve(m, "alice", "node-a", &acct, &err), 0);
    assert_string_equal(acct.name, "nobody");
    assert_int_equal(acct.uid, nobody_uid);
    assert_int_equal(acct.gid, nobody_gid);
    assert_non_null(acct.home);
    int has_gid = 0;
    for (size_t i = 0; i < acct.ngroups; i++)
        has_gid |= acct.groups[i] == nobody_gid;
    assert_true(acct.ngroups >= 1 && has_gid);
    usermap_account_release(&acct);
    usermap_account_release(&acct); /* twice is harmless */
    usermap_account_release(NULL);

    assert_int_equal(usermap_resolve(m, "carol", "node-a", &acct, &err), DDP_ENOTFOUND);
    assert_string_equal(err.msg, "no local account for ddp user carol on node node-a (see "
                                 "--user-map)");
    assert_null(acct.name);
    assert_int_equal(usermap_resolve(m, "ghost", "node-a", &acct, &err), DDP_ENOTFOUND);
    assert_string_equal(err.msg, "no local account for ddp user ghost on node node-a (see "
                                 "--user-map): it maps to 'no-such-account-x', which does not "
                                 "exist here");
    assert_int_equal(usermap_resolve(m, "admin", "node-a", &acct, &err), DDP_EPERM);
    assert_string_equal(err.msg, "ddp user admin maps to local account 'root' (uid 0) on node "
                                 "node-a: jobs never run as uid 0 (see --user-map)");
    assert_null(acct.name);
    assert_int_equal(usermap_resolve(m, "", "node-a", &acct, &err), DDP_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no local account for a job without owner on node node-a"));
    usermap_free(m);

    /* No map: the account of the same name; root is refused all the same. */
    assert_int_equal(usermap_resolve(NULL, "nobody", "n", &acct, &err), 0);
    assert_int_equal(acct.uid, nobody_uid);
    usermap_account_release(&acct);
    assert_int_equal(usermap_resolve(NULL, "root", "n", &acct, &err), DDP_EPERM);
    assert_int_equal(usermap_resolve(NULL, "no-such-account-x", "n", &acct, &err), DDP_ENOTFOUND);
}

/* The cache the beat fills outside the agent's lock: each user once, errors kept as given,
 * and a start served from it without NSS (resolving "alice" again under no map would look
 * up an account "alice", which does not exist); a user not in it is resolved then. */
static void test_usermap_cache(void **state)
{
    (void)state;
    if (!getpwnam("nobody")) {
        print_message("no account 'nobody' here: the account cache not tested\n");
        return;
    }
    struct usermap *m = parse_ok("alice nobody\nadmin root\nghost no-such-account-x\n");
    const char *users[] = {"alice", "ghost", NULL, "alice", "admin"};
    struct usermap_cache c = {0};
    usermap_cache_fill(&c, m, "node-a", users, 5);
    assert_true(c.filled);
    assert_int_equal(c.n, 3);
    usermap_free(m);
    struct usermap_account acct;
    memset(&acct, 0, sizeof(acct));
    struct ddp_err err;
    err_clear(&err);
    assert_int_equal(usermap_cache_resolve(&c, NULL, "alice", "node-a", &acct, &err), 0);
    assert_string_equal(acct.name, "nobody");
    assert_int_equal(usermap_cache_resolve(&c, NULL, "ghost", "node-a", &acct, &err),
                     DDP_ENOTFOUND);
    assert_non_null(strstr(err.msg, "maps to 'no-such-account-x'"));
    assert_int_equal(usermap_cache_resolve(&c, NULL, "admin", "node-a", &acct, &err), DDP_EPERM);
    /* not in the cache: resolved now, under no map the account of the same name */
    struct usermap_account other;
    memset(&other, 0, sizeof(other));
    assert_int_equal(usermap_cache_resolve(&c, NULL, "nobody", "node-a", &other, &err), 0);
    assert_int_equal(other.uid, getpwnam("nobody")->pw_uid);
    usermap_account_release(&other);
    usermap_cache_fill(&c, NULL, "node-a", users, 1); /* refilled: emptied first */
    assert_int_equal(c.n, 1);
    assert_int_equal(c.v[0].rc, DDP_ENOTFOUND); /* no map: no account "alice" */
    usermap_cache_release(&c);
    assert_int_equal(c.n, 0);
    /* the copy outlives the cache */
    assert_string_equal(acct.name, "nobody");
    assert_true(acct.ngroups >= 1);
    usermap_account_release(&acct);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usermap_parse_and_lookup),
        cmocka_unit_test(test_usermap_refusals_name_file_and_line),
        cmocka_unit_test(test_usermap_load),
        cmocka_unit_test(test_usermap_isolation_decide),
        cmocka_unit_test(test_usermap_resolve),
        cmocka_unit_test(test_usermap_cache),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
