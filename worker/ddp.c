/*
 * ddp.c - the process group: torchrun environment -> rendezvous store -> comm. Rank 0's
 * store stays open for the group's life (the store thread serves late joiners and the
 * comm may use it); it is closed after the comm.
 */
#include "worker/ddp.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"

int ddp_group_open(const char *backend, int64_t timeout_ms, struct ddp_group **out,
                   int *exit_code, struct ddp_err *err)
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
        co.device = g->env.local_rank;
        rc = comm_new(backend, g->rdzv, g->rank, g->world_size, &co, &g->comm, err);
        if (rc) {
            *exit_code = rc == DDP_EINVAL ? DDP_EXIT_USAGE
                         : rc == DDP_EEXIST ? DDP_EXIT_PORT_IN_USE
                                            : DDP_EXIT_RENDEZVOUS;
            goto out;
        }
        log_info("process group ready rank=%d world_size=%d backend=%s", g->rank,
                 g->world_size, comm_backend_name(g->comm));
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

int ddp_exit_code_for(int err_code)
{
    if (err_code == DDP_EPEER || err_code == DDP_ETIMEOUT)
        return DDP_EXIT_PEER_LOST;
    return DDP_EXIT_FAILURE;
}
