/*
 * fuzz_ckpt.c - libFuzzer target for the checkpoint loader (libddp/ckpt.c): a crafted file
 * is either rejected or decodes to sizes that fit the buffer exactly; copying its arrays
 * then stays in bounds.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ddp/ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ddp_err err;
    struct ckpt_view v;
    if (ckpt_decode(data, size, "fuzz", &v, &err) != 0)
        return 0;
    if (v.meta.nparams * 8 > size)
        abort();
    float *p = malloc(v.meta.nparams * sizeof(float) + 1);
    float *m = malloc(v.meta.nparams * sizeof(float) + 1);
    ckpt_copy_arrays(&v, p, m);
    if (v.meta.model[0]) {
        /* Version 2: it is the model its own spec and count name, and no MLP. */
        struct ckpt_id id = {.spec = v.meta.model, .nparams = v.meta.nparams};
        if (!ckpt_matches_id(&v.meta, &id) || ckpt_size_id(&id) != size)
            abort();
    } else {
        int w[CKPT_MAX_LAYERS + 1];
        for (int i = 0; i <= v.meta.nlayers; i++)
            w[i] = (int)v.meta.widths[i];
        if (!ckpt_matches(&v.meta, w, v.meta.nlayers + 1))
            abort();
    }
    free(p);
    free(m);
    return 0;
}
