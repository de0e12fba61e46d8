/*
 * test_resume.c - the resume protocol (libddp/resume.c): ranks as forked processes on
 * loopback, each with its own checkpoint folder, run ddp_resume and report what they got
 * on a shared board. Checked: every rank agrees on the newest epoch any rank can read and
 * on its lowest holder, every rank ends with that file's bytes, a LOCAL_RANK 0 that lacked
 * it keeps a replica, a corrupt newest file is skipped (and replaced by the replica), and
 * nothing anywhere means epoch 0. Every job is reaped under a deadline; ranks left after it
 * are SIGKILLed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/fsutil.h"
#include "common/timeutil.h"
#include "ddp/ckpt.h"
#include "ddp/ddp.h"
#include "ddp/resume.h"
#include "ddp/rng.h"
#include "tests/unit/testutil.h"

#define MAXW         4
#define JOB_LIMIT_MS 60000

static const int widths[3] = {4, 3, 2};
#define NPARAMS (3 * 4 + 3 + 2 * 3 + 2)

/* What each rank reports. */
struct board {
    int rc[MAXW];
    char msg[MAXW][sizeof(((struct ddp_err *)0)->msg)];
    uint32_t epoch[MAXW];
    int owner[MAXW];
    size_t len[MAXW];
    uint64_t digest[MAXW];
};

struct job {
    int world;
    int one_node;     /* 1: LOCAL_RANK = rank on one node; 0: every rank a node of its own */
    char *dirs[MAXW]; /* NULL: the rank has no folder */
    struct board *b;
};

static uint64_t digest_of(const void *p, size_t n)
{
    return testutil_fnv(p, n, 1469598103934665603ULL);
}

/* Encodes epoch's checkpoint; tag makes two files of one epoch differ, and a tag of 10 or
 * more makes it a mid-epoch one (epoch_pos = 32 * tag). Caller frees. */
static uint8_t *make_ckpt(uint32_t epoch, int tag, size_t *len)
{
    struct ckpt_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.epoch = epoch;
    meta.step = (uint64_t)epoch * 10 + (uint64_t)tag;
    meta.epoch_pos = tag >= 10 ? 32u * (uint32_t)tag : 0;
    meta.seed = 1;
    rng_seed(&meta.rng, 7 + (uint64_t)epoch);
    meta.world_size = 3;
    meta.nlayers = 2;
    for (int i = 0; i < 3; i++)
        meta.widths[i] = (uint32_t)widths[i];
    meta.nparams = NPARAMS;
    float params[NPARAMS], mom[NPARAMS];
    for (int i = 0; i < NPARAMS; i++) {
        params[i] = (float)epoch * 100.0f + (float)tag + 0.5f * (float)i;
        mom[i] = -params[i];
    }
    uint8_t *buf = NULL;
    struct ddp_err err;
    assert_int_equal(ckpt_encode(&meta, params, mom, &buf, len, &err), 0);
    return buf;
}

static void put_ckpt(const char *dir, uint32_t epoch, int tag)
{
    size_t len = 0;
    uint8_t *buf = make_ckpt(epoch, tag, &len);
    struct ddp_err err;
    assert_int_equal(ckpt_save(dir, epoch, buf, len, &err), 0);
    free(buf);
}

/* Flips a byte in the middle of dir's checkpoint of epoch: its crc no longer matches. */
static void corrupt_ckpt(const char *dir, uint32_t epoch)
{
    char *path = ckpt_path(dir, epoch);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    assert_true(fd >= 0);
    uint8_t c = 0;
    assert_int_equal(pread(fd, &c, 1, 100), 1);
    c ^= 0xff;
    assert_int_equal(pwrite(fd, &c, 1, 100), 1);
    close(fd);
    free(path);
}

/* The digest of dir's checkpoint of epoch, 0 when it cannot be read. */
static uint64_t file_digest(const char *dir, uint32_t epoch)
{
    char *path = ckpt_path(dir, epoch);
    char *data = NULL;
    size_t len = 0;
    struct ddp_err err;
    uint64_t d = 0;
    if (fs_read_all(path, 1 << 20, &data, &len, &err) == 0)
        d = digest_of(data, len);
    free(data);
    free(path);
    return d;
}

