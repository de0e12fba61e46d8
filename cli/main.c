/*
 * main.c - ddpctl: the command line of ddp. Parses the global options, picks the command,
 * and holds what every command shares (connection, errors, output helpers of cli.h).
 *
 *   ddpctl [--server URL] [--token-file F] [-o table|json|name|wide] COMMAND [ARGS]
 *
 * Resolution order (so that a user of the local cluster types no flags):
 *   server: --server, else $DDP_SERVER, else http://127.0.0.1:8470
 *   token:  --token-file, else $DDP_TOKEN (the token itself), else $DDP_HOME/user.token
 *           (DDP_HOME defaults to ./.ddp); a missing default file means no token (ddpd then
 *           answers 401 and we say where the token is looked for).
 *
 * Invariants: nothing is sent before the whole command line parsed; a usage error always
 * prints the usage line and exits 2; every error message goes to stderr prefixed "ddpctl: ",
 * and stdout only carries the command's answer (so `-o json` output is always parseable).
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/buf.h"
#include "common/fsutil.h"
#include "common/httpc.h"
#include "common/srvlist.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/tokenfile.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "ddp_version.h"

static const struct cli_cmd cli_cmds[] = {
    {"submit",
     "submit [--name N] [--nnodes MIN:MAX] [--nproc-per-node N] [--max-restarts N] "
     "[--env K=V]... [--workdir D] [--checkpoint-dir D] [--max-runtime S] [--grace S] "
     "[--hang-timeout S] [--priority N] [--node-selector K=V]... [--preempt-signal SIG] "
     "[--preempt-grace S] [--gpus-per-proc N] [--idempotency-key K] [--parsable] -- CMD ARGS...",
     "submit a job; prints its id",
     "  --name N            job name, 1..63 of [A-Za-z0-9._-] (default \"job\")\n"
     "  --nnodes MIN:MAX    nodes, or one number N (default 1)\n"
     "  --nproc-per-node N  worker processes per node (default 1)\n"
     "  --max-restarts N    restarts before the job FAILED (default 3)\n"
     "  --env K=V           environment of every worker (repeatable)\n"
     "  --workdir D         working directory of the workers (default: the job's own\n"
     "                      folder on each node, <agent work dir>/jobs/<job>; '.' for\n"
     "                      the current one, which the job's account must be able to enter)\n"
     "  --checkpoint-dir D  DDP_CHECKPOINT_DIR of the workers (default: the agent's)\n"
     "  --max-runtime S     stop the job after S seconds (default 0: no limit)\n"
     "  --grace S           seconds between SIGTERM and SIGKILL on stop (default 30)\n"
     "  --hang-timeout S    no progress for S seconds = failed (default 0: off)\n"
     "  --node-selector K=V only on nodes with this label (repeatable: all must match)\n"
     "  --priority N        -1000..1000, higher first (default 0; above 0 needs an admin\n"
     "                      unless ddpd's --max-user-priority allows it)\n"
     "  --preempt-signal SIG  the preemption notice's signal (default SIGUSR1; SIGUSR2,\n"
     "                      SIGHUP, SIGINT, SIGTERM, SIGURG, SIGWINCH)\n"
     "  --preempt-grace S   from the notice to the stop (default 30)\n"
     "  --gpus-per-proc N   GPUs of each worker, 0..64 (default auto: 1 on a node with\n"
     "                      GPUs, 0 on one without; N > 0 never runs on a node without)\n"
     "  --idempotency-key K the submit's Idempotency-Key (default: drawn): a submit again\n"
     "                      with K answers the job the first made (a requeued batch job)\n"
     "  --parsable          print only the job id (as -o name)\n"
     "The command is an argv (never a shell string); put it after '--'.\n",
     cmd_submit},
    {"list", "list [--state S] [--all] [--no-headers] [-o table|json|name|wide]",
     "list your jobs, newest first",
     "  --state S     only jobs in state S (PENDING, RUNNING, RESTARTING, CANCELLING,\n"
     "                SUCCEEDED, FAILED, CANCELLED)\n"
     "  --all         every user's jobs (roles admin and viewer)\n"
     "  --no-headers  no header line (no jobs: nothing at all)\n"
     "  -o name       the job ids only, one a line; -o wide: with PRIORITY, NODELIST, REASON\n",
     cmd_list},
    {"status", "status JOB...", "show jobs: state, generation, nodes and ranks, progress, events",
     "Several jobs: one after the other, a blank line between (-o json: {\"jobs\": [...],\n"
     "\"failed\": [{\"id\", \"error\"}]}). Exit 1 when any of them could not be shown.\n",
     cmd_status},
    {"cancel", "cancel JOB...", "cancel jobs (idempotent)",
     "Each job is cancelled apart; one that fails is named and the others go on\n"
     "(-o json with several: {\"jobs\": [...], \"failed\": [...]}). Exit 1 when any failed.\n",
     cmd_cancel},
    {"delete", "delete JOB...", "delete finished jobs with their events, metrics and logs",
     "Only a finished job (SUCCEEDED, FAILED, CANCELLED) is deleted: cancel a live one first.\n"
     "Its id is never given out again. Exit 1 when any of the jobs was not deleted.\n",
     cmd_delete},
    {"update", "update JOB --priority N", "change a live job's priority (admin)",
     "  --priority N  -1000..1000; the queue is ordered anew (a running job is not disturbed)\n",
     cmd_update},
    {"logs", "logs JOB [--rank R] [--tail N] [-f] | logs JOB --download F",
     "print a job's worker output",
     "  --rank R      only rank R's lines\n"
     "  --tail N      only the last N lines (1..10000; of rank R with --rank); with -f,\n"
     "                the last N lines, then the new ones\n"
     "  -f, --follow  keep printing new lines until the job ends\n"
     "  --download F  write the whole kept log to file F, gzip-compressed (- for stdout)\n",
     cmd_logs},
    {"nodes",
     "nodes [--no-headers] [-o table|json|name|wide] | nodes remove NAME | "
     "nodes cordon|drain|uncordon NAME [--reason TEXT]",
     "list the nodes (agents), their slots and state",
     "  remove NAME    forget a node (admin): its jobs lose it as if it died, and its\n"
     "                 credential opens nothing; a live agent registers again, so stop it\n"
     "                 first (and rotate the bootstrap token to keep it out)\n"
     "  cordon NAME    the node takes no new work (admin); what runs there stays\n"
     "  drain NAME     cordon, and elastic jobs move off it now at no restart's cost;\n"
     "                 the others finish there. Stopping the agent afterwards costs nothing\n"
     "  uncordon NAME  schedulable again\n"
     "  --reason TEXT  shown with the node (HOLD column)\n"
     "  --no-headers   no header line (no nodes: nothing at all)\n"
     "  -o name        the node names only, one a line; -o wide: with REGISTERED, LABELS\n",
     cmd_nodes},
    {"users",
     "users list | add NAME [--role R] [--max-slots N] [--group G] [--token-out F] | set NAME "
     "[--role R] "
     "[--max-slots N] [--group G] | remove NAME | rotate-token NAME [--token-out F]",
     "manage users and their tokens (admin; rotate-token also for yourself)",
     "  --role R        admin, user (default) or viewer (reads every job, changes none)\n"
     "  --max-slots N   quota: slots the user's jobs may hold at once (0: no limit)\n"
     "  --group G       the user's group, whose quota its jobs count against ('' for none)\n"
     "  --token-out F   where the new token goes (default NAME.token here), mode 0600;\n"
     "                  an existing file is replaced\n",
     cmd_users},
    {"groups", "groups list | set NAME --max-slots N",
     "the groups' quotas: slots all their users' jobs may hold at once (admin)",
     "  --max-slots N   the group's quota (0: no limit); raising it starts waiting jobs\n",
     cmd_groups},
    {"cluster", "cluster status [--no-headers] | add ID IP:PORT | remove ID",
     "the replicas of a cluster-mode ddpd: list them, add or remove one (admin)",
     "  status          the members: ID, RAFT-ADDRESS, ROLE, LEADER (the one that serves)\n"
     "                  and URL (its API once it has led, else '-'); -o name: the ids\n"
     "  add ID IP:PORT  make node ID, at raft address IP:PORT, a voter (admin)\n"
     "  remove ID       take member ID out (admin), then stop its ddpd; the replica that\n"
     "                  answers (the leader) cannot remove itself\n"
     "  --no-headers    no header line\n"
     "Any replica's address will do (--server A,B,C): the followers redirect to the\n"
     "leader. A single ddpd (--db) has no replicas: exit 1 saying so.\n",
     cmd_cluster},
    {"whoami", "whoami", "show the user and role of your token", "", cmd_whoami},
    {"watch", "watch JOB", "follow a job's progress to its end (exit 0 iff it SUCCEEDED)",
     "On a terminal: a live progress bar per epoch with loss and throughput, redrawn in\n"
     "place. Piped: one line per new epoch and per state change.\n",
     cmd_watch},
    {"wait", "wait JOB [--timeout S]", "wait for a job to end; exit 0 iff it SUCCEEDED",
     "  --timeout S  give up after S seconds (exit 1; default 0: no limit)\n", cmd_wait},
};
#define CLI_NCMDS (sizeof(cli_cmds) / sizeof(cli_cmds[0]))

static const char cli_global_usage[] =
    "usage: ddpctl [--server URL] [--token-file F] [-o table|json|name|wide] COMMAND [ARGS]\n"
    "       ddpctl --version";

static void cli_print_global_help(FILE *out)
{
    fprintf(out, "%s\n\n", cli_global_usage);
    fprintf(out, "Commands:\n");
    for (size_t i = 0; i < CLI_NCMDS; i++)
        fprintf(out, "  %-8s %s\n", cli_cmds[i].name, cli_cmds[i].summary);
    fprintf(out,
            "\nOptions (also accepted after the command):\n"
            "  --server URL[,URL...]  ddpd's address, or its replicas' (default $DDP_SERVER,\n"
            "                    else %s)\n"
            "  --token-file F    file holding the user token (default $DDP_TOKEN, else\n"
            "                    $DDP_HOME/user.token; DDP_HOME defaults to ./.ddp)\n"
            "  -o FORMAT         table (default), json (the raw answers of ddpd), name (list,\n"
            "                    nodes, cluster: the ids only) or wide (list and nodes: more\n"
            "                    columns)\n"
            "  --version         print the version and the git commit\n"
            "\n'ddpctl COMMAND --help' describes a command. Exit codes: 0 ok, 1 failure,"
            " 2 usage.\n",
            CLI_DEFAULT_SERVER);
}

/* ---- errors and usage ----------------------------------------------------------------- */

