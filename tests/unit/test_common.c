/*
 * test_common.c - common/: strict argument parsing, the error table, jsonx getters,
 * atomic file writes, constant-time secret comparison, the growth helper, the byte buffer,
 * deadlines, backoff and the /proc/PID/stat reader.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/args.h"
#include "common/exitcodes.h"
#include "common/backoff.h"
#include "common/buf.h"
#include "common/err.h"
#include "common/fsutil.h"
#include "common/jsonx.h"
#include "common/label.h"
#include "common/log.h"
#include "common/procstat.h"
#include "common/randutil.h"
#include "common/signame.h"
#include "common/termsafe.h"
#include "common/timeutil.h"
#include "common/tokenfile.h"
#include "common/utf8.h"
#include "common/xalloc.h"

static void test_common_args_long(void **state)
{
    long v = 7;
    struct ddp_err e;
    assert_int_equal(args_parse_long("--slots", "12", 1, 100, &v, &e), 0);
    assert_int_equal(v, 12);
    const char *bad[] = {"", "12x", "x", "0", "101", " 5", "1e3"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 7;
        assert_int_not_equal(args_parse_long("--slots", bad[i], 1, 100, &v, &e), 0);
        assert_int_equal(v, 7);
        assert_non_null(strstr(e.msg, "--slots"));
    }
}

static void test_common_args_range_and_hostport(void **state)
{
    long lo = 0, hi = 0;
    struct ddp_err e;
    assert_int_equal(args_parse_range("--port-range", "29500-29999", 1, 65535, &lo, &hi, &e), 0);
    assert_int_equal(lo, 29500);
    assert_int_equal(hi, 29999);
    assert_int_not_equal(args_parse_range("--port-range", "9-1", 1, 65535, &lo, &hi, &e), 0);
    char host[64];
    int port = 0;
    assert_int_equal(
        args_parse_hostport("--listen", "127.0.0.1:8470", host, sizeof(host), &port, &e), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8470);
    assert_int_not_equal(
        args_parse_hostport("--listen", "127.0.0.1", host, sizeof(host), &port, &e), 0);
    assert_int_not_equal(args_parse_hostport("--listen", "h:99999", host, sizeof(host), &port, &e),
                         0);
}

/* Label characters, the same for the agent's --label and ddpd's node_selector. */
static void test_common_signame(void **state)
{
    (void)state;
    assert_int_equal(signame_parse("SIGUSR1"), SIGUSR1);
    assert_int_equal(signame_parse("USR1"), SIGUSR1);
    assert_int_equal(signame_parse("SIGUSR2"), SIGUSR2);
    assert_int_equal(signame_parse("SIGTERM"), SIGTERM);
    assert_int_equal(signame_parse(SIGNAME_DEFAULT), SIGUSR1);
    /* not allowed: uncatchable, fatal by default or not a signal at all */
    assert_int_equal(signame_parse("SIGKILL"), -1);
    assert_int_equal(signame_parse("SIGSTOP"), -1);
    assert_int_equal(signame_parse("SIGSEGV"), -1);
    assert_int_equal(signame_parse("sigusr1"), -1);
    assert_int_equal(signame_parse("10"), -1);
    assert_int_equal(signame_parse(""), -1);
    assert_int_equal(signame_parse("SIG"), -1);
    assert_int_equal(signame_parse(NULL), -1);
    assert_string_equal(signame_str(SIGUSR1), "SIGUSR1");
    assert_string_equal(signame_str(SIGWINCH), "SIGWINCH");
    assert_null(signame_str(SIGKILL));
    assert_non_null(strstr(signame_allowed(), "SIGUSR2"));
    assert_int_equal(DDP_EXIT_PREEMPTED, 10);
    assert_string_equal(exitcode_str(DDP_EXIT_PREEMPTED), "preempted");
}

static void test_common_label_chars(void **state)
{
    (void)state;
    assert_true(label_key_ok("gpu", 3));
    assert_true(label_key_ok("example.com/zone-a_1", 20));
    assert_false(label_key_ok("", 0));
    assert_false(label_key_ok("a b", 3));
    assert_true(label_value_ok("", 0));
    assert_true(label_value_ok("a100", 4));
    assert_false(label_value_ok("a/b", 3));
    char long_key[65];
    memset(long_key, 'k', 64);
    long_key[64] = '\0';
    assert_false(label_key_ok(long_key, 64));
    assert_true(label_key_ok(long_key, 63));
}

