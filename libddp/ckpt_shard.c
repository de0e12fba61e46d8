/*
 * ckpt_shard.c - the sharded checkpoint files of ddp/ckpt_shard.h.
 *
 * Invariants: as ckpt.c's. Decoding never reads outside [buf, buf+len) and trusts no number
 * of the file for a size before every field is in range and the sizes agree with len; the
 * crc is checked before anything is returned. Saving goes through fs_write_atomic, so a
 * crash leaves the old file or the new one, never half of one.
 */
#include "ddp/ckpt_shard.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "ddp/shard.h"
#include "libddp/le.h"

static const uint8_t shard_magic[8] = {'D', 'D', 'P', 'S', 'H', 'R', 'D', 0};
#define SHARD_FIXED_HDR 104

static size_t hdr_len(size_t slen, uint32_t nunits)
{
    return SHARD_FIXED_HDR + (slen + 3) / 4 * 4 + 8 * (size_t)nunits;
}

size_t ckpt_shard_valid_floats(const uint64_t *lens, uint32_t nunits, int world, int k)
{
    size_t sum = 0;
    for (uint32_t i = 0; i < nunits; i++) {
        struct shard sh;
        struct ddp_err e;
        if (lens[i] > SIZE_MAX / 2 || shard_of((size_t)lens[i], world, k, &sh, &e) != 0 ||
            sum > SIZE_MAX / 2 - sh.valid)
            return SIZE_MAX;
        sum += sh.valid;
    }
    return sum;
}

size_t ckpt_shard_floats(const uint64_t *lens, uint32_t nunits, int world)
{
    size_t sum = 0;
    for (uint32_t i = 0; i < nunits; i++) {
        struct shard sh;
        struct ddp_err e;
        if (lens[i] > SIZE_MAX / 2 || shard_of((size_t)lens[i], world, 0, &sh, &e) != 0 ||
            sum > SIZE_MAX / 2 - sh.count)
            return 0;
        sum += sh.count;
    }
    return sum;
}

uint64_t ckpt_shard_unit_len(const struct ckpt_shard_view *v, uint32_t i)
{
    return le_get64(v->lens_bytes + 8 * (size_t)i);
}

