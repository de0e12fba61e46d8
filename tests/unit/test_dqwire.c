/*
 * test_dqwire.c - server/dqwire.c: dqlite's wire format byte for byte (headers, words, text
 * padding, parameter tuples, ROWS bodies with 4-bit type headers), and decoders that refuse
 * truncated or lying input without reading past it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/buf.h"
#include "server/dqwire.h"

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_dqwire_header_and_words(void **state)
{
    struct buf b = BUF_INIT;
    size_t start;
    assert_int_equal(dqwire_handshake(&b), 0);
    assert_int_equal(dqwire_msg_begin(&b, DQWIRE_REQ_EXEC_SQL, &start), 0);
    assert_int_equal(start, 8);
    assert_int_equal(dqwire_put_u64(&b, 0x0102030405060708ULL), 0);
    assert_int_equal(dqwire_put_u32x2(&b, 7, 9), 0);
    assert_int_equal(dqwire_msg_end(&b, start), 0);
    assert_int_equal(b.len, 8 + 8 + 16);
    const uint8_t *p = (const uint8_t *)b.data;
    /* The handshake: version 1, little-endian. */
    assert_int_equal(p[0], 1);
    for (int i = 1; i < 8; i++)
        assert_int_equal(p[i], 0);
    struct dqwire_header h;
    dqwire_header_decode(p + 8, &h);
    assert_int_equal(h.words, 2);
    assert_int_equal(h.type, DQWIRE_REQ_EXEC_SQL);
    assert_int_equal(h.revision, 0);
    assert_int_equal(p[16], 0x08);
    assert_int_equal(p[23], 0x01);
    /* Two uint32 share one word, the first in the low half. */
    assert_int_equal(p[24], 7);
    assert_int_equal(p[28], 9);
    struct dqwire_cursor c;
    uint32_t lo, hi;
    uint64_t w;
    dqwire_cursor_init(&c, p + 16, 16);
    assert_int_equal(dqwire_get_u64(&c, &w), 0);
    assert_true(w == 0x0102030405060708ULL);
    assert_int_equal(dqwire_get_u32x2(&c, &lo, &hi), 0);
    assert_int_equal(lo, 7);
    assert_int_equal(hi, 9);
    assert_int_equal(dqwire_get_u64(&c, &w), DDP_EINVAL);
    buf_release(&b);
}

static void test_dqwire_text_padding(void **state)
{
    /* The NUL counts: 0 characters take 8 bytes, 7 take 8, 8 take 16. */
    const char *s[] = {"", "abcdefg", "abcdefgh", "abcdefghijklmno"};
    size_t want[] = {8, 8, 16, 16};
    for (size_t i = 0; i < 4; i++) {
        struct buf b = BUF_INIT;
        assert_int_equal(dqwire_put_text(&b, s[i]), 0);
        assert_int_equal(b.len, want[i]);
        for (size_t k = strlen(s[i]); k < b.len; k++)
            assert_int_equal(b.data[k], 0);
        struct dqwire_cursor c;
        const char *out;
        size_t len;
        dqwire_cursor_init(&c, b.data, b.len);
        assert_int_equal(dqwire_get_text(&c, &out, &len), 0);
        assert_string_equal(out, s[i]);
        assert_int_equal(len, strlen(s[i]));
        assert_int_equal(c.left, 0);
        buf_release(&b);
    }
    /* No NUL inside the buffer, or padding past its end: refused. */
    uint8_t raw[16] = "abcdefgh";
    memset(raw, 'x', sizeof raw);
    struct dqwire_cursor c;
    const char *out = NULL;
    dqwire_cursor_init(&c, raw, sizeof raw);
    assert_int_equal(dqwire_get_text(&c, &out, NULL), DDP_EINVAL);
    raw[9] = 0; /* text of 9 needs 16 bytes: only 12 given */
    dqwire_cursor_init(&c, raw, 12);
    assert_int_equal(dqwire_get_text(&c, &out, NULL), DDP_EINVAL);
    assert_null(out);
    assert_int_equal(c.left, 12);
}

