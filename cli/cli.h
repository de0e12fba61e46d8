/*
 * cli.h - what the ddpctl command files share: the connection to ddpd, the common options,
 * the error and usage conventions, and small output helpers.
 *
 * Exit codes of every command: CLI_OK (0) success, CLI_FAIL (1) failure (ddpd unreachable,
 * an error answer, a job that did not succeed for `wait`/`watch`), CLI_USAGE (2) a usage error
 * (the usage line is printed on stderr).
 *
 * Ownership: struct cli owns its strings and its httpc; every json_t an API helper hands
 * back is owned by the caller (json_decref).
 */
#ifndef DDP_CLI_CLI_H
#define DDP_CLI_CLI_H

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* The -o formats. name and wide shape the lists (list, nodes: ids only, more columns); the
 * other commands print name and wide as table, but for submit, where name is --parsable. */
enum cli_output { CLI_OUT_TABLE = 0, CLI_OUT_JSON, CLI_OUT_NAME, CLI_OUT_WIDE };

#define CLI_DEFAULT_SERVER "http://127.0.0.1:8470"
/* Timeout of one request to ddpd. */
#define CLI_REQUEST_TIMEOUT_MS 15000L
/* How long watch, wait and logs -f keep retrying while ddpd is unreachable. */
#define CLI_UNREACHABLE_MAX_MS 60000
/* Poll interval of watch, wait and logs -f (bounded polling). */
#define CLI_POLL_MS 500
/* watch: pages of each stream read after the job ended, at most (ddpd's pages hold 10000) */
#define CLI_WATCH_FINAL_PAGES 100

struct cli {
    char *server;     /* resolved base URL */
    char *token;      /* user token or NULL */
    char *token_from; /* where the token came from (for hints), or NULL */
    char *server_opt; /* --server as given, or NULL */
    char *token_file_opt;
    int json;               /* -o json (output == CLI_OUT_JSON) */
    enum cli_output output; /* -o as given (default table) */
    struct httpc *http;
};

/* A command: name, its usage line (after "ddpctl "), a one-line summary and its runner.
 * run gets argv with argv[0] = the command's name. */
