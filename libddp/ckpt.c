/*
 * ckpt.c - checkpoint encoding, validation and the folder of replicas.
 *
 * Invariants: ckpt_decode never reads outside [buf, buf+len) and accepts a buffer only when
 * every size field agrees with len and the crc matches, so a crafted or truncated file is
 * rejected before any of its numbers is trusted for an allocation. Saving goes through
 * fs_write_atomic (temp file, fsync, rename, fsync of the folder): a crash leaves either the
 * old set of files or the new one.
 */
#include "ddp/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "libddp/le.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ckpt.c writes floats as little-endian bytes: port the array copies first"
#endif

static const uint8_t ckpt_magic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', 0};
#define CKPT_FIXED_HDR 88

/* crc32 over any length (zlib takes uInt pieces). */
uint32_t ckpt_crc32(const uint8_t *p, size_t len)
{
    uLong c = crc32(0L, Z_NULL, 0);
    while (len > 0) {
        uInt k = len > (1u << 30) ? (1u << 30) : (uInt)len;
        c = crc32(c, p, k);
        p += k;
        len -= k;
    }
    return (uint32_t)c;
}

/* Parameters implied by widths, or 0 on overflow past CKPT_MAX_BYTES. */
static uint64_t params_of(const uint32_t *widths, int nlayers)
{
    uint64_t total = 0;
    for (int l = 0; l < nlayers; l++) {
        uint64_t in = widths[l], out = widths[l + 1];
        if (in == 0 || out == 0 || in > (1u << 20) || out > (1u << 20))
            return 0;
        total += out * in + out;
        if (total > CKPT_MAX_BYTES / 8)
            return 0;
    }
    return total;
}

size_t ckpt_size_for(const int *widths, int nwidths)
{
    if (nwidths < 2 || nwidths > CKPT_MAX_LAYERS + 1)
        return 0;
    uint32_t w[CKPT_MAX_LAYERS + 1];
    for (int i = 0; i < nwidths; i++) {
        if (widths[i] <= 0)
            return 0;
        w[i] = (uint32_t)widths[i];
    }
    uint64_t np = params_of(w, nwidths - 1);
    if (np == 0)
        return 0;
    return (size_t)(88 + 4 * (uint64_t)nwidths + 8 * np + 4);
}

/* Where the spec starts in a version 2 (k = 1) or 3 (k > 1 optimizer arrays) header. */
static size_t spec_off(size_t k)
{
    return CKPT_FIXED_HDR + (k > 1 ? 8 : 4);
}

/* A version 2 or 3 header's length for a spec of slen bytes. */
static size_t spec_hdr(size_t slen, size_t k)
{
    return spec_off(k) + ((slen + 3) & ~(size_t)3);
}

size_t ckpt_size_id(const struct ckpt_id *id)
{
    if (!id->spec)
        return ckpt_size_for(id->widths, id->nwidths);
    size_t slen = strlen(id->spec);
    if (slen == 0 || slen > CKPT_MAX_MODEL || id->nparams == 0 || id->nparams > CKPT_MAX_BYTES / 8)
        return 0;
    size_t k = id->state_arrays > 1 ? (size_t)id->state_arrays : 1;
    return spec_hdr(slen, k) + 4 * (1 + k) * (size_t)id->nparams + 4;
}

