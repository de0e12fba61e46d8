/*
 * test_train.c - the train loop's small pure pieces: the samples/s formatting of the epoch
 * line, the cosine learning-rate schedule, the trace file format the overlap test reads,
 * and the CPU model instance (model_ops_cpu.c), which must train exactly like the model and
 * optimizer it wraps.
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
#include "trainer/model_ops.h"
#include "trainer/optim.h"
#include "trainer/train.h"

static void test_train_format_thousands(void **state)
{
    (void)state;
    char b[32];
    const struct {
        double v;
        const char *want;
    } cases[] = {{0, "0"},          {999, "999"},        {1000, "1,000"},
                 {14250, "14,250"}, {14249.6, "14,250"}, {1234567, "1,234,567"},
                 {-5, "0"},         {100000, "100,000"}};
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

/* The CPU instance against model.c + optim.c driven by hand: the same tensors, and after
 * a few steps (with a gradient scale, as the deferred average gives) bit-identical
 * parameters, momentum and predictions. */
static void test_train_cpu_inst_matches_model(void **state)
{
    (void)state;
    static const int w[3] = {5, 4, 3};
    struct ddp_err err;
    struct model *m1 = NULL, *m2 = NULL;
    assert_int_equal(model_new(w, 3, 8, 3, &m1, &err), 0);
    assert_int_equal(model_new(w, 3, 8, 3, &m2, &err), 0);
    struct model_inst *mi = model_inst_cpu_new(m1, 0.9f, 0.01f);
    const struct model_ops *ops = mi->ops;
    struct optim o2;
    optim_init(&o2, m2, 0.0f, 0.9f, 0.01f);
    assert_string_equal(ops->name, "cpu");
    assert_null(ops->close_device);
    assert_int_equal(ops->param_count(mi), model_param_count(m2));
    assert_int_equal(ops->tensor_count(mi), 4);
    for (int t = 0; t < 4; t++)
        assert_int_equal(ops->tensor_size(mi, t), model_tensor_size(m2, t));
    for (int l = 0; l < 2; l++) {
        int first = -1, count = -1;
        ops->layer_tensors(mi, l, &first, &count);
        assert_int_equal(first, 2 * l);
        assert_int_equal(count, 2);
        assert_int_equal(model_tensor_layer(first), l);
    }
    assert_int_equal(ops->sync_to_device(mi, &err), 0);
    float x[8 * 5];
    uint8_t y[8];
    for (int i = 0; i < 8 * 5; i++)
        x[i] = (float)((i * 37) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8; i++)
        y[i] = (uint8_t)(i % 3);
    for (int s = 0; s < 3; s++) {
        double l1 = 0.0, l2 = 0.0;
        float lr = 0.05f / (float)(s + 1);
        assert_int_equal(ops->forward(mi, x, y, 8, &l1, &err), 0);
        assert_int_equal(ops->backward(mi, NULL, &err), 0);
        assert_int_equal(ops->step(mi, lr, 0.5f, &err), 0);
        assert_int_equal(model_forward(m2, x, y, 8, &l2, &err), 0);
        assert_int_equal(model_backward(m2, NULL, &err), 0);
        o2.lr = lr;
        optim_step(&o2, m2, 0.5f);
        assert_true(l1 == l2);
    }
    assert_int_equal(ops->sync_to_host(mi, &err), 0);
    size_t bytes = model_param_count(m2) * sizeof(float);
    assert_memory_equal(ops->params(mi), model_params(m2), bytes);
    assert_memory_equal(ops->momentum(mi), o2.buf, bytes);
    size_t c1 = 0;
    assert_int_equal(ops->count_correct(mi, x, y, 8, &c1, &err), 0);
    assert_int_equal(c1, model_count_correct(m2, x, y, 8));
    ops->free(mi);
    ops->free(NULL);
    optim_release(&o2);
    model_free(m2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train_format_thousands),
        cmocka_unit_test(test_train_cosine_schedule),
        cmocka_unit_test(test_train_trace_format),
        cmocka_unit_test(test_train_cpu_inst_matches_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
