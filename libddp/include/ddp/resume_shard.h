/*
 * resume_shard.h - sharded checkpoints across the group, with no shared filesystem: every
 * rank writes its shard (ddp/ckpt_shard.h) into its own folder and a second copy lands on
 * another node, so losing any one node loses no shard; on resume the ranks agree on the
 * newest checkpoint of which every shard survives somewhere, and each rank takes its own
 * shard of it at the new world size (resharding 4 ranks' files onto 2, or 2 onto 3).
 *
 * Saving (ddp_shard_checkpoint_save, every rank of the group):
 *   1. the rank writes its shard file atomically into its folder;
 *   2. at the first save of the group, the ranks learn each other's node (GROUP_RANK, one
 *      all-reduce) and choose rank k's keeper: the rank at k's place within its node on the
 *      next node (by GROUP_RANK, cyclically), so that a node's copies spread over the next
 *      node's ranks; each k and its keeper make a comm of their own (ddp_sub_comm), kept
 *      with the group for its later saves;
 *   3. for every shard k in order, its rank sends the file to its keeper over their comm,
 *      and the keeper writes it. On one node there is no other node and nothing is sent;
 *   4. one all-reduce says whether every file and copy was written: only then is the
 *      checkpoint complete, and each folder prunes (ckpt_shard_prune) all but it and the
 *      one the group knew complete before (resumed from, or the last save confirmed).
 * Each file crosses the network once: per checkpoint the network carries the state once, and
 * a rank receives only the shards it keeps.
 *
 * Resuming (ddp_resume_shard_agree, then ddp_resume_shard_load, every rank):
 *   1. each rank lists the valid shard files of the model in its folder;
 *   2. the ranks all-reduce the checkpoints they hold (epoch, epoch_pos, world size: the
 *      newest 4 * CKPT_KEEP of each), and then, newest first, which shards of it each holds,
 *      until one checkpoint has every shard somewhere: that one is chosen, each shard from
 *      the lowest rank holding it (the same choice on every rank, as in resume.h);
 *   3. (load) for every shard k its holder broadcasts the file; every rank checks it (the
 *      crc, the model, the agreed epoch) and copies the part that its own new shard covers,
 *      unit layouts being free to differ (ckpt_shard_copy_overlap).
 * Every rank runs the same collectives in the same order whatever its folder holds.
 */
#ifndef DDP_RESUME_SHARD_H
#define DDP_RESUME_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/ckpt.h"
#include "ddp/ckpt_shard.h"

struct ddp_group; /* ddp/ddp.h */

/*
 * The rank that keeps rank k's copy (step 2 above) among W ranks whose GROUP_RANKs are
 * node[0..W): the rank at k's place within its node (by rank) on the next node (by
 * GROUP_RANK, cyclically), wrapping when that node has fewer ranks; -1 on one node.
 */
int ddp_shard_keeper(const double *node, int W, int k);

/*
 * Saves this rank's shard buf (a ckpt_shard_encode of shard g->rank of g->world_size at
 * (epoch, pos)) in dir and replicates every rank's on another node, as above. Collective:
 * every rank calls it, one without a folder (dir NULL or "") too, which then writes nothing.
 * Returns the first error of this rank: DDP_EIO naming a file it could not write (the
 * collectives still run to their end), or the collectives' (DDP_EPEER, DDP_ETIMEOUT).
 */
/* Step 4 of a save made otherwise (hybrid: every node writes its own copy's shards, none is
 * sent): collective, failed = this rank's write failed. When no rank failed the checkpoint is
 * complete: dir is pruned (ckpt_shard_prune, keeping the one the group knew complete
 * before) and the group remembers it. Returns the all-reduce's error, else 0. */
int ddp_shard_checkpoint_done(struct ddp_group *g, const char *dir, uint32_t epoch, uint32_t pos,
                              int failed, struct ddp_err *err);

int ddp_shard_checkpoint_save(struct ddp_group *g, const char *dir, uint32_t epoch, uint32_t pos,
                              const uint8_t *buf, size_t len, struct ddp_err *err);

/* The rank that keeps this rank's copy, as the saves so far chose it: -1 before the first
 * save, on one node (no copy is sent), or where setting up the pairs failed. */
int ddp_shard_copy_keeper(const struct ddp_group *g);

/* The sharded checkpoint the group agreed on. */
struct ddp_shard_resume {
    int found; /* 0: no checkpoint has all its shards anywhere */
    uint32_t epoch, epoch_pos;
    uint32_t world;                /* the world size that wrote it: its shard count */
    int *holder;                   /* world entries: the rank that serves shard k (owned) */
    struct ckpt_shard_file *files; /* this rank's valid files (owned) */
    size_t nfiles;
};

/* Steps 1 and 2 for model id (its spec set) with this rank's folder dir (NULL or "": none).
 * Collective. *out is filled (found 0 when nothing is complete); release it with
 * ddp_resume_shard_release. Errors: the collectives'. */
int ddp_resume_shard_agree(struct ddp_group *g, const char *dir, const struct ckpt_id *id,
                           struct ddp_shard_resume *out, struct ddp_err *err);

/*
 * Step 3 for an agreed r (found 1): this rank's shard as rank `rank` of `world` sharding
 * ranks (the group's, or under hybrid sharding its node's) into params
 * (S floats, the shard layout of ckpt_shard.h) and state (id's state arrays x S floats), and
 * the checkpoint's meta into *meta. lens[0..nunits) is the run's unit layout, which may
 * group the parameters otherwise than the writer's (DDP_EINVAL when it holds another count,
 * naming both); lens NULL takes the files' own, for a world of 1 (the shard layout is then
 * the whole state in definition order, whatever the units). S must
 * be ckpt_shard_floats of the layout at the world size. Collective. Errors: DDP_EINVAL for
 * a file that does not check or is not the agreed one, DDP_EIO when a holder cannot read
 * its file any more, and the collectives'.
 */
int ddp_resume_shard_load(struct ddp_group *g, const struct ddp_shard_resume *r,
                          const struct ckpt_id *id, const uint64_t *lens, uint32_t nunits,
                          int world, int rank, float *params, float *state, size_t S,
                          struct ckpt_meta *meta, struct ddp_err *err);

void ddp_resume_shard_release(struct ddp_shard_resume *r);

#endif