/* Version 2 (meta->model set): the spec's header, then as version 1. */
static int encode_spec(const struct ckpt_meta *meta, const float *params, const float *momentum,
                       uint8_t **out, size_t *len, struct ddp_err *err)
{
    size_t slen = strnlen(meta->model, CKPT_MAX_MODEL + 1);
    if (slen > CKPT_MAX_MODEL)
        return err_set(err, DDP_EINVAL, "checkpoint: model spec longer than %d bytes",
                       CKPT_MAX_MODEL);
    if (meta->nparams == 0 || meta->nparams > CKPT_MAX_BYTES / 8)
        return err_set(err, DDP_EINVAL, "checkpoint: %llu parameters",
                       (unsigned long long)meta->nparams);
    if (meta->state_arrays < 0 || meta->state_arrays > CKPT_MAX_STATE_ARRAYS)
        return err_set(err, DDP_EINVAL, "checkpoint: %d optimizer state arrays",
                       meta->state_arrays);
    size_t k = meta->state_arrays > 1 ? (size_t)meta->state_arrays : 1;
    size_t hdr = spec_hdr(slen, k);
    size_t arr = (size_t)meta->nparams * 4;
    size_t total = hdr + (1 + k) * arr + 4;
    uint8_t *b = xcalloc(1, total);
    memcpy(b, ckpt_magic, 8);
    le_put32(b + 8, k > 1 ? CKPT_VERSION_STATE : CKPT_VERSION_SPEC);
    le_put32(b + 12, (uint32_t)hdr);
    le_put32(b + 16, meta->epoch);
    le_put32(b + 20, 0);
    le_put64(b + 24, meta->step);
    le_put64(b + 32, meta->seed);
    for (int i = 0; i < 4; i++)
        le_put64(b + 40 + 8 * i, meta->rng.s[i]);
    le_put64(b + 72, meta->nparams);
    le_put32(b + 80, meta->world_size);
    le_put32(b + 84, meta->epoch_pos);
    le_put32(b + CKPT_FIXED_HDR, (uint32_t)slen);
    if (k > 1)
        le_put32(b + CKPT_FIXED_HDR + 4, (uint32_t)k);
    memcpy(b + spec_off(k), meta->model, slen);
    memcpy(b + hdr, params, arr);
    memcpy(b + hdr + arr, momentum, k * arr);
    le_put32(b + total - 4, ckpt_crc32(b, total - 4));
    *out = b;
    *len = total;
    return 0;
}

int ckpt_encode(const struct ckpt_meta *meta, const float *params, const float *momentum,
                uint8_t **out, size_t *len, struct ddp_err *err)
{
    if (meta->model[0])
        return encode_spec(meta, params, momentum, out, len, err);
    if (meta->nlayers < 1 || meta->nlayers > CKPT_MAX_LAYERS)
        return err_set(err, DDP_EINVAL, "checkpoint: %d layers", meta->nlayers);
    if (params_of(meta->widths, meta->nlayers) != meta->nparams)
        return err_set(err, DDP_EINVAL, "checkpoint: %llu parameters do not fit the widths",
                       (unsigned long long)meta->nparams);
    size_t hdr = CKPT_FIXED_HDR + 4 * ((size_t)meta->nlayers + 1);
    size_t arr = (size_t)meta->nparams * 4;
    size_t total = hdr + 2 * arr + 4;
    uint8_t *b = xcalloc(1, total);
    memcpy(b, ckpt_magic, 8);
    le_put32(b + 8, CKPT_VERSION);
    le_put32(b + 12, (uint32_t)hdr);
    le_put32(b + 16, meta->epoch);
    le_put32(b + 20, (uint32_t)meta->nlayers);
    le_put64(b + 24, meta->step);
    le_put64(b + 32, meta->seed);
    for (int i = 0; i < 4; i++)
        le_put64(b + 40 + 8 * i, meta->rng.s[i]);
    le_put64(b + 72, meta->nparams);
    le_put32(b + 80, meta->world_size);
    le_put32(b + 84, meta->epoch_pos);
    for (int i = 0; i <= meta->nlayers; i++)
        le_put32(b + CKPT_FIXED_HDR + 4 * i, meta->widths[i]);
    memcpy(b + hdr, params, arr);
    memcpy(b + hdr + arr, momentum, arr);
    le_put32(b + total - 4, ckpt_crc32(b, total - 4));
    *out = b;
    *len = total;
    return 0;
}

