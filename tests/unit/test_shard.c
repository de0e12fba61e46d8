/*
 * test_shard.c - the shard arithmetic of ddp/shard.h: ceil(N / W) elements per rank, the
 * buffer padded to W shards, the padding at the end; every (N, W) up to 40 x 9 against a
 * brute-force count, the worked examples of the header, and the refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "ddp/shard.h"

static void test_shard_header_examples(void **state)
{
    (void)state;
    struct shard s;
    struct ddp_err err;
    size_t want10[4] = {3, 3, 3, 1}, want5[4] = {2, 2, 1, 0};
    for (int r = 0; r < 4; r++) {
        assert_int_equal(shard_of(10, 4, r, &s, &err), 0);
        assert_int_equal(s.count, 3);
        assert_int_equal(s.padded, 12);
        assert_int_equal(s.offset, (size_t)r * 3);
        assert_int_equal(s.valid, want10[r]);
        assert_int_equal(shard_of(5, 4, r, &s, &err), 0);
        assert_int_equal(s.count, 2);
        assert_int_equal(s.padded, 8);
        assert_int_equal(s.valid, want5[r]);
    }
}

/* Every element below N lies in exactly one rank's valid part, every shard is contiguous
 * and equal, and the padding is less than one element per rank. */
static void test_shard_covers_every_element_once(void **state)
{
    (void)state;
    struct ddp_err err;
    for (size_t n = 0; n <= 40; n++) {
        for (int w = 1; w <= 9; w++) {
            size_t seen = 0, next = 0;
            for (int r = 0; r < w; r++) {
                struct shard s;
                assert_int_equal(shard_of(n, w, r, &s, &err), 0);
                assert_int_equal(s.count, (n + (size_t)w - 1) / (size_t)w);
                assert_int_equal(s.padded, s.count * (size_t)w);
                assert_true(s.padded >= n && s.padded - n < (size_t)w);
                assert_int_equal(s.offset, next);
                assert_true(s.valid <= s.count);
                /* real data first, padding only after the last real element */
                if (s.valid < s.count)
                    assert_true(s.offset + s.valid >= n);
                seen += s.valid;
                next += s.count;
            }
            if (seen != n)
                fail_msg("N=%zu W=%d: the valid parts hold %zu elements", n, w, seen);
        }
    }
}

static void test_shard_large_and_refused(void **state)
{
    (void)state;
    struct shard s, untouched;
    struct ddp_err err;
    assert_int_equal(shard_of(SIZE_MAX - 7, 8, 7, &s, &err), 0);
    assert_int_equal(s.count, SIZE_MAX / 8);
    assert_int_equal(s.valid, s.count);
    memset(&untouched, 0xab, sizeof(untouched));
    s = untouched;
    assert_int_equal(shard_of(SIZE_MAX, 2, 0, &s, &err), DDP_EINVAL); /* padded overflows */
    assert_non_null(strstr(err.msg, "overflow"));
    assert_memory_equal(&s, &untouched, sizeof(s));
    assert_int_equal(shard_of(10, 0, 0, &s, &err), DDP_EINVAL);
    assert_int_equal(shard_of(10, 4, 4, &s, &err), DDP_EINVAL);
    assert_int_equal(shard_of(10, 4, -1, &s, &err), DDP_EINVAL);
    assert_memory_equal(&s, &untouched, sizeof(s));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_header_examples),
        cmocka_unit_test(test_shard_covers_every_element_once),
        cmocka_unit_test(test_shard_large_and_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
