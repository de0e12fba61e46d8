/*
 * ckpt_shard.h - sharded checkpoints: each rank of a sharded run (--sharding grad|full)
 * writes only its shard of the parameters and of the optimizer state, with a header naming
 * the model, the unit layout and the world size that wrote it, so that a run at another
 * world size can reshard it (ddp/resume_shard.h).
 *
 * Shards. The state is cut into units (consecutive ranges of the parameters in definition
 * order, n_u floats each, covering all of them); shard k of world W holds, of every unit,
 * the floats [k * c_u, k * c_u + valid_k,u) with c_u = ceil(n_u / W) (ddp/shard.h: the last
 * shards are short, or empty). In memory a rank keeps its shard of every unit one after the
 * other, c_u floats a unit (the padding included): the "shard layout" of the functions
 * below, S = sum of c_u floats an array. At W = 1 that is the whole state in definition
 * order.
 *
 * Format (version 1, little-endian):
 *   offset  size           field
 *   0       8              magic "DDPSHRD\0"
 *   8       4              version (1)
 *   12      4              header_len = 104 + spec_len rounded up to 4 + 8 * nunits
 *   16      4              epoch (epochs completed)
 *   20      4              epoch_pos (as ckpt.h: samples of the next epoch trained)
 *   24      8              step
 *   32      8              seed
 *   40      32             rng state (4 x u64)
 *   72      8              nparams (the whole model's)
 *   80      4              world_size W that wrote it (1..CKPT_SHARD_MAX_WORLD)
 *   84      4              shard k (0..W-1)
 *   88      4              nunits (1..CKPT_SHARD_MAX_UNITS)
 *   92      4              state_arrays (1..CKPT_MAX_STATE_ARRAYS)
 *   96      4              spec_len (1..CKPT_MAX_MODEL)
 *   100     4              reserved (0)
 *   104     spec_len       the model spec as in ckpt.h ("gpt:2-4-64-64 adamw"), zero padded
 *   ...     8 * nunits     n_u of every unit (their sum is nparams)
 *   header_len             the parameters' shard: valid_k,u floats of every unit in order
 *   ...                    then the same for each state array
 *   end - 4     4          crc32 (zlib) of every byte before it
 * A file is valid only when every field is in range, the sizes agree with its length and
 * the crc matches. Files are named ckpt-<epoch, 6 digits>-pos-<epoch_pos>-shard-<k, 4>-of-<W,
 * 4>.bin beside the whole-state checkpoints (whose names they never match): a mid-epoch
 * checkpoint never overwrites its epoch's end, so a save cut short leaves the older
 * checkpoint whole. A folder keeps the files of its newest complete (epoch, epoch_pos) and
 * of the complete one before it (ckpt_shard_prune).
 */
#ifndef DDP_CKPT_SHARD_H
#define DDP_CKPT_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/ckpt.h"

#define CKPT_SHARD_VERSION   1
#define CKPT_SHARD_MAX_WORLD 4096
#define CKPT_SHARD_MAX_UNITS 65536

/* A decoded shard file: meta (model, nparams, state_arrays, epoch, epoch_pos, step, seed,
 * rng, world_size; nlayers 0), its index, and views into the buffer given to decode. */
struct ckpt_shard_view {
    struct ckpt_meta meta;
    uint32_t shard;
    uint32_t nunits;
    const uint8_t *lens_bytes; /* nunits x u64 */
    const uint8_t *data;       /* (1 + state_arrays) arrays of the shard's valid floats */
    size_t array_bytes;        /* bytes of one array in the file */
};

/* Unit i's length in a decoded file. */
uint64_t ckpt_shard_unit_len(const struct ckpt_shard_view *v, uint32_t i);

/*
 * Encodes shard `shard` of meta->world_size (meta: model, nparams, state_arrays and the
 * position fields) of the units lens[0..nunits) from params (S floats, the shard layout)
 * and state (state_arrays x S floats) into a new buffer (caller frees). DDP_EINVAL when a
 * field is out of range or the lengths do not sum to nparams.
 */
