/*
 * tokenfile.c - credentials read from files (see tokenfile.h).
 */
#include "common/tokenfile.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/fsutil.h"
#include "common/log.h"

int token_check(const char *text, size_t len, const char *what, const char *where,
                struct ddp_err *err)
{
    if (len == 0)
        return err_set(err, DDP_EINVAL, "%s token in %s is empty", what, where);
    if (len < TOKEN_MIN_LEN)
        return err_set(err, DDP_EINVAL, "%s token in %s is %zu bytes: at least %d", what, where,
                       len, TOKEN_MIN_LEN);
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[i];
        if (ch <= ' ' || ch == 0x7f)
            return err_set(err, DDP_EINVAL,
                           "%s token in %s holds a space or control character at byte %zu", what,
                           where, i);
    }
    return 0;
}

int token_file_read(const char *path, const char *what, char **out, struct ddp_err *err)
{
    char *text = NULL;
    size_t len = 0;
    int rc = fs_read_regular(path, TOKEN_FILE_MAX, &text, &len, err);
    if (rc)
        return rc;
    while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' ' ||
                       text[len - 1] == '\t'))
        text[--len] = '\0';
    if (len == 0)
        rc = err_set(err, DDP_EINVAL, "%s token file %s is empty", what, path);
    else if (len < TOKEN_MIN_LEN)
        rc = err_set(err, DDP_EINVAL,
                     "%s token in %s is %zu bytes: at least %d (delete the file and ddpd makes "
                     "one of 64 hex digits)",
                     what, path, len, TOKEN_MIN_LEN);
    else
        rc = token_check(text, len, what, path, err);
    if (rc) {
        free(text);
        return rc;
    }
    struct stat st;
    if (stat(path, &st) == 0 && (st.st_mode & 077))
        log_warn("%s token file %s is mode %04o: others on this machine can use the token; "
                 "chmod 600 %s",
                 what, path, (unsigned)(st.st_mode & 07777), path);
    *out = text;
    return 0;
}
