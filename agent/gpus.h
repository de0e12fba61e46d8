/*
 * gpus.h - the GPUs an agent hands out to its workers, gpus_per_proc each (one by default) and
 * never one GPU to two workers: those it was given
 * (an inherited CUDA_VISIBLE_DEVICES: a Slurm step's, a container's), else every /dev/nvidiaN
 * the node has. Ids are kept as the strings CUDA_VISIBLE_DEVICES holds (an index, a GPU-...
 * UUID or a MIG-... id), so a worker's CUDA_VISIBLE_DEVICES names one of them.
 */
#ifndef DDP_AGENT_GPUS_H
#define DDP_AGENT_GPUS_H

#include <stdint.h>

#define GPUS_MAX 64

/* The GPU ids: from visible (the agent's CUDA_VISIBLE_DEVICES; NULL when unset) or, without
 * it, "0" .. found-1. An empty visible, "-1", "none" or "NoDevFiles" means none. *out is a new
 * array of *n strings (gpus_free); at most GPUS_MAX. */
void gpus_list(const char *visible, int found, char ***out, int *n);
void gpus_free(char **ids, int n);

/* Picks want GPUs of the n (<= GPUS_MAX) the agent has, among those not set in busy (bit i =
 * GPU i is a worker's), lowest index first. Returns 0 with *out the picked set (0 for want 0),
 * or -1 when fewer than want are free (then *out is unchanged). A pure function. */
int gpus_pick(uint64_t busy, int n, int want, uint64_t *out);

/* The CUDA_VISIBLE_DEVICES value for the GPUs set in mask: their ids, comma separated, in
 * index order ("" for an empty mask). Caller frees. */
char *gpus_visible(char *const *ids, int n, uint64_t mask);

#endif
