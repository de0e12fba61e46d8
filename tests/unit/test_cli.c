/*
 * test_cli.c - ddpctl's pure helpers (cli/util.c, cli/table.c): URL escaping, --nnodes
 * checking, RFC 3339 parsing and ages, rank ranges, job states, tolerant JSON readers and
 * aligned tables, including their bounds (tiny buffers, cut cells, extra cells), with and
 * without the header line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli/cli.h"
#include "cli/table.h"

static void test_cli_escape(void **state)
{
    char *s = cli_escape("j-7");
    assert_string_equal(s, "j-7");
    free(s);
    s = cli_escape("../nodes?x=1 2/%");
    assert_string_equal(s, "..%2Fnodes%3Fx%3D1%202%2F%25");
    free(s);
    s = cli_escape("");
    assert_string_equal(s, "");
    free(s);
}

static void test_cli_nnodes(void **state)
{
    struct ddp_err e;
    assert_int_equal(cli_check_nnodes("2", &e), 0);
    assert_int_equal(cli_check_nnodes("1:4", &e), 0);
    assert_int_equal(cli_check_nnodes("1024:1024", &e), 0);
    assert_int_equal(cli_check_nnodes("3:2", &e), DDP_EINVAL);
    assert_string_equal(e.msg, "--nnodes: min 3 > max 2");
    const char *bad[] = {"",    "0",     "1025", ":2", "2:",
                         "a:b", "1:2:3", "2 ",   "-1", "123456789012345678901234567890123:1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        e.msg[0] = '\0';
        assert_int_equal(cli_check_nnodes(bad[i], &e), DDP_EINVAL);
        assert_non_null(strstr(e.msg, "--nnodes"));
    }
}

static void test_cli_time_and_age(void **state)
{
    assert_int_equal(cli_parse_time("1970-01-01T00:00:00Z"), 0);
    assert_int_equal(cli_parse_time("2026-11-29T13:58:16.123Z"), 1795960696123LL);
    assert_int_equal(cli_parse_time("2026-11-29T13:58:16Z"), 1795960696000LL);
    assert_int_equal(cli_parse_time(NULL), -1);
    assert_int_equal(cli_parse_time("yesterday"), -1);
    char buf[16];
    int64_t t = cli_parse_time("2026-11-29T13:58:16.000Z");
    cli_format_age("2026-11-29T13:58:16.000Z", t + 5000, buf, sizeof(buf));
    assert_string_equal(buf, "5s");
    cli_format_age("2026-11-29T13:58:16.000Z", t + 300000, buf, sizeof(buf));
    assert_string_equal(buf, "5m");
    cli_format_age("2026-11-29T13:58:16.000Z", t + 3 * 3600000LL, buf, sizeof(buf));
    assert_string_equal(buf, "3h");
    cli_format_age("2026-11-29T13:58:16.000Z", t + 9 * 86400000LL, buf, sizeof(buf));
    assert_string_equal(buf, "9d");
    cli_format_age("2026-11-29T13:58:16.000Z", t - 1000, buf, sizeof(buf)); /* clock skew */
    assert_string_equal(buf, "0s");
    cli_format_age(NULL, t, buf, sizeof(buf));
    assert_string_equal(buf, "-");
}

static void test_cli_ranks(void **state)
{
    char buf[64];
    json_t *r = json_pack("[iiii]", 0, 1, 2, 3);
    cli_format_ranks(r, buf, sizeof(buf));
    assert_string_equal(buf, "0-3");
    json_decref(r);
    r = json_pack("[iiiiii]", 0, 2, 5, 6, 7, 9);
    cli_format_ranks(r, buf, sizeof(buf));
    assert_string_equal(buf, "0,2,5-7,9");
    /* A buffer too small: cut at a whole item, still terminated. */
    char tiny[6];
    cli_format_ranks(r, tiny, sizeof(tiny));
    assert_string_equal(tiny, "0,2");
    json_decref(r);
    r = json_array();
    cli_format_ranks(r, buf, sizeof(buf));
    assert_string_equal(buf, "");
    json_decref(r);
}