static uint64_t ckpt_digest(uint32_t epoch, int tag)
{
    size_t len = 0;
    uint8_t *buf = make_ckpt(epoch, tag, &len);
    uint64_t d = digest_of(buf, len);
    free(buf);
    return d;
}

static void set_int_env(const char *name, int v)
{
    char s[32];
    snprintf(s, sizeof(s), "%d", v);
    setenv(name, s, 1);
}

/* One rank: the torchrun environment, the group, ddp_resume, the report. */
static int child(struct job *j, int rank, int port)
{
    set_int_env("RANK", rank);
    set_int_env("WORLD_SIZE", j->world);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    set_int_env("MASTER_PORT", port);
    set_int_env("LOCAL_RANK", j->one_node ? rank : 0);
    set_int_env("LOCAL_WORLD_SIZE", j->one_node ? j->world : 1);
    set_int_env("GROUP_RANK", j->one_node ? 0 : rank);
    set_int_env("GROUP_WORLD_SIZE", j->one_node ? 1 : j->world);
    char id[64];
    snprintf(id, sizeof(id), "test-resume-%d", (int)getppid());
    setenv("DDP_JOB_ID", id, 1);
    struct ddp_err err;
    err_clear(&err);
    struct ddp_group *g = NULL;
    int code = 0;
    int rc = ddp_group_open("cpu", 20000, &g, &code, &err);
    if (rc == 0) {
        struct ddp_resume res;
        rc = ddp_resume(g, j->dirs[rank], widths, 3, &res, &err);
        if (rc == 0) {
            j->b->epoch[rank] = res.epoch;
            j->b->owner[rank] = res.owner;
            j->b->len[rank] = res.len;
            j->b->digest[rank] = res.buf ? digest_of(res.buf, res.len) : 0;
            if (res.owner >= 0 && res.view.meta.epoch != res.epoch)
                rc = err_set(&err, DDP_EINTERNAL, "view says epoch %u, not %u", res.view.meta.epoch,
                             res.epoch);
            ddp_resume_release(&res);
        }
    }
    ddp_group_close(g);
    j->b->rc[rank] = rc;
    memcpy(j->b->msg[rank], err.msg, sizeof(err.msg));
    return 0;
}

/* Forks the ranks and reaps them; SIGKILLs whatever is left after JOB_LIMIT_MS. */
static void run_job(struct job *j)
{
    pid_t pids[MAXW];
    int port = testutil_free_port();
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < j->world; i++) {
        j->b->rc[i] = -9999;
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(child(j, i, port));
    }
    int64_t deadline = time_mono_ms() + JOB_LIMIT_MS;
    int left = j->world;
    while (left > 0) {
        for (int i = 0; i < j->world; i++) {
            if (pids[i] <= 0)
                continue;
            if (waitpid(pids[i], NULL, WNOHANG) == pids[i]) {
                pids[i] = 0;
                left--;
            }
        }
        if (left == 0)
            break;
        if (time_mono_ms() > deadline) {
            testutil_kill_all(pids, j->world);
            break;
        }
        time_sleep_ms(5);
    }
    for (int i = 0; i < j->world; i++)
        if (j->b->rc[i] != 0)
            fail_msg("rank %d of %d failed: %d %s", i, j->world, j->b->rc[i], j->b->msg[i]);
}