static void test_dqwire_params_layout(void **state)
{
    struct buf b = BUF_INIT;
    const uint8_t blob[3] = {0xde, 0xad, 0xbe};
    struct dqwire_value v[5] = {
        {.type = DQWIRE_INTEGER, .i = -2},
        {.type = DQWIRE_FLOAT, .f = 1.5},
        {.type = DQWIRE_TEXT, .p = "hi", .len = 2},
        {.type = DQWIRE_BLOB, .p = blob, .len = 3},
        {.type = DQWIRE_NULL},
    };
    struct ddp_err e;
    assert_int_equal(dqwire_put_params(&b, v, 5, &e), 0);
    /* count + 5 types = 6 bytes, padded to one word; then 8 + 8 + 8 + (8 + 8) + 8. */
    assert_int_equal(b.len, 8 + 8 + 8 + 8 + 16 + 8);
    const uint8_t *p = (const uint8_t *)b.data;
    uint8_t head[8] = {5, 1, 2, 3, 4, 5, 0, 0};
    assert_memory_equal(p, head, 8);
    assert_int_equal(p[8], 0xfe);
    assert_int_equal(p[15], 0xff);
    assert_string_equal((const char *)p + 24, "hi");
    assert_int_equal(p[32], 3);
    assert_memory_equal(p + 40, blob, 3);

    struct dqwire_value out[8];
    size_t n;
    struct dqwire_cursor c;
    dqwire_cursor_init(&c, b.data, b.len);
    assert_int_equal(dqwire_get_params(&c, out, 8, &n), 0);
    assert_int_equal(n, 5);
    assert_int_equal(c.left, 0);
    assert_true(out[0].i == -2);
    assert_true(out[1].f == 1.5);
    assert_string_equal(out[2].p, "hi");
    assert_int_equal(out[3].len, 3);
    assert_memory_equal(out[3].p, blob, 3);
    assert_int_equal(out[4].type, DQWIRE_NULL);
    buf_release(&b);

    /* Header sizes: 0 params one word, 7 still one, 8 take two. */
    struct dqwire_value ints[8];
    for (int i = 0; i < 8; i++)
        ints[i] = (struct dqwire_value){.type = DQWIRE_INTEGER, .i = i};
    size_t sizes[] = {0, 7, 8};
    size_t want[] = {8, 8 + 7 * 8, 16 + 8 * 8};
    for (int k = 0; k < 3; k++) {
        struct buf t = BUF_INIT;
        assert_int_equal(dqwire_put_params(&t, ints, sizes[k], &e), 0);
        assert_int_equal(t.len, want[k]);
        buf_release(&t);
    }
}

static void test_dqwire_params_refused(void **state)
{
    struct buf b = BUF_INIT;
    struct ddp_err e;
    struct dqwire_value many[DQWIRE_MAX_PARAMS + 1];
    for (int i = 0; i <= DQWIRE_MAX_PARAMS; i++)
        many[i] = (struct dqwire_value){.type = DQWIRE_NULL};
    assert_int_equal(dqwire_put_params(&b, many, DQWIRE_MAX_PARAMS + 1, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "at most 255"));
    assert_int_equal(dqwire_put_params(&b, many, DQWIRE_MAX_PARAMS, &e), 0);
    buf_reset(&b);
    struct dqwire_value bad = {.type = 7};
    assert_int_equal(dqwire_put_params(&b, &bad, 1, &e), DDP_EINVAL);
    assert_string_equal(e.msg, "parameter 1: type 7 cannot be bound");
    struct dqwire_value nul = {.type = DQWIRE_TEXT, .p = "a\0b", .len = 3};
    assert_int_equal(dqwire_put_params(&b, &nul, 1, &e), DDP_EINVAL);
    assert_int_equal(b.len, 0);
    buf_release(&b);
}

