/*
 * util.c - ddpctl's pure helpers (no I/O but printing JSON): URL escaping, tolerant JSON
 * readers, time parsing and formatting, rank lists, job states. Kept apart from main.c so
 * that tests/unit/test_cli.c can test them.
 *
 * Invariant: every formatter writes a NUL-terminated string within the size it is given,
 * whatever the input.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "common/args.h"
#include "common/jsonx.h"
#include "common/xalloc.h"

char *cli_escape(const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = xmalloc(3 * n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
    return out;
}

/* ---- output helpers ------------------------------------------------------------------- */

void cli_print_json(const json_t *v)
{
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (s) {
        printf("%s\n", s);
        free(s);
    }
}

void cli_print_json_line(const json_t *v)
{
    char *s = jsonx_dumps(v);
    printf("%s\n", s);
    free(s);
    fflush(stdout);
}

const char *cli_str(const json_t *obj, const char *key, const char *fallback)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : fallback;
}

int64_t cli_int(const json_t *obj, const char *key, int64_t fallback)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v))
        return (int64_t)json_real_value(v);
    return fallback;
}

int cli_num(const json_t *obj, const char *key, double *out)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_number(v))
        return 0;
    *out = json_number_value(v);
    return 1;
}

int64_t cli_parse_time(const char *s)
{
    if (!s)
        return -1;
    int y, mo, d, h, mi, sec, n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6)
        return -1;
    int ms = 0;
    const char *p = s + n;
    if (*p == '.') {
        int scale = 100;
        for (p++; isdigit((unsigned char)*p); p++) {
            ms += (*p - '0') * scale;
            scale /= 10;
        }
    }
    struct tm tm = {0};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    return (int64_t)t * 1000 + ms;
}

void cli_format_age(const char *rfc3339, int64_t now_ms, char *buf, size_t size)
{
    int64_t t = cli_parse_time(rfc3339);
    if (t < 0) {
        snprintf(buf, size, "-");
        return;
    }
    int64_t s = (now_ms - t) / 1000;
    if (s < 0)
        s = 0;
    if (s < 120)
        snprintf(buf, size, "%llds", (long long)s);
    else if (s < 7200)
        snprintf(buf, size, "%lldm", (long long)(s / 60));
    else if (s < 2 * 86400)
        snprintf(buf, size, "%lldh", (long long)(s / 3600));
    else
        snprintf(buf, size, "%lldd", (long long)(s / 86400));
}

void cli_format_ranks(const json_t *ranks, char *buf, size_t size)
{
    size_t o = 0, n = json_array_size(ranks);
    buf[0] = '\0';
    for (size_t i = 0; i < n && o + 1 < size;) {
        json_int_t lo = json_integer_value(json_array_get(ranks, i));
        size_t j = i;
        while (j + 1 < n && json_integer_value(json_array_get(ranks, j + 1)) ==
                                json_integer_value(json_array_get(ranks, j)) + 1)
            j++;
        json_int_t hi = json_integer_value(json_array_get(ranks, j));
        int w;
        if (hi > lo)
            w = snprintf(buf + o, size - o, "%s%lld-%lld", i ? "," : "", (long long)lo,
                         (long long)hi);
        else
            w = snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)lo);
        if (w < 0 || (size_t)w >= size - o) {
            buf[o] = '\0'; /* drop the cut item: whole items only */
            break;
        }
        o += (size_t)w;
        i = j + 1;
    }
}

static const char *const cli_states[] = {"PENDING",   "RUNNING", "RESTARTING", "CANCELLING",
                                         "SUCCEEDED", "FAILED",  "CANCELLED",  NULL};

int cli_state_final(const char *state)
{
    return state && (strcmp(state, "SUCCEEDED") == 0 || strcmp(state, "FAILED") == 0 ||
                     strcmp(state, "CANCELLED") == 0);
}

int cli_state_valid(const char *s)
{
    for (int i = 0; cli_states[i]; i++)
        if (strcmp(s, cli_states[i]) == 0)
            return 1;
    return 0;
}

int cli_job_state_known(const json_t *job, const char *id, struct ddp_err *err)
{
    const char *s = json_string_value(json_object_get(job, "state"));
    if (s && cli_state_valid(s))
        return 0;
    return err_set(err, DDP_EINTERNAL,
                   "ddpd answered job %s without a state this ddpctl knows (%.40s): is ddpd of "
                   "another version?",
                   id, s ? s : "none");
}

int cli_check_nnodes(const char *s, struct ddp_err *err)
{
    const char *colon = strchr(s, ':');
    long lo, hi;
    if (!colon) {
        if (args_parse_long("--nnodes", s, 1, 1024, &lo, err) < 0)
            return DDP_EINVAL;
        return 0;
    }
    char a[32];
    size_t alen = (size_t)(colon - s);
    if (alen == 0 || alen >= sizeof(a))
        return err_set(err, DDP_EINVAL, "--nnodes: '%s' is not N or MIN:MAX", s);
    memcpy(a, s, alen);
    a[alen] = '\0';
    if (args_parse_long("--nnodes", a, 1, 1024, &lo, err) < 0 ||
        args_parse_long("--nnodes", colon + 1, 1, 1024, &hi, err) < 0)
        return DDP_EINVAL;
    if (lo > hi)
        return err_set(err, DDP_EINVAL, "--nnodes: min %ld > max %ld", lo, hi);
    return 0;
}
