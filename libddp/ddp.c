/*
 * ddp.c - the process group: torchrun environment -> rendezvous store -> comm. Rank 0's
 * store stays open for the group's life (the store thread serves late joiners and the
 * comm may use it); it is closed after the comm.
 */
#include "ddp/ddp.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#ifdef DDP_HAVE_CUDA
#include "ddp/gpu.h"
#endif

/* Decides whether this process computes on a GPU, and selects it at world size 1 (above
 * that the nccl comm selects it). */
static int pick_device(struct ddp_group *g, const char *backend, int *exit_code,
                       struct ddp_err *err)
{
    int want = backend && strcmp(backend, "nccl") == 0;
    int maybe = !backend || strcmp(backend, "auto") == 0;
    if (!want && !maybe) {
        if (backend && strcmp(backend, "cpu") == 0)
            return 0;
        *exit_code = DDP_EXIT_USAGE;
        return err_set(err, DDP_EINVAL, "--backend: '%s' is not one of auto, cpu, nccl", backend);
    }
#ifdef DDP_HAVE_CUDA
    const char *why = NULL;
    int n = gpu_count(&why);
    if (n == 0) {
        if (!want)
            return 0;
        *exit_code = DDP_EXIT_DEVICE;
        return err_set(err, DDP_EINVAL, "--backend nccl: no GPU: %s", why ? why : "none found");
    }
    g->gpu = 1;
    /* torchrun's habit: LOCAL_RANK indexes the visible GPUs. Where the agent gave this rank
     * one GPU (CUDA_VISIBLE_DEVICES), that one is device 0. */
    g->device = n == 1 ? 0 : g->env.local_rank;
    if (g->world_size == 1) {
        int rc = gpu_init(g->device, err);
        if (rc) {
            *exit_code = DDP_EXIT_DEVICE;
            return rc;
        }
        log_info("computing on GPU %d (world size 1: no collectives)", g->device);
    }
    return 0;
#else
    if (!want)
        return 0;
    *exit_code = DDP_EXIT_USAGE;
    return err_set(err, DDP_EINVAL, "--backend nccl: ddp was built without NCCL");
#endif
}

int ddp_group_open(const char *backend, int64_t timeout_ms, struct ddp_group **out, int *exit_code,
                   struct ddp_err *err)
{
    struct ddp_group *g = xcalloc(1, sizeof(*g));
    int rc = env_read(&g->env, err);
    if (rc) {
        *exit_code = DDP_EXIT_USAGE;
        goto out;
    }
    g->rank = g->env.rank;
    g->world_size = g->env.world_size;
    g->timeout_ms = timeout_ms;
    if ((rc = pick_device(g, backend, exit_code, err)) < 0)
        goto out;
    if (g->gpu)
        backend = "nccl";
    else if (backend && strcmp(backend, "auto") == 0)
        backend = "cpu";
    if (g->world_size > 1) {
        rc = rdzv_open(g->env.master_addr, g->env.master_port, g->rank, g->world_size,
                       g->env.job_token, timeout_ms, &g->rdzv, err);
        if (rc) {
            *exit_code = rc == DDP_EEXIST ? DDP_EXIT_PORT_IN_USE : DDP_EXIT_RENDEZVOUS;
            goto out;
        }
        struct comm_opts co;
        comm_opts_default(&co);
        co.timeout_ms = timeout_ms;
        co.device = g->device;
        rc = comm_new(backend, g->rdzv, g->rank, g->world_size, &co, &g->comm, err);
        if (rc) {
            /* A CUDA error while NCCL starts (EINTERNAL) is the device's fault; a peer
             * that does not come (timeout, lost) is the rendezvous's. */
            *exit_code = rc == DDP_EEXIST ? DDP_EXIT_PORT_IN_USE
                         : g->gpu && (rc == DDP_EINVAL || rc == DDP_EINTERNAL) ? DDP_EXIT_DEVICE
                         : rc == DDP_EINVAL                                    ? DDP_EXIT_USAGE
                                            : DDP_EXIT_RENDEZVOUS;
            goto out;
        }
        log_info("process group ready rank=%d world_size=%d backend=%s", g->rank, g->world_size,
                 comm_backend_name(g->comm));
    }
    *out = g;
    g = NULL;
out:
    ddp_group_close(g);
    return rc;
}