/* A ROWS body by hand: columns (id, name, score), two rows, then the marker. */
static size_t rows_body(uint8_t *p, uint64_t marker)
{
    size_t o = 0;
    memset(p, 0, 256);
    put_le64(p + o, 3);
    o += 8;
    memcpy(p + o, "id", 2);
    o += 8;
    memcpy(p + o, "name", 4);
    o += 8;
    memcpy(p + o, "score", 5);
    o += 8;
    /* Row 1: INTEGER, TEXT, FLOAT: low nibble first. */
    p[o] = DQWIRE_INTEGER | (DQWIRE_TEXT << 4);
    p[o + 1] = DQWIRE_FLOAT;
    o += 8;
    put_le64(p + o, 42);
    o += 8;
    memcpy(p + o, "eightchr", 8); /* 8 characters + NUL: 16 bytes */
    o += 16;
    double f = 0.25;
    memcpy(p + o, &f, 8);
    o += 8;
    /* Row 2: NULL, BLOB, UNIXTIME. */
    p[o] = DQWIRE_NULL | (DQWIRE_BLOB << 4);
    p[o + 1] = DQWIRE_UNIXTIME;
    o += 8;
    o += 8; /* null: one zero word */
    put_le64(p + o, 2);
    p[o + 8] = 0xab;
    p[o + 9] = 0xcd;
    o += 16;
    put_le64(p + o, 1700000000);
    o += 8;
    put_le64(p + o, marker);
    return o + 8;
}

static void test_dqwire_rows_decode(void **state)
{
    uint8_t body[256];
    size_t len = rows_body(body, DQWIRE_ROWS_DONE);
    struct dqwire_rows r;
    struct ddp_err e;
    assert_int_equal(dqwire_decode_rows(body, len, &r, &e), 0);
    assert_int_equal(r.ncols, 3);
    assert_string_equal(r.cols[0], "id");
    assert_string_equal(r.cols[2], "score");
    assert_int_equal(r.nrows, 2);
    assert_int_equal(r.more, 0);
    assert_int_equal(r.vals[0].type, DQWIRE_INTEGER);
    assert_true(r.vals[0].i == 42);
    assert_string_equal(r.vals[1].p, "eightchr");
    assert_true(r.vals[2].f == 0.25);
    assert_int_equal(r.vals[3].type, DQWIRE_NULL);
    assert_int_equal(r.vals[4].type, DQWIRE_BLOB);
    assert_int_equal(r.vals[4].len, 2);
    assert_int_equal(((const uint8_t *)r.vals[4].p)[1], 0xcd);
    assert_true(r.vals[5].i == 1700000000);
    dqwire_rows_release(&r);
    dqwire_rows_release(NULL);

    len = rows_body(body, DQWIRE_ROWS_PART);
    assert_int_equal(dqwire_decode_rows(body, len, &r, &e), 0);
    assert_int_equal(r.more, 1);
    dqwire_rows_release(&r);

    /* No rows at all: the names, then the marker. */
    uint8_t empty[24] = {0};
    put_le64(empty, 1);
    memcpy(empty + 8, "x", 1);
    put_le64(empty + 16, DQWIRE_ROWS_DONE);
    assert_int_equal(dqwire_decode_rows(empty, sizeof empty, &r, &e), 0);
    assert_int_equal(r.nrows, 0);
    dqwire_rows_release(&r);
}

static void test_dqwire_rows_refused(void **state)
{
    uint8_t body[256];
    size_t len = rows_body(body, DQWIRE_ROWS_DONE);
    struct dqwire_rows r = {.nrows = 99};
    struct ddp_err e;
    /* Every truncation is refused, and r is left as it was. */
    for (size_t cut = 0; cut < len; cut++) {
        assert_int_equal(dqwire_decode_rows(body, cut, &r, &e), DDP_EINVAL);
        assert_int_equal(r.nrows, 99);
    }
    /* Bytes after the marker. */
    assert_int_equal(dqwire_decode_rows(body, len + 8, &r, &e), DDP_EINVAL);
    /* A type nibble that is no type. */
    uint8_t bad[256];
    memcpy(bad, body, len);
    bad[32] = 0x0e | (DQWIRE_TEXT << 4);
    assert_int_equal(dqwire_decode_rows(bad, len, &r, &e), DDP_EINVAL);
    assert_non_null(strstr(e.msg, "row 0 column 0"));
    /* A column count the body cannot hold. */
    memcpy(bad, body, len);
    put_le64(bad, 1ULL << 60);
    assert_int_equal(dqwire_decode_rows(bad, len, &r, &e), DDP_EINVAL);
    put_le64(bad, 0);
    assert_int_equal(dqwire_decode_rows(bad, len, &r, &e), DDP_EINVAL);
    /* A blob length past the end. */
    memcpy(bad, body, len);
    put_le64(bad + 88, 1ULL << 62);
    assert_int_equal(dqwire_decode_rows(bad, len, &r, &e), DDP_EINVAL);
    assert_int_equal(r.nrows, 99);
}

