/*
 * cmd_follow.c - the ddpctl commands that read a job's streams: `logs` (worker output, with
 * -f until the job ends, or --download the whole kept log as a gzip file) and `watch`
 * (epochs and state changes until the job ends).
 *
 * Both read by sequence number (`after=SEQ`), so no line, metric or event is printed twice
 * and none is skipped while it is kept by ddpd. Polling is bounded: one round every
 * CLI_POLL_MS, each request under CLI_REQUEST_TIMEOUT_MS, and an unreachable ddpd is retried
 * for at most CLI_UNREACHABLE_MAX_MS before the command fails.
 *
 * End of a follow: the job is read *before* the streams in each round; once that read says
 * the job is final, the streams read after it hold everything the job produced (ddpd stores
 * a beat's lines before it acts on the exits the same beat carries), so one more drain and we
 * stop.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/args.h"
#include "common/buf.h"
#include "common/fsutil.h"
#include "common/httpc.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

/* Lines asked per logs request (ddpd's page bound). */
#define CLI_LOGS_PAGE 1000
/* The largest --tail: ddpd answers at most this many last lines (GET .../logs?tail=N). */
#define CLI_LOGS_TAIL_MAX 10000
/* Width of the progress bar's [====>   ] part. */
#define CLI_BAR_WIDTH 30
/* A download's bounds: the whole kept log (100,000 lines of 4 KiB at most, gzip makes it no
 * larger than that plus a little) within 10 minutes. */
#define CLI_DOWNLOAD_MAX        (512ULL << 20)
#define CLI_DOWNLOAD_TIMEOUT_MS 600000L
/* Longest line `watch` prints (an epoch line, the bar line without its escapes). */
#define CLI_WATCH_LINE_MAX 511

/* ---- logs ----------------------------------------------------------------------------- */

struct logs_state {
    int64_t after;
    int64_t last_gen; /* generation of the last printed line, 0 before the first */
    int warned_dropped;
    int printed_page; /* -o json: a page was printed (an empty one only as the first) */
};

/* Prints one answer's lines that are newer than st->after; returns how many it printed. */
static size_t logs_print_page(struct cli *cli, struct logs_state *st, const json_t *page,
                              int prefix)
{
    json_t *lines = json_object_get(page, "lines");
    size_t n = json_array_size(lines);
    if (cli->json && (n > 0 || !st->printed_page)) {
        cli_print_json_line(page);
        st->printed_page = 1;
    }
    int64_t dropped = cli_int(page, "dropped", 0);
    if (dropped > 0 && !st->warned_dropped && !cli->json) {
        fprintf(stderr, "ddpctl: %lld older lines were dropped by ddpd's per-job cap\n",
                (long long)dropped);
        st->warned_dropped = 1;
    }
    size_t i, fresh = 0;
    json_t *l;
    json_array_foreach(lines, i, l)
    {
        /* Never print a line twice, even if an answer repeated some: the caller reads on
         * while this returns non-zero, so this also bounds that loop. */
        int64_t seq = cli_int(l, "seq", 0);
        if (seq <= st->after)
            continue;
        st->after = seq;
        fresh++;
        if (cli->json)
            continue;
        int64_t gen = cli_int(l, "generation", 0);
        if (st->last_gen != 0 && gen != st->last_gen)
            printf("--- generation %lld ---\n", (long long)gen);
        st->last_gen = gen;
        /* ddp-agent ships lines as "[rank R] text"; strip that so that the output is the
         * same whichever way the line was stored: prefixed for all ranks, bare for one. */
        int64_t rank = cli_int(l, "rank", -1);
        const char *text = cli_str(l, "text", "");
        char own[40];
        snprintf(own, sizeof(own), "[rank %lld] ", (long long)rank);
        if (strncmp(text, own, strlen(own)) == 0)
            text += strlen(own);
        if (prefix)
            printf("%s%s\n", own, text);
        else
            printf("%s\n", text);
    }
    int64_t next = cli_int(page, "next", 0);
    if (fresh > 0 && next > st->after)
        st->after = next;
    fflush(stdout);
    return fresh;
}