static void test_common_err_table(void **state)
{
    struct {
        int code, http;
        const char *status;
    } rows[] = {
        {DDP_EINVAL, 400, "INVALID_ARGUMENT"},  {DDP_EUNAUTH, 401, "UNAUTHENTICATED"},
        {DDP_EPERM, 403, "PERMISSION_DENIED"},  {DDP_ENOTFOUND, 404, "NOT_FOUND"},
        {DDP_EABORTED, 409, "ABORTED"},         {DDP_ETOOBIG, 413, "RESOURCE_EXHAUSTED"},
        {DDP_EINTERNAL, 500, "INTERNAL"},       {DDP_EUNAVAIL, 503, "UNAVAILABLE"},
        {DDP_EMETHOD, 405, "INVALID_ARGUMENT"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        assert_int_equal(err_http_status(rows[i].code), rows[i].http);
        assert_string_equal(err_status_name(rows[i].code), rows[i].status);
    }
    assert_int_equal(err_http_status(-999), 500);
    assert_string_equal(err_status_name(-999), "UNKNOWN");
    assert_int_equal(err_from_status_name("NOT_FOUND"), DDP_ENOTFOUND);
    assert_int_equal(err_from_status_name("nope"), DDP_EINTERNAL);
    struct ddp_err e;
    assert_int_equal(err_set(&e, DDP_EINVAL, "field '%s': bad", "x"), DDP_EINVAL);
    assert_string_equal(e.msg, "field 'x': bad");
    err_clear(&e);
    assert_int_equal(e.code, 0);
    assert_string_equal(e.msg, "");
    assert_int_equal(err_set(NULL, DDP_EIO, "ignored"), DDP_EIO);
}

static void test_common_jsonx(void **state)
{
    json_t *o = NULL;
    struct ddp_err e;
    const char *text = "{\"n\": 5, \"s\": \"x\", \"b\": true, \"a\": [], \"f\": 1.5}";
    assert_int_equal(jsonx_parse_object(text, strlen(text), &o, &e), 0);
    int64_t n = 0;
    assert_int_equal(jsonx_get_int(o, "n", 1, 0, 10, &n, &e), 0);
    assert_int_equal(n, 5);
    assert_int_equal(jsonx_get_int(o, "n", 1, 6, 10, &n, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "field 'n'"));
    assert_int_equal(jsonx_get_int(o, "s", 1, 0, 10, &n, &e), DDP_EINVAL);
    assert_int_equal(jsonx_get_int(o, "missing", 1, 0, 10, &n, &e), DDP_EINVAL);
    n = 42;
    assert_int_equal(jsonx_get_int(o, "missing", 0, 0, 10, &n, &e), 0);
    assert_int_equal(n, 42);
    const char *s = NULL;
    assert_int_equal(jsonx_get_string(o, "s", 1, &s, &e), 0);
    assert_string_equal(s, "x");
    int b = 0;
    assert_int_equal(jsonx_get_bool(o, "b", 1, &b, &e), 0);
    assert_true(b);
    static const char *const keys[] = {"n", "s", "b", "a", NULL};
    assert_int_equal(jsonx_check_keys(o, keys, NULL, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "unknown field 'f'"));
    json_decref(o);
    assert_int_equal(jsonx_parse_object("[1]", 3, &o, &e), DDP_EINVAL);
    assert_int_equal(jsonx_parse_object("{\"a\":1,\"a\":2}", 13, &o, &e), DDP_EINVAL);
    assert_int_equal(jsonx_parse_object("{", 1, &o, &e), DDP_EINVAL);
}

static void test_common_fs_write_atomic(void **state)
{
    char dir[] = "/tmp/ddp-test-common-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *path = xasprintf("%s/token", dir);
    struct ddp_err e;
    assert_int_equal(fs_write_atomic(path, "one\n", 4, 0600, &e), 0);
    assert_int_equal(fs_write_atomic(path, "second\n", 7, 0600, &e), 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fs_read_all(path, 100, &text, &len, &e), 0);
    assert_int_equal(len, 7);
    assert_string_equal(text, "second\n");
    free(text);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* no temp file left beside it */
    DIR *d = opendir(dir);
    int entries = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            entries++;
    closedir(d);
    assert_int_equal(entries, 1);
    assert_int_equal(fs_read_all(path, 3, &text, &len, &e), DDP_ETOOBIG);
    /* A file of exactly max bytes reads whole, past the first 4 KiB read too; one more is
     * refused; fs_read_regular the same. */
    char *big = xmalloc(10000);
    memset(big, 'b', 10000);
    char *bpath = xasprintf("%s/big", dir);
    assert_int_equal(fs_write_atomic(bpath, big, 10000, 0600, &e), 0);
    assert_int_equal(fs_read_all(bpath, 10000, &text, &len, &e), 0);
    assert_int_equal(len, 10000);
    free(text);
    assert_int_equal(fs_read_all(bpath, 9999, &text, &len, &e), DDP_ETOOBIG);
    assert_int_equal(fs_read_regular(bpath, 10000, &text, &len, &e), 0);
    assert_int_equal(len, 10000);
    free(text);
    assert_int_equal(fs_read_regular(bpath, 9999, &text, &len, &e), DDP_ETOOBIG);
    assert_int_equal(fs_read_regular(dir, 10000, &text, &len, &e), DDP_EINVAL);
    assert_int_equal(unlink(bpath), 0);
    free(bpath);
    free(big);
    char *missing = xasprintf("%s/missing", dir);
    assert_int_equal(fs_read_all(missing, 100, &text, &len, &e), DDP_ENOTFOUND);
    char *bad = xasprintf("%s/no/such/dir/f", dir);
    assert_int_not_equal(fs_write_atomic(bad, "x", 1, 0600, &e), 0);
    free(bad);
    free(missing);
    free(path);
    assert_int_equal(fs_remove_tree(dir, &e), 0);
}

static void test_common_secret_equal(void **state)
{
    assert_true(secret_equal("abc", "abc"));
    assert_false(secret_equal("abc", "abd"));
    assert_false(secret_equal("abc", "ab"));
    assert_false(secret_equal("ab", "abc"));
    assert_false(secret_equal("", "a"));
    assert_true(secret_equal("", ""));
    char a[65], b[65];
    assert_int_equal(rand_hex(a, 32), 0);
    assert_int_equal(rand_hex(b, 32), 0);
    assert_int_equal(strlen(a), 64);
    assert_false(secret_equal(a, b));
}

static void test_common_xgrow(void **state)
{
    int *a = NULL;
    size_t cap = 0;
    XGROW(a, 1, cap, 8);
    assert_int_equal(cap, 8);
    for (int i = 0; i < 8; i++)
        a[i] = i;
    XGROW(a, 8, cap, 8); /* enough already: unchanged */
    assert_int_equal(cap, 8);
    XGROW(a, 9, cap, 8);
    assert_int_equal(cap, 16);
    XGROW(a, 100, cap, 8); /* doubles until it fits */
    assert_int_equal(cap, 128);
    for (int i = 0; i < 8; i++)
        assert_int_equal(a[i], i);
    free(a);
    char *c = NULL;
    cap = 0;
    XGROW(c, 300, cap, 16); /* need above init: the first capacity still a power-of-two step */
    assert_true(cap >= 300);
    free(c);
}

static void test_common_buf(void **state)
{
    struct buf b = BUF_INIT;
    assert_int_equal(buf_addstr(&b, "abc"), 0);
    assert_int_equal(buf_add(&b, "\0x", 2), 0);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "abc\0x", 6); /* NUL after len too */
    buf_reset(&b);
    assert_int_equal(b.len, 0);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(buf_printf(&b, "%d,", i), 0);
    assert_int_equal(strncmp(b.data, "0,1,2,", 6), 0);
    assert_int_equal(strlen(b.data), b.len);
    size_t len;
    char *s = buf_detach(&b, &len);
    assert_int_equal(len, strlen(s));
    assert_null(b.data);
    free(s);
    s = buf_detach(&b, NULL); /* an empty buffer hands out "" */
    assert_string_equal(s, "");
    free(s);

    buf_init_max(&b, 8);
    assert_int_equal(buf_addstr(&b, "12345678"), 0);
    assert_int_equal(buf_addstr(&b, "9"), DDP_ETOOBIG);
    assert_int_equal(buf_printf(&b, "%d", 1), DDP_ETOOBIG);
    assert_int_equal(b.len, 8); /* unchanged by the refusals */
    assert_string_equal(b.data, "12345678");
    buf_release(&b);
    buf_release(NULL);
}

