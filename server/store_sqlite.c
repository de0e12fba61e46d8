/*
 * store_sqlite.c - the store's SQLite backend (the default, `ddpd --db FILE`): the ops of
 * store_internal.h over one sqlite3 connection and its persistent prepared statements.
 *
 * Invariants:
 *   1. journal_mode=WAL, synchronous=FULL: a COMMIT that returned is on disk.
 *   2. Prepared statements are made once at open and reset (bindings cleared) after each use.
 */
#include <errno.h>
#include <fcntl.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "server/store_internal.h"

struct sqlite_be {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
};

static int sq_fail(struct sqlite_be *b, struct ddp_err *err, const char *what)
{
    return err_set(err, DDP_EIO, "sqlite %s: %s", what, sqlite3_errmsg(b->db));
}

static int sq_exec(void *be, const char *sql, struct ddp_err *err)
{
    struct sqlite_be *b = be;
    char *msg = NULL;
    if (sqlite3_exec(b->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = err_set(err, DDP_EIO, "sqlite: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

static int sq_user_version(void *be)
{
    struct sqlite_be *b = be;
    sqlite3_stmt *s = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(b->db, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return v;
}

static int sq_prepare(void *be, int w, const char *sql, struct ddp_err *err)
{
    struct sqlite_be *b = be;
    if (sqlite3_prepare_v3(b->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &b->st[w], NULL) != SQLITE_OK)
        return sq_fail(b, err, "prepare");
    return 0;
}

static void sq_bind_int(void *be, int w, int i, int64_t v)
{
    struct sqlite_be *b = be;
    sqlite3_bind_int64(b->st[w], i, v);
}

static void sq_bind_text(void *be, int w, int i, const char *v)
{
    struct sqlite_be *b = be;
    sqlite3_bind_text(b->st[w], i, v, -1, SQLITE_TRANSIENT);
}

static void sq_bind_null(void *be, int w, int i)
{
    struct sqlite_be *b = be;
    sqlite3_bind_null(b->st[w], i);
}

static int sq_step(void *be, int w, struct ddp_err *err)
{
    struct sqlite_be *b = be;
    int r = sqlite3_step(b->st[w]);
    if (r == SQLITE_ROW)
        return 1;
    if (r == SQLITE_DONE)
        return 0;
    return sq_fail(b, err, "step");
}

static int64_t sq_col_int(void *be, int w, int i)
{
    struct sqlite_be *b = be;
    return sqlite3_column_int64(b->st[w], i);
}

static const char *sq_col_text(void *be, int w, int i)
{
    struct sqlite_be *b = be;
    const unsigned char *t = sqlite3_column_text(b->st[w], i);
    return t ? (const char *)t : NULL;
}

static void sq_reset(void *be, int w)
{
    struct sqlite_be *b = be;
    sqlite3_reset(b->st[w]);
    sqlite3_clear_bindings(b->st[w]);
}

static int sq_in_tx(void *be)
{
    struct sqlite_be *b = be;
    return !sqlite3_get_autocommit(b->db);
}

static void sq_close(void *be)
{
    struct sqlite_be *b = be;
    if (!b)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(b->st[i]);
    sqlite3_close(b->db);
    free(b);
}

int store_sqlite_open(const char *path, void **be, struct ddp_err *err)
{
    struct sqlite_be *b = xcalloc(1, sizeof(*b));
    int rc;
    /* The database holds every job's token, env and logs: owner only. SQLite creates its
     * -wal and -shm files with the mode of the database file. A file another tool made
     * wider is narrowed, saying so. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = err_set(err, DDP_EIO, "cannot open database %s: %s", path, strerror(errno));
        goto out;
    }
    struct stat fst;
    if (fstat(fd, &fst) == 0 && (fst.st_mode & 077)) {
        if (fchmod(fd, 0600) == 0)
            log_warn("database %s was mode %04o: now 0600 (it holds job tokens and env)", path,
                     (unsigned)(fst.st_mode & 07777));
        else
            log_warn("database %s is mode %04o and cannot be narrowed: %s", path,
                     (unsigned)(fst.st_mode & 07777), strerror(errno));
    }
    close(fd);
    if (sqlite3_open_v2(path, &b->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        rc = err_set(err, DDP_EIO, "cannot open database %s: %s", path,
                     b->db ? sqlite3_errmsg(b->db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(b->db, 5000);
    rc = sq_exec(b, "PRAGMA journal_mode=WAL", err);
    if (!rc)
        rc = sq_exec(b, "PRAGMA synchronous=FULL", err);
    if (!rc)
        rc = sq_exec(b, "PRAGMA foreign_keys=ON", err);
    if (rc)
        goto out;
    *be = b;
    b = NULL;
out:
    sq_close(b);
    return rc;
}

static int sq_storage_failed(void *be)
{
    struct sqlite_be *b = be;
    int code = sqlite3_extended_errcode(b->db);
    if (code == SQLITE_IOERR_NOMEM) /* memory, not the disk */
        return 0;
    return (code & 0xff) == SQLITE_IOERR || (code & 0xff) == SQLITE_FULL;
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .exec = sq_exec,
    .user_version = sq_user_version,
    .prepare = sq_prepare,
    .bind_int = sq_bind_int,
    .bind_text = sq_bind_text,
    .bind_null = sq_bind_null,
    .step = sq_step,
    .col_int = sq_col_int,
    .col_text = sq_col_text,
    .reset = sq_reset,
    .in_tx = sq_in_tx,
    .storage_failed = sq_storage_failed,
    .close = sq_close,
};