int ckpt_decode(const uint8_t *buf, size_t len, const char *what, struct ckpt_view *out,
                struct ddp_err *err)
{
    struct ckpt_view v;
    memset(&v, 0, sizeof(v));
    if (len < CKPT_FIXED_HDR + 4)
        return err_set(err, DDP_EINVAL, "checkpoint %s: truncated (%zu bytes)", what, len);
    if (memcmp(buf, ckpt_magic, 8) != 0)
        return err_set(err, DDP_EINVAL, "checkpoint %s: bad magic", what);
    uint32_t version = le_get32(buf + 8);
    if (version != CKPT_VERSION && version != CKPT_VERSION_SPEC && version != CKPT_VERSION_STATE)
        return err_set(err, DDP_EINVAL, "checkpoint %s: version %u (want %d, %d or %d)", what,
                       version, CKPT_VERSION, CKPT_VERSION_SPEC, CKPT_VERSION_STATE);
    uint32_t nlayers = le_get32(buf + 20);
    size_t hdr = 0;
    uint64_t want = 0;
    size_t k = 1;
    if (version != CKPT_VERSION) {
        if (nlayers != 0)
            return err_set(err, DDP_EINVAL, "checkpoint %s: %u layers in a spec checkpoint", what,
                           nlayers);
        if (len < CKPT_FIXED_HDR + 8 + 4)
            return err_set(err, DDP_EINVAL, "checkpoint %s: truncated header", what);
        uint32_t slen = le_get32(buf + CKPT_FIXED_HDR);
        if (slen == 0 || slen > CKPT_MAX_MODEL)
            return err_set(err, DDP_EINVAL, "checkpoint %s: model spec of %u bytes", what, slen);
        if (version == CKPT_VERSION_STATE) {
            uint32_t sa = le_get32(buf + CKPT_FIXED_HDR + 4);
            if (sa < 2 || sa > CKPT_MAX_STATE_ARRAYS)
                return err_set(err, DDP_EINVAL, "checkpoint %s: %u optimizer state arrays", what,
                               sa);
            k = sa;
        }
        v.meta.state_arrays = (int)k;
        hdr = spec_hdr(slen, k);
        if (le_get32(buf + 12) != hdr)
            return err_set(err, DDP_EINVAL, "checkpoint %s: header length %u (want %zu)", what,
                           le_get32(buf + 12), hdr);
        if (len < hdr + 4)
            return err_set(err, DDP_EINVAL, "checkpoint %s: truncated header", what);
        if (memchr(buf + spec_off(k), 0, slen))
            return err_set(err, DDP_EINVAL, "checkpoint %s: NUL in the model spec", what);
        memcpy(v.meta.model, buf + spec_off(k), slen);
        v.meta.model[slen] = '\0';
        v.meta.nparams = le_get64(buf + 72);
        want = v.meta.nparams;
        if (want == 0 || want > CKPT_MAX_BYTES / 8)
            return err_set(err, DDP_EINVAL, "checkpoint %s: %llu parameters", what,
                           (unsigned long long)want);
    } else {
        if (nlayers < 1 || nlayers > CKPT_MAX_LAYERS)
            return err_set(err, DDP_EINVAL, "checkpoint %s: %u layers", what, nlayers);
        hdr = CKPT_FIXED_HDR + 4 * ((size_t)nlayers + 1);
        if (le_get32(buf + 12) != hdr)
            return err_set(err, DDP_EINVAL, "checkpoint %s: header length %u (want %zu)", what,
                           le_get32(buf + 12), hdr);
        if (len < hdr + 4)
            return err_set(err, DDP_EINVAL, "checkpoint %s: truncated header", what);
        v.meta.nlayers = (int)nlayers;
        for (uint32_t i = 0; i <= nlayers; i++)
            v.meta.widths[i] = le_get32(buf + CKPT_FIXED_HDR + 4 * i);
        v.meta.nparams = le_get64(buf + 72);
        want = params_of(v.meta.widths, (int)nlayers);
        if (want == 0 || want != v.meta.nparams)
            return err_set(err, DDP_EINVAL, "checkpoint %s: parameter count does not fit widths",
                           what);
    }
    size_t arr = (size_t)want * 4;
    if (len != hdr + (1 + k) * arr + 4)
        return err_set(err, DDP_EINVAL, "checkpoint %s: %zu bytes, header says %zu", what, len,
                       hdr + (1 + k) * arr + 4);
    uint32_t crc = le_get32(buf + len - 4);
    if (crc != ckpt_crc32(buf, len - 4))
        return err_set(err, DDP_EINVAL, "checkpoint %s: checksum mismatch", what);
    v.meta.epoch = le_get32(buf + 16);
    v.meta.step = le_get64(buf + 24);
    v.meta.seed = le_get64(buf + 32);
    for (int i = 0; i < 4; i++)
        v.meta.rng.s[i] = le_get64(buf + 40 + 8 * i);
    v.meta.world_size = le_get32(buf + 80);
    v.meta.epoch_pos = le_get32(buf + 84);
    v.params_bytes = buf + hdr;
    v.momentum_bytes = buf + hdr + arr;
    *out = v;
    return 0;
}

void ckpt_copy_arrays(const struct ckpt_view *v, float *params, float *momentum)
{
    size_t arr = (size_t)v->meta.nparams * 4;
    size_t k = v->meta.state_arrays > 1 ? (size_t)v->meta.state_arrays : 1;
    memcpy(params, v->params_bytes, arr);
    memcpy(momentum, v->momentum_bytes, k * arr);
}

