/*
 * cmd_nodes.c - `ddpctl nodes`: the nodes ddpd knows (one agent each), their slots, state,
 * last heartbeat and isolation (whose accounts their jobs run as), from GET /v1/nodes;
 * `ddpctl nodes remove NAME` (DELETE /v1/nodes/NAME).
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

/* A node's labels as "k=v,k=v" in the order ddpd gave (cut at size), or "-". */
static void cli_format_labels(const json_t *labels, char *buf, size_t size)
{
    const char *key;
    json_t *v;
    size_t o = 0;
    snprintf(buf, size, "-");
    json_object_foreach((json_t *)labels, key, v)
    {
        int w = snprintf(buf + o, size - o, "%s%s=%s", o ? "," : "", key,
                         json_is_string(v) ? json_string_value(v) : "?");
        if (w < 0 || (size_t)w >= size - o)
            break;
        o += (size_t)w;
    }
}

/* ddpctl nodes cordon|drain|uncordon NAME [--reason TEXT]: POST /v1/nodes/NAME:ACTION. */
static int cmd_nodes_admin(struct cli *cli, const char *action, const char *name,
                           const char *reason)
{
    int rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    char *esc = cli_escape(name);
    char *path = xasprintf("/v1/nodes/%s:%s", esc, action);
    json_t *body = reason ? json_pack("{s:s}", "reason", reason) : json_object();
    json_t *ans = NULL;
    struct ddp_err err;
    if (cli_call(cli, "POST", path, body, &ans, &err) < 0)
        rc = cli_fail(cli, &err);
    else if (cli->json)
        cli_print_json(ans);
    else
        printf("node %s: %s\n", name,
               strcmp(action, "uncordon") == 0 ? "schedulable again"
               : strcmp(action, "drain") == 0  ? "drained (elastic jobs move off it)"
                                               : "cordoned (takes no new work)");
    json_decref(ans);
    json_decref(body);
    free(path);
    free(esc);
    return rc;
}

/* nodes remove NAME (checked by the caller). */
static int cmd_nodes_remove(struct cli *cli, const char *name)
{
    int rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    char *esc = cli_escape(name);
    char *path = xasprintf("/v1/nodes/%s", esc);
    json_t *ans = NULL;
    struct ddp_err err;
    if (cli_call(cli, "DELETE", path, NULL, &ans, &err) < 0)
        rc = cli_fail(cli, &err);
    else if (cli->json)
        cli_print_json(ans);
    else
        printf("removed node %s\n", name);
    json_decref(ans);
    free(path);
    free(esc);
    return rc;
}

int cmd_nodes(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    json_t *ans = NULL;
    int rc = CLI_OK;
    struct ddp_err err;

    enum { O_REASON = 1, O_NO_HEADERS };
    static const struct option longopts[] = {{"reason", required_argument, NULL, O_REASON},
                                             {"no-headers", no_argument, NULL, O_NO_HEADERS},
                                             CLI_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    const char *reason = NULL;
    int no_headers = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            goto out;
        if (h > 0)
            continue;
        if (c == O_NO_HEADERS) {
            no_headers = 1;
            continue;
        }
        if (c != O_REASON) {
            rc = cli_usage_error(cmd, "unexpected option");
            goto out;
        }
        reason = optarg;
    }
    const char *verb = optind < argc ? argv[optind] : NULL;
    int remove = verb && strcmp(verb, "remove") == 0;
    int noted = verb && (strcmp(verb, "cordon") == 0 || strcmp(verb, "drain") == 0);
    int admin = noted || (verb && strcmp(verb, "uncordon") == 0);
    /* A flag the verb does not take is refused, not dropped. */
    if (reason && !noted) {
        rc = cli_usage_error(cmd, "--reason goes with cordon and drain");
        goto out;
    }
    if (remove || admin) {
        if (no_headers)
            return cli_usage_error(cmd, "--no-headers goes with the node list");
        if (optind + 1 >= argc)
            return cli_usage_error(cmd, "%s: missing the node name", verb);
        if (!*argv[optind + 1])
            return cli_usage_error(cmd, "%s: the node name is empty", verb);
        if (optind + 2 < argc)
            return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 2]);
        if ((rc = cli_text_arg(cmd, "the node name", argv[optind + 1])) != CLI_OK ||
            (rc = cli_text_arg(cmd, "--reason", reason)) != CLI_OK)
            return rc;
        return remove ? cmd_nodes_remove(cli, argv[optind + 1])
                      : cmd_nodes_admin(cli, verb, argv[optind + 1], reason);
    }
    if (optind < argc) {
        rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
        goto out;
    }
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    if (cli_call(cli, "GET", "/v1/nodes", NULL, &ans, &err) < 0) {
        rc = cli_fail(cli, &err);
        goto out;
    }
    if (cli->json) {
        cli_print_json(ans);
        goto out;
    }
    json_t *nodes = json_object_get(ans, "nodes");
    size_t i;
    json_t *n;
    if (cli->output == CLI_OUT_NAME) {
        json_array_foreach(nodes, i, n)
        {
            printf("%s\n", cli_str(n, "name", "?"));
        }
        goto out;
    }
    if (json_array_size(nodes) == 0) {
        /* Not where headers were turned off: a script reads an empty list as nothing. */
        if (!no_headers)
            printf("no nodes (start ddp-agent on a machine to add one)\n");
        goto out;
    }
    int wide = cli->output == CLI_OUT_WIDE;
    static const char *const hdr[] = {"NAME",      "ADDRESS",    "STATE",     "SLOTS",
                                      "USED",      "PORTS",      "LAST BEAT", "HOLD",
                                      "ISOLATION", "REGISTERED", "LABELS"};
    struct table *t = table_new(wide ? 11 : 9, hdr);
    int64_t now = time_wall_ms();
    json_array_foreach(nodes, i, n)
    {
        char labels[TABLE_MAX_CELL];
        table_row(t);
        table_cell(t, "%s", cli_str(n, "name", "?"));
        table_cell(t, "%s", cli_str(n, "address", "?"));
        table_cell(t, "%s", cli_str(n, "state", "?"));
        table_cell(t, "%lld", (long long)cli_int(n, "slots", 0));
        table_cell(t, "%lld", (long long)cli_int(n, "slots_used", 0));
        table_cell(t, "%s", cli_str(n, "port_range", ""));
        int64_t age = cli_int(n, "last_heartbeat_age_ms", -1);
        if (age < 0)
            table_cell(t, "-");
        else if (age < 10000)
            table_cell(t, "%.1fs ago", (double)age / 1000.0);
        else
            table_cell(t, "%llds ago", (long long)(age / 1000));
        const char *hold = cli_str(n, "admin_state", "");
        const char *why = cli_str(n, "admin_reason", "");
        if (!hold[0])
            table_cell(t, "-");
        else
            table_cell(t, "%s%s%s", hold, why[0] ? ": " : "", why);
        table_cell(t, "%s", cli_str(n, "isolation", "-"));
        if (wide) {
            char reg[16];
            cli_format_age(cli_str(n, "registered_at", NULL), now, reg, sizeof(reg));
            table_cell(t, "%s", reg);
            cli_format_labels(json_object_get(n, "labels"), labels, sizeof(labels));
            table_cell(t, "%s", labels);
        }
    }
    table_print_opt(t, stdout, !no_headers);
    table_free(t);
out:
    json_decref(ans);
    return rc;
}
