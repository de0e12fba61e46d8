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

/* The same for buf[0..count) against elements [first, first + count) of the inputs (a
 * shard of a reduce-scatter). */
int testutil_check_sum_at(uint64_t seed, int world, const void *buf, size_t first, size_t count,
                          enum comm_dtype dt, struct ddp_err *err);

/*
 * The reduce-scatter / all-gather checks of every backend and transport, as one rank of c:
 * for each N of ns[0..nn) and f32 then f64, a buffer of N inputs (case seed + 2k + f,
 * testutil_input) padded with zeros to W shards (shard_of); then a reduce-scatter out of
 * place (own shard = the sums within tolerance, padding exactly 0, input untouched) and in
 * place (the same bits, other shards untouched), an all-gather of the result out of place (all
 * N sums, padding 0, nothing written past the output) and in place (the same bits), and a
 * reduce-scatter, an all-reduce and an all-gather in flight at once, waited in order (the
 * same results). registered: the full-size buffers come from one comm_alloc_buffer block,
 * at the same offsets on every rank (shared memory reads them where they lie). *digest = FNV
 * of the gathered buffers (equal on every rank). 0 or the first failure, naming N and the
 * step.
 */
int testutil_sharded_sweep(struct comm *c, uint64_t seed, const size_t *ns, size_t nn,
                           int registered, uint64_t *digest, struct ddp_err *err);

/* Kills (SIGKILL) and reaps every process of pids[0..n) still > 0, setting each to 0: the
 * end of a test whose forked ranks ran past their deadline. */
void testutil_kill_all(pid_t *pids, int n);

/* FNV-1a of n bytes continuing from h (digests of results compared across ranks). */
uint64_t testutil_fnv(const void *p, size_t n, uint64_t h);

#endif
