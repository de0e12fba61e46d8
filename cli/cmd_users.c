/*
 * cmd_users.c - `ddpctl users ...` (admins manage users over /v1/users), `ddpctl groups ...`
 * (their groups' quotas, /v1/groups) and `ddpctl whoami` (GET /v1/me). A new token is written to a file of mode 0600, never printed: the answer that
 * made it is the only copy ddpd ever hands out.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "common/args.h"
#include "common/fsutil.h"
#include "common/utf8.h"
#include "common/xalloc.h"

/*
 * The file a new token goes to is made before ddpd is asked (fs_atomic_open: a temporary
 * file of mode 0600 beside path, renamed over path once the token is in it). A path where no
 * file can be made (no such folder, no right to write there, a folder in its place) so fails
 * before the user is made or the old token dies.
 */
static int token_out_open(struct fs_atomic *t, const char *path)
{
    /* what the rename after the answer would fail on is refused now */
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return cli_failf("cannot write a token to %s: it is there and not a regular file "
                         "(nothing was asked of ddpd)",
                         path);
    struct ddp_err err;
    if (fs_atomic_open(t, path, 0600, &err) < 0)
        return cli_failf("cannot write a token to %s: %s (nothing was asked of ddpd)", path,
                         err.msg);
    return CLI_OK;
}

/* Writes the token of answer ans into t, renames it over t->path, and says so (the user
 * and the file as JSON with -o json; never the token). */
static int cli_users_keep_token(struct cli *cli, const json_t *ans, const char *name,
                                struct fs_atomic *t)
{
    const char *tok = cli_str(ans, "token", NULL);
    if (!tok)
        return cli_failf("ddpd's answer carries no token");
    char *line = xasprintf("%s\n", tok);
    struct ddp_err err;
    int rc = fs_atomic_commit(t, line, strlen(line), &err);
    free(line);
    if (rc < 0 && t->done) /* renamed: only the folder's fsync failed */
        fprintf(stderr, "ddpctl: warning: %s\n", err.msg);
    else if (rc < 0 && t->written) {
        /* the token is whole in the temporary file: keep it there and say so */
        rc = cli_failf("cannot write the token of %s: %s; it is in %s (mode 0600)", name, err.msg,
                       t->tmp);
        t->done = 1; /* not removed by fs_atomic_abort */
        return rc;
    } else if (rc < 0)
        return cli_failf("cannot write the token of %s: %s (the token is lost: an admin can make "
                         "another with 'ddpctl users rotate-token %s --token-out F')",
                         name, err.msg, name);
    if (cli->json) {
        char *shown = xstrdup(t->path); /* JSON text: a path of other bytes shown with '?' */
        utf8_repair(shown);
        json_t *o =
            json_pack("{s:O?, s:s}", "user", json_object_get(ans, "user"), "token_file", shown);
        free(shown);
        cli_print_json(o);
        json_decref(o);
        return CLI_OK;
    }
    printf("token of %s written to %s (mode 0600); hand it over and use it with "
           "'ddpctl --token-file %s'\n",
           name, t->path, t->path);
    return CLI_OK;
}

static int cli_users_table(const json_t *ans)
{
    static const char *const hdr[] = {"NAME", "ROLE", "MAX SLOTS", "GROUP", "CREATED"};
    struct table *t = table_new(5, hdr);
    size_t i;
    json_t *u;
    json_array_foreach(json_object_get(ans, "users"), i, u)
    {
        table_row(t);
        table_cell(t, "%s", cli_str(u, "name", "?"));
        table_cell(t, "%s", cli_str(u, "role", "?"));
        int64_t q = cli_int(u, "max_slots", 0);
        if (q > 0)
            table_cell(t, "%lld", (long long)q);
        else
            table_cell(t, "-");
        const char *g = cli_str(u, "group", "");
        table_cell(t, "%s", *g ? g : "-");
        table_cell(t, "%s", cli_str(u, "created_at", ""));
    }
    table_print(t, stdout);
    table_free(t);
    return CLI_OK;
}