static void test_common_deadline_backoff(void **state)
{
    int64_t now = time_mono_ms();
    int64_t d = time_deadline_ms(1000);
    assert_true(d >= now + 1000 && d < now + 2000);
    assert_int_equal(time_deadline_ms(-1), INT64_MAX);
    assert_true(time_left_ms(d) > 0 && time_left_ms(d) <= 1000);
    assert_int_equal(time_left_ms(now - 5), 0);
    assert_int_equal(time_deadline_min(3, 9), 3);

    struct backoff b;
    backoff_init(&b, 10, 75);
    const int64_t want[] = {10, 20, 40, 75, 75};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        assert_int_equal(backoff_next(&b), want[i]);
    backoff_reset(&b);
    assert_int_equal(backoff_next(&b), 10);
    int64_t t0 = time_mono_ms();
    backoff_sleep(&b, t0 - 1); /* a passed deadline: no wait */
    assert_true(time_mono_ms() - t0 < 20);
}

static void test_common_proc_state(void **state)
{
    assert_true(proc_state(getpid()) == 'R');
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        pause();
        _exit(0);
    }
    char st = 0;
    for (int i = 0; i < 200 && (st = proc_state(pid)) != 'S'; i++) /* bounded: ~2 s */
        time_sleep_ms(10);
    assert_int_equal(st, 'S');
    assert_int_equal(kill(pid, SIGSTOP), 0);
    for (int i = 0; i < 200 && (st = proc_state(pid)) != 'T'; i++)
        time_sleep_ms(10);
    assert_int_equal(st, 'T');
    assert_int_equal(kill(pid, SIGKILL), 0);
    for (int i = 0; i < 200 && (st = proc_state(pid)) != 'Z'; i++)
        time_sleep_ms(10);
    assert_int_equal(st, 'Z');
    assert_int_equal(waitpid(pid, NULL, 0), pid);
    assert_int_equal(proc_state(pid), 0); /* reaped: gone */
}

