/*
 * gpus.h - the GPUs an agent hands out to its workers, one per local rank: those it was given
 * (an inherited CUDA_VISIBLE_DEVICES: a Slurm step's, a container's), else every /dev/nvidiaN
 * the node has. Ids are kept as the strings CUDA_VISIBLE_DEVICES holds (an index, a GPU-...
 * UUID or a MIG-... id), so a worker's CUDA_VISIBLE_DEVICES names one of them.
 */
#ifndef DDP_AGENT_GPUS_H
#define DDP_AGENT_GPUS_H

#define GPUS_MAX 64

/* The GPU ids: from visible (the agent's CUDA_VISIBLE_DEVICES; NULL when unset) or, without
 * it, "0" .. found-1. An empty visible, "-1", "none" or "NoDevFiles" means none. *out is a new
 * array of *n strings (gpus_free); at most GPUS_MAX. */
void gpus_list(const char *visible, int found, char ***out, int *n);
void gpus_free(char **ids, int n);

#endif