static void test_dqwire_responses(void **state)
{
    uint8_t b[64] = {0};
    uint64_t code, id, a, n;
    const char *msg, *addr;
    put_le64(b, 2067);
    memcpy(b + 8, "UNIQUE constraint failed: t.x", 29);
    assert_int_equal(dqwire_decode_failure(b, 40, &code, &msg), 0);
    assert_true(code == 2067);
    assert_string_equal(msg, "UNIQUE constraint failed: t.x");
    assert_int_equal(dqwire_decode_failure(b, 32, &code, &msg), DDP_EINVAL);

    memset(b, 0, sizeof b);
    put_le64(b, 3);
    memcpy(b + 8, "127.0.0.1:9001", 14);
    assert_int_equal(dqwire_decode_server(b, 24, &id, &addr), 0);
    assert_true(id == 3);
    assert_string_equal(addr, "127.0.0.1:9001");

    uint32_t db, st;
    memset(b, 0, sizeof b);
    b[0] = 1;
    b[4] = 5;
    b[8] = 2;
    assert_int_equal(dqwire_decode_stmt(b, 16, &db, &st, &n), 0);
    assert_int_equal(db, 1);
    assert_int_equal(st, 5);
    assert_true(n == 2);
    assert_int_equal(dqwire_decode_stmt(b, 8, &db, &st, &n), DDP_EINVAL);
    assert_int_equal(dqwire_decode_result(b, 16, &a, &n), 0);
    assert_int_equal(dqwire_decode_db(b, 8, &db), 0);
    assert_int_equal(dqwire_decode_welcome(b, 8, &a), 0);
    assert_int_equal(dqwire_decode_welcome(b, 7, &a), DDP_EINVAL);

    /* SERVERS, format 1: two members. */
    memset(b, 0, sizeof b);
    put_le64(b, 2);
    put_le64(b + 8, 1);
    memcpy(b + 16, "a:1", 3);
    put_le64(b + 24, DQWIRE_VOTER);
    put_le64(b + 32, 2);
    memcpy(b + 40, "b:2", 3);
    put_le64(b + 48, DQWIRE_SPARE);
    struct dqwire_server s[2];
    size_t cnt;
    assert_int_equal(dqwire_decode_servers(b, 56, s, 2, &cnt), 0);
    assert_int_equal(cnt, 2);
    assert_string_equal(s[1].address, "b:2");
    assert_true(s[1].role == DQWIRE_SPARE);
    assert_int_equal(dqwire_decode_servers(b, 56, s, 1, &cnt), DDP_ETOOBIG);
    assert_int_equal(dqwire_decode_servers(b, 48, s, 2, &cnt), DDP_EINVAL);
    assert_string_equal(dqwire_response_name(DQWIRE_RESP_ROWS), "ROWS");
    assert_string_equal(dqwire_response_name(99), "?");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dqwire_header_and_words),
        cmocka_unit_test(test_dqwire_text_padding),
        cmocka_unit_test(test_dqwire_params_layout),
        cmocka_unit_test(test_dqwire_params_refused),
        cmocka_unit_test(test_dqwire_rows_decode),
        cmocka_unit_test(test_dqwire_rows_refused),
        cmocka_unit_test(test_dqwire_responses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