int cli_usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "ddpctl%s%s: ", cmd->name[0] ? " " : "", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: ddpctl %s\n", cmd->usage);
    return CLI_USAGE;
}

int cli_text_arg(const struct cli_cmd *cmd, const char *what, const char *s)
{
    if (!s || utf8_valid(s))
        return CLI_OK;
    return cli_usage_error(cmd, "%s: the value is not UTF-8 text", what);
}

int cli_print_help(const struct cli_cmd *cmd)
{
    printf("usage: ddpctl %s\n\n%s.\n", cmd->usage, cmd->summary);
    if (cmd->help[0])
        printf("\n%s", cmd->help);
    printf("\nGlobal options --server, --token-file and -o table|json|name|wide are accepted "
           "too.\n");
    return CLI_OK;
}

int cli_failf(const char *fmt, ...)
{
    va_list ap;
    fputs("ddpctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_FAIL;
}

int cli_fail(struct cli *cli, const struct ddp_err *err)
{
    fprintf(stderr, "ddpctl: %s\n", err->msg[0] ? err->msg : err_str(err->code));
    if (err->code == DDP_EUNAUTH) {
        if (cli->token_from)
            fprintf(stderr, "ddpctl: the user token from %s was refused\n", cli->token_from);
        else
            fprintf(stderr,
                    "ddpctl: no user token: pass --token-file F, set DDP_TOKEN, or run from "
                    "the folder holding .ddp/ (or set DDP_HOME)\n");
    } else if (err->code == DDP_EPERM && strstr(err->msg, "bootstrap token")) {
        fprintf(stderr, "ddpctl: that looks like the agent (bootstrap) token; ddpctl needs a "
                        "user token ($DDP_HOME/user.token, or one from 'ddpctl users add')\n");
    }
    return CLI_FAIL;
}

int cli_set_output(struct cli *cli, const char *v)
{
    static const struct {
        const char *name;
        enum cli_output out;
    } outs[] = {{"table", CLI_OUT_TABLE},
                {"json", CLI_OUT_JSON},
                {"name", CLI_OUT_NAME},
                {"wide", CLI_OUT_WIDE}};
    for (size_t i = 0; i < sizeof(outs) / sizeof(outs[0]); i++)
        if (strcmp(v, outs[i].name) == 0) {
            cli->output = outs[i].out;
            cli->json = outs[i].out == CLI_OUT_JSON;
            return 0;
        }
    return -1;
}

static void cli_set_str(char **dst, const char *v)
{
    free(*dst);
    *dst = xstrdup(v);
}

int cli_common_opt(struct cli *cli, const struct cli_cmd *cmd, int c, char **argv, int *exit_code)
{
    switch (c) {
    case CLI_OPT_SERVER:
        cli_set_str(&cli->server_opt, optarg);
        return 1;
    case CLI_OPT_TOKEN_FILE:
        cli_set_str(&cli->token_file_opt, optarg);
        return 1;
    case CLI_OPT_OUTPUT:
        if (cli_set_output(cli, optarg) < 0) {
            *exit_code =
                cli_usage_error(cmd, "-o: '%s' is not one of table, json, name, wide", optarg);
            return -1;
        }
        return 1;
    case CLI_OPT_HELP:
        *exit_code = cli_print_help(cmd);
        return -1;
    case ':':
        *exit_code = cli_usage_error(cmd, "option '%s' needs a value", argv[optind - 1]);
        return -1;
    case '?': {
        /* glibc: optopt is the option's value for a long option given a value it takes not
         * (--all=yes), the character for an unknown short one, 0 for an unknown long one */
        const char *arg = argv[optind - 1];
        int is_long = strncmp(arg, "--", 2) == 0;
        int name_len = (int)strcspn(arg, "=");
        if (is_long && optopt)
            *exit_code = cli_usage_error(cmd, "option '%.*s' takes no value", name_len, arg);
        else if (!is_long && optopt > 0x20 && optopt < 0x7f)
            *exit_code = cli_usage_error(cmd, "unknown option '-%c'", optopt);
        else
            *exit_code = cli_usage_error(cmd, "unknown option '%.*s'", name_len, arg);
        return -1;
    }
    default:
        return 0;
    }
}

/* Takes the one positional JOB argument left after the options; usage error otherwise. */
int cli_job_arg(const struct cli_cmd *cmd, int argc, char **argv, const char **job)
{
    if (optind >= argc)
        return cli_usage_error(cmd, "missing the job id");
    if (optind + 1 < argc)
        return cli_usage_error(cmd, "unexpected argument '%s'", argv[optind + 1]);
    if (!argv[optind][0])
        return cli_usage_error(cmd, "empty job id");
    *job = argv[optind];
    return CLI_OK;
}

int cli_job_args(const struct cli_cmd *cmd, int argc, char **argv)
{
    if (optind >= argc)
        return cli_usage_error(cmd, "missing the job id");
    if (argc - optind > CLI_JOBS_MAX)
        return cli_usage_error(cmd, "more than %d job ids", CLI_JOBS_MAX);
    for (int i = optind; i < argc; i++)
        if (!argv[i][0])
            return cli_usage_error(cmd, "empty job id");
    return CLI_OK;
}

int cli_jobs_summary(const json_t *failed, int n, const char *verb)
{
    size_t nfail = json_array_size(failed);
    if (nfail == 0)
        return CLI_OK;
    if (n > 1) {
        struct buf ids = BUF_INIT;
        size_t i;
        json_t *f;
        json_array_foreach(failed, i, f)
        {
            if (buf_printf(&ids, "%s%s", i ? ", " : "", cli_str(f, "id", "?")) != 0)
                break;
        }
        fprintf(stderr, "ddpctl: %zu of %d jobs not %s: %s\n", nfail, n, verb,
                ids.data ? ids.data : "");
        buf_release(&ids);
    }
    return CLI_FAIL;
}

/* Parses only the common options (commands without options of their own). Returns
 * CLI_OK to go on, or the exit code in *rc with a non-zero return. */
int cli_parse_common_only(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv,
                          int *rc)
{
    static const struct option longopts[] = {CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            return 0;
        int h = cli_common_opt(cli, cmd, c, argv, rc);
        if (h < 0)
            return -1;
        if (h == 0) {
            *rc = cli_usage_error(cmd, "unexpected option");
            return -1;
        }
    }
}

/* ---- connection ----------------------------------------------------------------------- */

static char *cli_trim_dup(const char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return xstrndup(s, n);
}

/* The user token in file path (token_file_read). ddpctl runs as its user, with nothing to
 * guard: a link (a Kubernetes secret's file, a link into a shared folder) is followed to the
 * file it names, which is then held to the rules. */
static int cli_read_token(const char *path, char **token, struct ddp_err *err)
{
    char *real = realpath(path, NULL);
    int rc = token_file_read(real ? real : path, "user", token, err);
    free(real);
    return rc;
}

int cli_connect(struct cli *cli)
{
    const char *env_server = getenv("DDP_SERVER");
    const char *server = cli->server_opt               ? cli->server_opt
                         : (env_server && *env_server) ? env_server
                                                       : CLI_DEFAULT_SERVER;
    struct srvlist list;
    struct ddp_err lerr;
    if (srvlist_parse(server, &list, &lerr) < 0) {
        fprintf(stderr, "ddpctl: %s: %s\n", cli->server_opt ? "--server" : "$DDP_SERVER", lerr.msg);
        return CLI_USAGE;
    }
    srvlist_release(&list);
    cli_set_str(&cli->server, server);

    /* The token travels in an Authorization header: each source is held to tokenfile.h's
     * rules (a regular file, no space or control character, 16 bytes at least), so that a
     * second line in a file is refused, not sent as a header of its own. */
    const char *env_token = getenv("DDP_TOKEN");
    struct ddp_err err;
    if (cli->token_file_opt) {
        if (cli_read_token(cli->token_file_opt, &cli->token, &err) < 0)
            return cli_failf("cannot use --token-file %s: %s", cli->token_file_opt, err.msg);
        cli->token_from = xasprintf("--token-file %s", cli->token_file_opt);
    } else if (env_token && *env_token) {
        cli->token = cli_trim_dup(env_token);
        if (token_check(cli->token, strlen(cli->token), "user", "$DDP_TOKEN", &err) < 0)
            return cli_failf("%s", err.msg);
        cli->token_from = xstrdup("$DDP_TOKEN");
    } else {
        const char *home = getenv("DDP_HOME");
        char *path = xasprintf("%s/user.token", home && *home ? home : "./.ddp");
        /* Missing is fine (no token); ddpd's 401 then leads to the hint of cli_fail. A file
         * that is there but cannot be used is said. */
        int rc = cli_read_token(path, &cli->token, &err);
        if (rc == 0)
            cli->token_from = path;
        else
            free(path);
        if (rc < 0 && rc != DDP_ENOTFOUND)
            return cli_failf("cannot use the user token file: %s", err.msg);
    }
    cli->http = httpc_new(cli->server, cli->token);
    return 0;
}

/* ---- calls ---------------------------------------------------------------------------- */

/* cli_call under a timeout of its own. */
static int cli_call_within(struct cli *cli, const char *method, const char *path,
                           const json_t *body, long timeout_ms, json_t **answer,
                           struct ddp_err *err)
{
    json_t *ans = NULL;
    int rc = httpc_call(cli->http, method, path, body, timeout_ms, &ans, err);
    if (rc < 0)
        return rc;
    if (!ans || !json_is_object(ans)) {
        json_decref(ans);
        return err_set(err, DDP_EINTERNAL, "ddpd answered %s %s with no JSON object", method, path);
    }
    if (answer)
        *answer = ans;
    else
        json_decref(ans);
    return 0;
}

int cli_call(struct cli *cli, const char *method, const char *path, const json_t *body,
             json_t **answer, struct ddp_err *err)
{
    return cli_call_within(cli, method, path, body, CLI_REQUEST_TIMEOUT_MS, answer, err);
}

int cli_job_call_within(struct cli *cli, const char *method, const char *job_id, const char *suffix,
                        const json_t *body, long timeout_ms, json_t **answer, struct ddp_err *err)
{
    char *id = cli_escape(job_id);
    char *path = xasprintf("/v1/jobs/%s%s", id, suffix ? suffix : "");
    int rc = cli_call_within(cli, method, path, body, timeout_ms, answer, err);
    if (rc == DDP_ENOTFOUND)
        err_set(err, rc, "job %s not found", job_id);
    free(path);
    free(id);
    return rc;
}

int cli_job_call(struct cli *cli, const char *method, const char *job_id, const char *suffix,
                 const json_t *body, json_t **answer, struct ddp_err *err)
{
    return cli_job_call_within(cli, method, job_id, suffix, body, CLI_REQUEST_TIMEOUT_MS, answer,
                               err);
}

int cli_job_call_patient(struct cli *cli, const char *job_id, const char *suffix,
                         int64_t deadline_ms, json_t **answer, struct ddp_err *err)
{
    int64_t until = time_deadline_ms(CLI_UNREACHABLE_MAX_MS);
    if (deadline_ms >= 0 && deadline_ms < until)
        until = deadline_ms;
    int warned = 0;
    for (;;) {
        int64_t left = time_left_ms(until);
        /* at least a second: a last poll at the deadline still gets its answer */
        long timeout = left < CLI_REQUEST_TIMEOUT_MS ? (long)(left > 1000 ? left : 1000)
                                                     : CLI_REQUEST_TIMEOUT_MS;
        int rc = cli_job_call_within(cli, "GET", job_id, suffix, NULL, timeout, answer, err);
        if (rc != DDP_EUNAVAIL && rc != DDP_ETIMEOUT) {
            if (warned && rc == 0)
                fprintf(stderr, "ddpctl: ddpd answers again\n");
            return rc;
        }
        left = time_left_ms(until);
        if (left <= 0)
            return rc;
        if (!warned) {
            fprintf(stderr, "ddpctl: %s; retrying for up to %lld s\n", err->msg,
                    (long long)((left + 999) / 1000));
            warned = 1;
        }
        time_sleep_ms(left < 1000 ? left : 1000);
    }
}

/* ---- main ----------------------------------------------------------------------------- */

static const struct cli_cmd cli_global_cmd = {
    "", "[--server URL] [--token-file F] [-o table|json|name|wide] COMMAND [ARGS]", "", "", NULL};

/* --version: only before the command (it needs no server). */
#define CLI_OPT_VERSION 1003

/* The command called name, or NULL. */
static const struct cli_cmd *cli_find_cmd(const char *name)
{
    for (size_t i = 0; i < CLI_NCMDS; i++)
        if (strcmp(cli_cmds[i].name, name) == 0)
            return &cli_cmds[i];
    return NULL;
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        CLI_COMMON_LONGOPTS, {"version", no_argument, NULL, CLI_OPT_VERSION}, {NULL, 0, NULL, 0}};
    struct cli cli = {0};
    int rc = CLI_OK;
    const struct cli_cmd *cmd = NULL;
    int out_errno = 0;

    log_init("ddpctl", LOG_INFO); /* tokenfile.h warns of a token file others may read */
    cli_term_protect();
    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, "+:" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        if (c == CLI_OPT_HELP) {
            cli_print_global_help(stdout);
            goto out;
        }
        if (c == CLI_OPT_VERSION) {
            if (optind < argc) {
                rc = cli_usage_error(&cli_global_cmd, "--version takes no argument, got '%s'",
                                     argv[optind]);
                goto out;
            }
            printf("ddpctl %s (commit %s)\n", DDP_VERSION, DDP_COMMIT);
            goto out;
        }
        int handled = cli_common_opt(&cli, &cli_global_cmd, c, argv, &rc);
        if (handled < 0)
            goto out;
        if (handled == 0) {
            rc = cli_usage_error(&cli_global_cmd, "unexpected option");
            goto out;
        }
    }
    if (optind >= argc) {
        fprintf(stderr, "ddpctl: missing the command\n%s\n", cli_global_usage);
        rc = CLI_USAGE;
        goto out;
    }
    const char *name = argv[optind];
    if (strcmp(name, "help") == 0) {
        /* help COMMAND: that command's help, as COMMAND --help */
        if (optind + 2 < argc) {
            rc = cli_usage_error(&cli_global_cmd, "help takes one command, got '%s' too",
                                 argv[optind + 2]);
            goto out;
        }
        if (optind + 1 < argc) {
            const struct cli_cmd *h = cli_find_cmd(argv[optind + 1]);
            rc = h ? cli_print_help(h)
                   : cli_usage_error(&cli_global_cmd, "help: unknown command '%s'",
                                     argv[optind + 1]);
            goto out;
        }
        cli_print_global_help(stdout);
        goto out;
    }
    cmd = cli_find_cmd(name);
    if (!cmd) {
        fprintf(stderr, "ddpctl: unknown command '%s'\n%s\n(commands:", name, cli_global_usage);
        for (size_t i = 0; i < CLI_NCMDS; i++)
            fprintf(stderr, " %s", cli_cmds[i].name);
        fprintf(stderr, ")\n");
        rc = CLI_USAGE;
        goto out;
    }
    int cargc = argc - optind;
    char **cargv = argv + optind;
    optind = 0; /* full re-initialisation of getopt for the command's own options */
    rc = cmd->run(&cli, cmd, cargc, cargv);
out:
    /* What a script reads from stdout (a job id of submit --parsable) that did not reach it
     * is a failure, not a success with nothing said. */
    out_errno = fflush(stdout) != 0 ? errno : 0;
    if ((out_errno || ferror(stdout)) && rc == CLI_OK) {
        fprintf(stderr, "ddpctl: cannot write the output: %s\n",
                strerror(out_errno ? out_errno : EIO));
        rc = CLI_FAIL;
    }
    fflush(stderr);
    httpc_free(cli.http);
    free(cli.server);
    free(cli.token);
    free(cli.token_from);
    free(cli.server_opt);
    free(cli.token_file_opt);
    return rc;
}