int ckpt_matches_id(const struct ckpt_meta *meta, const struct ckpt_id *id)
{
    if (!id->spec)
        return ckpt_matches(meta, id->widths, id->nwidths);
    int want_k = id->state_arrays > 1 ? id->state_arrays : 1;
    int have_k = meta->state_arrays > 1 ? meta->state_arrays : 1;
    return meta->model[0] && strcmp(meta->model, id->spec) == 0 && meta->nparams == id->nparams &&
           want_k == have_k;
}

/* "'mlp:W0-W1-...' (N parameters)" from widths. */
static void describe_widths(const uint32_t *widths, int nwidths, uint64_t nparams, char *buf,
                            size_t size)
{
    size_t o = 0;
    int k = snprintf(buf, size, "'mlp:");
    o = k > 0 ? (size_t)k : 0;
    for (int i = 0; i < nwidths && o < size; i++) {
        k = snprintf(buf + o, size - o, "%s%u", i ? "-" : "", widths[i]);
        o += k > 0 ? (size_t)k : 0;
    }
    if (o < size)
        snprintf(buf + o, size - o, "' (%llu parameters)", (unsigned long long)nparams);
}

void ckpt_describe(const struct ckpt_meta *meta, char *buf, size_t size)
{
    if (meta->model[0])
        snprintf(buf, size, "'%s' (%llu parameters)", meta->model,
                 (unsigned long long)meta->nparams);
    else
        describe_widths(meta->widths, meta->nlayers + 1, meta->nparams, buf, size);
}

void ckpt_id_describe(const struct ckpt_id *id, char *buf, size_t size)
{
    if (id->spec) {
        snprintf(buf, size, "'%s' (%llu parameters)", id->spec, (unsigned long long)id->nparams);
        return;
    }
    uint32_t w[CKPT_MAX_LAYERS + 1];
    int n = id->nwidths < 0                     ? 0
            : id->nwidths > CKPT_MAX_LAYERS + 1 ? CKPT_MAX_LAYERS + 1
                                                : id->nwidths;
    for (int i = 0; i < n; i++)
        w[i] = (uint32_t)id->widths[i];
    describe_widths(w, n, n >= 2 ? params_of(w, n - 1) : 0, buf, size);
}

int ckpt_matches(const struct ckpt_meta *meta, const int *widths, int nwidths)
{
    if (meta->model[0])
        return 0;
    if (meta->nlayers + 1 != nwidths)
        return 0;
    for (int i = 0; i < nwidths; i++)
        if (meta->widths[i] != (uint32_t)widths[i])
            return 0;
    return 1;
}

char *ckpt_path(const char *dir, uint32_t epoch)
{
    return xasprintf("%s/ckpt-%06u.bin", dir, epoch);
}

/* Parses "ckpt-NNNNNN.bin"; returns 0 and the epoch, or -1. */
static int parse_name(const char *name, uint32_t *epoch)
{
    if (strncmp(name, "ckpt-", 5) != 0)
        return -1;
    const char *p = name + 5;
    uint64_t v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 10) {
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
        digits++;
    }
    if (digits < 6 || strcmp(p, ".bin") != 0 || v > UINT32_MAX)
        return -1;
    /* Only the name ckpt_path writes: "ckpt-0000003.bin" is not epoch 3's file. */
    char canon[32];
    snprintf(canon, sizeof(canon), "ckpt-%06u.bin", (unsigned)v);
    if (strcmp(canon, name) != 0)
        return -1;
    *epoch = (uint32_t)v;
    return 0;
}

static int cmp_desc(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? 1 : (x > y ? -1 : 0);
}

/* Epochs of the checkpoint files in dir, newest first (caller frees); *n = count. */
static int list_epochs(const char *dir, uint32_t **out, size_t *n, struct ddp_err *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) {
            *out = NULL;
            *n = 0;
            return 0;
        }
        return err_set(err, DDP_EIO, "checkpoint dir %s: %s", dir, strerror(errno));
    }
    size_t cap = 0, cnt = 0;
    uint32_t *e = NULL;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint32_t ep;
        if (parse_name(de->d_name, &ep) != 0)
            continue;
        XGROW(e, cnt + 1, cap, 8);
        e[cnt++] = ep;
    }
    closedir(d);
    if (cnt > 1)
        qsort(e, cnt, sizeof(uint32_t), cmp_desc);
    *out = e;
    *n = cnt;
    return 0;
}