/* This process's usage: an opened descriptor is counted and closing it uncounts it, the
 * resident set and CPU time are positive, the start time lies before now. */
static void test_common_proc_self_usage(void **state)
{
    struct proc_usage a, b;
    proc_self_usage(&a);
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    proc_self_usage(&b);
    assert_int_equal(b.open_fds, a.open_fds + 1);
    assert_int_equal(close(fd), 0);
    proc_self_usage(&b);
    assert_int_equal(b.open_fds, a.open_fds);
    assert_true(a.open_fds >= 3);
    assert_true(a.max_fds >= a.open_fds);
    assert_true(a.rss_bytes > 0);
    assert_true(a.cpu_s >= 0);
    double now = (double)time_wall_ms() / 1000.0;
    assert_true(a.start_time_s > now - 3600 && a.start_time_s <= now + 1);
}

static void test_common_token_file(void **state)
{
    char dir[] = "/tmp/ddp-test-token-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *path = xasprintf("%s/t", dir);
    struct ddp_err e;
    char *tok = NULL;
    assert_int_equal(token_file_read(path, "user", &tok, &e), DDP_ENOTFOUND);
    const struct {
        const char *text;
        int rc;
        const char *msg;
    } cases[] = {
        {"0123456789abcdef0123\n", 0, NULL},
        {"\n", DDP_EINVAL, "is empty"},
        {"x\n", DDP_EINVAL, "is 1 bytes: at least 16"},
        {"0123456789 abcdef0123\n", DDP_EINVAL, "space or control character at byte 10"},
        {"0123456789abcdef\x01\n", DDP_EINVAL, "control character"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(fs_write_atomic(path, cases[i].text, strlen(cases[i].text), 0600, &e), 0);
        err_clear(&e);
        tok = NULL;
        int rc = token_file_read(path, "user", &tok, &e);
        if (rc != cases[i].rc || (cases[i].msg && !strstr(e.msg, cases[i].msg)))
            fail_msg("case %zu: rc %d message '%s'", i, rc, e.msg);
        if (rc == 0)
            assert_string_equal(tok, "0123456789abcdef0123");
        else
            assert_null(tok);
        free(tok);
    }
    /* A token others may read is taken (with a warning); a link to one is refused. */
    assert_int_equal(fs_write_atomic(path, "0123456789abcdef0123", 20, 0644, &e), 0);
    assert_int_equal(token_file_read(path, "user", &tok, &e), 0);
    free(tok);
    char *link = xasprintf("%s/link", dir);
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(token_file_read(link, "user", &tok, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "symbolic link"));
    assert_int_equal(unlink(link), 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
    free(link);
    free(path);
}

static void test_common_termsafe_and_log(void **state)
{
    char out[64];
    const char *in = "a\x1b[2J\tb\n\x7f\xc2\x9b\xc3\xa9";
    assert_int_equal(termsafe_escape(in, strlen(in), out, sizeof(out)), strlen(in));
    assert_string_equal(out, "a\\x1b[2J\tb\n\\x7f\\xc2\\x9b\xc3\xa9"); /* é stays */
    /* A short buffer never cuts an escape, and says how much it took. */
    assert_int_equal(termsafe_escape("ab\x1b", 3, out, 5), 2);
    assert_string_equal(out, "ab");
    /* ddpd's own log: a control character in a message is shown, not sent. */
    char path[] = "/tmp/ddp-test-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    log_warn("job name=%s", "x\x1b[2Jstate: SUCCEEDED");
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    close(fd);
    char *text = NULL;
    size_t len = 0;
    struct ddp_err e;
    assert_int_equal(fs_read_all(path, 4096, &text, &len, &e), 0);
    assert_null(strchr(text, '\x1b'));
    assert_non_null(strstr(text, "job name=x\\x1b[2Jstate: SUCCEEDED\n"));
    free(text);
    assert_int_equal(unlink(path), 0);
}

static void test_common_log_limited(void **state)
{
    char path[] = "/tmp/ddp-test-loglimit-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
    /* 1,000 warnings from one call site within its interval: one line. */
    int64_t t0 = time_mono_ms();
    for (int i = 0; i < 1000; i++)
        log_warn_limited(60000, "refused connection %d", i);
    int64_t took = time_mono_ms() - t0;
    /* After the interval the next line passes and says how many were left out. */
    struct log_limit l = {0};
    long left = -1;
    assert_int_equal(log_limit_pass(&l, 50, &left), 1);
    assert_int_equal(left, 0);
    assert_int_equal(log_limit_pass(&l, 50, &left), 0);
    assert_int_equal(log_limit_pass(&l, 50, &left), 0);
    int passed = 0;
    for (int i = 0; i < 100 && !passed; i++) { /* bounded: about 1 s */
        passed = log_limit_pass(&l, 50, &left);
        if (!passed)
            time_sleep_ms(10);
    }
    assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
    close(saved);
    close(fd);
    assert_true(passed);
    assert_true(left >= 2);
    char *text = NULL;
    size_t len = 0;
    struct ddp_err e;
    assert_int_equal(fs_read_all(path, 1 << 16, &text, &len, &e), 0);
    int lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    if (took < 60000 && (lines != 1 || !strstr(text, "refused connection 0")))
        fail_msg("%d lines for 1000 limited warnings: %s", lines, text);
    free(text);
    assert_int_equal(unlink(path), 0);
}

/* Well-formed UTF-8: each character's length, 0 for what is not one; a repair keeps every
 * well-formed character and makes each other byte '?' (a cut character, Latin-1, an overlong
 * form, a surrogate). */
static void test_common_utf8(void **state)
{
    (void)state;
    const unsigned char euro[] = "\xe2\x82\xac", bad[] = "\xc0\xaf", sur[] = "\xed\xa0\x80";
    assert_int_equal(utf8_char_len(euro, 3), 3);
    assert_int_equal(utf8_char_len(euro, 2), 0); /* cut */
    assert_int_equal(utf8_char_len(bad, 2), 0);  /* overlong '/' */
    assert_int_equal(utf8_char_len(sur, 3), 0);  /* U+D800 */
    assert_int_equal(utf8_char_len((const unsigned char *)"\xf4\x90\x80\x80", 4), 0);
    char s[64];
    snprintf(s, sizeof(s), "%s", "ok \xe2\x82\xac \xe9t\xe9 \xe2\x82");
    assert_int_equal(utf8_repair(s), 4);
    assert_string_equal(s, "ok \xe2\x82\xac ?t? ??");
    assert_int_equal(utf8_repair(s), 0); /* well-formed now */
    snprintf(s, sizeof(s), "%s", "");
    assert_int_equal(utf8_repair(s), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_common_args_long),
        cmocka_unit_test(test_common_args_range_and_hostport),
        cmocka_unit_test(test_common_err_table),
        cmocka_unit_test(test_common_utf8),
        cmocka_unit_test(test_common_label_chars),
        cmocka_unit_test(test_common_signame),
        cmocka_unit_test(test_common_jsonx),
        cmocka_unit_test(test_common_fs_write_atomic),
        cmocka_unit_test(test_common_secret_equal),
        cmocka_unit_test(test_common_xgrow),
        cmocka_unit_test(test_common_buf),
        cmocka_unit_test(test_common_deadline_backoff),
        cmocka_unit_test(test_common_proc_state),
        cmocka_unit_test(test_common_proc_self_usage),
        cmocka_unit_test(test_common_token_file),
        cmocka_unit_test(test_common_termsafe_and_log),
        cmocka_unit_test(test_common_log_limited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
