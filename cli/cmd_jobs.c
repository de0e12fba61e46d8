/*
 * cmd_jobs.c - the job commands of ddpctl that ask once and answer: list, status, cancel,
 * delete, update, and wait (which polls one job until it ends); submit is cmd_submit.c.
 *
 * Each command parses its whole command line before it connects, so a usage error never
 * sends anything. Output goes to stdout (a table, or with -o json ddpd's answer as it came);
 * errors go to stderr through cli_fail/cli_usage_error.
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/table.h"
#include "common/args.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "common/xalloc.h"

/* Bounds of the list command: pages of this size, at most this many pages. */
#define CLI_LIST_PAGE      100
#define CLI_LIST_MAX_PAGES 100
/* How many of the newest events status shows; pages of events it reads at most to find
 * them (ddpd answers at most 10,000 events a page, oldest first). */
#define CLI_STATUS_EVENTS      10
#define CLI_STATUS_EVENT_PAGES 100

/* The names of a job's nodes, comma-separated (cut at size), or "-". */
static void cli_format_node_names(const json_t *nodes, char *buf, size_t size)
{
    size_t o = 0, i;
    json_t *n;
    snprintf(buf, size, "-");
    json_array_foreach(nodes, i, n)
    {
        int w = snprintf(buf + o, size - o, "%s%s", i ? "," : "", cli_str(n, "name", "?"));
        if (w < 0 || (size_t)w >= size - o)
            break;
        o += (size_t)w;
    }
}

/* "epoch 3/10 loss 0.4100" from last_metrics, or "-". */
static void cli_progress_short(const json_t *job, char *buf, size_t size)
{
    const json_t *m = json_object_get(job, "last_metrics");
    const json_t *pend = json_object_get(job, "pending");
    if (json_is_object(pend)) {
        int64_t pos = cli_int(pend, "position", 0);
        if (pos > 0)
            snprintf(buf, size, "%s (#%lld)", cli_str(pend, "reason", "?"), (long long)pos);
        else
            snprintf(buf, size, "%s", cli_str(pend, "reason", "?"));
        return;
    }
    double loss;
    int64_t epoch = cli_int(m, "epoch", -1), epochs = cli_int(m, "epochs", -1);
    size_t o = 0;
    buf[0] = '\0';
    if (epoch >= 0) {
        int w = epochs > 0
                    ? snprintf(buf, size, "epoch %lld/%lld", (long long)epoch, (long long)epochs)
                    : snprintf(buf, size, "epoch %lld", (long long)epoch);
        if (w > 0 && (size_t)w < size)
            o = (size_t)w;
    }
    if (cli_num(m, "loss", &loss))
        snprintf(buf + o, size - o, "%sloss %.4f", o ? " " : "", loss);
    if (!buf[0])
        snprintf(buf, size, "-");
}

