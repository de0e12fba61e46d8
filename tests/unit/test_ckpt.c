/*
 * test_ckpt.c - checkpoint format: round trip, every corrupted byte and every truncation
 * detected, keep-newest-two (and only its own, in a reused folder), the removal of a cut
 * save's temporary files, and the newest-valid scan that skips a corrupt file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "ddp/ckpt.h"

static void make_meta(struct ckpt_meta *m, uint32_t epoch)
{
    memset(m, 0, sizeof(*m));
    m->epoch = epoch;
    m->step = 1234 + epoch;
    m->seed = 42;
    rng_seed(&m->rng, 99);
    m->world_size = 4;
    m->nlayers = 2;
    m->widths[0] = 3;
    m->widths[1] = 4;
    m->widths[2] = 2;
    m->nparams = 3 * 4 + 4 + 4 * 2 + 2;
}

static void make_arrays(float *p, float *mo, size_t n, float base)
{
    for (size_t i = 0; i < n; i++) {
        p[i] = base + (float)i * 0.25f;
        mo[i] = -base - (float)i;
    }
}

static void test_ckpt_round_trip(void **state)
{
    (void)state;
    struct ckpt_meta m;
    make_meta(&m, 3);
    float p[26], mo[26], p2[26], mo2[26];
    make_arrays(p, mo, 26, 1.5f);
    uint8_t *buf;
    size_t len;
    struct ddp_err err;
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
    assert_int_equal(len, 88 + 12 + 2 * 26 * 4 + 4);
    struct ckpt_view v;
    assert_int_equal(ckpt_decode(buf, len, "x", &v, &err), 0);
    assert_int_equal(v.meta.epoch, 3);
    assert_int_equal(v.meta.step, 1237);
    assert_int_equal(v.meta.seed, 42);
    assert_memory_equal(&v.meta.rng, &m.rng, sizeof(m.rng));
    assert_int_equal(v.meta.world_size, 4);
    int w[3] = {3, 4, 2}, w2[3] = {3, 5, 2};
    assert_true(ckpt_matches(&v.meta, w, 3));
    assert_false(ckpt_matches(&v.meta, w2, 3));
    assert_false(ckpt_matches(&v.meta, w, 2));
    ckpt_copy_arrays(&v, p2, mo2);
    assert_memory_equal(p, p2, sizeof(p));
    assert_memory_equal(mo, mo2, sizeof(mo));
    free(buf);
    /* nparams not matching the widths is refused when encoding. */
    m.nparams++;
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), DDP_EINVAL);
}

/* A checkpoint written mid-epoch keeps its position in the next epoch; one of an earlier
 * release (offset 84 "reserved", 0) decodes at the epoch's start, byte for byte the same
 * file as a new one at position 0. */
static void test_ckpt_mid_epoch_round_trip(void **state)
{
    (void)state;
    struct ckpt_meta m;
    make_meta(&m, 5);
    m.epoch_pos = 4096 + 96;
    float p[26], mo[26];
    make_arrays(p, mo, 26, 2.5f);
    uint8_t *buf, *old;
    size_t len, olen;
    struct ddp_err err;
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
    struct ckpt_view v;
    assert_int_equal(ckpt_decode(buf, len, "x", &v, &err), 0);
    assert_int_equal(v.meta.epoch, 5);
    assert_int_equal(v.meta.epoch_pos, 4096 + 96);
    assert_int_equal(v.meta.step, m.step);
    /* the same for the spec format */
    m.nlayers = 0;
    snprintf(m.model, sizeof(m.model), "cnn:test");
    uint8_t *sbuf;
    size_t slen;
    assert_int_equal(ckpt_encode(&m, p, mo, &sbuf, &slen, &err), 0);
    assert_int_equal(ckpt_decode(sbuf, slen, "x", &v, &err), 0);
    assert_int_equal(v.meta.epoch_pos, 4096 + 96);
    free(sbuf);
    /* an old file: version 1 with 0 at offset 84 */
    make_meta(&m, 5);
    assert_int_equal(ckpt_encode(&m, p, mo, &old, &olen, &err), 0);
    assert_int_equal(olen, len);
    for (int i = 84; i < 88; i++)
        assert_int_equal(old[i], 0);
    assert_int_equal(ckpt_decode(old, olen, "old", &v, &err), 0);
    assert_int_equal(v.meta.epoch_pos, 0);
    assert_int_equal(v.meta.epoch, 5);
    free(old);
    free(buf);
}

