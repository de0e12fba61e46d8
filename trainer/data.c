/*
 * data.c - IDX parsing (bounds-checked against the buffer: a crafted header never makes us
 * read past it or allocate more than DATA_MAX_FILE_BYTES), gzip reading through zlib,
 * Fashion-MNIST and synthetic data sets.
 *
 * Invariant: a dataset returned by any loader has n >= 1, dim >= 1, classes in
 * [1, DATA_MAX_CLASSES] and every label < classes.
 */
#include "trainer/data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "common/args.h"
#include "common/xalloc.h"
#include "ddp/rng.h"

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

int data_idx_parse(const uint8_t *buf, size_t len, int want_ndims, const char *what,
                   struct idx_array *out, struct ddp_err *err)
{
    struct idx_array a;
    memset(&a, 0, sizeof(a));
    if (len < 4)
        return err_set(err, DDP_EINVAL, "%s: not an IDX file: %zu bytes", what, len);
    if (buf[0] != 0 || buf[1] != 0 || buf[2] != 0x08)
        return err_set(err, DDP_EINVAL,
                       "%s: bad IDX magic 0x%02x%02x%02x%02x (want unsigned bytes, 0x000008..)",
                       what, buf[0], buf[1], buf[2], buf[3]);
    a.ndims = buf[3];
    if (a.ndims != want_ndims)
        return err_set(err, DDP_EINVAL, "%s: IDX file has %d dimensions, want %d", what, a.ndims,
                       want_ndims);
    size_t hdr = 4 + 4 * (size_t)a.ndims;
    if (len < hdr)
        return err_set(err, DDP_EINVAL, "%s: IDX header truncated", what);
    size_t count = 1;
    for (int i = 0; i < a.ndims; i++) {
        a.dims[i] = be32(buf + 4 + 4 * i);
        if (a.dims[i] == 0)
            return err_set(err, DDP_EINVAL, "%s: IDX dimension %d is 0", what, i);
        if (count > DATA_MAX_FILE_BYTES / a.dims[i])
            return err_set(err, DDP_EINVAL, "%s: IDX dimensions too large", what);
        count *= a.dims[i];
    }
    if (len - hdr != count)
        return err_set(err, DDP_EINVAL, "%s: IDX data is %zu bytes, header says %zu", what,
                       len - hdr, count);
    a.count = count;
    a.data = buf + hdr;
    *out = a;
    return 0;
}

int data_from_idx(const struct idx_array *images, const struct idx_array *labels, int fixed_classes,
                  const char *what, struct dataset *out, struct ddp_err *err)
{
    if (images->ndims != 3 || labels->ndims != 1)
        return err_set(err, DDP_EINVAL, "%s: want 3-d images and 1-d labels", what);
    size_t n = images->dims[0];
    if (labels->dims[0] != n)
        return err_set(err, DDP_EINVAL, "%s: %zu images but %u labels", what, n, labels->dims[0]);
    size_t dim = (size_t)images->dims[1] * images->dims[2];
    int classes = 0;
    for (size_t i = 0; i < n; i++) {
        int lab = labels->data[i];
        if (fixed_classes > 0 && lab >= fixed_classes)
            return err_set(err, DDP_EINVAL, "%s: label %d at index %zu is not below %d", what, lab,
                           i, fixed_classes);
        if (lab + 1 > classes)
            classes = lab + 1;
    }
    if (fixed_classes > 0)
        classes = fixed_classes;
    struct dataset d = {.n = n,
                        .dim = dim,
                        .classes = classes,
                        .rows = (int)images->dims[1],
                        .cols = (int)images->dims[2]};
    d.x = xmalloc(n * dim * sizeof(float));
    d.y = xmalloc(n);
    for (size_t i = 0; i < n * dim; i++)
        d.x[i] = (float)images->data[i] * (1.0f / 255.0f);
    memcpy(d.y, labels->data, n);
    *out = d;
    return 0;
}

int data_read_file(const char *path, uint8_t **buf, size_t *len, struct ddp_err *err)
{
    int rc = 0;
    uint8_t *b = NULL;
    size_t cap = 0, used = 0;
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        return err_set(err, e == ENOENT ? DDP_ENOTFOUND : DDP_EIO, "data file %s: %s", path,
                       strerror(e));
    }
    if (!S_ISREG(st.st_mode))
        return err_set(err, DDP_EIO, "data file %s: not a regular file", path);
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return err_set(err, DDP_EIO, "data file %s: cannot open: %s", path, strerror(errno));
    cap = (size_t)st.st_size + 1024;
    if (cap > DATA_MAX_FILE_BYTES)
        cap = DATA_MAX_FILE_BYTES;
    b = xmalloc(cap);
    for (;;) {
        if (used == cap) {
            if (cap >= DATA_MAX_FILE_BYTES) {
                rc = err_set(err, DDP_ETOOBIG, "data file %s: larger than %zu bytes", path,
                             DATA_MAX_FILE_BYTES);
                goto out;
            }
            cap = cap * 2 > DATA_MAX_FILE_BYTES ? DATA_MAX_FILE_BYTES : cap * 2;
            b = xrealloc(b, cap);
        }
        size_t want = cap - used;
        if (want > (1u << 30))
            want = 1u << 30;
        int got = gzread(gz, b + used, (unsigned)want);
        if (got < 0) {
            int zerr = 0;
            const char *m = gzerror(gz, &zerr);
            rc = err_set(err, DDP_EIO, "data file %s: %s", path, m ? m : "read error");
            goto out;
        }
        if (got == 0) {
            int zerr = 0;
            const char *m = gzerror(gz, &zerr);
            if (zerr == Z_BUF_ERROR) { /* the stream ended early */
                rc = err_set(err, DDP_EIO, "data file %s: truncated gzip stream", path);
                goto out;
            }
            if (zerr != Z_OK) {
                rc = err_set(err, DDP_EIO, "data file %s: %s", path, m ? m : "read error");
                goto out;
            }
            if (!gzeof(gz)) {
                rc = err_set(err, DDP_EIO, "data file %s: truncated gzip stream", path);
                goto out;
            }
            break;
        }
        used += (size_t)got;
    }
    *buf = b;
    *len = used;
    b = NULL;