int cmd_list(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_STATE = 1, O_ALL, O_NO_HEADERS };
    static const struct option longopts[] = {{"state", required_argument, NULL, O_STATE},
                                             {"all", no_argument, NULL, O_ALL},
                                             {"no-headers", no_argument, NULL, O_NO_HEADERS},
                                             CLI_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    char state[16] = "";
    int every = 0, no_headers = 0;
    json_t *all = json_array();
    json_t *page = NULL;
    char *token = xstrdup("");
    int rc = CLI_OK;
    struct ddp_err err;

    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            goto out;
        if (h > 0)
            continue;
        if (c == O_ALL) {
            every = 1;
            continue;
        }
        if (c == O_NO_HEADERS) {
            no_headers = 1;
            continue;
        }
        if (c != O_STATE) {
            rc = cli_usage_error(cmd, "unexpected option");
            goto out;
        }
        size_t n = strlen(optarg);
        for (size_t i = 0; i < n && i + 1 < sizeof(state); i++)
            state[i] = (char)(optarg[i] >= 'a' && optarg[i] <= 'z' ? optarg[i] - 32 : optarg[i]);
        state[n < sizeof(state) ? n : sizeof(state) - 1] = '\0';
        if (n >= sizeof(state) || !cli_state_valid(state)) {
            rc = cli_usage_error(cmd, "--state: '%s' is not a job state", optarg);
            goto out;
        }
    }
    if (optind < argc) {
        rc = cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
        goto out;
    }
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    int pages = 0;
    do {
        char *tok = cli_escape(token);
        char *path =
            xasprintf("/v1/jobs?page_size=%d%s%s%s%s%s", CLI_LIST_PAGE, state[0] ? "&state=" : "",
                      state, tok[0] ? "&page_token=" : "", tok, every ? "&all=true" : "");
        free(tok);
        json_decref(page);
        page = NULL;
        int r = cli_call(cli, "GET", path, NULL, &page, &err);
        free(path);
        if (r < 0) {
            rc = cli_fail(cli, &err);
            goto out;
        }
        json_array_extend(all, json_object_get(page, "jobs"));
        free(token);
        token = xstrdup(cli_str(page, "next_page_token", ""));
    } while (token[0] && ++pages < CLI_LIST_MAX_PAGES);
    if (token[0])
        fprintf(stderr, "ddpctl: showing the newest %zu jobs only\n", json_array_size(all));

    if (cli->json) {
        json_t *o = json_pack("{sOss}", "jobs", all, "next_page_token", token);
        cli_print_json(o);
        json_decref(o);
        goto out;
    }
    size_t i;
    json_t *job;
    if (cli->output == CLI_OUT_NAME) {
        json_array_foreach(all, i, job)
        {
            printf("%s\n", cli_str(job, "id", "?"));
        }
        goto out;
    }
    int wide = cli->output == CLI_OUT_WIDE;
    static const char *const hdr[] = {"ID",       "NAME",     "OWNER",    "STATE",    "GEN",
                                      "NODES",    "WORLD",    "RESTARTS", "PROGRESS", "AGE",
                                      "PRIORITY", "NODELIST", "REASON"};
    struct table *t = table_new(wide ? 13 : 10, hdr);
    int64_t now = time_wall_ms();
    json_array_foreach(all, i, job)
    {
        char prog[128], age[16];
        cli_progress_short(job, prog, sizeof(prog));
        cli_format_age(cli_str(job, "created_at", NULL), now, age, sizeof(age));
        table_row(t);
        table_cell(t, "%s", cli_str(job, "id", "?"));
        table_cell(t, "%s", cli_str(job, "name", ""));
        table_cell(t, "%s", cli_str(job, "owner", ""));
        table_cell(t, "%s", cli_str(job, "state", "?"));
        table_cell(t, "%lld", (long long)cli_int(job, "generation", 0));
        table_cell(t, "%zu", json_array_size(json_object_get(job, "nodes")));
        table_cell(t, "%lld", (long long)cli_int(job, "world_size", 0));
        table_cell(t, "%lld", (long long)cli_int(job, "restarts", 0));
        table_cell(t, "%s", prog);
        table_cell(t, "%s", age);
        if (wide) {
            char nodes[256];
            cli_format_node_names(json_object_get(job, "nodes"), nodes, sizeof(nodes));
            const char *reason = cli_str(job, "reason", "");
            table_cell(t, "%lld", (long long)cli_int(json_object_get(job, "spec"), "priority", 0));
            table_cell(t, "%s", nodes);
            table_cell(t, "%s", reason[0] ? reason : "-");
        }
    }
    /* An empty list says so, but not where headers were turned off: scripts read that. */
    if (json_array_size(all) == 0 && !no_headers)
        printf("no jobs%s%s\n", state[0] ? " in state " : "", state);
    else if (json_array_size(all) > 0)
        table_print_opt(t, stdout, !no_headers);
    table_free(t);
out:
    json_decref(page);
    json_decref(all);
    free(token);
    return rc;
}

/* The command line of a job spec, words separated by spaces, cut at size. */
static void cli_format_command(const json_t *spec, char *buf, size_t size)
{
    size_t o = 0, i;
    json_t *w;
    buf[0] = '\0';
    json_array_foreach(json_object_get(spec, "command"), i, w)
    {
        const char *word = json_string_value(w); /* an answer of another ddpd: "?" */
        int n = snprintf(buf + o, size - o, "%s%s", i ? " " : "", word ? word : "?");
        if (n < 0 || (size_t)n >= size - o)
            break;
        o += (size_t)n;
    }
}

/* Says err for job id on stderr; with several jobs (many) the message names the job when
 * it does not already. Returns CLI_FAIL. */