static void test_cli_states_and_readers(void **state)
{
    assert_true(cli_state_final("SUCCEEDED"));
    assert_true(cli_state_final("FAILED"));
    assert_true(cli_state_final("CANCELLED"));
    assert_false(cli_state_final("CANCELLING"));
    assert_false(cli_state_final(NULL));
    assert_true(cli_state_valid("RESTARTING"));
    assert_false(cli_state_valid("running"));
    assert_false(cli_state_valid(""));

    json_t *o = json_pack("{sssisfsn}", "s", "x", "i", 7, "f", 2.5, "n");
    assert_string_equal(cli_str(o, "s", "d"), "x");
    assert_string_equal(cli_str(o, "i", "d"), "d");
    assert_string_equal(cli_str(NULL, "s", "d"), "d");
    assert_int_equal(cli_int(o, "i", -1), 7);
    assert_int_equal(cli_int(o, "f", -1), 2);
    assert_int_equal(cli_int(o, "s", -1), -1);
    assert_int_equal(cli_int(o, "n", -1), -1);
    double d = 0;
    assert_true(cli_num(o, "f", &d));
    assert_true(d == 2.5);
    assert_false(cli_num(o, "s", &d));
    json_decref(o);
}

static void test_cli_table(void **state)
{
    static const char *const hdr[] = {"ID", "NAME", "STATE"};
    struct table *t = table_new(3, hdr);
    table_row(t);
    table_cell(t, "%s", "j-10");
    table_cell(t, "%s", "a\tb\nc");
    table_cell(t, "%s", "RUNNING");
    table_cell(t, "%s", "extra is ignored");
    table_row(t);
    table_cell(t, "%d", 7); /* a short row: the rest empty */
    char big[TABLE_MAX_CELL + 100];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    table_row(t);
    table_cell(t, "%s", "j-1");
    table_cell(t, "%s", big);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    table_print(t, f);
    fclose(f);
    table_free(t);
    const char *want_head = "ID    NAME";
    assert_memory_equal(out, want_head, strlen(want_head));
    assert_non_null(strstr(out, "\nj-10  a b c"));
    assert_non_null(strstr(out, "RUNNING\n7  "));
    assert_null(strstr(out, "extra"));
    /* The long cell was cut to TABLE_MAX_CELL - 1 bytes. */
    char *x = strchr(out, 'x');
    assert_non_null(x);
    assert_int_equal(strspn(x, "x"), TABLE_MAX_CELL - 1);
    free(out);
    table_free(NULL);
}

/* --no-headers: the rows only, their columns as wide as their own widest cell (not the
 * header's). */
static void test_cli_table_no_headers(void **state)
{
    static const char *const hdr[] = {"IDENTIFIER", "STATE"};
    struct table *t = table_new(2, hdr);
    table_row(t);
    table_cell(t, "%s", "j-1");
    table_cell(t, "%s", "RUNNING");
    table_row(t);
    table_cell(t, "%s", "j-10");
    table_cell(t, "%s", "PENDING");
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    table_print_opt(t, f, 0);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(out, "j-1   RUNNING\nj-10  PENDING\n");
    free(out);
    out = NULL;
    f = open_memstream(&out, &len);
    assert_non_null(f);
    table_print_opt(t, f, 1);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(out, "IDENTIFIER  STATE\nj-1         RUNNING\nj-10        PENDING\n");
    free(out);
    table_free(t);
}

/* The terminal's filter gets a stream's buffer in chunks cut anywhere (a line longer than
 * the buffer): a C1 control cut between its two bytes is escaped all the same, and a lone
 * lead byte before other text is passed as it is. */
static void test_cli_term_filter_across_writes(void **state)
{
    (void)state;
    char *got = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&got, &len);
    assert_non_null(mem);
    FILE *f = cli_term_wrap(mem);
    assert_ptr_not_equal(f, mem);
    const char *parts[] = {"a\xc2", "\x9b\x32J b\xc2", /* \x32: '2' */
                           "\xc2",  "\x9b",
                           "\x1b",  "[H \xc2",
                           "x\n"};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        assert_true(fputs(parts[i], f) >= 0);
        assert_int_equal(fflush(f), 0); /* each part a write of its own */
    }
    assert_int_equal(fclose(f), 0);
    assert_int_equal(fclose(mem), 0);
    assert_string_equal(got, "a\\xc2\\x9b"
                             "2J b\xc2\\xc2\\x9b\\x1b[H \xc2x\n");
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_escape),
        cmocka_unit_test(test_cli_nnodes),
        cmocka_unit_test(test_cli_time_and_age),
        cmocka_unit_test(test_cli_ranks),
        cmocka_unit_test(test_cli_states_and_readers),
        cmocka_unit_test(test_cli_table),
        cmocka_unit_test(test_cli_table_no_headers),
        cmocka_unit_test(test_cli_term_filter_across_writes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
