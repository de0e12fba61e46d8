/*
 * test_ckpt_shard.c - sharded checkpoint files (ddp/ckpt_shard.h): round trip of every
 * shard, resharding between every pair of world sizes 1..5 (the copied overlaps rebuild
 * each new shard exactly and touch no padding), also into other unit layouts, every corrupted byte and truncation
 * detected, bad fields refused, keep-newest-two-epochs, and the folder listing that skips
 * corrupt, foreign, misnamed and non-regular files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "ddp/ckpt_shard.h"
#include "ddp/resume_shard.h"
#include "ddp/shard.h"

/* Uneven units: one shorter than most world sizes, one of a single float. */
static const uint64_t lens[] = {10, 5, 1, 7};
#define NUNITS   4
#define NPARAMS  23
#define ARRAYS   2 /* AdamW's m and v */
#define SENTINEL -7.0f

static char tmpdir[256];
static uint32_t meta_pos = 96; /* the epoch_pos make_meta writes */

static void make_meta(struct ckpt_meta *m, uint32_t epoch, uint32_t world)
{
    memset(m, 0, sizeof(*m));
    m->epoch = epoch;
    m->epoch_pos = meta_pos;
    m->step = 500 + epoch;
    m->seed = 42;
    rng_seed(&m->rng, 7);
    m->world_size = world;
    m->nparams = NPARAMS;
    m->state_arrays = ARRAYS;
    snprintf(m->model, sizeof(m->model), "gpt:1-1-4-4 adamw");
}

/* Element j of array a of the whole state (a 0: parameters). */
static float whole(int a, size_t j)
{
    return (float)(1000 * a) + (float)j * 0.5f;
}

/* Rank k of world's shard layout of the whole state in units ls[0..nu): params (S) and
 * state (ARRAYS x S). */
static void shard_arrays_of(const uint64_t *ls, int nu, int world, int k, float *p, float *st,
                            size_t S)
{
    size_t soff = 0, poff = 0;
    for (int i = 0; i < nu; i++) {
        struct shard sh;
        struct ddp_err e;
        assert_int_equal(shard_of((size_t)ls[i], world, k, &sh, &e), 0);
        for (size_t j = 0; j < sh.count; j++) {
            int real = j < sh.valid;
            p[soff + j] = real ? whole(0, poff + sh.offset + j) : 0.0f;
            for (int a = 0; a < ARRAYS; a++)
                st[(size_t)a * S + soff + j] = real ? whole(1 + a, poff + sh.offset + j) : 0.0f;
        }
        soff += sh.count;
        poff += (size_t)ls[i];
    }
}

static void shard_arrays(int world, int k, float *p, float *st, size_t S)
{
    shard_arrays_of(lens, NUNITS, world, k, p, st, S);
}

static void encode_shard(uint32_t epoch, int world, int k, uint8_t **buf, size_t *len)
{
    size_t S = ckpt_shard_floats(lens, NUNITS, world);
    float *p = calloc(S, sizeof(float)), *st = calloc(ARRAYS * S, sizeof(float));
    shard_arrays(world, k, p, st, S);
    struct ckpt_meta m;
    make_meta(&m, epoch, (uint32_t)world);
    struct ddp_err err;
    assert_int_equal(ckpt_shard_encode(&m, (uint32_t)k, lens, NUNITS, p, st, buf, len, &err), 0);
    free(p);
    free(st);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (int world = 1; world <= 5; world++)
        for (int k = 0; k < world; k++) {
            uint8_t *buf;
            size_t len;
            encode_shard(3, world, k, &buf, &len);
            struct ckpt_shard_view v;
            struct ddp_err err;
            assert_int_equal(ckpt_shard_decode(buf, len, "x", &v, &err), 0);
            assert_int_equal(v.meta.epoch, 3);
            assert_int_equal(v.meta.epoch_pos, 96);
            assert_int_equal(v.meta.step, 503);
            assert_int_equal(v.meta.seed, 42);
            assert_int_equal(v.meta.world_size, world);
            assert_int_equal(v.meta.nparams, NPARAMS);
            assert_int_equal(v.meta.state_arrays, ARRAYS);
            assert_string_equal(v.meta.model, "gpt:1-1-4-4 adamw");
            assert_int_equal(v.shard, k);
            assert_int_equal(v.nunits, NUNITS);
            for (uint32_t i = 0; i < NUNITS; i++)
                assert_int_equal(ckpt_shard_unit_len(&v, i), lens[i]);
            struct rng r;
            rng_seed(&r, 7);
            assert_memory_equal(&v.meta.rng, &r, sizeof(r));
            struct ckpt_id id = {
                .spec = "gpt:1-1-4-4 adamw", .nparams = NPARAMS, .state_arrays = ARRAYS};
            assert_true(ckpt_shard_matches_id(&v, &id));
            id.nparams = NPARAMS + 1;
            assert_false(ckpt_shard_matches_id(&v, &id));
            id.nparams = NPARAMS;
            id.state_arrays = 1;
            assert_false(ckpt_shard_matches_id(&v, &id));
            free(buf);
        }
}

