/*
 * text.c - text corpora: the files read through data_read_file (so gzip works and sizes are
 * bounded), the fortunes folder listed and sorted, the windows cut.
 */
#define _DEFAULT_SOURCE
#include "trainer/text.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/xalloc.h"

int text_windows(const uint8_t *buf, size_t len, int ctx, const char *what, struct dataset *out,
                 struct ddp_err *err)
{
    if (len < (size_t)ctx + 1)
        return err_set(err, DDP_EINVAL,
                       "data %s: %zu bytes is too short for one window of context %d", what, len,
                       ctx);
    size_t n = (len - 1) / (size_t)ctx, w = (size_t)ctx + 1;
    memset(out, 0, sizeof(*out));
    out->n = n;
    out->dim = w;
    out->classes = 256;
    out->y = xmalloc(n * w);
    for (size_t i = 0; i < n; i++)
        memcpy(out->y + i * w, buf + i * (size_t)ctx, w);
    return 0;
}

double text_unigram_entropy(const uint8_t *buf, size_t len)
{
    size_t count[256] = {0};
    for (size_t i = 0; i < len; i++)
        count[buf[i]]++;
    double h = 0.0;
    for (int c = 0; c < 256; c++)
        if (count[c]) {
            double p = (double)count[c] / (double)len;
            h -= p * log(p);
        }
    return h;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every fortune file of dir joined into *buf. */
static int read_fortunes(const char *dir, uint8_t **buf, size_t *len, struct ddp_err *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return err_set(err, errno == ENOENT ? DDP_ENOTFOUND : DDP_EIO,
                       "data fortunes: %s: %s (install the Debian package fortunes, or set "
                       "DDP_FORTUNES_DIR)",
                       dir, strerror(errno));
    char **names = NULL;
    size_t nn = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' || strchr(de->d_name, '.'))
            continue; /* the .dat indexes and the .u8 links */
        if (nn == cap) {
            cap = cap ? 2 * cap : 64;
            names = xrealloc(names, cap * sizeof(*names));
        }
        names[nn++] = xstrdup(de->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof(*names), cmp_names);
    uint8_t *all = NULL;
    size_t used = 0;
    int rc = 0;
    for (size_t i = 0; i < nn && rc == 0; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        uint8_t *b = NULL;
        size_t l = 0;
        rc = data_read_file(path, &b, &l, err);
        if (rc == 0) {
            if (used + l > DATA_MAX_FILE_BYTES) {
                rc = err_set(err, DDP_ETOOBIG, "data fortunes: %s: more than %zu bytes", dir,
                             DATA_MAX_FILE_BYTES);
            } else {
                all = xrealloc(all, used + l + 1);
                memcpy(all + used, b, l);
                used += l;
            }
        }
        free(b);
    }
    for (size_t i = 0; i < nn; i++)
        free(names[i]);
    free(names);
    if (rc == 0 && used == 0)
        rc = err_set(err, DDP_ENOTFOUND, "data fortunes: no fortune files in %s", dir);
    if (rc) {
        free(all);
        return rc;
    }
    *buf = all;
    *len = used;
    return 0;
}

int text_load(const char *spec, int ctx, struct dataset *train, struct dataset *valid,
              struct text_info *info, struct ddp_err *err)
{
    uint8_t *tb = NULL, *vb = NULL;
    size_t tl = 0, vl = 0;
    int rc = 0;
    char what[PATH_MAX + 64] = "fortunes", vwhat[sizeof(what) + 128];
    const char *vsplit = NULL;
    if (strcmp(spec, "fortunes") == 0) {
        const char *dir = getenv("DDP_FORTUNES_DIR");
        rc = read_fortunes(dir && dir[0] ? dir : TEXT_FORTUNES_DIR, &tb, &tl, err);
    } else if (strncmp(spec, "text:", 5) == 0 && spec[5]) {
        char *copy = xstrdup(spec + 5);
        char *comma = strchr(copy, ',');
        if (comma)
            *comma = '\0';
        if (!copy[0] || (comma && !comma[1]) || (comma && strchr(comma + 1, ','))) {
            free(copy);
            return err_set(err, DDP_EINVAL, "--data: '%s': want text:FILE[,VALID_FILE]", spec);
        }
        rc = data_read_file(copy, &tb, &tl, err);
        if (rc == 0 && comma)
            rc = data_read_file(comma + 1, &vb, &vl, err);
        snprintf(what, sizeof(what), "%s", copy);
        if (comma) {
            vsplit = "given";
            snprintf(vwhat, sizeof(vwhat), "%s", comma + 1);
        }
        free(copy);
    } else {
        return err_set(err, DDP_EINVAL,
                       "--data: '%s' is not a text corpus for a gpt model: want fortunes or "
                       "text:FILE[,VALID_FILE]",
                       spec);
    }
    if (rc == 0 && !vsplit) {
        snprintf(vwhat, sizeof(vwhat),
                 "%s (its last %.0f%%, held out for validation: a "
                 "text:FILE,VALID_FILE gives another)",
                 what, 100.0 * TEXT_VALID_SHARE);
        size_t hold = (size_t)((double)tl * TEXT_VALID_SHARE);
        vb = tb + (tl - hold);
        vl = hold;
        tl -= hold;
    }
    struct dataset tr, va;
    memset(&tr, 0, sizeof(tr));
    memset(&va, 0, sizeof(va));
    if (rc == 0)
        rc = text_windows(tb, tl, ctx, what, &tr, err);
    if (rc == 0)
        rc = text_windows(vb, vl, ctx, vwhat, &va, err);
    if (rc == 0 && info) {
        info->train_bytes = tl;
        info->valid_bytes = vl;
        info->unigram_nats = text_unigram_entropy(tb, tl);
    }
    free(tb);
    if (vsplit)
        free(vb);
    if (rc) {
        data_release(&tr);
        data_release(&va);
        return rc;
    }
    *train = tr;
    *valid = va;
    return 0;
}