int ckpt_shard_encode(const struct ckpt_meta *meta, uint32_t shard, const uint64_t *lens,
                      uint32_t nunits, const float *params, const float *state, uint8_t **out,
                      size_t *len, struct ddp_err *err)
{
    size_t slen = strlen(meta->model);
    int k = meta->state_arrays;
    if (slen == 0 || slen > CKPT_MAX_MODEL || k < 1 || k > CKPT_MAX_STATE_ARRAYS ||
        meta->world_size < 1 || meta->world_size > CKPT_SHARD_MAX_WORLD ||
        shard >= meta->world_size || nunits < 1 || nunits > CKPT_SHARD_MAX_UNITS)
        return err_set(err, DDP_EINVAL,
                       "sharded checkpoint: model '%s', %d state arrays, shard %u of %u, "
                       "%u units out of range",
                       meta->model, k, shard, meta->world_size, nunits);
    uint64_t total = 0;
    for (uint32_t i = 0; i < nunits; i++)
        total += lens[i];
    if (total != meta->nparams)
        return err_set(err, DDP_EINVAL,
                       "sharded checkpoint: the units hold %llu parameters, not %llu",
                       (unsigned long long)total, (unsigned long long)meta->nparams);
    int world = (int)meta->world_size;
    size_t vf = ckpt_shard_valid_floats(lens, nunits, world, (int)shard);
    size_t S = ckpt_shard_floats(lens, nunits, world);
    /* Bounded by the whole model, as decode is: the same answer on every rank of a run, so
     * no rank skips the save's collectives alone, and nothing is written that cannot be
     * read back. */
    if (vf == SIZE_MAX || S == 0 || meta->nparams > CKPT_MAX_BYTES / 8 ||
        meta->nparams > CKPT_MAX_BYTES / 4 / (uint64_t)(1 + k))
        return err_set(err, DDP_EINVAL,
                       "sharded checkpoint: %llu parameters with %d state arrays is too large",
                       (unsigned long long)meta->nparams, k);
    size_t hdr = hdr_len(slen, nunits);
    size_t arr = vf * 4;
    size_t total_len = hdr + (size_t)(1 + k) * arr + 4;
    uint8_t *b = xcalloc(total_len, 1);
    memcpy(b, shard_magic, 8);
    le_put32(b + 8, CKPT_SHARD_VERSION);
    le_put32(b + 12, (uint32_t)hdr);
    le_put32(b + 16, meta->epoch);
    le_put32(b + 20, meta->epoch_pos);
    le_put64(b + 24, meta->step);
    le_put64(b + 32, meta->seed);
    for (int i = 0; i < 4; i++)
        le_put64(b + 40 + 8 * i, meta->rng.s[i]);
    le_put64(b + 72, meta->nparams);
    le_put32(b + 80, meta->world_size);
    le_put32(b + 84, shard);
    le_put32(b + 88, nunits);
    le_put32(b + 92, (uint32_t)k);
    le_put32(b + 96, (uint32_t)slen);
    memcpy(b + SHARD_FIXED_HDR, meta->model, slen);
    uint8_t *lp = b + SHARD_FIXED_HDR + (slen + 3) / 4 * 4;
    for (uint32_t i = 0; i < nunits; i++)
        le_put64(lp + 8 * (size_t)i, lens[i]);
    /* Each array: the valid floats of every unit's slice, from the shard layout. */
    for (int a = 0; a <= k; a++) {
        const float *src = a == 0 ? params : state + (size_t)(a - 1) * S;
        uint8_t *dst = b + hdr + (size_t)a * arr;
        size_t soff = 0;
        for (uint32_t i = 0; i < nunits; i++) {
            struct shard sh;
            struct ddp_err e;
            (void)shard_of((size_t)lens[i], world, (int)shard, &sh, &e); /* checked above */
            memcpy(dst, src + soff, sh.valid * 4);
            dst += sh.valid * 4;
            soff += sh.count;
        }
    }
    le_put32(b + total_len - 4, ckpt_crc32(b, total_len - 4));
    *out = b;
    *len = total_len;
    return 0;
}