/* Every shard of W0 copied into every rank of W1 in the units dl[0..dn) rebuilds that
 * rank's shard layout exactly; the padding keeps the sentinel. */
static void reshard_into(const uint64_t *dl, int dn)
{
    for (int w0 = 1; w0 <= 5; w0++)
        for (int w1 = 1; w1 <= 5; w1++) {
            size_t S1 = ckpt_shard_floats(dl, (uint32_t)dn, w1);
            for (int r = 0; r < w1; r++) {
                float *p = malloc(S1 * sizeof(float)), *st = malloc(ARRAYS * S1 * sizeof(float));
                for (size_t j = 0; j < S1; j++)
                    p[j] = SENTINEL;
                for (size_t j = 0; j < ARRAYS * S1; j++)
                    st[j] = SENTINEL;
                for (int k = 0; k < w0; k++) {
                    uint8_t *buf;
                    size_t len;
                    encode_shard(1, w0, k, &buf, &len);
                    struct ckpt_shard_view v;
                    struct ddp_err err;
                    assert_int_equal(ckpt_shard_decode(buf, len, "x", &v, &err), 0);
                    ckpt_shard_copy_overlap(&v, dl, (uint32_t)dn, w1, r, p, st, S1);
                    free(buf);
                }
                float *wp = malloc(S1 * sizeof(float)), *ws = malloc(ARRAYS * S1 * sizeof(float));
                shard_arrays_of(dl, dn, w1, r, wp, ws, S1);
                size_t soff = 0;
                for (int i = 0; i < dn; i++) {
                    struct shard sh;
                    struct ddp_err e;
                    assert_int_equal(shard_of((size_t)dl[i], w1, r, &sh, &e), 0);
                    for (size_t j = 0; j < sh.count; j++) {
                        int real = j < sh.valid;
                        assert_true(p[soff + j] == (real ? wp[soff + j] : SENTINEL));
                        for (int a = 0; a < ARRAYS; a++)
                            assert_true(st[a * S1 + soff + j] ==
                                        (real ? ws[a * S1 + soff + j] : SENTINEL));
                    }
                    soff += sh.count;
                }
                free(wp);
                free(ws);
                free(p);
                free(st);
            }
        }
}

static void test_reshard_every_pair(void **state)
{
    (void)state;
    reshard_into(lens, NUNITS);
}

/* A run that groups its units otherwise than the writer (size-based units) still takes the
 * same state: units merged, split across the writer's boundaries, and one of everything. */
static void test_reshard_other_units(void **state)
{
    (void)state;
    static const uint64_t merged[] = {15, 8}, across[] = {3, 13, 2, 5}, one[] = {NPARAMS},
                          singles[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    reshard_into(merged, 2);
    reshard_into(across, 4);
    reshard_into(one, 1);
    reshard_into(singles, NPARAMS);
}

static void test_every_flip_and_truncation(void **state)
{
    (void)state;
    uint8_t *buf;
    size_t len;
    encode_shard(2, 3, 1, &buf, &len);
    struct ckpt_shard_view v;
    struct ddp_err err;
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x10;
        assert_int_not_equal(ckpt_shard_decode(buf, len, "x", &v, &err), 0);
        buf[i] ^= 0x10;
    }
    for (size_t l = 0; l < len; l++)
        assert_int_not_equal(ckpt_shard_decode(buf, l, "x", &v, &err), 0);
    assert_int_equal(ckpt_shard_decode(buf, len, "x", &v, &err), 0);
    free(buf);
}

static void test_encode_refuses_bad_fields(void **state)
{
    (void)state;
    struct ckpt_meta m;
    float p[NPARAMS] = {0}, st[ARRAYS * NPARAMS] = {0};
    uint8_t *buf = NULL;
    size_t len;
    struct ddp_err err;
    make_meta(&m, 1, 2);
    assert_int_equal(ckpt_shard_encode(&m, 2, lens, NUNITS, p, st, &buf, &len, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "shard 2 of 2"));
    m.nparams = NPARAMS + 1;
    assert_int_equal(ckpt_shard_encode(&m, 0, lens, NUNITS, p, st, &buf, &len, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "units hold 23 parameters, not 24"));
    make_meta(&m, 1, 2);
    m.model[0] = '\0';
    assert_int_equal(ckpt_shard_encode(&m, 0, lens, NUNITS, p, st, &buf, &len, &err), DDP_EINVAL);
    assert_null(buf);
}

