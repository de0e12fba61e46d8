/*
 * testutil.h - helpers shared by the cmocka tests that run ranks on loopback.
 * Include after <cmocka.h> (the helpers assert with it).
 */
#ifndef DDP_TESTS_TESTUTIL_H
#define DDP_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* A TCP port that was free a moment ago on 127.0.0.1. */
int testutil_free_port(void);

/* A deterministic value in [-1, 1) for element i of rank r's input in test case s. */
double testutil_input(uint64_t s, int r, size_t i);

#endif
