/*
 * cmd_cluster.c - `ddpctl cluster`: the replicas of a cluster-mode ddpd (docs/ha.md), from
 * GET /v1/cluster; `cluster add ID IP:PORT` (POST /v1/cluster/members) and `cluster remove ID`
 * (DELETE /v1/cluster/members/ID), admins only. Any replica's address will do: the followers
 * redirect to the leader, which answers. A single ddpd (--db) answers FAILED_PRECONDITION,
 * which is printed as it comes.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "common/args.h"
#include "common/xalloc.h"

/* The largest member id ddpctl sends (dqlite's ids are 64-bit; a long is enough here). */
#define CLI_CLUSTER_MAX_ID 0x7fffffffL

/* Checks a member id argument: a positive integer. */
static int cli_cluster_id(const struct cli_cmd *cmd, const char *s, long *id)
{
    struct ddp_err err;
    if (args_parse_long("member id", s, 1, CLI_CLUSTER_MAX_ID, id, &err) < 0)
        return cli_usage_error(cmd, "member id: '%s' is not a whole number of 1 or more", s);
    return CLI_OK;
}

/* Checks a raft address argument: HOST:PORT, with a host and a port of 1..65535. */
static int cli_cluster_addr(const struct cli_cmd *cmd, const char *s)
{
    char host[256];
    int port = 0;
    struct ddp_err err;
    if (args_parse_hostport("raft address", s, host, sizeof(host), &port, &err) < 0)
        return cli_usage_error(cmd, "%s", err.msg);
    if (!host[0] || port < 1)
        return cli_usage_error(cmd,
                               "raft address: '%s' is not HOST:PORT (a host and a port "
                               "of 1..65535)",
                               s);
    return CLI_OK;
}

static void cli_cluster_table(const json_t *ans, int headers)
{
    static const char *const hdr[] = {"ID", "RAFT-ADDRESS", "ROLE", "LEADER", "URL"};
    struct table *t = table_new(5, hdr);
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(ans, "members"), i, m)
    {
        table_row(t);
        table_cell(t, "%lld", (long long)cli_int(m, "id", 0));
        table_cell(t, "%s", cli_str(m, "raft_address", "?"));
        table_cell(t, "%s", cli_str(m, "role", "?"));
        table_cell(t, "%s", json_is_true(json_object_get(m, "leader")) ? "yes" : "-");
        table_cell(t, "%s", cli_str(m, "url", "-"));
    }
    table_print_opt(t, stdout, headers);
    table_free(t);
}

int cmd_cluster(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_NO_HEADERS = 1 };
    static const struct option longopts[] = {
        {"no-headers", no_argument, NULL, O_NO_HEADERS}, CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    int no_headers = 0, rc = CLI_OK;
    long id = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            return rc;
        if (h > 0)
            continue;
        if (c != O_NO_HEADERS)
            return cli_usage_error(cmd, "unexpected option");
        no_headers = 1;
    }
    if (optind >= argc)
        return cli_usage_error(cmd, "missing what to do: status, add or remove");
    const char *verb = argv[optind];
    int status = strcmp(verb, "status") == 0, add = strcmp(verb, "add") == 0,
        remove = strcmp(verb, "remove") == 0;
    if (!status && !add && !remove)
        return cli_usage_error(cmd, "'%s' is not status, add or remove", verb);
    int want = status ? 1 : add ? 3 : 2;
    if (argc - optind < 2 && !status)
        return cli_usage_error(cmd, "%s: missing the member id", verb);
    if (argc - optind < want)
        return cli_usage_error(cmd, "add: missing the raft address (IP:PORT)");
    if (argc - optind > want)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + want]);
    if (no_headers && !status)
        return cli_usage_error(cmd, "--no-headers goes with status");
    if (!status && (rc = cli_cluster_id(cmd, argv[optind + 1], &id)) != CLI_OK)
        return rc;
    const char *addr = add ? argv[optind + 2] : NULL;
    if (add && (rc = cli_cluster_addr(cmd, addr)) != CLI_OK)
        return rc;

    rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    json_t *ans = NULL, *body = NULL;
    char *path = NULL;
    struct ddp_err err;
    int r;
    if (status) {
        r = cli_call(cli, "GET", "/v1/cluster", NULL, &ans, &err);
    } else if (add) {
        body = json_pack("{s:I,s:s}", "id", (json_int_t)id, "raft_address", addr);
        r = cli_call(cli, "POST", "/v1/cluster/members", body, &ans, &err);
    } else {
        path = xasprintf("/v1/cluster/members/%ld", id);
        r = cli_call(cli, "DELETE", path, NULL, &ans, &err);
    }
    if (r < 0) {
        rc = cli_fail(cli, &err);
    } else if (cli->json) {
        cli_print_json(ans);
    } else if (add) {
        printf("added member %ld at %s (%zu members)\n", id, addr,
               json_array_size(json_object_get(ans, "members")));
    } else if (remove) {
        printf("removed member %ld (%zu members left); stop its ddpd\n", id,
               json_array_size(json_object_get(ans, "members")));
    } else if (cli->output == CLI_OUT_NAME) {
        size_t i;
        json_t *m;
        json_array_foreach(json_object_get(ans, "members"), i, m)
        {
            printf("%lld\n", (long long)cli_int(m, "id", 0));
        }
    } else {
        cli_cluster_table(ans, !no_headers);
    }
    json_decref(ans);
    json_decref(body);
    free(path);
    return rc;
}