/* The longest header of either version: version 1's with CKPT_MAX_LAYERS layers. */
#define CKPT_MAX_HDR (CKPT_FIXED_HDR + 4 * (CKPT_MAX_LAYERS + 1))

/* The model the first got bytes of a checkpoint at h name, as peek_model() answers for a file. */
static int header_model(const uint8_t *h, size_t got, struct ckpt_meta *meta)
{
    if (got < CKPT_FIXED_HDR + 4 || memcmp(h, ckpt_magic, 8) != 0)
        return -1;
    memset(meta, 0, sizeof(*meta));
    meta->nparams = le_get64(h + 72);
    uint32_t version = le_get32(h + 8), nlayers = le_get32(h + 20);
    if (version == CKPT_VERSION_SPEC || version == CKPT_VERSION_STATE) {
        size_t k = version == CKPT_VERSION_STATE ? 2 : 1; /* only the spec's offset matters */
        uint32_t slen = le_get32(h + CKPT_FIXED_HDR);
        if (slen == 0 || slen > CKPT_MAX_MODEL || got < spec_off(k) + slen)
            return -1;
        memcpy(meta->model, h + spec_off(k), slen);
        meta->model[slen] = '\0';
        return strlen(meta->model) == slen ? 0 : -1;
    }
    if (version != CKPT_VERSION)
        return -3;
    if (nlayers < 1 || nlayers > CKPT_MAX_LAYERS ||
        got < CKPT_FIXED_HDR + 4 * ((size_t)nlayers + 1))
        return -1;
    meta->nlayers = (int)nlayers;
    for (uint32_t i = 0; i <= nlayers; i++)
        meta->widths[i] = le_get32(h + CKPT_FIXED_HDR + 4 * i);
    return 0;
}

/*
 * The model that the header of the regular file at path names, into *meta (its model,
 * nlayers, widths and nparams only), read without following a link and without reading
 * past the header: for a file too large to be a checkpoint of the wanted model, so that
 * the warning can name both. 0; -1 when the file was read and its header is none (too short,
 * no magic: torn); -2 when it cannot be opened or is no regular file; -3 for a version or a
 * layout this build does not read (nothing trusted).
 */
static int peek_model(const char *path, struct ckpt_meta *meta)
{
    uint8_t h[CKPT_MAX_HDR];
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -2;
    struct stat st;
    ssize_t got = -2;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        got = read(fd, h, sizeof(h));
    close(fd);
    return got < 0 ? -2 : header_model(h, (size_t)got, meta);
}

/* Whether two headers name the same model (spec and parameter count, or MLP widths). */
static int same_model(const struct ckpt_meta *a, const struct ckpt_meta *b)
{
    if (a->model[0] || b->model[0])
        return strcmp(a->model, b->model) == 0 && a->nparams == b->nparams;
    if (a->nlayers != b->nlayers)
        return 0;
    for (int i = 0; i <= a->nlayers && i <= CKPT_MAX_LAYERS; i++)
        if (a->widths[i] != b->widths[i])
            return 0;
    return 1;
}

int ckpt_save(const char *dir, uint32_t epoch, const uint8_t *buf, size_t len, struct ddp_err *err)
{
    int rc = fs_mkdir_p(dir, 0755, err);
    if (rc)
        return rc;
    char *path = ckpt_path(dir, epoch);
    uint32_t *epochs = NULL;
    size_t n = 0;
    rc = fs_write_atomic(path, buf, len, 0644, err);
    if (rc)
        goto out;
    rc = list_epochs(dir, &epochs, &n, err);
    if (rc)
        goto out;
    /* Keep the newest CKPT_KEEP of this model's not newer than the one written (epochs[] is
     * newest first), the one written among them. A newer file (another run's, or another
     * model's in a reused folder) neither removes the one written nor counts; another
     * model's file is never removed. */
    struct ckpt_meta mine;
    if (header_model(buf, len < CKPT_MAX_HDR ? len : CKPT_MAX_HDR, &mine) != 0)
        goto out; /* not a checkpoint: nothing is known to be old */
    size_t kept = 1;
    for (size_t i = 0; i < n; i++) {
        if (epochs[i] >= epoch)
            continue;
        char *old = ckpt_path(dir, epochs[i]);
        struct ckpt_meta m;
        /* This model's past the newest kept go; so does a file whose header is no
         * checkpoint's at all (torn, corrupt: no model's) once it is older than they are. */
        /* (a file read, but too short or without the magic, is torn: -1; one that cannot
         * be opened, or of a version this build does not read, may be another's: it stays) */
        int peek = peek_model(old, &m);
        int goes = peek == 0    ? same_model(&m, &mine) && ++kept > CKPT_KEEP
                   : peek == -1 ? kept >= CKPT_KEEP
                                : 0;
        if (goes && unlink(old) != 0 && errno != ENOENT)
            log_warn("cannot remove old checkpoint %s: %s", old, strerror(errno));
        free(old);
    }
out:
    free(epochs);
    free(path);
    return rc;
}

