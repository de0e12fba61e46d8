/*
 * fsutil.c - atomic writes, bounded reads, folder helpers.
 */
#include "common/fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"

/* fsyncs the folder holding path; 0, or -1 with errno set and *what "open" or "fsync". */
static int sync_parent(const char *path, char *dir, size_t size, const char **what)
{
    snprintf(dir, size, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        snprintf(dir, size, ".");
    else if (slash == dir)
        dir[1] = '\0';
    else
        *slash = '\0';
    *what = "open";
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    *what = "fsync";
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc == 0 ? 0 : -1;
}

int fs_sync_dir_of(const char *path, struct ddp_err *err)
{
    char dir[PATH_MAX];
    const char *what = "";
    if (sync_parent(path, dir, sizeof(dir), &what) != 0)
        return err_set(err, DDP_EIO, "%s folder %s: %s", what, dir, strerror(errno));
    return 0;
}

int fs_atomic_open(struct fs_atomic *a, const char *path, mode_t mode, struct ddp_err *err)
{
    a->path = path;
    a->fd = -1;
    a->written = a->done = 0;
    a->tmp[0] = '\0';
    int n = snprintf(a->tmp, sizeof(a->tmp), "%s.tmp.XXXXXX", path);
    if (n < 0 || (size_t)n >= sizeof(a->tmp)) {
        a->tmp[0] = '\0';
        return err_set(err, DDP_EINVAL, "path too long: %s", path);
    }
    a->fd = mkostemp(a->tmp, O_CLOEXEC);
    if (a->fd < 0) {
        a->tmp[0] = '\0';
        return err_set(err, DDP_EIO, "create temp file for %s: %s", path, strerror(errno));
    }
    /* Held until the rename: a temporary whose lock is free was left by a writer that died
     * (fs_atomic_abandoned), which a cleaner may remove; one being written is not. */
    (void)flock(a->fd, LOCK_EX | LOCK_NB);
    if (fchmod(a->fd, mode) != 0) {
        int rc = err_set(err, DDP_EIO, "chmod %s: %s", a->tmp, strerror(errno));
        fs_atomic_abort(a);
        return rc;
    }
    return 0;
}

int fs_atomic_commit(struct fs_atomic *a, const void *data, size_t len, struct ddp_err *err)
{
    const char *p = data;
    size_t left = len;
    while (left > 0) {
        ssize_t w = write(a->fd, p, left);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return err_set(err, DDP_EIO, "write %s: %s", a->tmp, strerror(errno));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(a->fd) != 0)
        return err_set(err, DDP_EIO, "fsync %s: %s", a->tmp, strerror(errno));
    a->written = 1;
    /* Renamed while still open (and locked), closed after: no cleaner sees it unlocked. */
    if (rename(a->tmp, a->path) != 0)
        return err_set(err, DDP_EIO, "rename %s to %s: %s", a->tmp, a->path, strerror(errno));
    a->done = 1;
    int fd = a->fd;
    a->fd = -1;
    if (close(fd) != 0)
        return err_set(err, DDP_EIO, "close %s: %s", a->path, strerror(errno));
    return fs_sync_dir_of(a->path, err);
}

int fs_atomic_abandoned(int dirfd, const char *name, int min_age_s)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    int r = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && time(NULL) - st.st_mtime >= min_age_s &&
            flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (!r) {
        close(fd);
        return -1;
    }
    return fd; /* locked: the caller removes the name, then closes */
}

void fs_atomic_abort(struct fs_atomic *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    if (a->tmp[0] && !a->done)
        unlink(a->tmp);
    a->tmp[0] = '\0';
}

int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                    struct ddp_err *err)
{
    struct fs_atomic a;
    int rc = fs_atomic_open(&a, path, mode, err);
    if (rc)
        return rc;
    rc = fs_atomic_commit(&a, data, len, err);
    if (rc && !a.done)
        fs_atomic_abort(&a);
    return rc;
}

static const char *fs_kind(mode_t m)
{
    if (S_ISDIR(m))
        return "a folder";
    if (S_ISFIFO(m))
        return "a FIFO";
    if (S_ISCHR(m) || S_ISBLK(m))
        return "a device";
    if (S_ISSOCK(m))
        return "a socket";
    return "not a regular file";
}