void ddp_group_close(struct ddp_group *g)
{
    if (!g)
        return;
    for (int k = 0; g->pairs && k < g->world_size; k++)
        if (g->pairs[k])
            comm_free(g->pairs[k]);
    free(g->pairs);
    free(g->keeper);
    if (g->comm)
        comm_free(g->comm);
    rdzv_close(g->rdzv);
    free(g);
}

int ddp_allreduce_f64(struct ddp_group *g, double *buf, size_t count, struct ddp_err *err)
{
    if (g->world_size == 1)
        return 0;
    return comm_allreduce(g->comm, buf, count, COMM_F64, err);
}

int ddp_broadcast(struct ddp_group *g, void *buf, size_t bytes, int root, struct ddp_err *err)
{
    if (g->world_size == 1)
        return 0;
    return comm_broadcast(g->comm, buf, bytes, root, err);
}

int ddp_sub_comm(struct ddp_group *g, uint32_t tag, int rank, int size, struct comm **out,
                 struct ddp_err *err)
{
    if (tag == 0)
        return err_set(err, DDP_EINVAL, "a sub-group needs a tag > 0");
    if (g->comm && strcmp(comm_backend_name(g->comm), "cpu") != 0)
        return err_set(err, DDP_EINVAL, "sub-groups are built on the cpu backend only, not %s",
                       comm_backend_name(g->comm));
    struct comm_opts co;
    comm_opts_default(&co);
    co.timeout_ms = g->timeout_ms;
    co.device = g->device;
    co.group_tag = tag;
    const char *backend = g->comm ? comm_backend_name(g->comm) : "cpu";
    return comm_new(backend, g->rdzv, rank, size, &co, out, err);
}

int ddp_comm_broadcast_bytes(struct comm *c, int root, size_t max, uint8_t **buf, size_t *len,
                             struct ddp_err *err)
{
    int me = comm_rank(c);
    uint64_t blen = me == root ? (uint64_t)*len : 0;
    int rc = comm_broadcast(c, &blen, sizeof(blen), root, err);
    if (rc)
        return rc;
    if (blen > max)
        return err_set(err, DDP_EINVAL, "rank %d sends %llu bytes (at most %zu)", root,
                       (unsigned long long)blen, max);
    if (me != root) {
        free(*buf);
        *buf = NULL;
        *len = 0;
        /* not xmalloc: a length this process cannot hold is an error naming it, not an
         * abort (the root's broadcast then ends at the comm's timeout) */
        if (blen && !(*buf = malloc((size_t)blen)))
            return err_set(err, DDP_ETOOBIG,
                           "rank %d sends %llu bytes: more than this process "
                           "can allocate",
                           root, (unsigned long long)blen);
        *len = (size_t)blen;
    }
    return blen ? comm_broadcast(c, *buf, *len, root, err) : 0;
}

int ddp_broadcast_bytes(struct ddp_group *g, int root, size_t max, uint8_t **buf, size_t *len,
                        struct ddp_err *err)
{
    if (g->world_size == 1) /* root is this rank: its bytes stay */
        return *len > max ? err_set(err, DDP_EINVAL, "rank %d sends %zu bytes (at most %zu)", root,
                                    *len, max)
                          : 0;
    return ddp_comm_broadcast_bytes(g->comm, root, max, buf, len, err);
}

int ddp_exit_code_for(int err_code)
{
    if (err_code == DDP_EPEER || err_code == DDP_ETIMEOUT)
        return DDP_EXIT_PEER_LOST;
    return DDP_EXIT_FAILURE;
}
