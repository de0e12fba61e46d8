/*
 * fuzz_idx.c - libFuzzer target for the IDX loader (trainer/data.c): whatever the bytes, the
 * parser and the data-set builder never read outside the buffer, never allocate more than
 * the input implies, and either succeed with consistent sizes or fail with a message.
 *
 * Input: byte 0 picks the mode; 0: images (3-d), 1: labels (1-d), else the rest is split at
 * the offset in bytes 1-2 into an images file and a labels file that are combined.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ddp_err err;
    struct idx_array a, b;
    if (size < 3)
        return 0;
    int mode = data[0] % 3;
    if (mode < 2) {
        if (data_idx_parse(data + 1, size - 1, mode == 0 ? 3 : 1, "fuzz", &a, &err) == 0) {
            if (a.data + a.count != data + size)
                abort();
        }
        return 0;
    }
    size_t split = ((size_t)data[1] << 8 | data[2]);
    const uint8_t *rest = data + 3;
    size_t rlen = size - 3;
    if (split > rlen)
        split = rlen;
    if (data_idx_parse(rest, split, 3, "images", &a, &err) != 0)
        return 0;
    if (data_idx_parse(rest + split, rlen - split, 1, "labels", &b, &err) != 0)
        return 0;
    struct dataset d;
    int fixed = (data[1] & 1) ? 10 : 0;
    if (data_from_idx(&a, &b, fixed, "labels", &d, &err) == 0) {
        for (size_t i = 0; i < d.n; i++)
            if (d.y[i] >= d.classes)
                abort();
        data_release(&d);
    }
    return 0;
}
