/*
 * fuzz_request.c - libFuzzer target over ddpd's request path without a network: body
 * parsing (jsonx_parse_object) and the job-spec, register and heartbeat validators, plus
 * the job id parser. The first byte picks the validator; the rest is the body.
 *
 * Invariants checked: no crash, no leak, no undefined behaviour; a validator that fails
 * has written nothing, one that succeeds gives values inside their documented ranges.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/jsonx.h"
#include "common/xalloc.h"
#include "server/validate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 4;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct ddp_err e;
    json_t *obj = NULL;
    if (which == 3) {
        char *s = xstrndup(body, len);
        int64_t id = 0;
        if (validate_job_id(s, &id) == 0 && id < 1)
            abort();
        free(s);
        return 0;
    }
    if (jsonx_parse_object(body, len, &obj, &e) != 0)
        return 0;
    if (which == 0) {
        struct job_spec s = {0};
        if (validate_job_spec(obj, &s, &e) == 0) {
            if (s.nmin < 1 || s.nmin > s.nmax || s.nmax > SPEC_MAX_NODES || s.nproc < 1 ||
                s.nproc > SPEC_MAX_NPROC || !s.json || !validate_name(s.name))
                abort();
            char *text = jsonx_dumps(s.json);
            /* the canonical spec validates again to itself */
            json_t *again = json_loads(text, 0, NULL);
            struct job_spec s2 = {0};
            if (!again || validate_job_spec(again, &s2, &e) != 0 || s2.nmin != s.nmin ||
                s2.nmax != s.nmax)
                abort();
            validate_spec_release(&s2);
            json_decref(again);
            free(text);
        } else if (s.json) {
            abort();
        }
        validate_spec_release(&s);
    } else if (which == 1) {
        struct node_reg r = {0};
        if (validate_register(obj, &r, &e) == 0) {
            if (r.slots < 1 || r.port_lo < 1 || r.port_lo > r.port_hi || r.port_hi > 65535)
                abort();
        } else if (r.name) {
            abort();
        }
    } else {
        struct beat b = {0};
        if (validate_beat(obj, &b, &e) == 0) {
            if (b.wait_ms < 0 || b.wait_ms > BEAT_MAX_WAIT_MS)
                abort();
            for (size_t i = 0; i < b.nworkers; i++)
                if (b.workers[i].job < 1 || b.workers[i].rank < 0)
                    abort();
        } else if (b.workers) {
            abort();
        }
        validate_beat_release(&b);
    }
    json_decref(obj);
    return 0;
}