/* GET /v1/jobs/{id}/logs:download into file path ("-": stdout). A file is written into a
 * temporary of its own beside path (fs_atomic_open: a new name, never a link followed; mode
 * 0666 less the umask, as a file any program makes) and renamed over path only once the
 * whole answer is in and synced, so a failed download leaves no partial file and touches no
 * file but path. */
static int logs_download(struct cli *cli, const char *id, const char *path)
{
    struct ddp_err err;
    int to_stdout = strcmp(path, "-") == 0;
    struct fs_atomic tmp = {.path = NULL, .tmp = "", .fd = -1};
    FILE *f = stdout;
    unsigned long long n = 0;
    if (!to_stdout) {
        mode_t mask = umask(0); /* read it: ddpctl has one thread */
        umask(mask);
        if (fs_atomic_open(&tmp, path, 0666 & ~mask, &err) < 0)
            return cli_failf("cannot write %s: %s", path, err.msg);
        f = fdopen(tmp.fd, "wb");
        if (!f) {
            int e = errno;
            fs_atomic_abort(&tmp);
            return cli_failf("cannot write %s: %s", path, strerror(e));
        }
        tmp.fd = -1; /* f owns it now */
    }
    char *eid = cli_escape(id);
    char *url = xasprintf("/v1/jobs/%s/logs:download", eid);
    free(eid);
    int r = httpc_download(cli->http, url, CLI_DOWNLOAD_TIMEOUT_MS, f, CLI_DOWNLOAD_MAX, &n, &err);
    free(url);
    if (r == DDP_ENOTFOUND)
        err_set(&err, r, "job %s not found", id);
    if (!r && (fflush(f) != 0 || (!to_stdout && fsync(fileno(f)) != 0)))
        r = err_set(&err, DDP_EIO, "cannot write %s: %s", to_stdout ? "stdout" : tmp.tmp,
                    strerror(errno));
    if (!to_stdout && fclose(f) != 0 && !r)
        r = err_set(&err, DDP_EIO, "cannot write %s: %s", tmp.tmp, strerror(errno));
    if (!r && !to_stdout) {
        if (rename(tmp.tmp, path) != 0)
            r = err_set(&err, DDP_EIO, "cannot rename %s to %s: %s", tmp.tmp, path,
                        strerror(errno));
        else
            tmp.done = 1;
    }
    fs_atomic_abort(&tmp); /* the temporary, unless renamed */
    if (r)
        return cli_fail(cli, &err);
    if (!to_stdout)
        fprintf(stderr, "ddpctl: wrote %s (%llu bytes, gzip)\n", path, n);
    return CLI_OK;
}

