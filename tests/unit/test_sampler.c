/*
 * test_sampler.c - DistributedSampler semantics: shuffle by seed + epoch, padding by
 * repetition from the start, rank r takes r, r+W, ...; and the property DDP equivalence
 * rests on: step s of W ranks with batch B covers step s of one process with batch W*B.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "ddp/sampler.h"

static void test_sampler_single_rank_is_a_permutation(void **state)
{
    (void)state;
    struct sampler s;
    struct ddp_err err;
    assert_int_equal(sampler_init(&s, 100, 0, 1, 5, 1, &err), 0);
    assert_int_equal(s.num_samples, 100);
    char seen[100] = {0};
    int moved = 0;
    for (size_t i = 0; i < 100; i++) {
        assert_true(s.indices[i] < 100);
        assert_int_equal(seen[s.indices[i]], 0);
        seen[s.indices[i]] = 1;
        moved += s.indices[i] != i;
    }
    assert_true(moved > 50);
    sampler_release(&s);
    assert_int_equal(sampler_init(&s, 10, 0, 1, 5, 0, &err), 0);
    for (size_t i = 0; i < 10; i++)
        assert_int_equal(s.indices[i], i);
    sampler_release(&s);
}

static void test_sampler_pads_and_strides(void **state)
{
    (void)state;
    /* n = 10, W = 3: 4 each, 12 positions, positions 10 and 11 repeat perm[0], perm[1]. */
    struct sampler s[3], one;
    struct ddp_err err;
    assert_int_equal(sampler_init(&one, 10, 0, 1, 9, 1, &err), 0);
    sampler_set_epoch(&one, 4);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(sampler_init(&s[r], 10, r, 3, 9, 1, &err), 0);
        sampler_set_epoch(&s[r], 4);
        assert_int_equal(s[r].num_samples, 4);
    }
    for (size_t p = 0; p < 12; p++)
        assert_int_equal(s[p % 3].indices[p / 3], one.indices[p % 10]);
    for (int r = 0; r < 3; r++)
        sampler_release(&s[r]);
    sampler_release(&one);
    /* More ranks than samples: padding wraps more than once. */
    assert_int_equal(sampler_init(&s[0], 2, 4, 5, 1, 0, &err), 0);
    assert_int_equal(s[0].num_samples, 1);
    assert_int_equal(s[0].indices[0], 0); /* position 4 -> perm[4 % 2] */
    sampler_release(&s[0]);
}

static void test_sampler_epoch_changes_order_deterministically(void **state)
{
    (void)state;
    struct sampler a, b;
    struct ddp_err err;
    assert_int_equal(sampler_init(&a, 50, 1, 2, 3, 1, &err), 0);
    assert_int_equal(sampler_init(&b, 50, 1, 2, 3, 1, &err), 0);
    sampler_set_epoch(&a, 2);
    sampler_set_epoch(&b, 2);
    assert_memory_equal(a.indices, b.indices, a.num_samples * sizeof(size_t));
    sampler_set_epoch(&b, 3);
    assert_memory_not_equal(a.indices, b.indices, a.num_samples * sizeof(size_t));
    sampler_set_epoch(&b, 2);
    assert_memory_equal(a.indices, b.indices, a.num_samples * sizeof(size_t));
    sampler_release(&a);
    sampler_release(&b);
}

static int cmp_size(const void *x, const void *y)
{
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? -1 : a > b;
}

static void test_sampler_global_batch_equivalence(void **state)
{
    (void)state;
    enum { N = 96, W = 4, B = 3 };
    struct sampler r[W], one;
    struct ddp_err err;
    assert_int_equal(sampler_init(&one, N, 0, 1, 77, 1, &err), 0);
    sampler_set_epoch(&one, 1);
    for (int i = 0; i < W; i++) {
        assert_int_equal(sampler_init(&r[i], N, i, W, 77, 1, &err), 0);
        sampler_set_epoch(&r[i], 1);
    }
    for (size_t step = 0; step < N / (W * B); step++) {
        size_t got[W * B], want[W * B];
        for (int i = 0; i < W; i++)
            for (int k = 0; k < B; k++)
                got[i * B + k] = r[i].indices[step * B + (size_t)k];
        for (int k = 0; k < W * B; k++)
            want[k] = one.indices[step * W * B + (size_t)k];
        qsort(got, W * B, sizeof(size_t), cmp_size);
        qsort(want, W * B, sizeof(size_t), cmp_size);
        assert_memory_equal(got, want, sizeof(got));
    }
    for (int i = 0; i < W; i++)
        sampler_release(&r[i]);
    sampler_release(&one);
}

static void test_sampler_rejects_bad_arguments(void **state)
{
    (void)state;
    struct sampler s;
    struct ddp_err err;
    assert_int_equal(sampler_init(&s, 0, 0, 1, 0, 1, &err), DDP_EINVAL);
    assert_int_equal(sampler_init(&s, 5, 2, 2, 0, 1, &err), DDP_EINVAL);
    assert_int_equal(sampler_init(&s, 5, -1, 2, 0, 1, &err), DDP_EINVAL);
    sampler_release(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sampler_single_rank_is_a_permutation),
        cmocka_unit_test(test_sampler_pads_and_strides),
        cmocka_unit_test(test_sampler_epoch_changes_order_deterministically),
        cmocka_unit_test(test_sampler_global_batch_equivalence),
        cmocka_unit_test(test_sampler_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
