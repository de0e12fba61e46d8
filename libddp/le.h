/*
 * le.h - little-endian integers in byte buffers, and the crc32 the checkpoint files end
 * with: shared by the whole-state (ckpt.c) and the sharded (ckpt_shard.c) formats. Private
 * to libddp.
 */
#ifndef DDP_LE_H
#define DDP_LE_H

#include <stddef.h>
#include <stdint.h>

static inline void le_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void le_put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t le_get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static inline uint64_t le_get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* zlib's crc32 of len bytes at p, any length (defined in ckpt.c). */
uint32_t ckpt_crc32(const uint8_t *p, size_t len);

#endif