int ckpt_shard_decode(const uint8_t *buf, size_t len, const char *what, struct ckpt_shard_view *out,
                      struct ddp_err *err)
{
    struct ckpt_shard_view v;
    memset(&v, 0, sizeof(v));
    if (len < SHARD_FIXED_HDR + 4)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: truncated (%zu bytes)", what, len);
    if (memcmp(buf, shard_magic, 8) != 0)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: bad magic", what);
    uint32_t version = le_get32(buf + 8);
    if (version != CKPT_SHARD_VERSION)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: version %u (want %d)", what,
                       version, CKPT_SHARD_VERSION);
    uint32_t world = le_get32(buf + 80), shard = le_get32(buf + 84);
    uint32_t nunits = le_get32(buf + 88), k = le_get32(buf + 92), slen = le_get32(buf + 96);
    if (world < 1 || world > CKPT_SHARD_MAX_WORLD || shard >= world)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: shard %u of world %u", what, shard,
                       world);
    if (nunits < 1 || nunits > CKPT_SHARD_MAX_UNITS)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: %u units", what, nunits);
    if (k < 1 || k > CKPT_MAX_STATE_ARRAYS)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: %u optimizer state arrays", what,
                       k);
    if (slen == 0 || slen > CKPT_MAX_MODEL)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: model spec of %u bytes", what,
                       slen);
    size_t hdr = hdr_len(slen, nunits);
    if (le_get32(buf + 12) != hdr)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: header length %u (want %zu)", what,
                       le_get32(buf + 12), hdr);
    if (len < hdr + 4)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: truncated header", what);
    if (memchr(buf + SHARD_FIXED_HDR, 0, slen))
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: NUL in the model spec", what);
    uint64_t nparams = le_get64(buf + 72);
    if (nparams == 0 || nparams > CKPT_MAX_BYTES / 8)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: %llu parameters", what,
                       (unsigned long long)nparams);
    const uint8_t *lp = buf + SHARD_FIXED_HDR + (slen + 3) / 4 * 4;
    uint64_t *lens = xmalloc((size_t)nunits * sizeof(uint64_t));
    uint64_t total = 0;
    for (uint32_t i = 0; i < nunits; i++) {
        lens[i] = le_get64(lp + 8 * (size_t)i);
        if (lens[i] > nparams || total + lens[i] > nparams) {
            free(lens);
            return err_set(err, DDP_EINVAL, "sharded checkpoint %s: units past %llu parameters",
                           what, (unsigned long long)nparams);
        }
        total += lens[i];
    }
    size_t vf = ckpt_shard_valid_floats(lens, nunits, (int)world, (int)shard);
    free(lens);
    if (total != nparams)
        return err_set(err, DDP_EINVAL,
                       "sharded checkpoint %s: the units hold %llu of %llu "
                       "parameters",
                       what, (unsigned long long)total, (unsigned long long)nparams);
    size_t arr = vf * 4;
    if (vf == SIZE_MAX || len != hdr + (size_t)(1 + k) * arr + 4)
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: %zu bytes, header says %zu", what,
                       len, hdr + (size_t)(1 + k) * arr + 4);
    if (le_get32(buf + len - 4) != ckpt_crc32(buf, len - 4))
        return err_set(err, DDP_EINVAL, "sharded checkpoint %s: checksum mismatch", what);
    memcpy(v.meta.model, buf + SHARD_FIXED_HDR, slen);
    v.meta.model[slen] = '\0';
    v.meta.nparams = nparams;
    v.meta.state_arrays = (int)k;
    v.meta.epoch = le_get32(buf + 16);
    v.meta.epoch_pos = le_get32(buf + 20);
    v.meta.step = le_get64(buf + 24);
    v.meta.seed = le_get64(buf + 32);
    for (int i = 0; i < 4; i++)
        v.meta.rng.s[i] = le_get64(buf + 40 + 8 * i);
    v.meta.world_size = world;
    v.shard = shard;
    v.nunits = nunits;
    v.lens_bytes = lp;
    v.data = buf + hdr;
    v.array_bytes = arr;
    *out = v;
    return 0;
}

int ckpt_shard_matches_id(const struct ckpt_shard_view *v, const struct ckpt_id *id)
{
    int k = id->state_arrays > 1 ? id->state_arrays : 1;
    return id->spec && strcmp(v->meta.model, id->spec) == 0 && v->meta.nparams == id->nparams &&
           v->meta.state_arrays == k;
}

/* Each unit's first parameter in definition order, its first float in the shard layout of
 * rank `rank` of world, and its shard (caller frees the three). */
static void layout_offsets(const uint64_t *lens, uint32_t nunits, int world, int rank, size_t **pos,
                           size_t **soff, struct shard **sh)
{
    *pos = xmalloc(((size_t)nunits + 1) * sizeof(size_t));
    *soff = xmalloc(((size_t)nunits + 1) * sizeof(size_t));
    *sh = xmalloc(((size_t)nunits + 1) * sizeof(struct shard));
    (*pos)[0] = 0;
    (*soff)[0] = 0;
    for (uint32_t i = 0; i < nunits; i++) {
        struct ddp_err e;
        /* In range: decode checked the lengths against nparams, the callers the world. */
        (void)shard_of((size_t)lens[i], world, rank, &(*sh)[i], &e);
        (*pos)[i + 1] = (*pos)[i] + (size_t)lens[i];
        (*soff)[i + 1] = (*soff)[i] + (*sh)[i].count;
    }
}