static int cli_job_fail(struct cli *cli, const char *id, struct ddp_err *err, int many)
{
    if (many && !strstr(err->msg, id)) {
        char msg[sizeof(err->msg)];
        snprintf(msg, sizeof(msg), "%s", err->msg[0] ? err->msg : err_str(err->code));
        int w = snprintf(err->msg, sizeof(err->msg), "job %s: %s", id, msg);
        if (w < 0 || (size_t)w >= sizeof(err->msg)) /* cut at the end: the id is kept */
            err->msg[sizeof(err->msg) - 1] = '\0';
    }
    return cli_fail(cli, err);
}

/* The status block of one job (table output), from the job and its events. */
static void cli_status_print(const json_t *job, const json_t *ev)
{
    const json_t *spec = json_object_get(job, "spec");
    char line[1024];
    printf("job:         %s (%s)\n", cli_str(job, "id", "?"), cli_str(job, "name", ""));
    printf("state:       %s\n", cli_str(job, "state", "?"));
    const char *reason = cli_str(job, "reason", "");
    if (reason[0])
        printf("reason:      %s\n", reason);
    const json_t *pend = json_object_get(job, "pending");
    if (json_is_object(pend)) {
        int64_t pos = cli_int(pend, "position", 0);
        char where[48] = "";
        if (pos > 0)
            snprintf(where, sizeof(where), " (#%lld in the queue)", (long long)pos);
        printf("pending:     %s%s, %s\n", cli_str(pend, "reason", "?"), where,
               cli_str(pend, "message", ""));
    }
    printf("owner:       %s\n", cli_str(job, "owner", "?"));
    printf("priority:    %lld\n", (long long)cli_int(json_object_get(job, "spec"), "priority", 0));
    cli_format_command(spec, line, sizeof(line));
    printf("command:     %s\n", line);
    json_t *nn = json_object_get(spec, "nnodes");
    if (json_is_integer(nn))
        snprintf(line, sizeof(line), "%lld", (long long)json_integer_value(nn));
    else
        snprintf(line, sizeof(line), "%s", json_is_string(nn) ? json_string_value(nn) : "?");
    printf("asked:       %s nodes x %lld processes, max restarts %lld\n", line,
           (long long)cli_int(spec, "nproc_per_node", 1),
           (long long)cli_int(spec, "max_restarts", 0));
    printf("generation:  %lld (restarts %lld)\n", (long long)cli_int(job, "generation", 0),
           (long long)cli_int(job, "restarts", 0));
    json_t *nodes = json_object_get(job, "nodes");
    if (json_array_size(nodes) > 0) {
        printf("world size:  %lld, master %s:%lld\n", (long long)cli_int(job, "world_size", 0),
               cli_str(job, "master_addr", "?"), (long long)cli_int(job, "master_port", 0));
        size_t i;
        json_t *n;
        json_array_foreach(nodes, i, n)
        {
            char ranks[256];
            cli_format_ranks(json_object_get(n, "ranks"), ranks, sizeof(ranks));
            printf("%s%-12s group rank %lld, ranks %s\n",
                   i ? "             " : "nodes:       ", cli_str(n, "name", "?"),
                   (long long)cli_int(n, "group_rank", -1), ranks);
        }
    }
    const json_t *m = json_object_get(job, "last_metrics");
    if (json_is_object(m)) {
        double loss, acc, sps;
        int o = snprintf(line, sizeof(line), "epoch %lld", (long long)cli_int(m, "epoch", -1));
        if (cli_int(m, "epochs", -1) > 0 && o > 0)
            o += snprintf(line + o, sizeof(line) - (size_t)o, "/%lld",
                          (long long)cli_int(m, "epochs", 0));
        if (cli_num(m, "loss", &loss) && o > 0)
            o += snprintf(line + o, sizeof(line) - (size_t)o, ", loss %.4f", loss);
        if (cli_num(m, "test_acc", &acc) && o > 0)
            o += snprintf(line + o, sizeof(line) - (size_t)o, ", test acc %.4f", acc);
        if (cli_num(m, "samples_per_s", &sps) && o > 0)
            snprintf(line + o, sizeof(line) - (size_t)o, ", %.0f samples/s", sps);
        printf("last:        %s\n", line);
    }
    printf("created:     %s\n", cli_str(job, "created_at", "-"));
    if (json_is_string(json_object_get(job, "started_at")))
        printf("started:     %s\n", cli_str(job, "started_at", "-"));
    if (json_is_string(json_object_get(job, "finished_at")))
        printf("finished:    %s\n", cli_str(job, "finished_at", "-"));
    json_t *events = json_object_get(ev, "events");
    size_t ne = json_array_size(events);
    if (ne > 0) {
        printf("events%s:\n", ne > CLI_STATUS_EVENTS ? " (newest 10)" : "");
        for (size_t i = ne > CLI_STATUS_EVENTS ? ne - CLI_STATUS_EVENTS : 0; i < ne; i++) {
            json_t *e = json_array_get(events, i);
            printf("  %s  gen %lld  %-10s  %s\n", cli_str(e, "time", "-"),
                   (long long)cli_int(e, "generation", 0), cli_str(e, "state", "?"),
                   cli_str(e, "reason", ""));
        }
    }
}