static void save(const char *dir, uint32_t epoch, int world, int k)
{
    uint8_t *buf;
    size_t len;
    encode_shard(epoch, world, k, &buf, &len);
    struct ddp_err err;
    assert_int_equal(
        ckpt_shard_save(dir, epoch, meta_pos, (uint32_t)k, (uint32_t)world, buf, len, &err), 0);
    free(buf);
}

static int exists(const char *dir, uint32_t epoch, int k, int world)
{
    char *path = ckpt_shard_path(dir, epoch, meta_pos, (uint32_t)k, (uint32_t)world);
    struct stat st;
    int ok = stat(path, &st) == 0;
    free(path);
    return ok;
}

/* A save writes; only a checkpoint the group confirmed complete prunes, keeping prev (the
 * one complete before; pe < 0: none). */
static void prune(const char *dir, uint32_t epoch, uint32_t pos, int pe, uint32_t pp)
{
    struct ddp_err err;
    uint32_t prev[2] = {(uint32_t)pe, pp};
    assert_int_equal(ckpt_shard_prune(dir, epoch, pos, pe < 0 ? NULL : prev, &err), 0);
}

static void test_keeps_newest_two_epochs(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/keep/x", tmpdir);
    for (uint32_t e = 1; e <= 3; e++) {
        for (int k = 0; k < 2; k++)
            save(dir, e, 2, k);
        assert_true(exists(dir, 1, 0, 2)); /* written: nothing goes before the prune */
        prune(dir, e, meta_pos, e > 1 ? (int)e - 1 : -1, meta_pos);
    }
    save(dir, 3, 4, 3); /* epoch 3 at another world size is the same key */
    prune(dir, 3, meta_pos, 2, meta_pos);
    for (int k = 0; k < 2; k++) {
        assert_false(exists(dir, 1, k, 2));
        assert_true(exists(dir, 2, k, 2));
        assert_true(exists(dir, 3, k, 2));
    }
    assert_true(exists(dir, 3, 3, 4));
    /* a whole-state file beside them is not theirs to remove */
    char *whole_path = ckpt_path(dir, 1);
    struct ddp_err err;
    assert_int_equal(fs_write_atomic(whole_path, "x", 1, 0644, &err), 0);
    save(dir, 4, 2, 0);
    save(dir, 4, 2, 1);
    prune(dir, 4, meta_pos, 3, meta_pos);
    struct stat st;
    assert_int_equal(stat(whole_path, &st), 0);
    assert_false(exists(dir, 2, 0, 2));
    assert_true(exists(dir, 3, 0, 2));
    free(whole_path);
    /* a mid-epoch checkpoint sits beside its epoch's end instead of over it */
    snprintf(dir, sizeof(dir), "%s/keep/pos", tmpdir);
    meta_pos = 0;
    save(dir, 3, 2, 0);
    meta_pos = 96;
    save(dir, 3, 2, 0);
    prune(dir, 3, 96, 3, 0);
    assert_true(exists(dir, 3, 0, 2));
    meta_pos = 0;
    assert_true(exists(dir, 3, 0, 2));
    /* A save cut short at (5, 1000), a resume from (5, 0) (complete), saves at (5, 600) and
     * (6, 0) cut short too: nothing goes. Once (7, 0) is complete, it and (5, 0), the one
     * complete before it, stay: every cut-short key goes, older or newer. */
    snprintf(dir, sizeof(dir), "%s/keep/stale", tmpdir);
    save(dir, 4, 2, 0);
    save(dir, 4, 2, 1);
    save(dir, 5, 2, 0);
    save(dir, 5, 2, 1);
    prune(dir, 5, 0, 4, 0);
    meta_pos = 1000;
    save(dir, 5, 2, 0);
    meta_pos = 600;
    save(dir, 5, 2, 0);
    meta_pos = 0;
    save(dir, 6, 2, 0);
    save(dir, 9, 2, 0); /* a stale newer one */
    assert_true(exists(dir, 5, 0, 2));
    assert_true(exists(dir, 4, 0, 2));
    save(dir, 7, 2, 0);
    save(dir, 7, 2, 1);
    prune(dir, 7, 0, 5, 0);
    assert_true(exists(dir, 7, 0, 2));
    assert_true(exists(dir, 7, 1, 2));
    assert_true(exists(dir, 5, 0, 2));
    assert_true(exists(dir, 5, 1, 2));
    assert_false(exists(dir, 4, 0, 2));
    assert_false(exists(dir, 6, 0, 2));
    assert_false(exists(dir, 9, 0, 2));
    meta_pos = 1000;
    assert_false(exists(dir, 5, 0, 2));
    meta_pos = 600;
    assert_false(exists(dir, 5, 0, 2));
    /* nothing known complete before (a fresh run): the new one alone stays */
    meta_pos = 0;
    save(dir, 8, 2, 0);
    prune(dir, 8, 0, -1, 0);
    assert_true(exists(dir, 8, 0, 2));
    assert_false(exists(dir, 7, 0, 2));
    meta_pos = 96;
}