static void test_ckpt_detects_every_flip_and_truncation(void **state)
{
    (void)state;
    struct ckpt_meta m;
    make_meta(&m, 1);
    float p[26], mo[26];
    make_arrays(p, mo, 26, 0.0f);
    uint8_t *buf;
    size_t len;
    struct ddp_err err;
    struct ckpt_view v;
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            buf[i] ^= (uint8_t)(1u << bit);
            if (ckpt_decode(buf, len, "flip", &v, &err) == 0)
                fail_msg("flip of bit %d of byte %zu not detected", bit, i);
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    for (size_t l = 0; l < len; l++)
        if (ckpt_decode(buf, l, "cut", &v, &err) == 0)
            fail_msg("truncation to %zu bytes not detected", l);
    assert_int_equal(ckpt_decode(buf, len, "ok", &v, &err), 0);
    free(buf);
}

/* Version 2: a model named by its spec; it round-trips, matches only the same spec and
 * count, never an MLP's widths, and an MLP checkpoint never matches a spec. */
static void test_ckpt_spec_round_trip(void **state)
{
    (void)state;
    struct ckpt_meta m;
    make_meta(&m, 2);
    m.nlayers = 0;
    snprintf(m.model, sizeof(m.model), "cnn:c2k3-f5");
    m.nparams = 26;
    float p[26], mo[26], p2[26], mo2[26];
    make_arrays(p, mo, 26, 0.5f);
    uint8_t *buf;
    size_t len;
    struct ddp_err err;
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
    assert_int_equal(len, 92 + 12 + 2 * 26 * 4 + 4);
    struct ckpt_id id = {.spec = "cnn:c2k3-f5", .nparams = 26};
    assert_int_equal(ckpt_size_id(&id), len);
    struct ckpt_view v;
    assert_int_equal(ckpt_decode(buf, len, "x", &v, &err), 0);
    assert_string_equal(v.meta.model, "cnn:c2k3-f5");
    assert_int_equal(v.meta.epoch, 2);
    assert_int_equal(v.meta.nparams, 26);
    assert_true(ckpt_matches_id(&v.meta, &id));
    struct ckpt_id other = {.spec = "cnn:c2k3-f6", .nparams = 26};
    assert_false(ckpt_matches_id(&v.meta, &other));
    other.spec = "cnn:c2k3-f5";
    other.nparams = 27;
    assert_false(ckpt_matches_id(&v.meta, &other));
    int w[3] = {3, 4, 2};
    struct ckpt_id mlp = {.widths = w, .nwidths = 3};
    assert_false(ckpt_matches_id(&v.meta, &mlp));
    char d[CKPT_MAX_MODEL + 64];
    ckpt_describe(&v.meta, d, sizeof(d));
    assert_string_equal(d, "'cnn:c2k3-f5' (26 parameters)");
    ckpt_id_describe(&mlp, d, sizeof(d));
    assert_string_equal(d, "'mlp:3-4-2' (26 parameters)");
    ckpt_copy_arrays(&v, p2, mo2);
    assert_memory_equal(p, p2, sizeof(p));
    assert_memory_equal(mo, mo2, sizeof(mo));
    /* Every flipped byte and every truncation is refused. */
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x10;
        if (ckpt_decode(buf, len, "flip", &v, &err) == 0)
            fail_msg("a flipped byte %zu decoded", i);
        buf[i] ^= 0x10;
    }
    for (size_t l = 0; l < len; l++)
        if (ckpt_decode(buf, l, "cut", &v, &err) == 0)
            fail_msg("a cut at %zu decoded", l);
    free(buf);
    /* The MLP's version 1 file does not match a spec. */
    make_meta(&m, 2);
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
    assert_int_equal(ckpt_decode(buf, len, "mlp", &v, &err), 0);
    assert_false(ckpt_matches_id(&v.meta, &id));
    assert_true(ckpt_matches_id(&v.meta, &mlp));
    free(buf);
}