/* Which of the per-job commands runs: status (GET) or cancel (POST :cancel). */
enum cli_each { CLI_EACH_STATUS, CLI_EACH_CANCEL };

/* 1 when a call's code says ddpd is not there (refused, or no answer in time): the calls
 * on the other jobs of the command would fail the same way, each after its timeout. */
static int cli_unreachable(int code)
{
    return code == DDP_EUNAVAIL || code == DDP_ETIMEOUT;
}

/* Records in failed that the call on argv[i] failed with code (err); when ddpd is unreachable,
 * the jobs after it too, with the same error, and returns 1: stop asking. */
static int cli_jobs_failed(json_t *failed, int code, const struct ddp_err *err, int i, int argc,
                           char **argv)
{
    int rest = cli_unreachable(code);
    /* well-formed copies: json_pack refuses other text, and a failure it dropped would not
     * be counted (an id typed in another encoding, a message cut inside a character) */
    char msg[sizeof(err->msg)];
    snprintf(msg, sizeof(msg), "%s", err->msg);
    utf8_repair(msg);
    for (int k = i; k < (rest ? argc : i + 1); k++) {
        char *id = xstrdup(argv[k]);
        utf8_repair(id);
        json_array_append_new(failed, json_pack("{s:s, s:s}", "id", id, "error", msg));
        free(id);
    }
    return rest;
}

/*
 * The events of job id as {"events": [...]}, read on with ?after= until a page comes back
 * empty (bounded): an answer holds the oldest events after its seq, so a job with more than a
 * page of them would show old ones as its newest. Only the newest CLI_STATUS_EVENTS are kept
 * (one page more than those is kept while reading, so the newest are always whole).
 */
static int cli_job_events_newest(struct cli *cli, const char *id, json_t **out, struct ddp_err *err)
{
    json_t *keep = json_array();
    int64_t after = 0;
    int rc = 0;
    for (int page = 0; page < CLI_STATUS_EVENT_PAGES; page++) {
        char *suffix = xasprintf("/events?after=%lld", (long long)after);
        json_t *ans = NULL;
        rc = cli_job_call(cli, "GET", id, suffix, NULL, &ans, err);
        free(suffix);
        if (rc < 0)
            break;
        json_t *events = json_object_get(ans, "events");
        size_t n = json_array_size(events);
        if (n == 0) {
            json_decref(ans);
            break;
        }
        /* +1: one more than shown, so that the title can say "newest 10" */
        for (size_t i = n > CLI_STATUS_EVENTS + 1 ? n - CLI_STATUS_EVENTS - 1 : 0; i < n; i++)
            json_array_append(keep, json_array_get(events, i));
        while (json_array_size(keep) > CLI_STATUS_EVENTS + 1)
            json_array_remove(keep, 0);
        int64_t last = cli_int(json_array_get(events, n - 1), "seq", after);
        json_decref(ans);
        if (last <= after)
            break; /* a page that does not move on ends the reading */
        after = last;
    }
    if (rc < 0) {
        json_decref(keep);
        return rc;
    }
    *out = json_pack("{s:o}", "events", keep);
    return 0;
}

/* status and cancel on JOB...: each job apart, a failed one named on stderr while the others
 * go on; exit 1 when any failed. -o json: one job's answer as it came, several as
 * {"jobs": [...], "failed": [{"id", "error"}]}. */
