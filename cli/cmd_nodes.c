/*
 * cmd_nodes.c - `ddpctl nodes`: the nodes ddpd knows (one agent each), their slots, state
 * and last heartbeat, from GET /v1/nodes; `ddpctl nodes remove NAME` (DELETE /v1/nodes/NAME).
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "common/xalloc.h"

static int cmd_nodes_remove(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    if (optind + 1 >= argc)
        return cli_usage_error(cmd, "remove: missing the node name");
    if (optind + 2 < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 2]);
    const char *name = argv[optind + 1];
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

    if (cli_parse_common_only(cli, cmd, argc, argv, &rc) < 0)
        goto out;
    if (optind < argc && strcmp(argv[optind], "remove") == 0)
        return cmd_nodes_remove(cli, cmd, argc, argv);
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
    if (json_array_size(nodes) == 0) {
        printf("no nodes (start ddp-agent on a machine to add one)\n");
        goto out;
    }
    static const char *const hdr[] = {"NAME", "ADDRESS", "STATE",    "SLOTS",
                                      "USED", "PORTS",   "LAST BEAT"};
    struct table *t = table_new(7, hdr);
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n)
    {
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
    }
    table_print(t, stdout);
    table_free(t);
out:
    json_decref(ans);
    return rc;
}
