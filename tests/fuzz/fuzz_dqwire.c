/*
 * fuzz_dqwire.c - libFuzzer target for the dqlite wire decoders (server/dqwire.c). The first
 * byte picks the decoder, the rest is a response body as a dqlite node would send it. Every
 * decoder either refuses the bytes or yields values that lie inside them: text and blob
 * pointers are checked against the input's bounds, and a decoded parameter tuple encodes
 * back to the bytes it came from.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "server/dqwire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void inside(const uint8_t *body, size_t len, const void *p, size_t n)
{
    const uint8_t *q = p;
    if (q < body || q + n > body + len)
        abort();
}

static void check_values(const uint8_t *body, size_t len, const struct dqwire_value *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (v[i].type == DQWIRE_TEXT || v[i].type == DQWIRE_ISO8601) {
            inside(body, len, v[i].p, v[i].len + 1);
            if (strlen(v[i].p) != v[i].len)
                abort();
        } else if (v[i].type == DQWIRE_BLOB) {
            inside(body, len, v[i].p, v[i].len);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* A private copy, so that a read past the body is a read past a heap block (ASan). */
    size_t len = size - 1;
    uint8_t *body = malloc(len ? len : 1);
    memcpy(body, data + 1, len);
    uint64_t a, b;
    uint32_t x, y;
    const char *s;
    switch (data[0] % 6) {
    case 0: {
        struct dqwire_rows r;
        struct ddp_err e;
        if (dqwire_decode_rows(body, len, &r, &e) == 0) {
            if (r.ncols == 0)
                abort();
            for (size_t i = 0; i < r.ncols; i++)
                inside(body, len, r.cols[i], strlen(r.cols[i]) + 1);
            check_values(body, len, r.vals, r.nrows * r.ncols);
            dqwire_rows_release(&r);
        }
        break;
    }
    case 1: {
        struct dqwire_value v[DQWIRE_MAX_PARAMS];
        size_t n;
        struct dqwire_cursor c;
        dqwire_cursor_init(&c, body, len);
        if (dqwire_get_params(&c, v, DQWIRE_MAX_PARAMS, &n) == 0) {
            check_values(body, len, v, n);
            /* Every decoded tuple without UNIXTIME (which only rows carry) re-encodes to
             * the same length it was read from. */
            int bindable = 1;
            for (size_t i = 0; i < n; i++)
                bindable &= v[i].type != DQWIRE_UNIXTIME;
            if (bindable) {
                struct buf out = BUF_INIT;
                if (dqwire_put_params(&out, v, n, NULL) != 0 || out.len != len - c.left)
                    abort();
                buf_release(&out);
            }
        }
        break;
    }
    case 2:
        if (dqwire_decode_failure(body, len, &a, &s) == 0)
            inside(body, len, s, strlen(s) + 1);
        break;
    case 3:
        if (dqwire_decode_server(body, len, &a, &s) == 0)
            inside(body, len, s, strlen(s) + 1);
        break;
    case 4: {
        struct dqwire_server sv[8];
        size_t n;
        if (dqwire_decode_servers(body, len, sv, 8, &n) == 0) {
            for (size_t i = 0; i < n; i++)
                inside(body, len, sv[i].address, strlen(sv[i].address) + 1);
        }
        break;
    }
    default:
        (void)dqwire_decode_stmt(body, len, &x, &y, &a);
        (void)dqwire_decode_result(body, len, &a, &b);
        break;
    }
    free(body);
    return 0;
}