static int cli_each_job(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv,
                        enum cli_each what)
{
    int rc = CLI_OK;
    if (cli_parse_common_only(cli, cmd, argc, argv, &rc) < 0)
        return rc;
    rc = cli_job_args(cmd, argc, argv);
    if (rc != CLI_OK)
        return rc;
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    int n = argc - optind, shown = 0;
    json_t *jobs = json_array(), *failed = json_array();
    for (int i = optind; i < argc; i++) {
        const char *id = argv[i];
        json_t *job = NULL, *ev = NULL;
        struct ddp_err err;
        int r = what == CLI_EACH_STATUS
                    ? cli_job_call(cli, "GET", id, NULL, NULL, &job, &err)
                    : cli_job_call(cli, "POST", id, ":cancel", NULL, &job, &err);
        if (r == 0 && what == CLI_EACH_STATUS && !cli->json)
            r = cli_job_events_newest(cli, id, &ev, &err);
        if (r < 0) {
            json_decref(job);
            if (cli_unreachable(r)) /* no ddpd: the same for the rest, said once */
                cli_fail(cli, &err);
            else
                cli_job_fail(cli, id, &err, n > 1);
            if (cli_jobs_failed(failed, r, &err, i, argc, argv))
                break;
            continue;
        }
        if (cli->json) {
            if (n == 1)
                cli_print_json(job);
            json_array_append_new(jobs, job);
            continue;
        }
        if (what == CLI_EACH_STATUS) {
            if (shown++)
                printf("\n");
            cli_status_print(job, ev);
        } else {
            const char *state = cli_str(job, "state", "?");
            if (strcmp(state, "CANCELLING") == 0)
                printf("cancelling job %s (workers get SIGTERM, SIGKILL after %lld s)\n", id,
                       (long long)cli_int(json_object_get(job, "spec"), "grace_period_s", 30));
            else if (strcmp(state, "CANCELLED") == 0)
                printf("job %s CANCELLED\n", id);
            else
                printf("job %s already ended: %s (nothing to cancel)\n", id, state);
        }
        json_decref(job);
        json_decref(ev);
    }
    if (cli->json && n > 1) {
        json_t *o = json_pack("{s:O, s:O}", "jobs", jobs, "failed", failed);
        cli_print_json(o);
        json_decref(o);
    }
    rc = cli_jobs_summary(failed, n, what == CLI_EACH_STATUS ? "shown" : "cancelled");
    json_decref(jobs);
    json_decref(failed);
    return rc;
}

int cmd_status(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    return cli_each_job(cli, cmd, argc, argv, CLI_EACH_STATUS);
}

int cmd_cancel(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    return cli_each_job(cli, cmd, argc, argv, CLI_EACH_CANCEL);
}

int cmd_delete(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    int rc = CLI_OK;
    struct ddp_err err;
    json_t *deleted = NULL, *failed = NULL;

    if (cli_parse_common_only(cli, cmd, argc, argv, &rc) < 0)
        return rc;
    rc = cli_job_args(cmd, argc, argv);
    if (rc != CLI_OK)
        return rc;
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    deleted = json_array();
    failed = json_array();
    for (int i = optind; i < argc; i++) {
        const char *id = argv[i];
        json_t *job = NULL;
        int r = cli_job_call(cli, "DELETE", id, NULL, NULL, &job, &err);
        if (r < 0) {
            cli_fail(cli, &err);
            if (cli_jobs_failed(failed, r, &err, i, argc, argv))
                break; /* no ddpd: the same for the rest, said once */
            continue;
        }
        if (!cli->json)
            printf("deleted job %s (%s)\n", id, cli_str(job, "state", "?"));
        json_array_append_new(deleted, job);
    }
    if (cli->json) {
        json_t *o = json_pack("{s:O, s:O}", "deleted", deleted, "failed", failed);
        cli_print_json(o);
        json_decref(o);
        rc = json_array_size(failed) > 0 ? CLI_FAIL : CLI_OK;
    } else {
        rc = cli_jobs_summary(failed, argc - optind, "deleted");
    }
    json_decref(deleted);
    json_decref(failed);
    return rc;
}

