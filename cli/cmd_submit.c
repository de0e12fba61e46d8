/*
 * cmd_submit.c - `ddpctl submit`: the job spec from the command line (checked against
 * docs/api.md's ranges before anything is sent), sent with an Idempotency-Key it draws and
 * retried with it while ddpd is unreachable, so a lost answer never makes a second job.
 */
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/args.h"
#include "common/backoff.h"
#include "common/httpc.h"
#include "common/randutil.h"
#include "common/signame.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

/*
 * The absolute form of path, relative to the current directory as the shell names it ($PWD
 * where that is this directory, else getcwd()), without resolving links: the path goes to
 * other nodes, where a link of this one (/home -> /export/home) may not lead where it does
 * here but the name the user typed does. "." is the directory itself, "./x" is x. NULL when
 * the current directory cannot be found; caller frees.
 */
static char *cli_absolute(const char *path)
{
    if (path[0] == '/')
        return xstrdup(path);
    char cwd[PATH_MAX];
    const char *base = getenv("PWD");
    struct stat a, b;
    if (!base || base[0] != '/' || stat(base, &a) != 0 || stat(".", &b) != 0 ||
        a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        if (!getcwd(cwd, sizeof(cwd)))
            return NULL;
        base = cwd;
    }
    while (path[0] == '.' && path[1] == '/') {
        path += 2;
        while (path[0] == '/')
            path++;
    }
    size_t n = strlen(base);
    while (n > 1 && base[n - 1] == '/')
        n--;
    if (path[0] == '\0' || strcmp(path, ".") == 0)
        return xstrndup(base, n);
    if (n == 1) /* the root folder: "/x", not "//x" */
        return xasprintf("/%s", path);
    return xasprintf("%.*s/%s", (int)n, base, path);
}

/* Sets key K to V in obj for a "K=V" argument; -1 when it is not one (no '=' or no K). */
static int cli_put_kv(json_t *obj, const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg)
        return -1;
    char *key = xstrndup(arg, (size_t)(eq - arg));
    json_object_set_new(obj, key, json_string(eq + 1));
    free(key);
    return 0;
}