/* Reads fd (path names it in errors) whole, at most max bytes; closes fd. */
static int read_fd(int fd, const char *path, size_t max, char **out, size_t *len,
                   struct ddp_err *err)
{
    size_t cap = 4096, used = 0;
    char *buf = xmalloc(cap + 1);
    int rc = 0;
    for (;;) {
        if (used == cap) {
            /* Room for max + 1 bytes at most: a file of exactly max bytes reads whole (the
             * next read says end of file), one byte more is refused below. */
            if (cap > max) {
                rc = err_set(err, DDP_ETOOBIG, "%s is larger than %zu bytes", path, max);
                goto fail;
            }
            cap = cap * 2 > max + 1 ? max + 1 : cap * 2;
            buf = xrealloc(buf, cap + 1);
        }
        ssize_t r = read(fd, buf + used, cap - used);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            rc = err_set(err, DDP_EIO, "read %s: %s", path, strerror(errno));
            goto fail;
        }
        if (r == 0)
            break;
        used += (size_t)r;
        if (used > max) {
            rc = err_set(err, DDP_ETOOBIG, "%s is larger than %zu bytes", path, max);
            goto fail;
        }
    }
    close(fd);
    buf[used] = '\0';
    *out = buf;
    if (len)
        *len = used;
    return 0;
fail:
    close(fd);
    free(buf);
    return rc;
}

int fs_read_regular(const char *path, size_t max, char **out, size_t *len, struct ddp_err *err)
{
    /* O_NOFOLLOW: a link is refused, never followed; O_NONBLOCK: opening a FIFO does not wait
     * for a writer. The file checked is the file read: no second open by name. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ELOOP)
            return err_set(err, DDP_EINVAL, "%s is a symbolic link, not a regular file", path);
        return err_set(err, errno == ENOENT ? DDP_ENOTFOUND : DDP_EIO, "open %s: %s", path,
                       strerror(errno));
    }
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = err_set(err, DDP_EIO, "stat %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = err_set(err, DDP_EINVAL, "%s is %s", path, fs_kind(st.st_mode));
    } else if ((uint64_t)st.st_size > (uint64_t)max) {
        rc = err_set(err, DDP_ETOOBIG, "%s is %lld bytes, more than %zu", path,
                     (long long)st.st_size, max);
    }
    if (rc) {
        close(fd);
        return rc;
    }
    /* Regular and small enough: read it (a file that grows meanwhile is still cut at max). */
    return read_fd(fd, path, max, out, len, err);
}

int fs_read_all(const char *path, size_t max, char **out, size_t *len, struct ddp_err *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, errno == ENOENT ? DDP_ENOTFOUND : DDP_EIO, "open %s: %s", path,
                       strerror(errno));
    return read_fd(fd, path, max, out, len, err);
}

/* mkdir of one component; a folder it made is made durable in its parent (one this user may
 * not read cannot be synced, and is not: the folder exists either way). */
static int mkdir_one(const char *path, mode_t mode, struct ddp_err *err)
{
    if (mkdir(path, mode) != 0)
        return errno == EEXIST ? 0 : err_set(err, DDP_EIO, "mkdir %s: %s", path, strerror(errno));
    char dir[PATH_MAX];
    const char *what = "";
    if (sync_parent(path, dir, sizeof(dir), &what) != 0 && errno != EACCES)
        return err_set(err, DDP_EIO, "%s folder %s: %s", what, dir, strerror(errno));
    return 0;
}

int fs_mkdir_p(const char *path, mode_t mode, struct ddp_err *err)
{
    char buf[PATH_MAX];
    int n = snprintf(buf, sizeof(buf), "%s", path);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return err_set(err, DDP_EINVAL, "path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int rc = mkdir_one(buf, mode, err);
        if (rc)
            return rc;
        *p = '/';
    }
    int rc = mkdir_one(buf, mode, err);
    if (rc)
        return rc;
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return err_set(err, DDP_EIO, "%s is not a folder", buf);
    return 0;
}

static int fs_remove_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p) != 0 && errno != ENOENT ? -1 : 0;
}

int fs_remove_tree(const char *path, struct ddp_err *err)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : err_set(err, DDP_EIO, "stat %s: %s", path, strerror(errno));
    if (nftw(path, fs_remove_one, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return err_set(err, DDP_EIO, "remove %s: %s", path, strerror(errno));
    return 0;
}
