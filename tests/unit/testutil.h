/*
 * testutil.h - helpers shared by the cmocka tests that run ranks on loopback.
 * Include after <cmocka.h> (the helpers assert with it).
 */
#ifndef DDP_TESTS_TESTUTIL_H
#define DDP_TESTS_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"
#include "ddp/comm.h"

/* A TCP port that was free a moment ago on 127.0.0.1. */
int testutil_free_port(void);

/* A deterministic value in [-1, 1) for element i of rank r's input in test case s. */
double testutil_input(uint64_t s, int r, size_t i);

/* Sets count elements of dt in buf to rank's inputs of case seed (testutil_input). */
void testutil_fill(uint64_t seed, int rank, void *buf, size_t count, enum comm_dtype dt);

/* Checks buf (count elements of dt) against the sum of world ranks' inputs of case seed:
 * f32 within 1e-5 * (1 + sum |x|), f64 within 1e-12 * (1 + sum |x|). 0, or DDP_EINTERNAL
 * in err naming the first element off. */
int testutil_check_sum(uint64_t seed, int world, const void *buf, size_t count, enum comm_dtype dt,
                       struct ddp_err *err);

/* Kills (SIGKILL) and reaps every process of pids[0..n) still > 0, setting each to 0: the
 * end of a test whose forked ranks ran past their deadline. */
void testutil_kill_all(pid_t *pids, int n);

/* FNV-1a of n bytes continuing from h (digests of results compared across ranks). */
uint64_t testutil_fnv(const void *p, size_t n, uint64_t h);

#endif
