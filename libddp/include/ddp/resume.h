/*
 * resume.h - where a restarted job picks up: the ranks agree on one checkpoint and every
 * rank ends holding the same bytes of it.
 *
 * The protocol (every rank of the group calls ddp_resume, with its own checkpoint folder):
 *   1. each rank finds the newest valid checkpoint in its folder that fits the model
 *      (ckpt_find_newest: a corrupt, truncated or mismatching file is skipped);
 *   2. the ranks all-reduce a vector holding each rank's epoch and position (or none: a
 *      checkpoint of epoch 0, written mid-way through the first epoch, counts), so every rank
 *      knows every rank's newest epoch and computes the same choice: the newest epoch, held
 *      by its lowest rank (the owner);
 *   3. the owner broadcasts the file's length, then its bytes; every rank decodes them;
 *   4. a LOCAL_RANK 0 whose folder lacked the chosen epoch keeps a replica of it there, so a
 *      node that lost its files (a new machine) holds the newest checkpoint again.
 * At world size 1 the collectives are no-ops: the rank resumes from its own folder.
 */
#ifndef DDP_RESUME_H
#define DDP_RESUME_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/ckpt.h"

struct ddp_group; /* ddp/ddp.h */

/* The checkpoint the group agreed on. */
struct ddp_resume {
    uint32_t epoch; /* its epoch (epochs completed); 0 also when no rank had one */
    int owner;      /* the rank whose file was broadcast; -1 when none */
    uint8_t *buf;   /* its bytes, the same on every rank; owned, NULL when none */
    size_t len;
    struct ckpt_view view; /* buf decoded (views into buf); valid when owner >= 0 */
};

/*
 * Runs the protocol above on g with this rank's folder dir (NULL or "": this rank has no
 * folder: it offers no checkpoint and keeps no replica) for a model of these widths. Every
 * rank of g must call it. On success *out holds the agreed checkpoint (out->owner -1 when
 * there is none anywhere); the caller releases it with ddp_resume_release(). A folder that
 * cannot be scanned or a replica that cannot be written is a warning, not an error. Errors:
 * the collectives' (DDP_EPEER, DDP_ETIMEOUT, ...), DDP_EINVAL when the owner's bytes are too
 * long, do not decode or are for another model; *out is then untouched.
 */
int ddp_resume(struct ddp_group *g, const char *dir, const int *widths, int nwidths,
               struct ddp_resume *out, struct ddp_err *err);

/* ddp_resume for the model id (ddp/ckpt.h): an MLP by widths or any model by spec and
 * parameter count; a mismatching owner's checkpoint is refused naming both models. */
int ddp_resume_id(struct ddp_group *g, const char *dir, const struct ckpt_id *id,
                  struct ddp_resume *out, struct ddp_err *err);

/* ddp_resume_id among the checkpoints newer than (after_epoch, after_pos) only (a sharded
 * checkpoint the group already agreed on, ddp/resume_shard.h; (0, 0): any): out->owner -1
 * when none is. Before it looks, LOCAL_RANK 0 removes the temporary files of saves cut short
 * from dir (ckpt_remove_temps). */
int ddp_resume_id_newer(struct ddp_group *g, const char *dir, const struct ckpt_id *id,
                        uint32_t after_epoch, uint32_t after_pos, struct ddp_resume *out,
                        struct ddp_err *err);

/* Frees r's bytes; accepts NULL and a zeroed or released struct. */
void ddp_resume_release(struct ddp_resume *r);

#endif