int cmd_users(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_ROLE = 1, O_TOKEN_OUT, O_MAX_SLOTS, O_GROUP };
    static const struct option longopts[] = {{"role", required_argument, NULL, O_ROLE},
                                             {"token-out", required_argument, NULL, O_TOKEN_OUT},
                                             {"max-slots", required_argument, NULL, O_MAX_SLOTS},
                                             {"group", required_argument, NULL, O_GROUP},
                                             CLI_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *role = NULL, *token_out = NULL, *group = NULL;
    long max_slots = -1;
    int rc = CLI_OK;
    json_t *ans = NULL, *body = NULL;
    char *path = NULL, *esc = NULL, *out_default = NULL;
    struct fs_atomic tout = {.path = NULL, .tmp = "", .fd = -1};
    struct ddp_err err;
    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            return rc;
        if (h > 0)
            continue;
        if (c == O_ROLE)
            role = optarg;
        else if (c == O_TOKEN_OUT) {
            if (!*optarg)
                return cli_usage_error(cmd, "--token-out: the file name is empty");
            token_out = optarg;
        } else if (c == O_GROUP)
            group = optarg;
        else if (c == O_MAX_SLOTS) {
            if (args_parse_long("--max-slots", optarg, 0, 1 << 30, &max_slots, &err) < 0)
                return cli_usage_error(cmd, "%s", err.msg);
        } else
            return cli_usage_error(cmd, "unexpected option");
    }
    if (optind >= argc)
        return cli_usage_error(cmd, "missing what to do: list, add, remove or rotate-token");
    const char *verb = argv[optind];
    int list = strcmp(verb, "list") == 0, add = strcmp(verb, "add") == 0,
        remove = strcmp(verb, "remove") == 0, rotate = strcmp(verb, "rotate-token") == 0,
        set = strcmp(verb, "set") == 0;
    if (!list && !add && !remove && !rotate && !set)
        return cli_usage_error(cmd, "'%s' is not list, add, set, remove or rotate-token", verb);
    int want = list ? 1 : 2;
    if (argc - optind < want)
        return cli_usage_error(cmd, "%s: missing the user name", verb);
    if (argc - optind > want)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + want]);
    if ((role || max_slots >= 0 || group) && !add && !set)
        return cli_usage_error(cmd, "--role, --max-slots and --group go with add and set");
    if (set && !role && max_slots < 0 && !group)
        return cli_usage_error(cmd, "set: nothing to change (--role R, --max-slots N, --group G)");
    if (token_out && !add && !rotate)
        return cli_usage_error(cmd, "--token-out goes with add and rotate-token");
    const char *name = list ? NULL : argv[optind + 1];
    if ((rc = cli_text_arg(cmd, "the user name", name)) != CLI_OK ||
        (rc = cli_text_arg(cmd, "--role", role)) != CLI_OK ||
        (rc = cli_text_arg(cmd, "--group", group)) != CLI_OK)
        return rc;
    if (name) {
        esc = cli_escape(name);
        if (!token_out && (add || rotate))
            token_out = out_default = xasprintf("%s.token", name);
    }
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    if ((add || rotate) && (rc = token_out_open(&tout, token_out)) != CLI_OK)
        goto out;
    int r;
    if (list) {
        r = cli_call(cli, "GET", "/v1/users", NULL, &ans, &err);
    } else if (add) {
        body = json_pack("{s:s}", "name", name);
        if (role)
            json_object_set_new(body, "role", json_string(role));
        if (max_slots >= 0)
            json_object_set_new(body, "max_slots", json_integer(max_slots));
        if (group)
            json_object_set_new(body, "group", json_string(group));
        r = cli_call(cli, "POST", "/v1/users", body, &ans, &err);
    } else if (set) {
        body = json_object();
        if (role)
            json_object_set_new(body, "role", json_string(role));
        if (max_slots >= 0)
            json_object_set_new(body, "max_slots", json_integer(max_slots));
        if (group)
            json_object_set_new(body, "group", json_string(group));
        path = xasprintf("/v1/users/%s", esc);
        r = cli_call(cli, "PATCH", path, body, &ans, &err);
    } else if (remove) {
        path = xasprintf("/v1/users/%s", esc);
        r = cli_call(cli, "DELETE", path, NULL, &ans, &err);
    } else {
        path = xasprintf("/v1/users/%s:rotate-token", esc);
        r = cli_call(cli, "POST", path, NULL, &ans, &err);
    }
    if (r < 0) {
        rc = cli_fail(cli, &err);
        goto out;
    }
    if (add || rotate)
        rc = cli_users_keep_token(cli, ans, name, &tout);
    else if (cli->json)
        cli_print_json(ans);
    else if (list)
        rc = cli_users_table(ans);
    else if (set)
        printf("user %s: role %s, max slots %lld, group %s\n", name,
               cli_str(json_object_get(ans, "user"), "role", "?"),
               (long long)cli_int(json_object_get(ans, "user"), "max_slots", 0),
               *cli_str(json_object_get(ans, "user"), "group", "")
                   ? cli_str(json_object_get(ans, "user"), "group", "")
                   : "-");
    else
        printf("removed user %s (its jobs stay, owned by it)\n", name);