struct cli_cmd {
    const char *name;
    const char *usage;
    const char *summary;
    const char *help; /* the lines printed by --help after the usage line */
    int (*run)(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
};

/* Long options every command accepts as well (so `ddpctl list -o json` works too). The
 * values are the option ids cli_common_opt() handles. */
#define CLI_OPT_SERVER     1001
#define CLI_OPT_TOKEN_FILE 1002
#define CLI_OPT_HELP       'h'
#define CLI_OPT_OUTPUT     'o'
#define CLI_COMMON_LONGOPTS                                          \
    {"server", required_argument, NULL, CLI_OPT_SERVER},             \
        {"token-file", required_argument, NULL, CLI_OPT_TOKEN_FILE}, \
        {"output", required_argument, NULL, CLI_OPT_OUTPUT},         \
    {                                                                \
        "help", no_argument, NULL, CLI_OPT_HELP                      \
    }
/* Prefix with ":" (and "+" where words end the options) at each getopt_long call. */
#define CLI_COMMON_SHORTOPTS "ho:"

/*
 * Handles one getopt result shared by all commands. Returns 1 when it handled c (and the
 * command should go on), 0 when c is not a common option, and -1 when the command must end
 * with the exit code written to *exit_code (help printed: 0; usage error printed: 2).
 * argv is the command's argv (for naming an unknown option).
 */
int cli_common_opt(struct cli *cli, const struct cli_cmd *cmd, int c, char **argv, int *exit_code);

/* Parses only the common options (commands without options of their own). Returns 0 to go
 * on, or -1 with the exit code in *rc. */
int cli_parse_common_only(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv,
                          int *rc);

/* Takes the one positional JOB argument left after the options (optind): CLI_OK with *job
 * set, or a usage error (missing, empty, or followed by another argument). */
int cli_job_arg(const struct cli_cmd *cmd, int argc, char **argv, const char **job);

/* The most job ids one command takes (each is one request): delete, cancel, status. */
#define CLI_JOBS_MAX 1000

/* Checks the JOB... arguments left after the options (optind): at least one, at most
 * CLI_JOBS_MAX, none empty. CLI_OK, or a usage error printed and CLI_USAGE. */
int cli_job_args(const struct cli_cmd *cmd, int argc, char **argv);

/* After a command on several jobs (n of them) of which failed (an array of {"id", "error"})
 * did not work out: with more than one job and any failure, says "ddpctl: F of N jobs not
 * VERB: id, id" on stderr. Returns CLI_FAIL when any failed, else CLI_OK. */
int cli_jobs_summary(const json_t *failed, int n, const char *verb);

/* Parses "table", "json", "name" or "wide" into cli->output (and cli->json); -1 if it is none
 * of them. */
int cli_set_output(struct cli *cli, const char *v);

/* Prints "ddpctl CMD: <message>" and the usage line on stderr; returns CLI_USAGE. */
int cli_usage_error(const struct cli_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* CLI_OK when s, the value of what (an option, "the user name"), is well-formed UTF-8, as
 * the JSON it goes into must be (jansson refuses other text, and a value it dropped would
 * go unsent); else a usage error naming what (CLI_USAGE). NULL is CLI_OK. */
int cli_text_arg(const struct cli_cmd *cmd, const char *what, const char *s);

/* Prints the command's usage and help on stdout; returns CLI_OK. */
int cli_print_help(const struct cli_cmd *cmd);

/* Resolves server and token (flag, environment, $DDP_HOME/user.token) and opens the HTTP
 * client. Returns 0, or prints the reason and returns CLI_FAIL (CLI_USAGE for a server list
 * that srvlist_parse refuses). */
int cli_connect(struct cli *cli);

/* Prints "ddpctl: <err->msg>" on stderr, with a hint where one helps (401, 403); returns
 * CLI_FAIL. */
int cli_fail(struct cli *cli, const struct ddp_err *err);

/* Prints "ddpctl: <message>" on stderr; returns CLI_FAIL. */
int cli_failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* GET/POST to ddpd (path starts with "/v1/..."); an error answer becomes err. For calls on
 * one job, a NOT_FOUND answer is reported as "job <id> not found". */
int cli_call(struct cli *cli, const char *method, const char *path, const json_t *body,
             json_t **answer, struct ddp_err *err);
int cli_job_call(struct cli *cli, const char *method, const char *job_id, const char *suffix,
                 const json_t *body, json_t **answer, struct ddp_err *err);
/* cli_job_call under a timeout of its own (ms) instead of CLI_REQUEST_TIMEOUT_MS. */
int cli_job_call_within(struct cli *cli, const char *method, const char *job_id, const char *suffix,
                        const json_t *body, long timeout_ms, json_t **answer, struct ddp_err *err);

/* Like cli_job_call (a GET), but while ddpd is unreachable (DDP_EUNAVAIL / DDP_ETIMEOUT) it
 * retries every second up to CLI_UNREACHABLE_MAX_MS in all, saying so once on stderr. Used by
 * the commands that follow a job. deadline_ms (time_deadline_ms; -1 none) bounds the tries
 * and each request's own timeout too: a command's --timeout holds while ddpd is away. */
int cli_job_call_patient(struct cli *cli, const char *job_id, const char *suffix,
                         int64_t deadline_ms, json_t **answer, struct ddp_err *err);

/* The terminal itself, for ddpctl's own control sequences; stdout when it is none. */
extern FILE *cli_term;
/* Makes stdout and stderr, where they are terminals, show control characters as \xNN
 * (cli/termout.c). Called once, first thing in main. */
void cli_term_protect(void);
/* A stream that writes to out what cli_term_protect() lets through (out itself when no stream
 * can be made); fclose() it to flush and free it. For the tests (cli_term_protect() keeps
 * the state of stdout's and stderr's in static storage). */
FILE *cli_term_wrap(FILE *out);

/* Percent-encodes s for a URL path segment or query value; caller frees. */
char *cli_escape(const char *s);

/* Prints v as indented JSON (one document, newline-terminated) on stdout. */
void cli_print_json(const json_t *v);
/* Prints v as one compact JSON line on stdout (JSON Lines, for streams). */
void cli_print_json_line(const json_t *v);

/* Small readers that never fail: a missing or mistyped field gives the fallback. */
const char *cli_str(const json_t *obj, const char *key, const char *fallback);
int64_t cli_int(const json_t *obj, const char *key, int64_t fallback);
/* Returns 1 and writes *out when obj[key] is a number (integer or real). */
int cli_num(const json_t *obj, const char *key, double *out);

/* Parses an RFC 3339 UTC time ("2026-11-29T13:58:16.123Z") into wall-clock ms; -1 if not
 * one. */
int64_t cli_parse_time(const char *s);
/* Writes a short age ("5s", "3m", "2h", "4d") of a time relative to now_ms; "-" if the
 * time is missing or unreadable. */
void cli_format_age(const char *rfc3339, int64_t now_ms, char *buf, size_t size);
/* Writes a rank list as ranges ("0-3", "0,2,5-7") into buf; what does not fit is left out
 * a whole item at a time. */
void cli_format_ranks(const json_t *ranks, char *buf, size_t size);

/* Whether a job state is final (SUCCEEDED, FAILED, CANCELLED). */
int cli_state_final(const char *state);
/* Whether s names a job state (exact, upper case). */
int cli_state_valid(const char *s);
/* 0 when job (an answer about job id) has a state cli_state_valid() knows, else an error
 * saying so: the commands that follow a job until a final state stop on it instead of
 * polling for ever. */
int cli_job_state_known(const json_t *job, const char *id, struct ddp_err *err);

/* Checks a --nnodes value: "N" or "MIN:MAX" with 1 <= MIN <= MAX <= 1024 (docs/api.md);
 * on failure err says why ("--nnodes: min 3 > max 2"). */
int cli_check_nnodes(const char *s, struct ddp_err *err);

/* The commands (one file per group). */
int cmd_submit(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_list(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_status(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_cancel(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_delete(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_update(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_wait(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_logs(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_watch(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_nodes(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_users(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_groups(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_cluster(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);
int cmd_whoami(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv);

#endif