/* The Idempotency-Key rule of docs/api.md: 1..128 printable ASCII characters, no space. */
static int cli_key_ok(const char *k)
{
    size_t n = strlen(k);
    if (n < 1 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (k[i] <= ' ' || k[i] > '~')
            return 0;
    return 1;
}

/* POST /v1/jobs with an Idempotency-Key (given, borrowed, or drawn for this submit when
 * NULL), retried (bounded: 5 tries within CLI_UNREACHABLE_MAX_MS) while ddpd is unreachable
 * or answers 5xx: ddpd may have stored the job and died before answering, and the same key
 * then answers that job instead of a second one. */
static int cli_submit_retrying(struct cli *cli, const json_t *spec, const char *given,
                               json_t **answer, struct ddp_err *err)
{
    char key[33], line[160];
    if (!given && rand_hex(key, 16) != 0)
        return err_set(err, DDP_EIO, "no randomness for the Idempotency-Key");
    snprintf(line, sizeof(line), "Idempotency-Key: %s", given ? given : key);
    httpc_set_header(cli->http, line);
    struct backoff bo;
    backoff_init(&bo, 200, 5000);
    int64_t until = time_deadline_ms(CLI_UNREACHABLE_MAX_MS);
    int rc = 0;
    for (int attempt = 1; attempt <= 5; attempt++) {
        rc = cli_call(cli, "POST", "/v1/jobs", spec, answer, err);
        int transient =
            rc == DDP_EUNAVAIL || rc == DDP_ETIMEOUT || rc == DDP_EINTERNAL || rc == DDP_EIO;
        if (!transient || attempt == 5 || time_left_ms(until) <= 0)
            break;
        fprintf(stderr, "ddpctl: submit: %s; trying again (same Idempotency-Key)\n", err->msg);
        backoff_sleep(&bo, until);
    }
    httpc_set_header(cli->http, NULL);
    return rc;
}

/* --workdir / --checkpoint-dir (flag) from optarg into *out, made absolute (the agents run
 * the job elsewhere); an empty one is a usage error. CLI_OK or the exit code. */
static int folder_opt(const struct cli_cmd *cmd, const char *flag, char **out)
{
    if (!*optarg)
        return cli_usage_error(cmd,
                               "%s: empty (leave it out for the job's own folder on each "
                               "node)",
                               flag);
    free(*out);
    *out = cli_absolute(optarg);
    return *out ? CLI_OK : cli_failf("cannot find the current directory");
}

int cmd_submit(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum {
        O_NAME = 1,
        O_NNODES,
        O_NPROC,
        O_RESTARTS,
        O_ENV,
        O_WORKDIR,
        O_CKPT,
        O_RUNTIME,
        O_GRACE,
        O_HANG,
        O_PRIORITY,
        O_SELECTOR,
        O_PREEMPT_SIGNAL,
        O_PREEMPT_GRACE,
        O_GPUS,
        O_PARSABLE,
        O_KEY
    };
    static const struct option longopts[] = {
        {"name", required_argument, NULL, O_NAME},
        {"nnodes", required_argument, NULL, O_NNODES},
        {"nproc-per-node", required_argument, NULL, O_NPROC},
        {"max-restarts", required_argument, NULL, O_RESTARTS},
        {"env", required_argument, NULL, O_ENV},
        {"workdir", required_argument, NULL, O_WORKDIR},
        {"checkpoint-dir", required_argument, NULL, O_CKPT},
        {"max-runtime", required_argument, NULL, O_RUNTIME},
        {"grace", required_argument, NULL, O_GRACE},
        {"hang-timeout", required_argument, NULL, O_HANG},
        {"priority", required_argument, NULL, O_PRIORITY},
        {"node-selector", required_argument, NULL, O_SELECTOR},
        {"preempt-signal", required_argument, NULL, O_PREEMPT_SIGNAL},
        {"preempt-grace", required_argument, NULL, O_PREEMPT_GRACE},
        {"gpus-per-proc", required_argument, NULL, O_GPUS},
        {"parsable", no_argument, NULL, O_PARSABLE},
        {"idempotency-key", required_argument, NULL, O_KEY},
        CLI_COMMON_LONGOPTS,
        {NULL, 0, NULL, 0}};
    /* The ranges of docs/api.md, checked here so that a typo is a usage error. */
    static const struct {
        int opt;
        const char *flag, *field;
        long max;
    } ints[] = {
        {O_NPROC, "--nproc-per-node", "nproc_per_node", 1024},
        {O_RESTARTS, "--max-restarts", "max_restarts", 1000},
        {O_RUNTIME, "--max-runtime", "max_runtime_s", 31536000},
        {O_GRACE, "--grace", "grace_period_s", 3600},
        {O_HANG, "--hang-timeout", "hang_timeout_s", 86400},
        {O_PRIORITY, "--priority", "priority", 1000},
        {O_PREEMPT_GRACE, "--preempt-grace", "preempt_grace_s", 3600},
    };
    json_t *spec = json_object();
    json_t *env = json_object();
    json_t *selector = json_object();
    json_t *answer = NULL;
    char *workdir = NULL, *ckpt = NULL;
    const char *key = NULL;
    int parsable = 0, rc = CLI_OK;
    struct ddp_err err;

    for (;;) {
        /* "+": the first non-option word starts the job's command (as after "--"). */
        int c = getopt_long(argc, argv, "+:" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            goto out;
        if (h > 0)
            continue;
        switch (c) {
        case O_NAME:
            if ((rc = cli_text_arg(cmd, "--name", optarg)) != CLI_OK)
                goto out;
            json_object_set_new(spec, "name", json_string(optarg));
            break;
        case O_NNODES:
            if (cli_check_nnodes(optarg, &err) < 0) {
                rc = cli_usage_error(cmd, "%s", err.msg);
                goto out;
            }
            json_object_set_new(spec, "nnodes", json_string(optarg));
            break;
        case O_ENV:
        case O_SELECTOR:
            if ((rc = cli_text_arg(cmd, c == O_ENV ? "--env" : "--node-selector", optarg)) !=
                CLI_OK)
                goto out;
            if (cli_put_kv(c == O_ENV ? env : selector, optarg) < 0) {
                rc = cli_usage_error(cmd, "%s: '%s' is not K=V",
                                     c == O_ENV ? "--env" : "--node-selector", optarg);
                goto out;
            }
            break;
        case O_WORKDIR:
        case O_CKPT:
            if ((rc = folder_opt(cmd, c == O_WORKDIR ? "--workdir" : "--checkpoint-dir",
                                 c == O_WORKDIR ? &workdir : &ckpt)) != CLI_OK)
                goto out;
            break;
        case O_PREEMPT_SIGNAL:
            if (signame_parse(optarg) < 0) {
                rc = cli_usage_error(cmd, "--preempt-signal: '%s' is not one of %s", optarg,
                                     signame_allowed());
                goto out;
            }
            json_object_set_new(spec, "preempt_signal", json_string(optarg));
            break;
        case O_GPUS: {
            long g;
            if (strcmp(optarg, "auto") == 0) {
                json_object_set_new(spec, "gpus_per_proc", json_string("auto"));
                break;
            }
            if (args_parse_long("--gpus-per-proc", optarg, 0, 64, &g, &err) < 0) {
                rc = cli_usage_error(cmd, "%s (or auto)", err.msg);
                goto out;
            }
            json_object_set_new(spec, "gpus_per_proc", json_integer(g));
            break;
        }
        case O_PARSABLE:
            parsable = 1;
            break;
        case O_KEY:
            if (!cli_key_ok(optarg)) {
                rc = cli_usage_error(cmd, "--idempotency-key: 1..128 printable ASCII "
                                          "characters, no space");
                goto out;
            }
            key = optarg;
            break;
        default: {
            size_t i;
            for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
                if (ints[i].opt == c)
                    break;
            if (i == sizeof(ints) / sizeof(ints[0])) {
                rc = cli_usage_error(cmd, "unexpected option");
                goto out;
            }
            long v;
            long min = c == O_NPROC ? 1 : c == O_PRIORITY ? -1000 : 0;
            if (args_parse_long(ints[i].flag, optarg, min, ints[i].max, &v, &err) < 0) {
                rc = cli_usage_error(cmd, "%s", err.msg);
                goto out;
            }
            json_object_set_new(spec, ints[i].field, json_integer(v));
            break;
        }
        }
    }
    if (optind >= argc) {
        rc = cli_usage_error(cmd, "missing the command to run (after '--')");
        goto out;
    }
    for (int i = optind; i < argc; i++)
        if ((rc = cli_text_arg(cmd, "the command", argv[i])) != CLI_OK)
            goto out;
    if ((rc = cli_text_arg(cmd, "--workdir", workdir)) != CLI_OK ||
        (rc = cli_text_arg(cmd, "--checkpoint-dir", ckpt)) != CLI_OK)
        goto out;
    json_t *command = json_array();
    for (int i = optind; i < argc; i++)
        json_array_append_new(command, json_string(argv[i]));
    json_object_set_new(spec, "command", command);
    if (json_object_size(env) > 0)
        json_object_set(spec, "env", env);
    if (json_object_size(selector) > 0)
        json_object_set(spec, "node_selector", selector);
    /* No --workdir: none in the spec, so the agent runs the workers in the job's own folder
     * on each node (an account of the job's owner can always enter it; the caller's
     * directory, say a home folder, may be closed to it). --workdir . asks for that one. */
    if (workdir)
        json_object_set_new(spec, "workdir", json_string(workdir));
    if (ckpt)
        json_object_set_new(spec, "checkpoint_dir", json_string(ckpt));

    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    if (cli_submit_retrying(cli, spec, key, &answer, &err) < 0) {
        rc = cli_fail(cli, &err);
        goto out;
    }
    const char *id = cli_str(answer, "id", "?");
    if (cli->json)
        cli_print_json(answer);
    else if (parsable || cli->output == CLI_OUT_NAME)
        printf("%s\n", id);
    else
        printf("submitted job %s\n", id);
out:
    json_decref(answer);
    json_decref(env);
    json_decref(selector);
    json_decref(spec);
    free(workdir);
    free(ckpt);
    return rc;
}
