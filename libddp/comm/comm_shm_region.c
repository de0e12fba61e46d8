/*
 * comm_shm_region.c - registered buffers of the shared-memory transport (shm_region_alloc,
 * see comm_shm.h): a segment of its own per allocation, with one part per member, so that
 * an all-reduce of a range in the part reads the others' data where it lies
 * (comm_shm_coll.c) instead of copying it through the slots.
 *
 * A region segment is a header page (magic, token, stride, L, attach count), then one part
 * of `stride` bytes per member. The leader creates it under "<segment name>-r<n>", reserves
 * its pages (a full /dev/shm is found here, not by SIGBUS later), and announces token,
 * stride and size with a broadcast through the slots; the members map it, check it and
 * count themselves in; the leader unlinks the name once all have.
 *
 * Invariants:
 *  1. Every member gets the same answer: a region, or none (token 0 in the announcement),
 *     so either all all-reduce through the region or all through the slots.
 *  2. Part k starts at base + SHM_REGION_HDR + k * stride; strides differ from a multiple
 *     of 4 KiB by 320 bytes (see shm_region_alloc).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/randutil.h"
#include "libddp/comm/comm_shm_internal.h"

/* What the leader tells the members about a new region (through shm_broadcast). */
struct region_msg {
    uint64_t token; /* 0: no region (the members fall back too) */
    uint64_t stride;
    uint64_t map_bytes;
};

int shm_region_alloc(struct shm_group *g, size_t bytes, void **out, struct ddp_err *err)
{
    *out = NULL;
    if (g->L == 1 || bytes == 0)
        return 0;
    if (g->nregions == SHM_MAX_REGIONS)
        return 0;
    /* the mapping (header + L parts) must not wrap: too large stays private (and fails
     * there, naming the size) */
    if (bytes > (SIZE_MAX - SHM_REGION_HDR) / (size_t)g->L - 8192)
        return 0;
    char name[80];
    snprintf(name, sizeof(name), "%s-r%u", g->name, g->nalloc);
    uint64_t seq = UINT64_MAX - g->nalloc;
    g->nalloc++;
    /* Parts 320 bytes apart modulo 4 KiB: at the same offset in two parts, loads of one and
     * stores to the other would otherwise alias (same address bits 0-11) on every line. */
    size_t stride = ((bytes + 4095) & ~(size_t)4095) + 320;
    struct region_msg msg = {0};
    char *base = NULL;
    int fd = -1, ret = 0;
    if (g->leader) {
        size_t map_bytes = SHM_REGION_HDR + (size_t)g->L * stride;
        shm_unlink(name);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            log_info("comm: shared memory %s: create: %s: buffers stay private", name,
                     strerror(errno));
        } else if (ftruncate(fd, (off_t)map_bytes) < 0 ||
                   (errno = posix_fallocate(fd, 0, (off_t)map_bytes)) != 0) {
            /* posix_fallocate reserves the pages: without it a full /dev/shm (64 MiB in
             * many containers) would kill the process with SIGBUS on first touch. */
            log_info("comm: no room for %zu MiB in shared memory (%s): gradient buffers stay "
                     "private, all-reduces copy through the shared slots",
                     map_bytes >> 20, strerror(errno));
            close(fd);
            fd = -1;
            shm_unlink(name);
        } else if ((ret = shm_map_shared(name, fd, map_bytes, (void **)&base, err)) < 0) {
            close(fd);
            shm_unlink(name);
            return ret;
        } else {
            struct shm_region_hdr *rh = (struct shm_region_hdr *)base;
            if ((ret = rand_bytes(&rh->token, sizeof(rh->token))) < 0) {
                err_set(err, ret, "cannot read random bytes for the shared-memory token");
                goto fail;
            }
            rh->token |= 1; /* never 0, which means "no region" */
            rh->stride = stride;
            rh->nmembers = (uint32_t)g->L;
            atomic_store(&rh->attached, 1);
            atomic_thread_fence(memory_order_seq_cst);
            rh->magic = SHM_REGION_MAGIC;
            msg.token = rh->token;
            msg.stride = stride;
            msg.map_bytes = map_bytes;
        }
    }
    if ((ret = shm_broadcast(g, &msg, sizeof(msg), 0, seq, SHM_KIND_REGION, err)) < 0)
        goto fail;
    if (msg.token == 0)
        return 0; /* the leader could not make one: everyone falls back */
    if (!g->leader) {
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
        struct stat st;
        if (fd < 0) {
            ret = err_set(err, DDP_EIO, "shared memory %s: attach: %s", name, strerror(errno));
            goto fail;
        }
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != msg.map_bytes || msg.stride != stride) {
            ret = err_set(err, DDP_EINVAL, "shared memory %s: unexpected size", name);
            goto fail;
        }
        if ((ret = shm_map_shared(name, fd, msg.map_bytes, (void **)&base, err)) < 0)
            goto fail;
        struct shm_region_hdr *rh = (struct shm_region_hdr *)base;
        if (rh->magic != SHM_REGION_MAGIC || rh->token != msg.token ||
            rh->nmembers != (uint32_t)g->L || rh->stride != stride) {
            ret = err_set(err, DDP_EINVAL,
                          "shared memory %s: not this job's region (token or layout differ)", name);
            goto fail;
        }
        atomic_fetch_add(&rh->attached, 1);
    } else {
        /* Take the name away once everyone has mapped it. */
        struct shm_region_hdr *rh = (struct shm_region_hdr *)base;
        if ((ret = shm_wait_attached(g, &rh->attached, name, err)) < 0)
            goto fail;
        shm_unlink(name);
    }
    close(fd);
    struct shm_region *rg = &g->regions[g->nregions++];
    rg->base = base;
    rg->map_bytes = msg.map_bytes;
    rg->stride = stride;
    rg->bytes = bytes;
    *out = base + SHM_REGION_HDR + (size_t)g->lr * stride;
    return 1;
fail:
    if (base)
        munmap(base, msg.map_bytes ? msg.map_bytes : SHM_REGION_HDR + (size_t)g->L * stride);
    if (fd >= 0)
        close(fd);
    if (g->leader)
        shm_unlink(name);
    return ret;
}

int shm_region_free(struct shm_group *g, void *p)
{
    if (!g || !p)
        return 0;
    for (int i = 0; i < g->nregions; i++) {
        struct shm_region *rg = &g->regions[i];
        if ((char *)p != rg->base + SHM_REGION_HDR + (size_t)g->lr * rg->stride)
            continue;
        munmap(rg->base, rg->map_bytes);
        g->regions[i] = g->regions[--g->nregions];
        return 1;
    }
    return 0;
}