size_t ckpt_shard_copy_overlap(const struct ckpt_shard_view *v, const uint64_t *dst_lens,
                               uint32_t dst_nunits, int world, int rank, float *dst_params,
                               float *dst_state, size_t S)
{
    uint64_t *src_lens = xmalloc((size_t)v->nunits * sizeof(uint64_t));
    for (uint32_t i = 0; i < v->nunits; i++)
        src_lens[i] = ckpt_shard_unit_len(v, i);
    if (!dst_lens) {
        dst_lens = src_lens;
        dst_nunits = v->nunits;
    }
    size_t *spos, *ssoff, *dpos, *dsoff;
    struct shard *ssh, *dsh;
    layout_offsets(src_lens, v->nunits, (int)v->meta.world_size, (int)v->shard, &spos, &ssoff,
                   &ssh);
    layout_offsets(dst_lens, dst_nunits, world, rank, &dpos, &dsoff, &dsh);
    /* Both layouts cover the parameters in order: walk them together. ssoff counts the
     * file's padded floats; the file holds the valid ones only, so foff counts those. */
    size_t foff = 0, copied = 0;
    uint32_t j = 0;
    for (uint32_t i = 0; i < v->nunits; i++) {
        size_t s_lo = spos[i] + ssh[i].offset, s_hi = s_lo + ssh[i].valid;
        while (j < dst_nunits && dpos[j + 1] <= spos[i])
            j++;
        for (uint32_t k = j; k < dst_nunits && dpos[k] < spos[i + 1]; k++) {
            size_t d_lo = dpos[k] + dsh[k].offset, d_hi = d_lo + dsh[k].valid;
            size_t lo = s_lo > d_lo ? s_lo : d_lo, hi = s_hi < d_hi ? s_hi : d_hi;
            if (lo >= hi)
                continue;
            copied += hi - lo;
            for (int a = 0; a <= v->meta.state_arrays; a++) {
                float *d = a == 0 ? dst_params : dst_state + (size_t)(a - 1) * S;
                memcpy(d + dsoff[k] + (lo - d_lo),
                       v->data + (size_t)a * v->array_bytes + (foff + lo - s_lo) * 4,
                       (hi - lo) * 4);
            }
        }
        foff += ssh[i].valid;
    }
    free(spos);
    free(ssoff);
    free(ssh);
    free(dpos);
    free(dsoff);
    free(dsh);
    free(src_lens);
    return copied;
}

char *ckpt_shard_path(const char *dir, uint32_t epoch, uint32_t pos, uint32_t k, uint32_t world)
{
    return xasprintf("%s/ckpt-%06u-pos-%u-shard-%04u-of-%04u.bin", dir, epoch, pos, k, world);
}

/* A file's name fields. */
struct shard_name {
    unsigned epoch, pos, k, world;
};

/* Parses "ckpt-<epoch>-pos-<pos>-shard-<k>-of-<W>.bin"; 0 and the fields, or -1. */
static int parse_name(const char *name, struct shard_name *out)
{
    struct shard_name f;
    char canon[96];
    if (strncmp(name, "ckpt-", 5) != 0 ||
        sscanf(name, "ckpt-%u-pos-%u-shard-%u-of-%u.bin", &f.epoch, &f.pos, &f.k, &f.world) != 4)
        return -1;
    /* Only the name this file writes: no sign, space or missing digit. */
    snprintf(canon, sizeof(canon), "ckpt-%06u-pos-%u-shard-%04u-of-%04u.bin", f.epoch, f.pos, f.k,
             f.world);
    if (strcmp(canon, name) != 0)
        return -1;
    *out = f;
    return 0;
}

/* The names of dir's shard files (caller frees each and the array). */
static int list_names(const char *dir, char ***out, size_t *n, struct ddp_err *err)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, DDP_EIO, "checkpoint dir %s: %s", dir, strerror(errno));
    }
    size_t cap = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        struct shard_name f;
        if (parse_name(de->d_name, &f) != 0)
            continue;
        XGROW(*out, *n + 1, cap, 8);
        (*out)[(*n)++] = xstrdup(de->d_name);
    }
    closedir(d);
    return 0;
}

static void free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int ckpt_shard_save(const char *dir, uint32_t epoch, uint32_t pos, uint32_t k, uint32_t world,
                    const uint8_t *buf, size_t len, struct ddp_err *err)
{
    int rc = fs_mkdir_p(dir, 0755, err);
    if (rc)
        return rc;
    char *path = ckpt_shard_path(dir, epoch, pos, k, world);
    rc = fs_write_atomic(path, buf, len, 0644, err);
    free(path);
    return rc;
}