/* A job of world ranks, each with a fresh folder under a fresh temporary root. */
static struct job *job_new(int world, int one_node)
{
    struct job *j = calloc(1, sizeof(*j));
    assert_non_null(j);
    j->world = world;
    j->one_node = one_node;
    void *m =
        mmap(NULL, sizeof(struct board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 0, sizeof(struct board));
    j->b = m;
    for (int i = 0; i < world; i++) {
        char tmpl[] = "/tmp/test_resume.XXXXXX";
        assert_non_null(mkdtemp(tmpl));
        j->dirs[i] = strdup(tmpl);
        assert_non_null(j->dirs[i]);
    }
    return j;
}

static void job_free(struct job *j)
{
    for (int i = 0; i < j->world; i++) {
        if (!j->dirs[i])
            continue;
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", j->dirs[i]);
        assert_int_equal(system(cmd), 0);
        free(j->dirs[i]);
    }
    munmap(j->b, sizeof(struct board));
    free(j);
}

/* Every rank got epoch from owner, with the bytes of (epoch, tag). */
static void expect_agreed(const struct job *j, uint32_t epoch, int owner, int tag)
{
    uint64_t want = ckpt_digest(epoch, tag);
    for (int i = 0; i < j->world; i++) {
        if (j->b->epoch[i] != epoch || j->b->owner[i] != owner)
            fail_msg("rank %d resumed epoch %u from rank %d, want epoch %u from rank %d", i,
                     j->b->epoch[i], j->b->owner[i], epoch, owner);
        if (j->b->digest[i] != want)
            fail_msg("rank %d holds other bytes (%zu) than rank %d's checkpoint %u", i,
                     j->b->len[i], owner, epoch);
    }
}

/* Ranks hold epochs {1,2}, {2,3} and nothing: all resume from rank 1's epoch 3, and the
 * two others (each LOCAL_RANK 0 of its node) keep a replica of it. */
static void test_resume_newest_across_ranks(void **state)
{
    (void)state;
    struct job *j = job_new(3, 0);
    put_ckpt(j->dirs[0], 1, 0);
    put_ckpt(j->dirs[0], 2, 0);
    put_ckpt(j->dirs[1], 2, 0);
    put_ckpt(j->dirs[1], 3, 0);
    run_job(j);
    expect_agreed(j, 3, 1, 0);
    for (int i = 0; i < 3; i++)
        assert_true(file_digest(j->dirs[i], 3) == ckpt_digest(3, 0));
    job_free(j);
}

/* Ranks 1 and 2 both hold an epoch 3 (different bytes): the lowest, rank 1, is the owner.
 * On one node only LOCAL_RANK 0 keeps a replica; rank 2's own file stays as it was. */
static void test_resume_lowest_owner_one_node(void **state)
{
    (void)state;
    struct job *j = job_new(3, 1);
    put_ckpt(j->dirs[0], 1, 0);
    put_ckpt(j->dirs[1], 3, 1);
    put_ckpt(j->dirs[2], 3, 2);
    run_job(j);
    expect_agreed(j, 3, 1, 1);
    assert_true(file_digest(j->dirs[0], 3) == ckpt_digest(3, 1));
    assert_true(file_digest(j->dirs[2], 3) == ckpt_digest(3, 2));
    job_free(j);
}

/* Ranks 0 and 1 both hold epoch 3, rank 1's written mid-epoch 4 (a preemption notice): it is
 * newer, so rank 1 owns the choice and rank 0's replica takes its place; rank 2's epoch 2
 * loses. */
static void test_resume_mid_epoch_is_newer(void **state)
{
    (void)state;
    struct job *j = job_new(3, 0);
    put_ckpt(j->dirs[0], 3, 0);
    put_ckpt(j->dirs[1], 3, 11);
    put_ckpt(j->dirs[2], 2, 0);
    run_job(j);
    expect_agreed(j, 3, 1, 11);
    assert_true(file_digest(j->dirs[0], 3) == ckpt_digest(3, 11));
    assert_true(file_digest(j->dirs[2], 3) == ckpt_digest(3, 11));
    job_free(j);
}

/* A checkpoint written mid-way through the first epoch (a preemption notice in epoch 1:
 * epoch 0, position 352) is one: every rank resumes from it, and none starts over. Rank 0
 * (LOCAL_RANK 0 of its node) also finds the temporary file of a save cut short and removes
 * it. */
static void test_resume_first_epoch_mid_save(void **state)
{
    (void)state;
    struct job *j = job_new(3, 0);
    put_ckpt(j->dirs[1], 0, 11);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s/ckpt-000001.bin.tmp.AbC123", j->dirs[0]);
    struct ddp_err err;
    assert_int_equal(fs_write_atomic(tmp, "partial", 7, 0644, &err), 0);
    const struct timespec old[2] = {{.tv_sec = time(NULL) - 2 * CKPT_TEMP_AGE_S},
                                    {.tv_sec = time(NULL) - 2 * CKPT_TEMP_AGE_S}};
    assert_int_equal(utimensat(AT_FDCWD, tmp, old, 0), 0);
    run_job(j);
    expect_agreed(j, 0, 1, 11);
    assert_true(file_digest(j->dirs[0], 0) == ckpt_digest(0, 11));
    struct stat st;
    assert_int_not_equal(stat(tmp, &st), 0);
    job_free(j);
}

/* Rank 0's newest file (epoch 3) is corrupt: it offers epoch 2, and the group resumes from
 * the newest readable epoch, 2, from rank 0 (the lowest holder). */
static void test_resume_skips_corrupt(void **state)
{
    (void)state;
    struct job *j = job_new(3, 0);
    put_ckpt(j->dirs[0], 2, 0);
    put_ckpt(j->dirs[0], 3, 0);
    corrupt_ckpt(j->dirs[0], 3);
    put_ckpt(j->dirs[1], 2, 0);
    put_ckpt(j->dirs[2], 1, 0);
    run_job(j);
    expect_agreed(j, 2, 0, 0);
    assert_true(file_digest(j->dirs[2], 2) == ckpt_digest(2, 0));
    job_free(j);
}

/* Rank 0's epoch 3 is corrupt, rank 1's is good: rank 1 is the owner and rank 0's replica
 * replaces the corrupt file. */
static void test_resume_replica_replaces_corrupt(void **state)
{
    (void)state;
    struct job *j = job_new(2, 0);
    put_ckpt(j->dirs[0], 2, 0);
    put_ckpt(j->dirs[0], 3, 0);
    corrupt_ckpt(j->dirs[0], 3);
    put_ckpt(j->dirs[1], 3, 0);
    run_job(j);
    expect_agreed(j, 3, 1, 0);
    assert_true(file_digest(j->dirs[0], 3) == ckpt_digest(3, 0));
    job_free(j);
}

/* No checkpoint anywhere (one rank without a folder at all): epoch 0 on every rank. */
static void test_resume_none(void **state)
{
    (void)state;
    struct job *j = job_new(2, 0);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", j->dirs[1]);
    assert_int_equal(system(cmd), 0);
    free(j->dirs[1]);
    j->dirs[1] = NULL;
    run_job(j);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(j->b->epoch[i], 0);
        assert_int_equal(j->b->owner[i], -1);
        assert_int_equal(j->b->len[i], 0);
    }
    job_free(j);
}