static char tmpdir[256];

static int make_tmp(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_ckpt.XXXXXX");
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

static void save_epoch(const char *dir, uint32_t epoch)
{
    struct ckpt_meta m;
    make_meta(&m, epoch);
    float p[26], mo[26];
    make_arrays(p, mo, 26, (float)epoch);
    uint8_t *buf;
    size_t len;
    struct ddp_err err;
    assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
    assert_int_equal(ckpt_save(dir, epoch, buf, len, &err), 0);
    free(buf);
}

static int exists(const char *dir, uint32_t epoch)
{
    char *path = ckpt_path(dir, epoch);
    struct stat st;
    int ok = stat(path, &st) == 0;
    free(path);
    return ok;
}

static void test_ckpt_keeps_newest_two(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/a/b", tmpdir); /* created on the way */
    for (uint32_t e = 1; e <= 4; e++)
        save_epoch(dir, e);
    assert_false(exists(dir, 1));
    assert_false(exists(dir, 2));
    assert_true(exists(dir, 3));
    assert_true(exists(dir, 4));
    /* a torn file (no checkpoint's header) older than the kept ones goes too */
    char *torn = ckpt_path(dir, 2);
    struct ddp_err err;
    assert_int_equal(fs_write_atomic(torn, "torn", 4, 0644, &err), 0);
    save_epoch(dir, 5);
    assert_false(exists(dir, 2));
    assert_false(exists(dir, 3));
    assert_true(exists(dir, 4));
    assert_true(exists(dir, 5));
    free(torn);
}

/* A reused folder: another model's checkpoints of later epochs (9, 10) and a stray
 * "ckpt-0000002.bin" (7 digits: no name ckpt_save writes). The new run's saves keep what
 * they wrote and their newest two, and never touch the other files. */
static void test_ckpt_keeps_own_in_reused_folder(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/reused", tmpdir);
    struct ddp_err err;
    assert_int_equal(fs_mkdir_p(dir, 0755, &err), 0);
    for (uint32_t e = 9; e <= 10; e++) {
        struct ckpt_meta m;
        make_meta(&m, e);
        m.widths[1] = 5; /* another model */
        m.nparams = 3 * 5 + 5 + 5 * 2 + 2;
        float p[32], mo[32];
        make_arrays(p, mo, 32, 1.0f);
        uint8_t *buf;
        size_t len;
        assert_int_equal(ckpt_encode(&m, p, mo, &buf, &len, &err), 0);
        assert_int_equal(ckpt_save(dir, e, buf, len, &err), 0);
        free(buf);
    }
    char stray[600];
    snprintf(stray, sizeof(stray), "%s/ckpt-0000002.bin", dir);
    assert_int_equal(fs_write_atomic(stray, "x", 1, 0644, &err), 0);
    save_epoch(dir, 1);
    assert_true(exists(dir, 1));
    save_epoch(dir, 2);
    save_epoch(dir, 3);
    assert_false(exists(dir, 1));
    assert_true(exists(dir, 2));
    assert_true(exists(dir, 3));
    assert_true(exists(dir, 9));
    assert_true(exists(dir, 10));
    struct stat st;
    assert_int_equal(stat(stray, &st), 0);
    /* The newest of this model is found past the other model's later files. */
    uint8_t *buf = NULL;
    size_t len = 0;
    uint32_t epoch = 0;
    const int widths[] = {3, 4, 2};
    assert_int_equal(ckpt_find_newest(dir, widths, 3, &buf, &len, &epoch, &err), 0);
    assert_int_equal(epoch, 3);
    free(buf);
}

/* Temporary files of saves cut short go once untouched for CKPT_TEMP_AGE_S; anything else
 * stays. */
static void test_ckpt_remove_temps(void **state)
{
    (void)state;
    char dir[512], path[600];
    snprintf(dir, sizeof(dir), "%s/temps", tmpdir);
    struct ddp_err err;
    assert_int_equal(fs_mkdir_p(dir, 0755, &err), 0);
    save_epoch(dir, 1);
    const char *gone[] = {"ckpt-000002.bin.tmp.AbC123",
                          "ckpt-000002-pos-96-shard-0001-of-0002.bin.tmp.x1Y2z3"};
    /* another model's name, a checkpoint, and a temporary being written now */
    const char *kept[] = {"notes.bin.tmp.AbC123", "ckpt-000003.bin", "ckpt-000004.bin.tmp.Zz9"};
    const struct timespec old[2] = {{.tv_sec = time(NULL) - 2 * CKPT_TEMP_AGE_S},
                                    {.tv_sec = time(NULL) - 2 * CKPT_TEMP_AGE_S}};
    for (int i = 0; i < 3; i++) {
        if (i < 2) {
            snprintf(path, sizeof(path), "%s/%s", dir, gone[i]);
            assert_int_equal(fs_write_atomic(path, "x", 1, 0644, &err), 0);
            assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
        }
        snprintf(path, sizeof(path), "%s/%s", dir, kept[i]);
        assert_int_equal(fs_write_atomic(path, "x", 1, 0644, &err), 0);
        if (i < 2)
            assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
    }
    struct stat st;
    /* an old temporary whose writer still holds its lock (a live writer in a shared folder) */
    snprintf(path, sizeof(path), "%s/ckpt-000005.bin.tmp.Lk0ck1", dir);
    assert_int_equal(fs_write_atomic(path, "x", 1, 0644, &err), 0);
    assert_int_equal(utimensat(AT_FDCWD, path, old, 0), 0);
    int held = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(held >= 0);
    assert_int_equal(flock(held, LOCK_EX), 0);
    assert_int_equal(ckpt_remove_temps(dir), 2);
    assert_int_equal(stat(path, &st), 0);
    close(held);
    for (int i = 0; i < 3; i++) {
        if (i < 2) {
            snprintf(path, sizeof(path), "%s/%s", dir, gone[i]);
            assert_int_not_equal(stat(path, &st), 0);
        }
        snprintf(path, sizeof(path), "%s/%s", dir, kept[i]);
        assert_int_equal(stat(path, &st), 0);
    }
    assert_true(exists(dir, 1));
    assert_int_equal(ckpt_remove_temps("/nonexistent/ddp-test"), 0);
}

static void test_ckpt_find_newest_skips_corrupt(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/scan", tmpdir);
    int w[3] = {3, 4, 2}, other[3] = {3, 4, 3};
    uint8_t *buf = NULL;
    size_t len = 0;
    uint32_t epoch = 0;
    struct ddp_err err;
    /* Missing folder and empty folder: not found. */
    assert_int_equal(ckpt_find_newest(dir, w, 3, &buf, &len, &epoch, &err), DDP_ENOTFOUND);
    save_epoch(dir, 5);
    save_epoch(dir, 6);
    /* Corrupt epoch 6 (one byte in the parameters): epoch 5 is found. */
    char *p6 = ckpt_path(dir, 6);
    FILE *f = fopen(p6, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, 120, SEEK_SET), 0);
    assert_int_equal(fputc(0x7f, f), 0x7f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ckpt_find_newest(dir, w, 3, &buf, &len, &epoch, &err), 0);
    assert_int_equal(epoch, 5);
    struct ckpt_view v;
    assert_int_equal(ckpt_decode(buf, len, "found", &v, &err), 0);
    assert_int_equal(v.meta.epoch, 5);
    free(buf);
    /* Truncate epoch 6 instead: same. */
    assert_int_equal(truncate(p6, 50), 0);
    assert_int_equal(ckpt_find_newest(dir, w, 3, &buf, &len, &epoch, &err), 0);
    assert_int_equal(epoch, 5);
    free(buf);
    /* A model of other widths finds nothing. */
    assert_int_equal(ckpt_find_newest(dir, other, 3, &buf, &len, &epoch, &err), DDP_ENOTFOUND);
    /* So does a model named by a spec, of the same parameter count (the warning names both). */
    struct ckpt_id cnn = {.spec = "cnn:c2k3-f5", .nparams = 26};
    assert_int_equal(ckpt_find_newest_id(dir, &cnn, &buf, &len, &epoch, &err), DDP_ENOTFOUND);
    {
        /* A larger checkpoint of a spec model (its header is read, not the file): the MLP
         * still finds its own epoch 5 under it. */
        struct ckpt_meta m;
        make_meta(&m, 8);
        m.nlayers = 0;
        snprintf(m.model, sizeof(m.model), "cnn:c2k3-f5");
        m.nparams = 64;
        float big[64], bigm[64];
        make_arrays(big, bigm, 64, 1.0f);
        uint8_t *b8;
        size_t l8;
        assert_int_equal(ckpt_encode(&m, big, bigm, &b8, &l8, &err), 0);
        char *p8 = ckpt_path(dir, 8);
        assert_int_equal(fs_write_atomic(p8, b8, l8, 0644, &err), 0);
        assert_int_equal(ckpt_find_newest(dir, w, 3, &buf, &len, &epoch, &err), 0);
        assert_int_equal(epoch, 5);
        free(buf);
        struct ckpt_id cnn64 = {.spec = "cnn:c2k3-f5", .nparams = 64};
        assert_int_equal(ckpt_find_newest_id(dir, &cnn64, &buf, &len, &epoch, &err), 0);
        assert_int_equal(epoch, 8);
        free(buf);
        assert_int_equal(unlink(p8), 0);
        free(p8);
        free(b8);
    }
    /* Stray files are ignored. */
    char *stray = ckpt_path(dir, 9);
    struct ddp_err e2;
    assert_int_equal(fs_write_atomic(stray, "junk", 4, 0644, &e2), 0);
    assert_int_equal(ckpt_find_newest(dir, w, 3, &buf, &len, &epoch, &err), 0);
    assert_int_equal(epoch, 5);
    free(buf);
    free(stray);
    free(p6);
}