int ckpt_shard_encode(const struct ckpt_meta *meta, uint32_t shard, const uint64_t *lens,
                      uint32_t nunits, const float *params, const float *state, uint8_t **out,
                      size_t *len, struct ddp_err *err);

/* Checks and decodes buf; what names it in messages. DDP_EINVAL for anything wrong. */
int ckpt_shard_decode(const uint8_t *buf, size_t len, const char *what, struct ckpt_shard_view *out,
                      struct ddp_err *err);

/* Whether v is of model id (spec, nparams and state arrays; id->spec must be set). */
int ckpt_shard_matches_id(const struct ckpt_shard_view *v, const struct ckpt_id *id);

/*
 * Copies into dst the part of v's shard that rank `rank` of `world` owns in the unit layout
 * dst_lens[0..dst_nunits) (NULL: the file's own; any layout of the same parameters will do,
 * so a run may group its units otherwise than the writer did): for every unit of the file
 * and every unit of dst that it overlaps, the overlap of the file's slice with the rank's
 * slice, into dst_params (the rank's shard layout of dst's units) and dst_state
 * (state_arrays arrays of its S floats). Floats outside the overlaps are untouched: copying
 * every shard of one checkpoint fills a rank's shard. dst_lens must sum to the file's
 * nparams. Returns the parameters copied (each state array got as many).
 */
size_t ckpt_shard_copy_overlap(const struct ckpt_shard_view *v, const uint64_t *dst_lens,
                               uint32_t dst_nunits, int world, int rank, float *dst_params,
                               float *dst_state, size_t S);

/* The parameters rank k of world owns of these units (the valid floats of its shard, which a
 * file holds); SIZE_MAX on overflow. */
size_t ckpt_shard_valid_floats(const uint64_t *lens, uint32_t nunits, int world, int k);

/* The shard layout's length S of these units at world ranks (0 on overflow). */
size_t ckpt_shard_floats(const uint64_t *lens, uint32_t nunits, int world);

/* The path of shard k of world in dir at (epoch, pos) (caller frees). */
char *ckpt_shard_path(const char *dir, uint32_t epoch, uint32_t pos, uint32_t k, uint32_t world);

/* Writes buf as that file in dir (created if missing) atomically. DDP_EIO names the file.
 * Nothing is removed: only a checkpoint the group knows complete prunes (below). */
int ckpt_shard_save(const char *dir, uint32_t epoch, uint32_t pos, uint32_t k, uint32_t world,
                    const uint8_t *buf, size_t len, struct ddp_err *err);

/* After the group confirmed (epoch, pos) complete (every shard written and copied): removes
 * dir's shard files of every other key but prev ({epoch, pos} of the checkpoint the group
 * knew complete before, NULL: none), older ones and newer ones alike (saves cut short, never
 * complete). So a folder keeps CKPT_KEEP (2) complete checkpoints, and a save cut short
 * never costs one. */
int ckpt_shard_prune(const char *dir, uint32_t epoch, uint32_t pos, const uint32_t *prev,
                     struct ddp_err *err);

/* One valid shard file of a folder. */
struct ckpt_shard_file {
    uint32_t epoch, epoch_pos, world, shard;
    char *path; /* owned */
};

/*
 * The valid shard files of model id in dir, newest (epoch, epoch_pos) first, into *out
 * (caller frees with ckpt_shard_files_free). A corrupt or foreign file is skipped with a
 * warning naming it, anything not a regular file or larger than the model's whole state is
 * never read. A missing dir is an empty list; DDP_EIO when it cannot be read.
 */
int ckpt_shard_list(const char *dir, const struct ckpt_id *id, struct ckpt_shard_file **out,
                    size_t *n, struct ddp_err *err);
void ckpt_shard_files_free(struct ckpt_shard_file *f, size_t n);

#endif
