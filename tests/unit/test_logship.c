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

/* A line of exactly the limit, then its '\n', is one line: no empty line after it. */
static void test_logship_split_exact_limit_is_one_line(void **state)
{
    (void)state;
    struct logship_splitter s = {0};
    struct lines l = {0};
    char *big = malloc(LOGSHIP_LINE_MAX + 1);
    memset(big, 'x', LOGSHIP_LINE_MAX);
    big[LOGSHIP_LINE_MAX] = '\n';
    logship_split(&s, big, LOGSHIP_LINE_MAX + 1, collect, &l);
    logship_split_flush(&s, collect, &l);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.len[0], LOGSHIP_LINE_MAX);
    /* The same with the '\n' in a later read, and with a piece limit below the buffer. */
    lines_free(&l);
    memset(&l, 0, sizeof(l));
    logship_split_init(&s, 100);
    logship_split(&s, big, 100, collect, &l);
    assert_int_equal(l.n, 0);
    logship_split(&s, "\n", 1, collect, &l);
    logship_split_flush(&s, collect, &l);
    assert_int_equal(l.n, 1);
    assert_int_equal(l.len[0], 100);
    free(big);
    lines_free(&l);
}

/*
 * A 10,000-byte line cut for rank 1234's "[rank 1234] " prefix: every piece with its prefix
 * fits in LOGSHIP_LINE_MAX (what ddpd keeps), and the pieces put together are the line, so no
 * byte is lost on the way.
 */
static void test_logship_split_leaves_room_for_prefix(void **state)
{
    (void)state;
    const char *prefix = "[rank 1234] ";
    struct logship_splitter s;
    logship_split_init(&s, logship_piece_max(prefix));
    struct lines l = {0};
    size_t n = 10000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    big[n] = '\n';
    logship_split(&s, big, n + 1, collect, &l);
    logship_split_flush(&s, collect, &l);
    assert_int_equal(l.n, 3);
    size_t off = 0;
    for (size_t i = 0; i < l.n; i++) {
        char *c = logship_clean(prefix, l.v[i], l.len[i]);
        assert_true(strlen(c) <= LOGSHIP_LINE_MAX);
        assert_int_equal(strlen(c), strlen(prefix) + l.len[i]);
        free(c);
        assert_true(off + l.len[i] <= n);
        assert_memory_equal(l.v[i], big + off, l.len[i]);
        off += l.len[i];
    }
    assert_int_equal(off, n);
    free(big);
    lines_free(&l);
}

/* A cut never falls inside a UTF-8 character: each piece stays valid, nothing becomes '?'. */
static void test_logship_split_cuts_on_utf8_boundary(void **state)
{
    (void)state;
    struct logship_splitter s;
    logship_split_init(&s, 10);
    struct lines l = {0};
    /* "ab" then four 3-byte characters: a cut at 10 bytes would split the third. */
    static const char in[] = "ab\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\n";
    logship_split(&s, in, sizeof(in) - 1, collect, &l);
    assert_int_equal(l.n, 2);
    assert_int_equal(l.len[0], 10 - 2);
    assert_int_equal(l.len[1], 6);
    for (size_t i = 0; i < l.n; i++) {
        char *c = logship_clean(NULL, l.v[i], l.len[i]);
        assert_memory_equal(c, l.v[i], l.len[i]);
        free(c);
    }
    lines_free(&l);
}

/*
 * Carriage returns: a line of exactly the limit ended by "\r\n" is one line (not a piece and
 * an empty line), and a '\r' inside a long line (a progress bar) is not lost at a cut, where
 * logship_clean() would take it for a line end.
 */
static void test_logship_split_keeps_carriage_returns(void **state)
{
    (void)state;
    struct logship_splitter s;
    logship_split_init(&s, 8);
    struct lines l = {0};
    logship_split(&s, "12345678\r\n", 10, collect, &l);
    assert_int_equal(l.n, 1);
    char *c = logship_clean(NULL, l.v[0], l.len[0]);
    assert_string_equal(c, "12345678");
    free(c);
    lines_free(&l);
    memset(&l, 0, sizeof(l));
    static const char bar[] = "1234567\r890\r1234567\r89\n";
    logship_split(&s, bar, sizeof(bar) - 1, collect, &l);
    logship_split_flush(&s, collect, &l);
    char joined[64];
    size_t off = 0;
    for (size_t i = 0; i < l.n; i++) {
        c = logship_clean(NULL, l.v[i], l.len[i]);
        size_t k = strlen(c);
        assert_true(k <= 8 && off + k < sizeof(joined));
        memcpy(joined + off, c, k);
        off += k;
        free(c);
    }
    joined[off] = '\0';
    assert_string_equal(joined, "1234567\r890\r1234567\r89");
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
        cmocka_unit_test(test_logship_split_exact_limit_is_one_line),
        cmocka_unit_test(test_logship_split_leaves_room_for_prefix),
        cmocka_unit_test(test_logship_split_cuts_on_utf8_boundary),
        cmocka_unit_test(test_logship_split_keeps_carriage_returns),
        cmocka_unit_test(test_logship_clean_makes_valid_utf8),
        cmocka_unit_test(test_logship_queue_seq_ack_and_resend),
        cmocka_unit_test(test_logship_queue_cap_drops_oldest),
        cmocka_unit_test(test_logship_queue_take_bounded_by_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
