/*
 * errfile.c - reading a failed worker's TORCHELASTIC_ERROR_FILE (errfile.h).
 */
#include "agent/errfile.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xalloc.h"

void errfile_free(struct errfile *e)
{
    if (!e)
        return;
    free(e->message);
    free(e->frame);
    free(e);
}

/* The innermost 'File "...", line N, in f' line of a Python traceback, or NULL. */
static char *errfile_frame(const char *stack)
{
    const char *last = NULL;
    for (const char *p = stack; p && (p = strstr(p, "File \"")) != NULL; p++)
        last = p;
    if (!last)
        return NULL;
    size_t n = strcspn(last, "\n");
    return xstrndup(last, n > 512 ? 512 : n);
}

int errfile_parse(const char *text, struct errfile **out, struct ddp_err *err)
{
    json_error_t je;
    json_t *root = json_loads(text, 0, &je);
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set(err, DDP_EINVAL, "not a JSON object: %s", je.text);
    }
    json_t *m = json_object_get(root, "message");
    const char *msg = NULL, *stack = NULL;
    json_t *ts = NULL; /* torch writes a string of seconds; an integer is taken too */
    if (json_is_string(m)) {
        msg = json_string_value(m);
    } else if (json_is_object(m)) {
        msg = json_string_value(json_object_get(m, "message"));
        json_t *x = json_object_get(m, "extraInfo");
        stack = json_string_value(json_object_get(x, "py_callstack"));
        ts = json_object_get(x, "timestamp");
    }
    if (!msg || !*msg) {
        json_decref(root);
        return err_set(err, DDP_EINVAL, "no 'message' in it");
    }
    struct errfile *e = xcalloc(1, sizeof(*e));
    size_t n = strlen(msg);
    e->message = xstrndup(msg, n > 1024 ? 1024 : n);
    /* one line: the message's first line is what a reason can hold */
    e->message[strcspn(e->message, "\n")] = '\0';
    e->frame = stack ? errfile_frame(stack) : NULL;
    if (json_is_integer(ts))
        e->timestamp = json_integer_value(ts);
    else if (json_is_string(ts))
        e->timestamp = strtoll(json_string_value(ts), NULL, 10);
    json_decref(root);
    *out = e;
    return 0;
}

int errfile_read(int dir_fd, const char *name, const char *path, struct errfile **out,
                 struct ddp_err *err)
{
    int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? DDP_ENOTFOUND
                               : err_set(err, DDP_EIO, "%s: %s", path,
                                         errno == ELOOP ? "a symbolic link" : strerror(errno));
    struct stat st;
    int rc = 0;
    char *text = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        rc = err_set(err, DDP_EINVAL, "%s: not a regular file", path);
        goto out;
    }
    /* A second link may be one the job made to a file that is not its own. */
    if (st.st_nlink != 1) {
        rc = err_set(err, DDP_EINVAL, "%s: %ld links to that file, a worker's has one", path,
                     (long)st.st_nlink);
        goto out;
    }
    if (st.st_size > ERRFILE_MAX) {
        rc = err_set(err, DDP_EINVAL, "%s: %lld bytes, at most %d", path, (long long)st.st_size,
                     ERRFILE_MAX);
        goto out;
    }
    text = xcalloc((size_t)st.st_size + 1, 1);
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, text + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    text[got] = '\0';
    struct ddp_err pe;
    rc = errfile_parse(text, out, &pe);
    if (rc)
        err_set(err, rc, "%s: %.400s", path, pe.msg);
out:
    free(text);
    close(fd);
    return rc;
}