int cmd_wait(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_TIMEOUT = 1 };
    static const struct option longopts[] = {
        {"timeout", required_argument, NULL, O_TIMEOUT}, CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    json_t *job = NULL;
    const char *id = NULL;
    long timeout_s = 0;
    int rc = CLI_OK;
    struct ddp_err err;

    for (;;) {
        int c = getopt_long(argc, argv, ":" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            goto out;
        if (h > 0)
            continue;
        if (c != O_TIMEOUT ||
            args_parse_long("--timeout", optarg, 0, 100L * 365 * 86400, &timeout_s, &err) < 0) {
            rc = c == O_TIMEOUT ? cli_usage_error(cmd, "%s", err.msg)
                                : cli_usage_error(cmd, "unexpected option");
            goto out;
        }
    }
    rc = cli_job_arg(cmd, argc, argv, &id);
    if (rc != CLI_OK)
        goto out;
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    int64_t deadline = time_deadline_ms(timeout_s > 0 ? timeout_s * 1000 : -1);
    /* The first call is not patient: a wrong server or job id fails at once; but it is
     * bounded by --timeout too (at least a second for its answer). */
    int64_t first_left = time_left_ms(deadline);
    long first_ms = first_left < CLI_REQUEST_TIMEOUT_MS
                        ? (long)(first_left > 1000 ? first_left : 1000)
                        : CLI_REQUEST_TIMEOUT_MS;
    int first = cli_job_call_within(cli, "GET", id, NULL, NULL, first_ms, &job, &err);
    if (first < 0) {
        if (time_left_ms(deadline) <= 0 && (first == DDP_EUNAVAIL || first == DDP_ETIMEOUT))
            rc = cli_failf("timed out after %ld s waiting for job %s (ddpd did not answer: %s)",
                           timeout_s, id, err.msg);
        else
            rc = cli_fail(cli, &err);
        goto out;
    }
    for (;;) {
        if (cli_job_state_known(job, id, &err) < 0) {
            rc = cli_fail(cli, &err);
            goto out;
        }
        const char *state = cli_str(job, "state", "?");
        if (cli_state_final(state))
            break;
        int64_t left = time_left_ms(deadline);
        if (left <= 0) {
            rc = cli_failf("timed out after %ld s waiting for job %s (state %s)", timeout_s, id,
                           state);
            goto out;
        }
        time_sleep_ms(left < CLI_POLL_MS ? left : CLI_POLL_MS);
        json_decref(job);
        job = NULL;
        if (cli_job_call_patient(cli, id, NULL, deadline, &job, &err) < 0) {
            if (time_left_ms(deadline) <= 0)
                rc = cli_failf("timed out after %ld s waiting for job %s (ddpd did not answer: "
                               "%s)",
                               timeout_s, id, err.msg);
            else
                rc = cli_fail(cli, &err);
            goto out;
        }
    }
    const char *state = cli_str(job, "state", "?");
    if (cli->json) {
        cli_print_json(job);
    } else {
        const char *reason = cli_str(job, "reason", "");
        printf("job %s %s%s%s\n", id, state, reason[0] ? ": " : "", reason);
    }
    rc = strcmp(state, "SUCCEEDED") == 0 ? CLI_OK : CLI_FAIL;
out:
    json_decref(job);
    return rc;
}

int cmd_update(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_PRIORITY = 1 };
    static const struct option longopts[] = {
        {"priority", required_argument, NULL, O_PRIORITY}, CLI_COMMON_LONGOPTS, {NULL, 0, NULL, 0}};
    long prio = 0;
    int have = 0, rc = CLI_OK;
    json_t *ans = NULL;
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
        if (c != O_PRIORITY)
            return cli_usage_error(cmd, "unexpected option");
        if (args_parse_long("--priority", optarg, -1000, 1000, &prio, &err) < 0)
            return cli_usage_error(cmd, "%s", err.msg);
        have = 1;
    }
    const char *id = NULL;
    rc = cli_job_arg(cmd, argc, argv, &id);
    if (rc != CLI_OK)
        return rc;
    if (!have)
        return cli_usage_error(cmd, "nothing to change: give --priority N");
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        return rc;
    json_t *body = json_pack("{s:I}", "priority", (json_int_t)prio);
    if (cli_job_call(cli, "PATCH", id, NULL, body, &ans, &err) < 0)
        rc = cli_fail(cli, &err);
    else if (cli->json)
        cli_print_json(ans);
    else
        printf("job %s: priority %lld\n", id,
               (long long)cli_int(json_object_get(ans, "spec"), "priority", 0));
    json_decref(body);
    json_decref(ans);
    return rc;
}