int cmd_logs(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    enum { O_RANK = 1, O_TAIL, O_DOWNLOAD };
    static const struct option longopts[] = {{"rank", required_argument, NULL, O_RANK},
                                             {"tail", required_argument, NULL, O_TAIL},
                                             {"download", required_argument, NULL, O_DOWNLOAD},
                                             {"follow", no_argument, NULL, 'f'},
                                             CLI_COMMON_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    struct logs_state st = {0};
    json_t *page = NULL, *job = NULL;
    const char *id = NULL, *download = NULL;
    long rank = -1, tail = 0;
    int follow = 0, rc = CLI_OK, final_seen = 0;
    struct ddp_err err;

    for (;;) {
        int c = getopt_long(argc, argv, ":f" CLI_COMMON_SHORTOPTS, longopts, NULL);
        if (c == -1)
            break;
        int h = cli_common_opt(cli, cmd, c, argv, &rc);
        if (h < 0)
            goto out;
        if (h > 0)
            continue;
        if (c == 'f') {
            follow = 1;
        } else if (c == O_RANK) {
            if (args_parse_long("--rank", optarg, 0, 1 << 20, &rank, &err) < 0) {
                rc = cli_usage_error(cmd, "%s", err.msg);
                goto out;
            }
        } else if (c == O_DOWNLOAD) {
            if (!optarg[0]) {
                rc = cli_usage_error(cmd, "--download: empty file name");
                goto out;
            }
            download = optarg;
        } else if (c == O_TAIL) {
            if (args_parse_long("--tail", optarg, 1, CLI_LOGS_TAIL_MAX, &tail, &err) < 0) {
                rc = cli_usage_error(cmd, "%s", err.msg);
                goto out;
            }
        } else {
            rc = cli_usage_error(cmd, "unexpected option");
            goto out;
        }
    }
    if ((rc = cli_job_arg(cmd, argc, argv, &id)) != CLI_OK)
        goto out;
    if (download && (follow || tail > 0 || rank >= 0)) {
        rc = cli_usage_error(cmd, "--download writes the whole log: it takes no %s",
                             follow     ? "-f"
                             : tail > 0 ? "--tail"
                                        : "--rank");
        goto out;
    }
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    if (download) {
        rc = logs_download(cli, id, download);
        goto out;
    }
    /* The job first: an unknown job is "job j-42 not found", not an empty log. */
    if (cli_job_call(cli, "GET", id, NULL, NULL, &job, &err) < 0) {
        rc = cli_fail(cli, &err);
        goto out;
    }
    /* The last lines are of no use to tell how many older ones the cap dropped. */
    st.warned_dropped = tail > 0;
    for (int first = 1;; first = 0) {
        char rank_q[32] = "";
        if (rank >= 0)
            snprintf(rank_q, sizeof(rank_q), "&rank=%ld", rank);
        /* --tail: the first request reads the last lines; `next` then follows on. */
        char *suffix = first && tail > 0 ? xasprintf("/logs?tail=%ld%s", tail, rank_q)
                                         : xasprintf("/logs?after=%lld&limit=%d%s",
                                                     (long long)st.after, CLI_LOGS_PAGE, rank_q);
        json_decref(page);
        page = NULL;
        int r = follow ? cli_job_call_patient(cli, id, suffix, -1, &page, &err)
                       : cli_job_call(cli, "GET", id, suffix, NULL, &page, &err);
        free(suffix);
        if (r < 0) {
            rc = cli_fail(cli, &err);
            goto out;
        }
        size_t n = logs_print_page(cli, &st, page, rank < 0);
        if (first && tail > 0) {
            if (!follow)
                break; /* like `kubectl logs --tail`: the last lines, nothing after them */
            /* then follow on from the tail's last line (an empty tail leaves after at 0) */
            continue;
        }
        if (n > 0)
            continue; /* more may be waiting: read on before sleeping */
        if (!follow || final_seen)
            break;
        json_decref(job);
        job = NULL;
        if (cli_job_call_patient(cli, id, NULL, -1, &job, &err) < 0 ||
            cli_job_state_known(job, id, &err) < 0) {
            rc = cli_fail(cli, &err);
            goto out;
        }
        if (cli_state_final(cli_str(job, "state", NULL)))
            final_seen = 1; /* one more drain, then stop */
        else
            time_sleep_ms(CLI_POLL_MS);
    }
out:
    json_decref(page);
    json_decref(job);
    return rc;
}

/* ---- watch ---------------------------------------------------------------------------- */

struct watch {
    const char *id;
    int tty;
    int cols;
    int bar_shown;
    int64_t ev_after, met_after;
    char state[16];
    int64_t gen;
    int64_t start_ms;      /* monotonic, when watch began */
    int64_t epoch_t0;      /* monotonic, when the current epoch began (0: unknown) */
    int64_t epoch_dur_ms;  /* duration of the last finished epoch (0: unknown) */
    int64_t epoch, epochs; /* last finished epoch and the total (-1: unknown) */
    int64_t step, steps;   /* within the current epoch, when the worker reports steps */
    double loss, acc, sps;
    int have_loss, have_acc, have_sps;
};

static void watch_clear_bar(struct watch *w)
{
    if (w->tty && w->bar_shown) {
        fflush(stdout);
        fputs("\r\033[K", cli_term);
        fflush(cli_term);
        w->bar_shown = 0;
    }
}

/* Appends printf output to a watch line (struct buf). A line has a max: an append that
 * would pass it is left out and the line keeps what it has (the terminal width cuts it
 * shorter anyway), so buf_vprintf's DDP_ETOOBIG is deliberately not an error here. */
static void watch_add(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void watch_add(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (buf_vprintf(b, fmt, ap) == DDP_ETOOBIG) {
        /* left out, as said above */
    }
    va_end(ap);
}

static void watch_draw_bar(struct watch *w)
{
    if (!w->tty)
        return;
    struct buf line, tail;
    buf_init_max(&line, CLI_WATCH_LINE_MAX);
    buf_init_max(&tail, CLI_WATCH_LINE_MAX / 2);
    int64_t now = time_mono_ms();
    int64_t el = (now - w->start_ms) / 1000;
    if (strcmp(w->state, "RUNNING") == 0) {
        int64_t cur = w->epoch >= 0 ? w->epoch + 1 : 1;
        if (w->epochs > 0 && cur > w->epochs)
            cur = w->epochs;
        double frac = -1;
        int estimate = 0;
        if (w->steps > 0) {
            frac = (double)w->step / (double)w->steps;
        } else if (w->epoch_dur_ms > 0 && w->epoch_t0 > 0) {
            frac = (double)(now - w->epoch_t0) / (double)w->epoch_dur_ms;
            estimate = 1;
        }
        if (frac > 0.99)
            frac = 0.99;
        if (frac >= 0)
            watch_add(&tail, "] %s%3d%%", estimate ? "~" : "", (int)(frac * 100));
        else
            watch_add(&tail, "]");
        if (w->have_loss)
            watch_add(&tail, "  loss %.4f", w->loss);
        if (w->have_sps)
            watch_add(&tail, "  %.0f samples/s", w->sps);
        if (w->gen > 1)
            watch_add(&tail, "  gen %lld", (long long)w->gen);
        watch_add(&tail, "  %lld:%02lld", (long long)(el / 60), (long long)(el % 60));
        if (w->epochs > 0)
            watch_add(&line, "epoch %lld/%lld [", (long long)cur, (long long)w->epochs);
        else
            watch_add(&line, "epoch %lld [", (long long)cur);
        /* The bar takes what the terminal width leaves, within bounds. */
        int width = w->cols - 1 - (int)line.len - (int)tail.len;
        if (width > CLI_BAR_WIDTH)
            width = CLI_BAR_WIDTH;
        if (width < 10)
            width = 10;
        if (frac >= 0) {
            int fill = (int)(frac * width);
            for (int i = 0; i < width; i++)
                watch_add(&line, "%c", i < fill ? '=' : (i == fill ? '>' : ' '));
        } else {
            /* No measure yet: a bouncing marker shows that the job is alive. */
            int span = width - 3;
            int pos = (int)((now / 250) % (2 * span));
            if (pos >= span)
                pos = 2 * span - pos;
            for (int i = 0; i < width; i++)
                watch_add(&line, "%s",
                          i == pos ? "<" : (i == pos + 1 ? "=" : (i == pos + 2 ? ">" : " ")));
        }
        watch_add(&line, "%s", tail.data ? tail.data : "");
    } else {
        watch_add(&line, "%s", w->state[0] ? w->state : "...");
        if (w->gen > 0)
            watch_add(&line, " (gen %lld)", (long long)w->gen);
        watch_add(&line, "  %lld:%02lld", (long long)(el / 60), (long long)(el % 60));
    }
    /* Never wrap: a wrapped line cannot be redrawn in place with \r. */
    if (w->cols > 1 && line.len >= (size_t)w->cols)
        line.data[w->cols - 1] = '\0';
    fflush(stdout);
    fputs("\r\033[K", cli_term);
    fputs(line.data ? line.data : "", stdout);
    fflush(stdout);
    fflush(cli_term);
    w->bar_shown = 1;
    buf_release(&tail);
    buf_release(&line);
}

static void watch_on_event(struct watch *w, const json_t *e)
{
    const char *state = cli_str(e, "state", "?");
    int64_t gen = cli_int(e, "generation", 0);
    if (strcmp(state, "RUNNING") == 0 && (strcmp(w->state, "RUNNING") != 0 || gen != w->gen)) {
        w->epoch_t0 = time_mono_ms();
        w->step = w->steps = 0;
    }
    snprintf(w->state, sizeof(w->state), "%s", state);
    w->gen = gen;
    watch_clear_bar(w);
    const char *reason = cli_str(e, "reason", "");
    printf("state %s gen %lld%s%s\n", state, (long long)gen, reason[0] ? ": " : "", reason);
}

static void watch_on_metric(struct watch *w, const json_t *rec)
{
    const json_t *m = json_object_get(rec, "metric");
    if (!json_is_object(m) || !json_is_integer(json_object_get(m, "epoch")))
        return;
    int64_t now = time_mono_ms();
    w->epochs = cli_int(m, "epochs", w->epochs);
    w->have_loss = cli_num(m, "loss", &w->loss) || w->have_loss;
    w->have_sps = cli_num(m, "samples_per_s", &w->sps) || w->have_sps;
    if (json_is_integer(json_object_get(m, "step"))) {
        /* A step report: moves the bar, prints nothing. */
        w->step = cli_int(m, "step", 0);
        w->steps = cli_int(m, "steps", 0);
        return;
    }
    w->epoch = cli_int(m, "epoch", -1);
    w->have_acc = cli_num(m, "test_acc", &w->acc);
    double t;
    if (cli_num(m, "time_s", &t) && t > 0)
        w->epoch_dur_ms = (int64_t)(t * 1000);
    else if (w->epoch_t0 > 0)
        w->epoch_dur_ms = now - w->epoch_t0;
    w->epoch_t0 = now;
    w->step = w->steps = 0;

    struct buf line;
    buf_init_max(&line, CLI_WATCH_LINE_MAX);
    if (w->epochs > 0)
        watch_add(&line, "epoch %lld/%lld", (long long)w->epoch, (long long)w->epochs);
    else
        watch_add(&line, "epoch %lld", (long long)w->epoch);
    double v;
    if (cli_num(m, "loss", &v))
        watch_add(&line, " loss %.4f", v);
    if (w->have_acc)
        watch_add(&line, " test_acc %.4f", w->acc);
    if (cli_num(m, "val_loss", &v)) /* a language model (ddp-worker's GPT) */
        watch_add(&line, " val_loss %.4f", v);
    if (cli_num(m, "tokens_per_s", &v))
        watch_add(&line, " tokens/s %.0f", v);
    else if (cli_num(m, "samples_per_s", &v))
        watch_add(&line, " samples/s %.0f", v);
    if (cli_num(m, "time_s", &v))
        watch_add(&line, " time %.1fs", v);
    watch_add(&line, " gen %lld", (long long)cli_int(rec, "generation", w->gen));
    watch_clear_bar(w);
    printf("%s\n", line.data ? line.data : "");
    buf_release(&line);
}

/* Reads the items of kind ("events"/"metrics") after *after into a new reference *items
(those with seq <= *after left out) and advances *after; with -o json prints the answer. */
static int watch_fetch(struct cli *cli, struct watch *w, const char *kind, int64_t *after,
                       json_t **items, struct ddp_err *err)
{
    char *suffix = xasprintf("/%s?after=%lld", kind, (long long)*after);
    json_t *ans = NULL;
    int rc = cli_job_call_patient(cli, w->id, suffix, -1, &ans, err);
    free(suffix);
    if (rc < 0)
        return rc;
    json_t *all = json_object_get(ans, kind);
    if (cli->json && json_array_size(all) > 0)
        cli_print_json_line(ans);
    json_t *out = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(all, i, it)
    {
        int64_t seq = cli_int(it, "seq", 0);
        if (seq <= *after)
            continue;
        *after = seq;
        json_array_append(out, it);
    }
    json_decref(ans);
    *items = out;
    return 0;
}

/* Hands new events and metrics to their printers in time order, so that a replay (or a
 * slow poll) reads like the job's history. On equal times a metric goes before an event
 * that ends the job and after any other event (RUNNING comes before the first epoch). */
static void watch_merge(struct watch *w, const json_t *events, const json_t *metrics)
{
    size_t ie = 0, im = 0, ne = json_array_size(events), nm = json_array_size(metrics);
    while (ie < ne || im < nm) {
        const json_t *e = ie < ne ? json_array_get(events, ie) : NULL;
        const json_t *m = im < nm ? json_array_get(metrics, im) : NULL;
        int take_event;
        if (!m) {
            take_event = 1;
        } else if (!e) {
            take_event = 0;
        } else {
            int64_t te = cli_parse_time(cli_str(e, "time", NULL));
            int64_t tm = cli_parse_time(cli_str(m, "time", NULL));
            if (te != tm)
                take_event = te < tm;
            else
                take_event = !cli_state_final(cli_str(e, "state", NULL));
        }
        if (take_event) {
            watch_on_event(w, e);
            ie++;
        } else {
            watch_on_metric(w, m);
            im++;
        }
    }
}

int cmd_watch(struct cli *cli, const struct cli_cmd *cmd, int argc, char **argv)
{
    struct watch w = {0};
    json_t *job = NULL;
    int rc = CLI_OK;
    struct ddp_err err;

    if (cli_parse_common_only(cli, cmd, argc, argv, &rc) < 0)
        goto out;
    if ((rc = cli_job_arg(cmd, argc, argv, &w.id)) != CLI_OK)
        goto out;
    w.tty = !cli->json && isatty(STDOUT_FILENO);
    w.cols = 80;
    struct winsize ws;
    if (w.tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        w.cols = ws.ws_col;
    w.epoch = w.epochs = -1;
    w.start_ms = time_mono_ms();
    rc = cli_connect(cli);
    if (rc != CLI_OK)
        goto out;
    if (cli_job_call(cli, "GET", w.id, NULL, NULL, &job, &err) < 0) {
        rc = cli_fail(cli, &err);
        goto out;
    }
    for (;;) {
        /* The job before the streams: see the end-of-follow rule at the top. */
        json_decref(job);
        job = NULL;
        if (cli_job_call_patient(cli, w.id, NULL, -1, &job, &err) < 0 ||
            cli_job_state_known(job, w.id, &err) < 0)
            goto fail;
        int final = cli_state_final(cli_str(job, "state", NULL));
        /* A page of each stream a round; once the job is final, pages until both are read
         * to their end (bounded), so a long history keeps its tail and its last state. */
        for (int page = 0; page < CLI_WATCH_FINAL_PAGES; page++) {
            json_t *events = NULL, *metrics = NULL;
            if (watch_fetch(cli, &w, "events", &w.ev_after, &events, &err) < 0)
                goto fail;
            if (watch_fetch(cli, &w, "metrics", &w.met_after, &metrics, &err) < 0) {
                json_decref(events);
                goto fail;
            }
            int fresh = json_array_size(events) > 0 || json_array_size(metrics) > 0;
            if (!cli->json)
                watch_merge(&w, events, metrics);
            json_decref(events);
            json_decref(metrics);
            if (!final || !fresh)
                break;
        }
        fflush(stdout); /* piped into tee or a log: each line as it happens */
        if (final)
            break;
        /* Redraw the bar a few times per poll so the estimate moves smoothly. */
        int64_t until = time_deadline_ms(CLI_POLL_MS);
        do {
            watch_draw_bar(&w);
            int64_t left = time_left_ms(until);
            time_sleep_ms(left < 125 ? left : 125);
        } while (time_left_ms(until) > 0);
    }
    watch_clear_bar(&w);
    const char *state = cli_str(job, "state", "?");
    if (cli->json) {
        cli_print_json_line(job);
    } else {
        const char *reason = cli_str(job, "reason", "");
        printf("job %s %s", w.id, state);
        const json_t *m = json_object_get(job, "last_metrics");
        double v;
        if (json_is_object(m) && json_is_integer(json_object_get(m, "epoch")))
            printf(" at epoch %lld", (long long)cli_int(m, "epoch", 0));
        if (cli_num(m, "loss", &v))
            printf(", loss %.4f", v);
        if (cli_num(m, "test_acc", &v))
            printf(", test acc %.4f", v);
        if (cli_num(m, "val_loss", &v))
            printf(", val loss %.4f", v);
        printf(", %lld restarts%s%s\n", (long long)cli_int(job, "restarts", 0),
               reason[0] ? ": " : "", reason);
    }
    fflush(stdout);
    rc = strcmp(state, "SUCCEEDED") == 0 ? CLI_OK : CLI_FAIL;
    goto out;
fail:
    watch_clear_bar(&w);
    fflush(stdout);
    rc = cli_fail(cli, &err);
out:
    json_decref(job);
    return rc;
}
