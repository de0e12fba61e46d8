/*
 * outpath.h - where a rank writes what --trace and --dump-params name: "{rank}" in the
 * path is the rank (so that every rank of a job writes its own file, as a job under the
 * agents needs); a path without it is written by rank 0 alone (the parameters are the same
 * on every rank; a trace would be overwritten by each). Checked before training, so that a
 * path that cannot be written is exit 2 naming the flag, not a lost run at the end.
 */
#ifndef DDP_TRAINER_OUTPATH_H
#define DDP_TRAINER_OUTPATH_H

#include "common/err.h"

/* The path rank writes for the flag's value tmpl (caller frees), or NULL when this rank
 * writes none (no "{rank}" and rank > 0). Its folder must exist and be writable, else
 * DDP_EINVAL naming flag and the folder (*out NULL). */
int outpath_for(const char *flag, const char *tmpl, int rank, char **out, struct ddp_err *err);

#endif
