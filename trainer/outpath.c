/*
 * outpath.c - the file a rank writes for --trace and --dump-params (trainer/outpath.h).
 */
#include "trainer/outpath.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"

int outpath_for(const char *flag, const char *tmpl, int rank, char **out, struct ddp_err *err)
{
    *out = NULL;
    const char *at = strstr(tmpl, "{rank}");
    if (!at && rank > 0)
        return 0;
    char *path = NULL;
    if (at) {
        char r[16];
        snprintf(r, sizeof(r), "%d", rank);
        size_t n = strlen(tmpl) + 1;
        for (const char *p = at; p; p = strstr(p + 6, "{rank}"))
            n += strlen(r);
        path = xmalloc(n);
        size_t o = 0;
        for (const char *p = tmpl; *p;) {
            if (strncmp(p, "{rank}", 6) == 0) {
                memcpy(path + o, r, strlen(r));
                o += strlen(r);
                p += 6;
            } else {
                path[o++] = *p++;
            }
        }
        path[o] = '\0';
    } else {
        path = xstrdup(tmpl);
    }
    char *slash = strrchr(path, '/');
    char *dir = slash == path ? xstrdup("/")
                : slash       ? xstrndup(path, (size_t)(slash - path))
                              : xstrdup(".");
    int rc = 0;
    if (slash && slash[1] == '\0')
        rc = err_set(err, DDP_EINVAL, "%s: '%s' names a folder, not a file", flag, path);
    else if (access(dir, W_OK | X_OK) != 0)
        rc = err_set(err, DDP_EINVAL, "%s: cannot write into the folder %s: %s", flag, dir,
                     strerror(errno));
    free(dir);
    if (rc) {
        free(path);
        return rc;
    }
    *out = path;
    return 0;
}
