/*
 * torchref.h - comparing C results with PyTorch's: a test writes its inputs as raw
 * little-endian files into a temporary folder, runs a python3 script (the system's
 * TEST_PYTHON, default /usr/bin/python3) on that folder, and reads the script's outputs
 * back. A script exits 77 when it cannot import torch; the test then skips, saying why.
 * Include after <cmocka.h> (the helpers assert with it).
 */
#ifndef DDP_TESTS_TORCHREF_H
#define DDP_TESTS_TORCHREF_H

#include <stddef.h>

#include "ddp/rng.h"

#ifndef TEST_PYTHON
#define TEST_PYTHON "/usr/bin/python3"
#endif

/* Agreement with torch in fp32: max |ours - torch| <= TORCHREF_RTOL * max |torch|. */
#define TORCHREF_RTOL 1e-5

struct torchref_dir {
    char path[64];
};

/* A new empty folder under /tmp; torchref_dir_free removes it and every file in it. */
void torchref_dir_new(struct torchref_dir *d);
void torchref_dir_free(struct torchref_dir *d);

void torchref_write(const struct torchref_dir *d, const char *name, const void *a, size_t bytes);
/* Reads exactly bytes of name into a; fails the test when the file is missing or longer. */
void torchref_read(const struct torchref_dir *d, const char *name, void *a, size_t bytes);

/*
 * Runs TEST_PYTHON script DIR args... (args NULL-terminated, at most 12). 0 when it ran; 77,
 * having printed why, when python3 or torch is missing (the caller then calls skip());
 * fails the test on any other exit.
 */
int torchref_run(const struct torchref_dir *d, const char *script, const char *const *args);

/* Fails the test naming what and the worst element unless max |got - want| <= rtol *
 * max |want| (1e-6 floor for an all-zero want). */
void torchref_check_close(const char *what, const float *got, const float *want, size_t n,
                          double rtol);

/* Reads n floats of name and checks ours against them with TORCHREF_RTOL. */
void torchref_compare(const struct torchref_dir *d, const char *what, const char *name,
                      const float *ours, size_t n);

/* n floats uniform in [-scale, scale) from r, and n zeros: arrays for a layer's inputs and
 * outputs (caller frees; one float more than asked, so that n may be 0). */
float *torchref_rand(struct rng *r, size_t n, float scale);
float *torchref_zeros(size_t n);

#endif
