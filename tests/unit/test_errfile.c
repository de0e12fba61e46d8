/*
 * test_errfile.c - a failed worker's TORCHELASTIC_ERROR_FILE (agent/errfile.c): torch's
 * @record shape, a plain message, the innermost frame and the timestamp; a link, a FIFO, a
 * file of two links, a file too big and one without a message are refused; no file is
 * DDP_ENOTFOUND; the file is read in the folder opened first even when its path is made to
 * lead elsewhere.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/errfile.h"
#include "common/fsutil.h"
#include "common/xalloc.h"

static void test_errfile_torch_record_shape(void **state)
{
    (void)state;
    struct errfile *e = NULL;
    const char *text =
        "{\"message\": {\"message\": \"ValueError: bad batch\", \"extraInfo\": {\"py_callstack\": "
        "\"Traceback (most recent call last):\\n  File \\\"/x/run.py\\\", line 20, in main\\n"
        "    step(7)\\n  File \\\"/x/run.py\\\", line 7, in step\\n    raise ValueError\\n"
        "ValueError: bad batch\\n\", \"timestamp\": \"1733090000\"}}}";
    assert_int_equal(errfile_parse(text, &e, NULL), 0);
    assert_string_equal(e->message, "ValueError: bad batch");
    assert_string_equal(e->frame, "File \"/x/run.py\", line 7, in step");
    assert_int_equal(e->timestamp, 1733090000);
    errfile_free(e);
    assert_int_equal(errfile_parse("{\"message\": \"boom\\nsecond line\"}", &e, NULL), 0);
    assert_string_equal(e->message, "boom");
    assert_null(e->frame);
    assert_int_equal(e->timestamp, 0);
    errfile_free(e);
    struct ddp_err err;
    assert_int_equal(errfile_parse("{\"nothing\": 1}", &e, &err), DDP_EINVAL);
    assert_int_equal(errfile_parse("not json", &e, &err), DDP_EINVAL);
}

static void test_errfile_read_refuses_what_is_not_a_small_regular_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/ddp-test-errfile-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *good = xasprintf("%s/good.json", dir), *link = xasprintf("%s/link.json", dir);
    char *fifo = xasprintf("%s/fifo.json", dir), *big = xasprintf("%s/big.json", dir);
    char *none = xasprintf("%s/none.json", dir);
    const char *text = "{\"message\": \"RuntimeError: x\"}";
    assert_int_equal(fs_write_atomic(good, text, strlen(text), 0600, NULL), 0);
    assert_int_equal(symlink(good, link), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char *pad = xcalloc(ERRFILE_MAX + 2, 1);
    memset(pad, ' ', ERRFILE_MAX + 1);
    assert_int_equal(fs_write_atomic(big, pad, ERRFILE_MAX + 1, 0600, NULL), 0);
    struct errfile *e = NULL;
    struct ddp_err err;
    assert_int_equal(errfile_read(AT_FDCWD, good, good, &e, &err), 0);
    assert_string_equal(e->message, "RuntimeError: x");
    errfile_free(e);
    assert_int_equal(errfile_read(AT_FDCWD, none, none, &e, &err), DDP_ENOTFOUND);
    assert_int_equal(errfile_read(AT_FDCWD, link, link, &e, &err), DDP_EIO);
    assert_non_null(strstr(err.msg, "a symbolic link"));
    assert_int_equal(errfile_read(AT_FDCWD, fifo, fifo, &e, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(errfile_read(AT_FDCWD, big, big, &e, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "at most"));
    char *twin = xasprintf("%s/twin.json", dir);
    assert_int_equal(linkat(AT_FDCWD, good, AT_FDCWD, twin, 0), 0); /* a second name for the file */
    assert_int_equal(errfile_read(AT_FDCWD, good, good, &e, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "2 links"));
    free(twin);
    fs_remove_tree(dir, NULL);
    free(pad);
    free(good);
    free(link);
    free(fifo);
    free(big);
    free(none);
}

/* The agent opens the generation's folder when the worker starts; a job that then moves the
 * folder away and puts a link to another folder in its place does not redirect the read. */
static void test_errfile_read_in_the_folder_opened_first(void **state)
{
    (void)state;
    char dir[] = "/tmp/ddp-test-errfile-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *gen = xasprintf("%s/gen-1", dir), *moved = xasprintf("%s/gen-1.moved", dir);
    char *other = xasprintf("%s/other", dir);
    assert_int_equal(mkdir(gen, 0700), 0);
    assert_int_equal(mkdir(other, 0700), 0);
    char *mine = xasprintf("%s/rank-0.error.json", gen);
    char *theirs = xasprintf("%s/rank-0.error.json", other);
    const char *a = "{\"message\": \"mine\"}", *b = "{\"message\": \"not the job's\"}";
    assert_int_equal(fs_write_atomic(mine, a, strlen(a), 0600, NULL), 0);
    assert_int_equal(fs_write_atomic(theirs, b, strlen(b), 0600, NULL), 0);
    int gen_fd = open(gen, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    assert_true(gen_fd >= 0);
    assert_int_equal(rename(gen, moved), 0);
    assert_int_equal(symlink(other, gen), 0);
    struct errfile *e = NULL;
    struct ddp_err err;
    assert_int_equal(errfile_read(gen_fd, "rank-0.error.json", mine, &e, &err), 0);
    assert_string_equal(e->message, "mine");
    errfile_free(e);
    close(gen_fd);
    fs_remove_tree(dir, NULL);
    free(gen);
    free(moved);
    free(other);
    free(mine);
    free(theirs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errfile_torch_record_shape),
        cmocka_unit_test(test_errfile_read_refuses_what_is_not_a_small_regular_file),
        cmocka_unit_test(test_errfile_read_in_the_folder_opened_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