static void test_list_skips_bad_files(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/list", tmpdir);
    save(dir, 5, 2, 0);
    save(dir, 5, 2, 1);
    save(dir, 4, 3, 2);
    struct ddp_err err;
    /* corrupt: a flipped byte */
    char *p = ckpt_shard_path(dir, 5, 96, 1, 2);
    char *data;
    size_t len;
    assert_int_equal(fs_read_all(p, 1 << 20, &data, &len, &err), 0);
    data[len / 2] ^= 1;
    assert_int_equal(fs_write_atomic(p, data, len, 0644, &err), 0);
    free(data);
    free(p);
    /* misnamed: shard 0's bytes under shard 1 of epoch 4's name */
    p = ckpt_shard_path(dir, 5, 96, 0, 2);
    assert_int_equal(fs_read_all(p, 1 << 20, &data, &len, &err), 0);
    free(p);
    p = ckpt_shard_path(dir, 4, 96, 1, 3);
    assert_int_equal(fs_write_atomic(p, data, len, 0644, &err), 0);
    free(data);
    free(p);
    /* not regular: a symbolic link to a valid file; not canonical names */
    char *target = ckpt_shard_path(dir, 5, 96, 0, 2);
    char *link = ckpt_shard_path(dir, 6, 96, 0, 2);
    assert_int_equal(symlink(target, link), 0);
    char odd[600];
    snprintf(odd, sizeof(odd), "%s/ckpt-+00007-pos-96-shard-0000-of-0002.bin", dir);
    assert_int_equal(symlink(target, odd), 0);
    free(target);
    free(link);

    struct ckpt_id id = {.spec = "gpt:1-1-4-4 adamw", .nparams = NPARAMS, .state_arrays = ARRAYS};
    struct ckpt_shard_file *f;
    size_t n;
    assert_int_equal(ckpt_shard_list(dir, &id, &f, &n, &err), 0);
    assert_int_equal(n, 2); /* epoch 5 shard 0, epoch 4 shard 2 of 3 */
    assert_int_equal(f[0].epoch, 5);
    assert_int_equal(f[0].shard, 0);
    assert_int_equal(f[0].world, 2);
    assert_int_equal(f[0].epoch_pos, 96);
    assert_int_equal(f[1].epoch, 4);
    assert_int_equal(f[1].shard, 2);
    assert_int_equal(f[1].world, 3);
    ckpt_shard_files_free(f, n);
    /* another model: nothing */
    id.spec = "gpt:1-1-4-4 sgd";
    id.state_arrays = 1;
    assert_int_equal(ckpt_shard_list(dir, &id, &f, &n, &err), 0);
    assert_int_equal(n, 0);
    ckpt_shard_files_free(f, n);
    /* a missing folder is an empty list */
    snprintf(dir, sizeof(dir), "%s/none", tmpdir);
    assert_int_equal(ckpt_shard_list(dir, &id, &f, &n, &err), 0);
    assert_int_equal(n, 0);
}

static int make_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_ckpt_shard.XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    return 0;
}

static int remove_tmp(void **state)
{
    (void)state;
    struct ddp_err err;
    fs_remove_tree(tmpdir, &err);
    return 0;
}

/* Who keeps rank k's copy: the rank at k's place on the next node, the last node's on the
 * first; never one of k's own node; none on one node. */
static void test_keepers_spread(void **state)
{
    (void)state;
    const double two[4] = {0, 0, 1, 1};
    const int want_two[4] = {2, 3, 0, 1};
    for (int k = 0; k < 4; k++)
        assert_int_equal(ddp_shard_keeper(two, 4, k), want_two[k]);
    /* uneven nodes, GROUP_RANKs with a gap: 3 ranks on node 0, 1 on node 2, 2 on node 5 */
    const double odd[6] = {0, 0, 0, 2, 5, 5};
    const int want_odd[6] = {3, 3, 3, 4, 0, 1};
    for (int k = 0; k < 6; k++)
        assert_int_equal(ddp_shard_keeper(odd, 6, k), want_odd[k]);
    const double one[3] = {4, 4, 4};
    for (int k = 0; k < 3; k++)
        assert_int_equal(ddp_shard_keeper(one, 3, k), -1);
}

int main(void)
{
    log_init("test_ckpt_shard", LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_reshard_every_pair),
        cmocka_unit_test(test_reshard_other_units),
        cmocka_unit_test(test_every_flip_and_truncation),
        cmocka_unit_test(test_encode_refuses_bad_fields),
        cmocka_unit_test(test_keeps_newest_two_epochs),
        cmocka_unit_test(test_list_skips_bad_files),
        cmocka_unit_test(test_keepers_spread),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
