/*
 * torchref.c - the PyTorch comparison helpers of torchref.h.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tests/unit/torchref.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void torchref_dir_new(struct torchref_dir *d)
{
    snprintf(d->path, sizeof(d->path), "/tmp/ddp_torchref.XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

void torchref_dir_free(struct torchref_dir *d)
{
    DIR *dir = opendir(d->path);
    assert_non_null(dir);
    struct dirent *e;
    char p[384];
    while ((e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(p, sizeof(p), "%s/%s", d->path, e->d_name);
        assert_int_equal(unlink(p), 0);
    }
    assert_int_equal(closedir(dir), 0);
    assert_int_equal(rmdir(d->path), 0);
}

void torchref_write(const struct torchref_dir *d, const char *name, const void *a, size_t bytes)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", d->path, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(a, 1, bytes, f), bytes);
    assert_int_equal(fclose(f), 0);
}

void torchref_read(const struct torchref_dir *d, const char *name, void *a, size_t bytes)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/%s", d->path, name);
    FILE *f = fopen(p, "rb");
    if (!f)
        fail_msg("the PyTorch script wrote no %s", p);
    assert_int_equal(fread(a, 1, bytes, f), bytes);
    char extra;
    assert_int_equal(fread(&extra, 1, 1, f), 0);
    assert_int_equal(fclose(f), 0);
}

int torchref_run(const struct torchref_dir *d, const char *script, const char *const *args)
{
    if (access(TEST_PYTHON, X_OK) != 0) {
        print_message("skipped: %s not found: no comparison against PyTorch\n", TEST_PYTHON);
        return 77;
    }
    const char *argv[16] = {TEST_PYTHON, script, d->path};
    int argc = 3;
    for (int i = 0; args[i]; i++) {
        assert_true(argc < 15);
        argv[argc++] = args[i];
    }
    argv[argc] = NULL;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execv(TEST_PYTHON, (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (WEXITSTATUS(st) == 77) {
        print_message("skipped: python3-torch is not installed (import torch failed): no "
                      "comparison against PyTorch\n");
        return 77;
    }
    if (WEXITSTATUS(st) != 0)
        fail_msg("%s %s exited %d", TEST_PYTHON, script, WEXITSTATUS(st));
    return 0;
}

void torchref_check_close(const char *what, const float *got, const float *want, size_t n,
                          double rtol)
{
    double diff = 0.0, mag = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double dd = fabs((double)got[i] - (double)want[i]);
        if (dd > diff) {
            diff = dd;
            worst = i;
        }
        if (fabs((double)want[i]) > mag)
            mag = fabs((double)want[i]);
    }
    if (diff > rtol * (mag > 1e-6 ? mag : 1e-6))
        fail_msg("%s: element %zu is %.9g, want %.9g (max diff %.3g, max |want| %.3g, rtol %g)",
                 what, worst, (double)got[worst], (double)want[worst], diff, mag, rtol);
}

void torchref_compare(const struct torchref_dir *d, const char *what, const char *name,
                      const float *ours, size_t n)
{
    float *theirs = calloc(n + 1, sizeof(float));
    assert_non_null(theirs);
    torchref_read(d, name, theirs, n * sizeof(float));
    torchref_check_close(what, ours, theirs, n, TORCHREF_RTOL);
    free(theirs);
}

float *torchref_rand(struct rng *r, size_t n, float scale)
{
    float *a = malloc(n * sizeof(float) + sizeof(float));
    assert_non_null(a);
    for (size_t i = 0; i < n; i++)
        a[i] = (2.0f * rng_uniform(r) - 1.0f) * scale;
    return a;
}

float *torchref_zeros(size_t n)
{
    float *a = calloc(n + 1, sizeof(float));
    assert_non_null(a);
    return a;
}
