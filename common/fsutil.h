/*
 * fsutil.h - files written so that a crash never leaves them half-written, and bounded
 * reads.
 */
#ifndef DDP_COMMON_FSUTIL_H
#define DDP_COMMON_FSUTIL_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

/* Writes data to path atomically: a temp file beside it, fsync, rename, fsync of the
 * folder. mode is the new file's permission bits. On failure path is unchanged and no
 * temp file is left. */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                    struct ddp_err *err);

/*
 * fs_write_atomic in steps, for a caller that must know the file can be made before it has
 * what goes in it: fs_atomic_open makes the temp file beside path (mode bits), and
 * fs_atomic_commit writes data into it, fsyncs, renames it over path and fsyncs the folder.
 * A failed commit leaves the temp file (a->written says whether all of data is in it, as
 * when only the rename failed); fs_atomic_abort removes it and closes what is open (safe to
 * call after a commit, successful or not). path is borrowed until then.
 */
struct fs_atomic {
    const char *path;
    char tmp[PATH_MAX];
    int fd;      /* -1 once closed */
    int written; /* data fsynced and closed into tmp */
    int done;    /* renamed over path: nothing to remove */
};
int fs_atomic_open(struct fs_atomic *a, const char *path, mode_t mode, struct ddp_err *err);
int fs_atomic_commit(struct fs_atomic *a, const void *data, size_t len, struct ddp_err *err);
void fs_atomic_abort(struct fs_atomic *a);
/* Whether the temporary `name` in the folder dirfd was abandoned by its writer: a regular
 * file untouched for min_age_s whose lock (taken by fs_atomic_open, held until the rename)
 * is free. The locked fd (the caller unlinks the name, then closes it), else -1. */
int fs_atomic_abandoned(int dirfd, const char *name, int min_age_s);

/* Reads all of path into a new NUL-terminated buffer (caller frees) and its length into
 * *len (may be NULL). Fails with DDP_ETOOBIG past max bytes, DDP_ENOTFOUND if missing. */
int fs_read_all(const char *path, size_t max, char **out, size_t *len, struct ddp_err *err);
/* As fs_read_all, for a file that must be a regular file of at most max bytes: a symbolic
 * link, a FIFO, a device or a folder is refused (DDP_EINVAL, naming what it is) without
 * blocking or reading from it, and a size past max is DDP_ETOOBIG before anything is read.
 * The file checked is the one read (one open). */
int fs_read_regular(const char *path, size_t max, char **out, size_t *len, struct ddp_err *err);

/* mkdir -p with mode for the folders it creates, each fsynced into its parent. */
int fs_mkdir_p(const char *path, mode_t mode, struct ddp_err *err);

/* fsyncs the folder holding path (after a rename or a create). */
int fs_sync_dir_of(const char *path, struct ddp_err *err);

/* Removes a folder tree (like rm -rf); missing is not an error. */
int fs_remove_tree(const char *path, struct ddp_err *err);

#endif
