/*
 * data.h - data sets for ddp-worker: IDX files (gzip or plain, read with zlib), the
 * Fashion-MNIST files of the Debian package dataset-fashion-mnist, and a synthetic set.
 *
 * A struct dataset owns its arrays: x holds n rows of dim floats (normalized), y holds n
 * labels in [0, classes). Release with data_release().
 */
#ifndef DDP_TRAINER_DATA_H
#define DDP_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

/* Limits on what a data file may declare: a crafted header never makes us allocate more. */
#define DATA_MAX_FILE_BYTES ((size_t)1 << 31) /* decompressed IDX file */
#define DATA_MAX_CLASSES    65536

/* Default folder of the Fashion-MNIST files; DDP_FASHION_MNIST_DIR overrides it. */
#define DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

struct dataset {
    size_t n;       /* samples */
    size_t dim;     /* features per sample */
    int classes;    /* labels are in [0, classes) */
    int rows, cols; /* images (IDX): dim = rows * cols; 0 for data with no image shape */
    float *x;       /* n * dim, row-major */
    uint8_t *y;     /* n */
};

/* A parsed IDX array of unsigned bytes: a view into the buffer given to data_idx_parse. */
struct idx_array {
    int ndims;
    uint32_t dims[4];
    size_t count; /* product of dims */
    const uint8_t *data;
};

/*
 * Parses an IDX buffer (magic 0x00 0x00 0x08 ndims, big-endian dims, then the bytes) that
 * must have want_ndims dimensions (1 for labels, 3 for images) and exactly count data bytes.
 * what names the file in messages. Fails with DDP_EINVAL; *out is then untouched.
 */
int data_idx_parse(const uint8_t *buf, size_t len, int want_ndims, const char *what,
                   struct idx_array *out, struct ddp_err *err);

/*
 * Builds a data set from an images array (n x rows x cols) and a labels array (n): pixels
 * scaled to [0, 1]. classes is fixed_classes when > 0 (a label beyond it is an error), else
 * max label + 1. Fails with DDP_EINVAL naming what.
 */
int data_from_idx(const struct idx_array *images, const struct idx_array *labels, int fixed_classes,
                  const char *what, struct dataset *out, struct ddp_err *err);

/* Reads a whole file, gunzipping it if it is gzip (zlib reads plain files as they are), up to
 * DATA_MAX_FILE_BYTES. Caller frees *buf. DDP_ENOTFOUND / DDP_EIO / DDP_ETOOBIG name path. */
int data_read_file(const char *path, uint8_t **buf, size_t *len, struct ddp_err *err);

/* Loads an IDX image file and label file pair. */
int data_load_idx_pair(const char *images_path, const char *labels_path, int fixed_classes,
                       struct dataset *out, struct ddp_err *err);

/*
 * Loads the training and test sets described by spec:
 *   "fashion-mnist"                      the Debian package's files (10 classes)
 *   "idx:IMAGES,LABELS[,TIMAGES,TLABELS]" any IDX pair; without a test pair the training set
 *                                        is also the test set
 *   "synthetic:N:D:C"                    N training samples (and N/5, at least 1, test
 *                                        samples) of D features in C classes: Gaussian
 *                                        clusters drawn from seed
 * IDX data is standardized with the training set's mean and standard deviation.
 * Errors: DDP_EINVAL for a bad spec (message names --data), DDP_ENOTFOUND/DDP_EIO for
 * unreadable files, DDP_EINVAL for malformed ones (message names the file).
 */
int data_load(const char *spec, uint64_t seed, struct dataset *train, struct dataset *test,
              struct ddp_err *err);

/* Standardizes train and test (may be the same object) with train's mean and deviation. */
void data_standardize(struct dataset *train, struct dataset *test);

/* Frees d's arrays and zeroes it; accepts a zeroed dataset. */
void data_release(struct dataset *d);

#endif
