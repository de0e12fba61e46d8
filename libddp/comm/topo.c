/*
 * topo.c - host topology for the CPU backend: which ranks share a host, so that they can
 * talk through shared memory (comm_shm.c) and only one of them per host joins the TCP ring.
 *
 * Every rank publishes a host identity under "comm/<id>/host/<rank>" and reads everyone's;
 * ranks with equal identities share a host.
 *
 * Invariants:
 *  1. Every rank computes the same map from the same store values: hosts are numbered in
 *     the order of their lowest rank, and a rank's local index is its order among its
 *     host's ranks, so local index 0 (the lowest rank) is the host's leader.
 *  2. Two ranks count as one host only when they can share /dev/shm and see each other's
 *     pids (the shared memory's liveness check reads them): same boot, same network, pid
 *     and mount namespaces, same host name and DDP_COMM_HOST_ID.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/comm/comm_cpu_internal.h"

/* The inode of /proc/self/ns/<name> (0 when unreadable). */
static unsigned long long ns_inode(const char *name)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/self/ns/%s", name);
    return stat(path, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}

/*
 * This rank's host identity: the boot id, the inodes of its network, pid and mount
 * namespaces and the host name (ranks in different network namespaces of one machine - how
 * the fault tests simulate hosts - count as different hosts; so do ranks that cannot see
 * each other's pids, which the shared memory's liveness check reads, or may see different
 * /dev/shm mounts), plus DDP_COMM_HOST_ID when set (a test or a site can split one machine
 * into several "hosts" with it).
 */
static void host_identity(char *out, size_t size)
{
    char boot[64] = "", name[128] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!fgets(boot, sizeof(boot), f))
            boot[0] = '\0';
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    if (gethostname(name, sizeof(name)) < 0)
        name[0] = '\0';
    name[sizeof(name) - 1] = '\0';
    const char *extra = getenv("DDP_COMM_HOST_ID");
    snprintf(out, size, "%s/%llu/%llu/%llu/%s/%s", boot, ns_inode("net"), ns_inode("pid"),
             ns_inode("mnt"), name, extra ? extra : "");
}

int topo_map_hosts(struct comm *c, struct rdzv *r, uint64_t id, int **host_of, int **local_of,
                   int *nhosts, struct ddp_err *err)
{
    int W = c->world_size, ret = 0, n = 0;
    char mine[512], key[96];
    char **ids = xcalloc((size_t)W, sizeof(char *));
    int *count = xcalloc((size_t)W, sizeof(int));
    int *hosts = xcalloc((size_t)W, sizeof(int)), *locals = xcalloc((size_t)W, sizeof(int));
    int64_t deadline = time_deadline_ms(c->opts.timeout_ms);
    host_identity(mine, sizeof(mine));
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/host/%d", id, c->rank);
    if ((ret = rdzv_set(r, key, mine, strlen(mine), err)) < 0)
        goto out;
    for (int q = 0; q < W; q++) {
        void *v = NULL;
        size_t len = 0;
        snprintf(key, sizeof(key), "comm/%" PRIu64 "/host/%d", id, q);
        if ((ret = rdzv_get(r, key, time_left_ms(deadline), &v, &len, err)) < 0) {
            if (ret == DDP_ETIMEOUT)
                ret = err_set(err, DDP_ETIMEOUT,
                              "peer rank %d did not publish its host within %" PRId64 " ms", q,
                              c->opts.timeout_ms);
            goto out;
        }
        ids[q] = xmalloc(len + 1);
        memcpy(ids[q], v, len);
        ids[q][len] = '\0';
        free(v);
        int h = -1;
        for (int p = 0; p < q && h < 0; p++)
            if (strcmp(ids[p], ids[q]) == 0)
                h = hosts[p];
        if (h < 0)
            h = n++;
        hosts[q] = h;
        locals[q] = count[h]++;
    }
    *host_of = hosts;
    *local_of = locals;
    *nhosts = n;
    hosts = locals = NULL;
out:
    free(hosts);
    free(locals);
    for (int q = 0; q < W; q++)
        free(ids[q]);
    free(ids);
    free(count);
    return ret;
}
