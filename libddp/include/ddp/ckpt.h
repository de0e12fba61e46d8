/*
 * ckpt.h - checkpoints: the model's parameters, the optimizer's momentum, the epoch, the
 * step count and the RNG state, in one self-checking file.
 *
 * Format (version 1, little-endian):
 *   offset  size           field
 *   0       8              magic "DDPCKPT\0"
 *   8       4              version (1)
 *   12      4              header_len = 88 + 4 * (nlayers + 1)
 *   16      4              epoch (epochs completed)
 *   20      4              nlayers
 *   24      8              step (optimizer steps taken)
 *   32      8              seed
 *   40      32             rng state (4 x u64)
 *   72      8              nparams
 *   80      4              world_size that wrote it (informational)
 *   84      4              epoch_pos: samples of epoch `epoch` (0-based: the one after the
 *                          completed ones) already trained, counted in the epoch's shuffled
 *                          and padded global list; 0 = the epoch's start (files of earlier
 *                          releases held 0 here, "reserved", and still resume at an epoch's
 *                          start)
 *   88      4*(nlayers+1)  widths
 *   header_len  4*nparams  parameters (f32, definition order)
 *   ...         4*nparams  momentum buffers (f32, same order)
 *   end - 4     4          crc32 (zlib) of every byte before it
 * A file is valid only if its length is exactly header_len + 8 * nparams + 4, nparams is
 * what the widths imply, and the crc matches. Files are named ckpt-<epoch, 6 digits>.bin.
 * A checkpoint written mid-epoch (on a preemption notice, docs/worker.md) has epoch_pos > 0
 * and the name of its completed epochs: it replaces that epoch's end-of-epoch file, being
 * newer, and ranks choose by (epoch, epoch_pos) (resume.h).
 *
 * Version 2 identifies the model by its spec string instead of widths (any model family,
 * the CNN's "cnn:c32k5-..."), for the models that are not an MLP. It is version 1 but for:
 *   8       4              version (2)
 *   12      4              header_len = 92 + spec_len rounded up to a multiple of 4
 *   20      4              nlayers: 0
 *   88      4              spec_len (1..CKPT_MAX_MODEL)
 *   92      spec_len       the spec (no NUL), then zero padding to header_len
 * Version 3 is version 2 with more than one array of optimizer state (AdamW's m and v):
 *   8       4              version (3)
 *   12      4              header_len = 96 + spec_len rounded up to a multiple of 4
 *   92      4              state_arrays (2..CKPT_MAX_STATE_ARRAYS)
 *   96      spec_len       the spec, then zero padding to header_len
 * and the arrays after the parameters are state_arrays of nparams floats each (the file is
 * header_len + 4 * nparams * (1 + state_arrays) + 4 bytes).
 * nparams is checked against the model's own count when a model is matched (ckpt_id); the
 * spec names the optimizer where it is not SGD ("gpt:2-4-64-64 adamw"), so a checkpoint of
 * another optimizer is refused by name.
 * MLP checkpoints stay version 1, so the files of earlier releases still resume.
 */
#ifndef DDP_CKPT_H
#define DDP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/rng.h"

#define CKPT_VERSION          1 /* by widths: the MLP */
#define CKPT_VERSION_SPEC     2 /* by spec string */
#define CKPT_VERSION_STATE    3 /* by spec string, with several optimizer arrays */
#define CKPT_MAX_MODEL        256
#define CKPT_MAX_LAYERS       64
#define CKPT_MAX_BYTES        ((size_t)1 << 34)
#define CKPT_MAX_STATE_ARRAYS 4
#define CKPT_KEEP             2 /* newest checkpoints kept in a folder */

struct ckpt_meta {
    uint32_t epoch;
    uint32_t epoch_pos; /* samples of the next epoch already trained (0: at its start) */
    uint64_t step;
    uint64_t seed;
    struct rng rng;
    uint32_t world_size;
    int nlayers;
    uint32_t widths[CKPT_MAX_LAYERS + 1];
    uint64_t nparams;
    /* Version 2: the model's spec ("" in a version 1 checkpoint, whose nlayers and widths
     * say the model; a version 2 one has nlayers 0). */
    char model[CKPT_MAX_MODEL + 1];
    int state_arrays; /* versions 2 and 3: arrays of optimizer state (0 or 1: one) */
};

/* The model a checkpoint must be of: an MLP by its widths (spec NULL), or any model by its
 * spec string and parameter count. All borrowed. */