int ckpt_shard_prune(const char *dir, uint32_t epoch, uint32_t pos, const uint32_t *prev,
                     struct ddp_err *err)
{
    char **names = NULL;
    size_t n = 0;
    int rc = list_names(dir, &names, &n, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++) {
        struct shard_name f;
        (void)parse_name(names[i], &f);
        if ((f.epoch == epoch && f.pos == pos) || (prev && f.epoch == prev[0] && f.pos == prev[1]))
            continue; /* the complete one, and the one complete before it */
        char *old = xasprintf("%s/%s", dir, names[i]);
        if (unlink(old) != 0 && errno != ENOENT)
            log_warn("cannot remove old checkpoint %s: %s", old, strerror(errno));
        free(old);
    }
    free_names(names, n);
    return 0;
}

static int cmp_files(const void *a, const void *b)
{
    const struct ckpt_shard_file *x = a, *y = b;
    if (x->epoch != y->epoch)
        return x->epoch < y->epoch ? 1 : -1;
    if (x->epoch_pos != y->epoch_pos)
        return x->epoch_pos < y->epoch_pos ? 1 : -1;
    if (x->world != y->world)
        return x->world < y->world ? -1 : 1;
    return x->shard < y->shard ? -1 : (x->shard > y->shard ? 1 : 0);
}

int ckpt_shard_list(const char *dir, const struct ckpt_id *id, struct ckpt_shard_file **out,
                    size_t *n, struct ddp_err *err)
{
    *out = NULL;
    *n = 0;
    if (!id->spec || id->nparams == 0 || id->nparams > CKPT_MAX_BYTES / 8)
        return err_set(err, DDP_EINVAL, "sharded checkpoints need a model spec");
    char **names = NULL;
    size_t nn = 0;
    int rc = list_names(dir, &names, &nn, err);
    if (rc)
        return rc;
    /* No shard of this model is larger than its whole state with the longest header. */
    int k = id->state_arrays > 1 ? id->state_arrays : 1;
    size_t max = hdr_len(CKPT_MAX_MODEL, CKPT_SHARD_MAX_UNITS) +
                 (size_t)(1 + k) * 4 * (size_t)id->nparams + 4;
    size_t cap = 0;
    for (size_t i = 0; i < nn; i++) {
        struct shard_name f;
        (void)parse_name(names[i], &f);
        char *path = xasprintf("%s/%s", dir, names[i]);
        char *data = NULL;
        size_t dlen = 0;
        struct ddp_err de;
        struct ckpt_shard_view v;
        if (fs_read_regular(path, max, &data, &dlen, &de) != 0) {
            log_warn("skipping checkpoint %s: %s", path, de.msg);
        } else if (ckpt_shard_decode((const uint8_t *)data, dlen, path, &v, &de) != 0) {
            log_warn("skipping checkpoint %s: %s", path, de.msg);
        } else if (!ckpt_shard_matches_id(&v, id)) {
            log_warn("skipping checkpoint %s: it is of model '%s' (%llu parameters), not '%s' "
                     "(%llu parameters)",
                     path, v.meta.model, (unsigned long long)v.meta.nparams, id->spec,
                     (unsigned long long)id->nparams);
        } else if (v.meta.epoch != f.epoch || v.meta.epoch_pos != f.pos || v.shard != f.k ||
                   v.meta.world_size != f.world) {
            log_warn("skipping checkpoint %s: it holds epoch %u position %u, shard %u of %u", path,
                     v.meta.epoch, v.meta.epoch_pos, v.shard, v.meta.world_size);
        } else {
            XGROW(*out, *n + 1, cap, 8);
            (*out)[(*n)++] = (struct ckpt_shard_file){
                .epoch = f.epoch, .epoch_pos = f.pos, .world = f.world, .shard = f.k, .path = path};
            path = NULL;
        }
        free(data);
        free(path);
    }
    free_names(names, nn);
    if (*n > 1)
        qsort(*out, *n, sizeof(**out), cmp_files);
    return 0;
}

void ckpt_shard_files_free(struct ckpt_shard_file *f, size_t n)
{
    for (size_t i = 0; f && i < n; i++)
        free(f[i].path);
    free(f);
}
