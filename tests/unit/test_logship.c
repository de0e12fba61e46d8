/*
 * test_logship.c - line splitting (long lines, partial tails), UTF-8 cleaning, and the
 * acknowledged queue (seq numbering, cap, ack, re-send after a lost answer).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agent/logship.h"

struct lines {
    char *v[16];
    size_t len[16];
    size_t n;
};

static void collect(void *ctx, const char *line, size_t len)
{
    struct lines *l = ctx;
    assert_true(l->n < 16);
    l->v[l->n] = malloc(len + 1);
    memcpy(l->v[l->n], line, len);
    l->v[l->n][len] = '\0';
    l->len[l->n++] = len;
}

static void lines_free(struct lines *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
}

static void test_logship_split_lines_and_tail(void **state)
{
    (void)state;
    struct logship_splitter s = {0};
    struct lines l = {0};
    logship_split(&s, "ab\ncd", 5, collect, &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.v[0], "ab");
    logship_split(&s, "e\n\nf", 4, collect, &l);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.v[1], "cde");
    assert_string_equal(l.v[2], "");
    logship_split_flush(&s, collect, &l);
    assert_int_equal(l.n, 4);
    assert_string_equal(l.v[3], "f");
    logship_split_flush(&s, collect, &l); /* nothing left */
    assert_int_equal(l.n, 4);
    lines_free(&l);
}

static void test_logship_split_long_line_is_cut(void **state)
{
    (void)state;
    struct logship_splitter s = {0};
    struct lines l = {0};
    size_t n = LOGSHIP_LINE_MAX + 10;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\n';
    logship_split(&s, big, n + 1, collect, &l);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.len[0], LOGSHIP_LINE_MAX);
    assert_int_equal(l.len[1], 10);
    free(big);
    lines_free(&l);
}

static void test_logship_clean_makes_valid_utf8(void **state)
{
    (void)state;
    static const char in[] = "ok \xc3\xa9 \xff bad \xe2\x82 cut\r";
    char *c = logship_clean("[rank 3] ", in, sizeof(in) - 1);
    assert_string_equal(c, "[rank 3] ok \xc3\xa9 ? bad ?? cut");
    free(c);
    const char nul[] = {'a', '\0', 'b'};
    c = logship_clean(NULL, nul, 3);
    assert_string_equal(c, "a?b");
    free(c);
    /* Overlong encodings and surrogates are refused byte by byte. */
    c = logship_clean(NULL, "\xc0\xaf\xed\xa0\x80", 5);
    assert_string_equal(c, "?????");
    free(c);
    c = logship_clean(NULL, "\xf0\x9f\x98\x80", 4);
    assert_string_equal(c, "\xf0\x9f\x98\x80");
    free(c);
}

static void test_logship_queue_seq_ack_and_resend(void **state)
{
    (void)state;
    struct logship_queue q;
    logship_queue_init(&q, 100);
    uint64_t first = 0;
    size_t big = 1 << 20;
    assert_null(logship_queue_take(&q, 10, &big, &first));
    for (int i = 0; i < 5; i++) {
        char buf[16];
        snprintf(buf, sizeof(buf), "l%d", i + 1);
        logship_queue_push(&q, strdup(buf));
    }
    json_t *a = logship_queue_take(&q, 3, &big, &first);
    assert_int_equal(first, 1);
    assert_int_equal(json_array_size(a), 3);
    assert_string_equal(json_string_value(json_array_get(a, 2)), "l3");
    json_decref(a);
    /* The answer was lost: nothing acked, the same seqs go again. */
    a = logship_queue_take(&q, 3, &big, &first);
    assert_int_equal(first, 1);
    json_decref(a);
    logship_queue_ack(&q, 3);
    assert_int_equal(q.count, 2);
    a = logship_queue_take(&q, 10, &big, &first);
    assert_int_equal(first, 4);
    assert_string_equal(json_string_value(json_array_get(a, 0)), "l4");
    json_decref(a);
    logship_queue_ack(&q, 2); /* an older ack changes nothing */
    assert_int_equal(q.count, 2);
    logship_queue_ack(&q, 5);
    assert_int_equal(q.count, 0);
    logship_queue_push(&q, strdup("l6"));
    a = logship_queue_take(&q, 10, &big, &first);
    assert_int_equal(first, 6);
    json_decref(a);
    logship_queue_release(&q);
}

static void test_logship_queue_cap_drops_oldest(void **state)
{
    (void)state;
    struct logship_queue q;
    logship_queue_init(&q, 4);
    size_t big = 1 << 20;
    for (int i = 0; i < 10; i++) {
        char buf[16];
        snprintf(buf, sizeof(buf), "l%d", i + 1);
        logship_queue_push(&q, strdup(buf));
    }
    assert_int_equal(q.count, 4);
    assert_int_equal(q.dropped, 6);
    uint64_t first = 0;
    json_t *a = logship_queue_take(&q, 100, &big, &first);
    assert_int_equal(first, 7);
    assert_string_equal(json_string_value(json_array_get(a, 0)), "l7");
    assert_string_equal(json_string_value(json_array_get(a, 3)), "l10");
    json_decref(a);
    logship_queue_release(&q);
}

static void test_logship_queue_take_bounded_by_bytes(void **state)
{
    (void)state;
    struct logship_queue q;
    logship_queue_init(&q, 100);
    for (int i = 0; i < 10; i++)
        logship_queue_push(&q, strdup("abcdefgh")); /* 10 bytes as JSON, +1 separator */
    uint64_t first = 0;
    size_t bytes = 35;
    json_t *a = logship_queue_take(&q, 100, &bytes, &first);
    assert_int_equal(json_array_size(a), 3);
    assert_int_equal(bytes, 2);
    json_decref(a);
    /* Escapes count: a quote or a control byte takes 6 bytes at most. */
    assert_int_equal(logship_json_size("a\"b\x01"), 2 + 1 + 6 + 1 + 6);
    /* The first item always goes, even over the budget (a beat is never empty for it). */
    bytes = 1;
    a = logship_queue_take(&q, 100, &bytes, &first);
    assert_int_equal(json_array_size(a), 1);
    assert_int_equal(bytes, 0);
    json_decref(a);
    assert_null(logship_queue_take(&q, 100, &bytes, &first));
    logship_queue_release(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logship_split_lines_and_tail),
        cmocka_unit_test(test_logship_split_long_line_is_cut),
        cmocka_unit_test(test_logship_clean_makes_valid_utf8),
        cmocka_unit_test(test_logship_queue_seq_ack_and_resend),
        cmocka_unit_test(test_logship_queue_cap_drops_oldest),
        cmocka_unit_test(test_logship_queue_take_bounded_by_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