out:
    fs_atomic_abort(&tout);
    json_decref(ans);
    json_decref(body);
    free(path);
    free(esc);
    free(out_default);
    return rc;
}

static int cli_groups_table(const json_t *ans)
{
    static const char *const hdr[] = {"NAME", "MAX SLOTS", "SLOTS USED", "USERS"};
    struct table *t = table_new(4, hdr);
    size_t i, k;
    json_t *g, *u;
    json_array_foreach(json_object_get(ans, "groups"), i, g)
    {
        table_row(t);
        table_cell(t, "%s", cli_str(g, "name", "?"));
        int64_t q = cli_int(g, "max_slots", 0);
        if (q > 0)
            table_cell(t, "%lld", (long long)q);
        else
            table_cell(t, "-");
        table_cell(t, "%lld", (long long)cli_int(g, "slots_used", 0));
        char users[512] = "";
        size_t off = 0;
        json_array_foreach(json_object_get(g, "users"), k, u)
        {
            if (off < sizeof(users))
                off += (size_t)snprintf(users + off, sizeof(users) - off, "%s%s", k ? "," : "",
                                        json_string_value(u) ? json_string_value(u) : "?");
        }
        table_cell(t, "%s", users[0] ? users : "-");
    }
    table_print(t, stdout);
    table_free(t);
    return CLI_OK;
}

int cmd_groups(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_MAX_SLOTS = 1 };
    static const struct option longopts[] = {{"max-slots", required_argument, NULL, O_MAX_SLOTS},
                                             CLI_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    long max_slots = -1;
    int rc = CLI_OK;
    json_t *ans = NULL, *body = NULL;
    char *path = NULL, *esc = NULL;
    struct ddp_err err;
    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            return rc;
        if (h > 0)
            continue;
        if (c == O_MAX_SLOTS) {
            if (args_parse_long("--max-slots", optarg, 0, 1 << 30, &max_slots, &err) < 0)
                return cli_usage_error(cmd, "%s", err.msg);
        } else {
            return cli_usage_error(cmd, "unexpected option");
        }
    }
    if (optind >= argc)
        return cli_usage_error(cmd, "missing what to do: list or set");
    const char *verb = argv[optind];
    int list = strcmp(verb, "list") == 0, set = strcmp(verb, "set") == 0;
    if (!list && !set)
        return cli_usage_error(cmd, "'%s' is not list or set", verb);
    int want = list ? 1 : 2;
    if (argc - optind < want)
        return cli_usage_error(cmd, "%s: missing the group name", verb);
    if (argc - optind > want)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + want]);
    if (list && max_slots >= 0)
        return cli_usage_error(cmd, "--max-slots goes with set");
    if (set && max_slots < 0)
        return cli_usage_error(cmd, "set: missing --max-slots N");
    const char *name = list ? NULL : argv[optind + 1];
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    int r;
    if (list) {
        r = cli_call(cli, "GET", "/v1/groups", NULL, &ans, &err);
    } else {
        esc = cli_escape(name);
        body = json_pack("{s:I}", "max_slots", (json_int_t)max_slots);
        path = xasprintf("/v1/groups/%s", esc);
        r = cli_call(cli, "PUT", path, body, &ans, &err);
    }
    if (r < 0)
        rc = cli_fail(cli, &err);
    else if (cli->json)
        cli_print_json(ans);
    else if (list)
        rc = cli_groups_table(ans);
    else
        printf("group %s: max slots %lld, %lld in use\n", name,
               (long long)cli_int(json_object_get(ans, "group"), "max_slots", 0),
               (long long)cli_int(json_object_get(ans, "group"), "slots_used", 0));
    json_decref(ans);
    json_decref(body);
    free(path);
    free(esc);
    return rc;
}

int cmd_whoami(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    int rc = CLI_OK;
    json_t *ans = NULL;
    struct ddp_err err;
    if (cli_parse_common_only(cli, cmd, argc, argv, &rc) < 0)
        return rc;
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    if (cli_call(cli, "GET", "/v1/me", NULL, &ans, &err) < 0)
        rc = cli_fail(cli, &err);
    else if (cli->json)
        cli_print_json(ans);
    else
        printf("%s (role %s)\n", cli_str(ans, "name", "?"), cli_str(ans, "role", "?"));
    json_decref(ans);
    return rc;
}
