/*
 * test_train.c - the train loop's small pure pieces: the samples/s formatting of the epoch
 * line, the cosine learning-rate schedule, and the trace file format the overlap test reads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "ddp/trace.h"
#include "trainer/train.h"

static void test_train_format_thousands(void **state)
{
    (void)state;
    char b[32];
    const struct {
        double v;
        const char *want;
    } cases[] = {{0, "0"},       {999, "999"},         {1000, "1,000"},
                 {14250, "14,250"}, {14249.6, "14,250"}, {1234567, "1,234,567"},
                 {-5, "0"},      {100000, "100,000"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        train_format_thousands(cases[i].v, b, sizeof(b));
        assert_string_equal(b, cases[i].want);
    }
    char small[4];
    train_format_thousands(1234567, small, sizeof(small));
    assert_int_equal(strlen(small), 3);
}

static void test_train_cosine_schedule(void **state)
{
    (void)state;
    assert_float_equal(train_lr_at(0.04, 1, 0, 10), 0.04, 1e-12);
    assert_float_equal(train_lr_at(0.04, 1, 5, 10), 0.02, 1e-12);
    assert_true(train_lr_at(0.04, 1, 9, 10) < 0.001);
    assert_true(train_lr_at(0.04, 1, 9, 10) > 0.0);
    for (uint32_t e = 1; e < 10; e++)
        assert_true(train_lr_at(0.04, 1, e, 10) < train_lr_at(0.04, 1, e - 1, 10));
    assert_float_equal(train_lr_at(0.04, 0, 7, 10), 0.04, 1e-12);
}

static void test_train_trace_format(void **state)
{
    (void)state;
    struct trace *t = trace_new(3);
    trace_set_step(t, 7);
    trace_event(t, TRACE_BWD_BEGIN, 2);
    trace_event(t, TRACE_AR_ISSUE, 0);
    trace_event(t, TRACE_BWD_END, 0);
    trace_event(t, TRACE_AR_DONE, 0); /* over capacity: counted, dropped */
    trace_event(NULL, TRACE_AR_DONE, 0);
    assert_int_equal(trace_count(t), 3);
    char path[] = "/tmp/test_train_trace.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct ddp_err err;
    assert_int_equal(trace_write(t, path, &err), 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fs_read_all(path, 4096, &text, &len, &err), 0);
    long long t1, t2, t3;
    unsigned s1, s2, s3;
    int i1, i2, i3;
    char k1[16], k2[16], k3[16];
    int dropped = 0;
    assert_int_equal(sscanf(text, "%lld %u %15s %d\n%lld %u %15s %d\n%lld %u %15s %d\n# dropped %d",
                            &t1, &s1, k1, &i1, &t2, &s2, k2, &i2, &t3, &s3, k3, &i3, &dropped),
                     13);
    assert_string_equal(k1, "bwd_begin");
    assert_string_equal(k2, "ar_issue");
    assert_string_equal(k3, "bwd_end");
    assert_int_equal(s1, 7);
    assert_int_equal(i1, 2);
    assert_true(t1 <= t2 && t2 <= t3);
    assert_int_equal(dropped, 1);
    free(text);
    unlink(path);
    trace_free(t);
    trace_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_format_thousands),
        cmocka_unit_test(test_train_cosine_schedule),
        cmocka_unit_test(test_train_trace_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