int ckpt_remove_temps(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        /* Only an abandoned one: a writer that shares the folder (a user's --checkpoint-dir
         * given to two jobs) holds its temporary's lock while it writes. */
        int fd = -1;
        if (strncmp(de->d_name, "ckpt-", 5) != 0 || !strstr(de->d_name, ".bin.tmp.") ||
            (fd = fs_atomic_abandoned(dirfd(d), de->d_name, CKPT_TEMP_AGE_S)) < 0)
            continue;
        if (unlinkat(dirfd(d), de->d_name, 0) != 0)
            log_warn("cannot remove %s/%s, left by a save cut short: %s", dir, de->d_name,
                     strerror(errno));
        else {
            log_info("removed %s/%s, left by a save cut short", dir, de->d_name);
            removed++;
        }
        close(fd);
    }
    closedir(d);
    return removed;
}

int ckpt_find_newest(const char *dir, const int *widths, int nwidths, uint8_t **buf, size_t *len,
                     uint32_t *epoch, struct ddp_err *err)
{
    struct ckpt_id id = {.widths = widths, .nwidths = nwidths, .spec = NULL, .nparams = 0};
    return ckpt_find_newest_id(dir, &id, buf, len, epoch, err);
}

int ckpt_find_newest_id(const char *dir, const struct ckpt_id *id, uint8_t **buf, size_t *len,
                        uint32_t *epoch, struct ddp_err *err)
{
    uint32_t *epochs = NULL;
    size_t n = 0;
    int rc = list_epochs(dir, &epochs, &n, err);
    if (rc)
        return rc;
    rc = err_set(err, DDP_ENOTFOUND, "no valid checkpoint in %s", dir);
    /* A checkpoint of this model has exactly this size: a file that is larger is not one, and
     * is not read (a link to /dev/zero or a huge file would be read toward CKPT_MAX_BYTES). */
    size_t want = ckpt_size_id(id);
    if (want == 0) {
        free(epochs);
        return err_set(err, DDP_EINVAL, "the model makes no valid checkpoint");
    }
    char mine[CKPT_MAX_MODEL + 64], theirs[CKPT_MAX_MODEL + 64];
    ckpt_id_describe(id, mine, sizeof(mine));
    for (size_t i = 0; i < n; i++) {
        char *path = ckpt_path(dir, epochs[i]);
        char *data = NULL;
        size_t dlen = 0;
        struct ddp_err e;
        struct ckpt_view v;
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && (uint64_t)st.st_size > want &&
            peek_model(path, &v.meta) == 0 && !ckpt_matches_id(&v.meta, id)) {
            ckpt_describe(&v.meta, theirs, sizeof(theirs));
            log_warn("skipping checkpoint %s: it is of model %s, not %s", path, theirs, mine);
        } else if (fs_read_regular(path, want, &data, &dlen, &e) != 0) {
            log_warn("skipping checkpoint %s: %s", path, e.msg);
        } else if (ckpt_decode((const uint8_t *)data, dlen, path, &v, &e) != 0) {
            log_warn("skipping checkpoint %s: %s", path, e.msg);
        } else if (!ckpt_matches_id(&v.meta, id)) {
            ckpt_describe(&v.meta, theirs, sizeof(theirs));
            log_warn("skipping checkpoint %s: it is of model %s, not %s", path, theirs, mine);
        } else if (v.meta.epoch != epochs[i]) {
            log_warn("skipping checkpoint %s: it holds epoch %u", path, v.meta.epoch);
        } else {
            *buf = (uint8_t *)data;
            *len = dlen;
            *epoch = epochs[i];
            data = NULL;
            free(path);
            err_clear(err);
            rc = 0;
            break;
        }
        free(data);
        free(path);
    }
    free(epochs);
    return rc;
}