struct ckpt_id {
    const int *widths;
    int nwidths;
    const char *spec;
    uint64_t nparams;
    int state_arrays; /* with spec: the optimizer's arrays (0 or 1: one) */
};

/* A decoded checkpoint: meta, plus views into the buffer given to ckpt_decode. */
struct ckpt_view {
    struct ckpt_meta meta;
    const uint8_t *params_bytes;
    const uint8_t *momentum_bytes;
};

/* Encodes meta (nparams must match the widths; with meta->model set, a version 2 file of
 * nparams) and the two arrays into a new buffer (caller frees). */
int ckpt_encode(const struct ckpt_meta *meta, const float *params, const float *momentum,
                uint8_t **out, size_t *len, struct ddp_err *err);

/* Checks and decodes buf. what names the file in messages. DDP_EINVAL for anything wrong
 * (bad magic, version, sizes, checksum, truncation). */
int ckpt_decode(const uint8_t *buf, size_t len, const char *what, struct ckpt_view *out,
                struct ddp_err *err);

/* Copies a decoded checkpoint's arrays into params (nparams floats) and momentum (nparams
 * floats per state array). */
void ckpt_copy_arrays(const struct ckpt_view *v, float *params, float *momentum);

/* Whether a decoded checkpoint fits a model with these widths. */
int ckpt_matches(const struct ckpt_meta *meta, const int *widths, int nwidths);
/* Whether it is of the model id: the same widths, or the same spec and parameter count. */
int ckpt_matches_id(const struct ckpt_meta *meta, const struct ckpt_id *id);
/* Writes "'mlp:784-256-128-10' (203530 parameters)" for meta's model, or id's, into buf. */
void ckpt_describe(const struct ckpt_meta *meta, char *buf, size_t size);
void ckpt_id_describe(const struct ckpt_id *id, char *buf, size_t size);

/* The path of epoch's checkpoint in dir (caller frees). */
char *ckpt_path(const char *dir, uint32_t epoch);

/* Writes buf as epoch's checkpoint in dir (created if missing) atomically, then removes
 * this model's checkpoints older than the newest CKPT_KEEP of those not newer than epoch (the
 * one written counts), and older files whose header is no checkpoint's. A newer file, or one
 * of another model, is never removed nor counted: a reused folder's other files cannot make
 * a save delete what it wrote. DDP_EIO names the file. */
int ckpt_save(const char *dir, uint32_t epoch, const uint8_t *buf, size_t len, struct ddp_err *err);

/* Removes the temporary files a save cut short left in dir ("ckpt-*.bin.tmp.*": a rank
 * killed while writing, whole or sharded): those whose writer's lock is free and that are
 * CKPT_TEMP_AGE_S old (fs_atomic_abandoned; another writer's, in a folder two jobs share,
 * is kept while it writes); run before a generation's first save. Returns how many were
 * removed (each logged); a folder that cannot be read removes none. */
#define CKPT_TEMP_AGE_S 2
int ckpt_remove_temps(const char *dir);

/*
 * Finds the newest valid checkpoint in dir that fits widths: files are tried newest first;
 * a corrupt, truncated or mismatching one is skipped with a warning naming it, and so is
 * anything that is not a regular file (a symbolic link, a FIFO, a device: never opened for
 * reading or followed) or is larger than a checkpoint of this model (never read). On success
 * *buf (caller frees), *len and *epoch describe it; DDP_ENOTFOUND when there is none (also
 * when dir does not exist).
 */
/* The exact size in bytes of a checkpoint of a model of these widths; 0 when the widths make
 * no valid checkpoint (fewer than 2, more than CKPT_MAX_LAYERS + 1, one <= 0, too large). */
size_t ckpt_size_for(const int *widths, int nwidths);
/* The same for id; for a spec, 0 when it is empty, too long or nparams too large. */
size_t ckpt_size_id(const struct ckpt_id *id);

int ckpt_find_newest(const char *dir, const int *widths, int nwidths, uint8_t **buf, size_t *len,
                     uint32_t *epoch, struct ddp_err *err);
/* ckpt_find_newest for the model id; a checkpoint of another model is skipped with a
 * warning naming both models. */
int ckpt_find_newest_id(const char *dir, const struct ckpt_id *id, uint8_t **buf, size_t *len,
                        uint32_t *epoch, struct ddp_err *err);

#endif
