/*
 * fsutil.h - files written so that a crash never leaves them half-written, and bounded
 * reads.
 */
#ifndef DDP_COMMON_FSUTIL_H
#define DDP_COMMON_FSUTIL_H

#include <stddef.h>
#include <sys/types.h>

#include "common/err.h"

/* Writes data to path atomically: a temp file beside it, fsync, rename, fsync of the
 * folder. mode is the new file's permission bits. On failure path is unchanged and no
 * temp file is left. */
int fs_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                    struct ddp_err *err);

/* Reads all of path into a new NUL-terminated buffer (caller frees) and its length into
 * *len (may be NULL). Fails with DDP_ETOOBIG past max bytes, DDP_ENOTFOUND if missing. */
int fs_read_all(const char *path, size_t max, char **out, size_t *len, struct ddp_err *err);
/* As fs_read_all, for a file that must be a regular file of at most max bytes: a symbolic
 * link, a FIFO, a device or a folder is refused (DDP_EINVAL, naming what it is) without
 * blocking or reading from it, and a size past max is DDP_ETOOBIG before anything is read. */
int fs_read_regular(const char *path, size_t max, char **out, size_t *len, struct ddp_err *err);

/* mkdir -p with mode for the folders it creates. */
int fs_mkdir_p(const char *path, mode_t mode, struct ddp_err *err);

/* fsyncs the folder holding path (after a rename or a create). */
int fs_sync_dir_of(const char *path, struct ddp_err *err);

/* Removes a folder tree (like rm -rf); missing is not an error. */
int fs_remove_tree(const char *path, struct ddp_err *err);

#endif