out:
    free(b);
    gzclose(gz);
    return rc;
}

int data_load_idx_pair(const char *images_path, const char *labels_path, int fixed_classes,
                       struct dataset *out, struct ddp_err *err)
{
    uint8_t *ib = NULL, *lb = NULL;
    size_t il = 0, ll = 0;
    struct idx_array ia, la;
    int rc = data_read_file(images_path, &ib, &il, err);
    if (rc)
        goto out;
    rc = data_read_file(labels_path, &lb, &ll, err);
    if (rc)
        goto out;
    rc = data_idx_parse(ib, il, 3, images_path, &ia, err);
    if (rc)
        goto out;
    rc = data_idx_parse(lb, ll, 1, labels_path, &la, err);
    if (rc)
        goto out;
    rc = data_from_idx(&ia, &la, fixed_classes, labels_path, out, err);
out:
    free(ib);
    free(lb);
    return rc;
}

void data_standardize(struct dataset *train, struct dataset *test)
{
    double sum = 0, sq = 0;
    size_t total = train->n * train->dim;
    for (size_t i = 0; i < total; i++) {
        sum += train->x[i];
        sq += (double)train->x[i] * train->x[i];
    }
    double mean = sum / (double)total;
    double var = sq / (double)total - mean * mean;
    double sd = var > 1e-12 ? sqrt(var) : 1.0;
    float m = (float)mean, inv = (float)(1.0 / sd);
    for (size_t i = 0; i < total; i++)
        train->x[i] = (train->x[i] - m) * inv;
    if (test != train) {
        size_t tt = test->n * test->dim;
        for (size_t i = 0; i < tt; i++)
            test->x[i] = (test->x[i] - m) * inv;
    }
}

static void synth_fill(struct dataset *d, size_t n, size_t dim, int classes, const float *centers,
                       struct rng *r)
{
    d->n = n;
    d->dim = dim;
    d->classes = classes;
    d->x = xmalloc(n * dim * sizeof(float));
    d->y = xmalloc(n);
    for (size_t i = 0; i < n; i++) {
        int c = (int)rng_below(r, (uint64_t)classes);
        d->y[i] = (uint8_t)c;
        for (size_t j = 0; j < dim; j++)
            d->x[i * dim + j] = centers[(size_t)c * dim + j] + 1.5f * rng_normal(r);
    }
}

/* 0 when the test images (from file what) have the training images' shape. */
static int same_shape(const struct dataset *test, const struct dataset *train, const char *what,
                      struct ddp_err *err)
{
    if (test->rows == train->rows && test->cols == train->cols)
        return 0;
    return err_set(err, DDP_EINVAL, "%s: images are %dx%d, the training set's %dx%d", what,
                   test->rows, test->cols, train->rows, train->cols);
}

static void copy_dataset(const struct dataset *src, struct dataset *dst)
{
    *dst = *src;
    dst->x = xmalloc(src->n * src->dim * sizeof(float));
    dst->y = xmalloc(src->n);
    memcpy(dst->x, src->x, src->n * src->dim * sizeof(float));
    memcpy(dst->y, src->y, src->n);
}

