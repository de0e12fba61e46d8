/*
 * fuzz_agent.c - libFuzzer target for what ddp-agent takes from outside: heartbeat answers
 * (assignments, from ddpd) and worker output (any bytes). Checks the invariants the agent
 * relies on: a parsed assignment is self-consistent; every cleaned line is valid UTF-8
 * without NUL (jansson accepts it as a string), bounded in length; the line queue keeps its
 * seq arithmetic under pushes, bounded takes and acks.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/assign.h"
#include "agent/logship.h"

#define CHECK(c)     \
    do {             \
        if (!(c))    \
            abort(); \
    } while (0)

struct fuzz_ctx {
    struct logship_queue *q;
};

static void fuzz_emit(void *ctx, const char *line, size_t len)
{
    struct fuzz_ctx *f = ctx;
    CHECK(len <= LOGSHIP_LINE_MAX);
    CHECK(memchr(line, '\n', len) == NULL);
    char *c = logship_clean("[rank 7] ", line, len);
    size_t n = strlen(c);
    CHECK(n <= len + 9);
    json_t *s = json_string(c); /* NULL would mean invalid UTF-8 */
    CHECK(s != NULL);
    CHECK(strcmp(json_string_value(s), c) == 0);
    json_decref(s);
    logship_queue_push(f->q, c);
}

static void fuzz_assign(const json_t *v)
{
    struct assign a;
    memset(&a, 0, sizeof(a));
    if (assign_parse(v, &a, NULL) != 0) {
        CHECK(a.job_id == NULL);
        return;
    }
    CHECK(a.argc >= 1 && a.argv[0] && a.argv[a.argc] == NULL);
    CHECK(a.group_rank >= 0 && a.group_rank < a.group_world_size);
    CHECK(a.nproc_per_node >= 1);
    CHECK(assign_rank(&a, a.nproc_per_node - 1) < a.world_size);
    CHECK(a.job_id[0] && !strchr(a.job_id, '/'));
    CHECK(a.master_addr[0] && a.master_port > 0);
    assign_release(&a);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *v = json_loadb((const char *)data, size, 0, NULL);
    if (v) {
        fuzz_assign(v);
        json_t *arr = json_object_get(v, "assignments");
        for (size_t i = 0; i < json_array_size(arr) && i < 64; i++)
            fuzz_assign(json_array_get(arr, i));
        json_decref(v);
    }

    struct logship_queue q;
    logship_queue_init(&q, 16);
    struct logship_splitter sp;
    memset(&sp, 0, sizeof(sp));
    struct fuzz_ctx f = {.q = &q};
    size_t half = size / 2;
    logship_split(&sp, (const char *)data, half, fuzz_emit, &f);
    uint64_t first = 0;
    size_t bytes = size % 4096 + 1;
    json_t *taken = logship_queue_take(&q, 5, &bytes, &first);
    if (taken) {
        CHECK(json_array_size(taken) >= 1 && json_array_size(taken) <= 5);
        CHECK(first == q.first_seq);
        logship_queue_ack(&q, first + json_array_size(taken) - 1);
        json_decref(taken);
    }
    logship_split(&sp, (const char *)data + half, size - half, fuzz_emit, &f);
    logship_split_flush(&sp, fuzz_emit, &f);
    CHECK(q.count <= 16 && q.first_seq + q.count == q.next_seq);
    logship_queue_release(&q);
    return 0;
}