/* Without the torchrun environment (world size 1) the process resumes from its folder. */
static void test_resume_single_process(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/test_resume.XXXXXX";
    assert_non_null(mkdtemp(tmpl));
    put_ckpt(tmpl, 1, 0);
    put_ckpt(tmpl, 2, 0);
    struct ddp_err err;
    struct ddp_group *g = NULL;
    int code = 0;
    assert_int_equal(ddp_group_open("cpu", 5000, &g, &code, &err), 0);
    struct ddp_resume res;
    assert_int_equal(ddp_resume(g, tmpl, widths, 3, &res, &err), 0);
    assert_int_equal(res.epoch, 2);
    assert_int_equal(res.owner, 0);
    assert_true(digest_of(res.buf, res.len) == ckpt_digest(2, 0));
    assert_int_equal(res.view.meta.step, 20);
    ddp_resume_release(&res);
    ddp_resume_release(&res);
    ddp_resume_release(NULL);
    /* Another model's checkpoints do not count. */
    static const int other[3] = {4, 5, 2};
    assert_int_equal(ddp_resume(g, tmpl, other, 3, &res, &err), 0);
    assert_int_equal(res.epoch, 0);
    ddp_resume_release(&res);
    ddp_group_close(g);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpl);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const char *vars[] = {"RANK",       "WORLD_SIZE",       "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                          "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_newest_across_ranks),
        cmocka_unit_test(test_resume_lowest_owner_one_node),
        cmocka_unit_test(test_resume_skips_corrupt),
        cmocka_unit_test(test_resume_mid_epoch_is_newer),
        cmocka_unit_test(test_resume_first_epoch_mid_save),
        cmocka_unit_test(test_resume_replica_replaces_corrupt),
        cmocka_unit_test(test_resume_none),
        cmocka_unit_test(test_resume_single_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