static int load_synthetic(const char *args, uint64_t seed, struct dataset *train,
                          struct dataset *test, struct ddp_err *err)
{
    long v[3];
    const char *p = args;
    for (int i = 0; i < 3; i++) {
        char part[32];
        const char *colon = strchr(p, ':');
        size_t l = colon ? (size_t)(colon - p) : strlen(p);
        if ((i < 2 && !colon) || (i == 2 && colon) || l == 0 || l >= sizeof(part))
            return err_set(err, DDP_EINVAL, "--data: want synthetic:N:D:C, got 'synthetic:%s'",
                           args);
        memcpy(part, p, l);
        part[l] = '\0';
        static const char *const names[3] = {"--data synthetic N", "--data synthetic D",
                                             "--data synthetic C"};
        static const long maxes[3] = {10000000L, 100000L, 256L};
        int rc = args_parse_long(names[i], part, i == 2 ? 2 : 1, maxes[i], &v[i], err);
        if (rc)
            return rc;
        p = colon ? colon + 1 : p + l;
    }
    if ((uint64_t)v[0] * (uint64_t)v[1] > (1ULL << 29))
        return err_set(err, DDP_EINVAL, "--data: synthetic set of %ld x %ld is too large", v[0],
                       v[1]);
    struct rng r;
    rng_seed(&r, seed ^ 0x5eed0da7aULL);
    float *centers = xmalloc((size_t)v[2] * (size_t)v[1] * sizeof(float));
    for (size_t i = 0; i < (size_t)v[2] * (size_t)v[1]; i++)
        centers[i] = rng_normal(&r);
    synth_fill(train, (size_t)v[0], (size_t)v[1], (int)v[2], centers, &r);
    size_t nt = (size_t)v[0] / 5 ? (size_t)v[0] / 5 : 1;
    synth_fill(test, nt, (size_t)v[1], (int)v[2], centers, &r);
    free(centers);
    return 0;
}

static int load_idx_spec(const char *args, struct dataset *train, struct dataset *test,
                         struct ddp_err *err)
{
    char *copy = xstrdup(args);
    char *parts[4] = {NULL, NULL, NULL, NULL};
    int np = 0, rc = 0;
    char *p = copy;
    while (np < 4) {
        parts[np++] = p;
        char *comma = strchr(p, ',');
        if (!comma)
            break;
        *comma = '\0';
        p = comma + 1;
    }
    size_t commas = 0;
    for (const char *q = args; *q; q++)
        commas += *q == ',';
    if ((np != 2 && np != 4) || (commas != 1 && commas != 3)) { /* idx:a,b,c,d,e: not 4 */
        rc =
            err_set(err, DDP_EINVAL,
                    "--data: want idx:IMAGES,LABELS[,TEST_IMAGES,TEST_LABELS], got 'idx:%s'", args);
        goto out;
    }
    for (int i = 0; i < np; i++) {
        if (parts[i][0] == '\0') {
            rc = err_set(err, DDP_EINVAL, "--data: empty file name in 'idx:%s'", args);
            goto out;
        }
    }
    rc = data_load_idx_pair(parts[0], parts[1], 0, train, err);
    if (rc)
        goto out;
    if (np == 4) {
        rc = data_load_idx_pair(parts[2], parts[3], 0, test, err);
        if (rc)
            goto out;
        rc = same_shape(test, train, parts[2], err);
        if (rc)
            goto out;
        int c = train->classes > test->classes ? train->classes : test->classes;
        train->classes = test->classes = c;
    } else {
        copy_dataset(train, test);
    }
    data_standardize(train, test);
out:
    if (rc) {
        data_release(train);
        data_release(test);
    }
    free(copy);
    return rc;
}

int data_load(const char *spec, uint64_t seed, struct dataset *train, struct dataset *test,
              struct ddp_err *err)
{
    struct dataset tr, te;
    memset(&tr, 0, sizeof(tr));
    memset(&te, 0, sizeof(te));
    int rc;
    if (strcmp(spec, "fashion-mnist") == 0) {
        const char *dir = getenv("DDP_FASHION_MNIST_DIR");
        if (!dir || !dir[0])
            dir = DATA_FASHION_MNIST_DIR;
        char *paths[4];
        static const char *const names[4] = {
            "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
            "t10k-labels-idx1-ubyte.gz"};
        for (int i = 0; i < 4; i++)
            paths[i] = xasprintf("%s/%s", dir, names[i]);
        rc = data_load_idx_pair(paths[0], paths[1], 10, &tr, err);
        if (rc == 0)
            rc = data_load_idx_pair(paths[2], paths[3], 10, &te, err);
        if (rc == 0)
            rc = same_shape(&te, &tr, paths[2], err);
        for (int i = 0; i < 4; i++)
            free(paths[i]);
        if (rc == 0)
            data_standardize(&tr, &te);
    } else if (strncmp(spec, "idx:", 4) == 0) {
        rc = load_idx_spec(spec + 4, &tr, &te, err);
    } else if (strncmp(spec, "synthetic:", 10) == 0) {
        rc = load_synthetic(spec + 10, seed, &tr, &te, err);
    } else if (strcmp(spec, "fortunes") == 0 || strncmp(spec, "text:", 5) == 0) {
        rc = err_set(err, DDP_EINVAL,
                     "--data: '%s' is a text corpus, for a language model: use --model "
                     "gpt:L-H-D-T with it",
                     spec);
    } else {
        rc = err_set(err, DDP_EINVAL,
                     "--data: unknown data set '%s' (fashion-mnist, idx:IMAGES,LABELS or "
                     "synthetic:N:D:C)",
                     spec);
    }
    if (rc) {
        data_release(&tr);
        data_release(&te);
        return rc;
    }
    *train = tr;
    *test = te;
    return 0;
}

void data_release(struct dataset *d)
{
    if (!d)
        return;
    free(d->x);
    free(d->y);
    memset(d, 0, sizeof(*d));
}