static void test_ckpt_find_newest_regular_files_only(void **state)
{
    (void)state;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/odd", tmpdir);
    int w[3] = {3, 4, 2};
    uint8_t *buf = NULL;
    size_t len = 0;
    uint32_t epoch = 0;
    struct ddp_err err;
    save_epoch(dir, 5);
    assert_int_equal(ckpt_size_for(w, 3), 88 + 4 * 3 + 8 * 26 + 4);
    assert_int_equal(ckpt_size_for(w, 1), 0);
    /* A FIFO named like the newest checkpoint: opening it for reading would wait for a writer
     * forever. */
    char *p9 = ckpt_path(dir, 9);
    assert_int_equal(mkfifo(p9, 0600), 0);
    /* A link to /dev/zero: read toward CKPT_MAX_BYTES (16 GiB) before. */
    char *p8 = ckpt_path(dir, 8);
    assert_int_equal(symlink("/dev/zero", p8), 0);
    /* A regular file larger than a checkpoint of this model: not read at all. */
    char *p7 = ckpt_path(dir, 7);
    FILE *f = fopen(p7, "wb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 64L << 20, SEEK_SET), 0);
    assert_int_equal(fputc(0, f), 0);
    assert_int_equal(fclose(f), 0);
    /* A folder. */
    char *p6 = ckpt_path(dir, 6);
    assert_int_equal(mkdir(p6, 0700), 0);
    int64_t t0 = time_mono_ms();
    assert_int_equal(ckpt_find_newest(dir, w, 3, &buf, &len, &epoch, &err), 0);
    assert_true(time_mono_ms() - t0 < 5000); /* no wait on the FIFO, no 16 GiB read */
    assert_int_equal(epoch, 5);
    free(buf);
    free(p6);
    free(p7);
    free(p8);
    free(p9);
}

int main(void)
{
    log_init("test_ckpt", LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ckpt_round_trip),
        cmocka_unit_test(test_ckpt_mid_epoch_round_trip),
        cmocka_unit_test(test_ckpt_detects_every_flip_and_truncation),
        cmocka_unit_test(test_ckpt_keeps_newest_two),
        cmocka_unit_test(test_ckpt_keeps_own_in_reused_folder),
        cmocka_unit_test(test_ckpt_remove_temps),
        cmocka_unit_test(test_ckpt_spec_round_trip),
        cmocka_unit_test(test_ckpt_find_newest_skips_corrupt),
        cmocka_unit_test(test_ckpt_find_newest_regular_files_only),
    };
    return cmocka_run_group_tests(tests, make_tmp, remove_tmp);
}
