/*
 * jsonx.h - strict readers over jansson objects. Each getter either succeeds or has filled
 * err with DDP_EINVAL and a message naming the field and the rule ("field 'nproc_per_node':
 * expected an integer"). Values written to out-parameters are borrowed from the object
 * unless the comment says otherwise; out-parameters are untouched on failure.
 *
 * `required` = 1 makes a missing field an error; with 0 a missing (or null) field leaves
 * *out as it was and returns 0, so callers preset defaults.
 */
#ifndef DDP_COMMON_JSONX_H
#define DDP_COMMON_JSONX_H

#include <jansson.h>
#include <stdint.h>

#include "common/err.h"

/* Refuses any key of obj not in the NULL-terminated list allowed. */
int jsonx_check_keys(const json_t *obj, const char *const *allowed, const char *where,
                     struct ddp_err *err);

int jsonx_get_string(const json_t *obj, const char *key, int required, const char **out,
                     struct ddp_err *err);
int jsonx_get_int(const json_t *obj, const char *key, int required, int64_t min, int64_t max,
                  int64_t *out, struct ddp_err *err);
int jsonx_get_bool(const json_t *obj, const char *key, int required, int *out, struct ddp_err *err);
int jsonx_get_number(const json_t *obj, const char *key, int required, double *out,
                     struct ddp_err *err);
/* Borrowed array / object (type checked). */
int jsonx_get_array(const json_t *obj, const char *key, int required, json_t **out,
                    struct ddp_err *err);
int jsonx_get_object(const json_t *obj, const char *key, int required, json_t **out,
                     struct ddp_err *err);

/* Parses text (len bytes, need not be NUL-terminated) that must be a JSON object; the
 * caller owns the result (json_decref). */
int jsonx_parse_object(const char *text, size_t len, json_t **out, struct ddp_err *err);

/* Compact serialisation; the caller frees the string. Aborts on out-of-memory. */
char *jsonx_dumps(const json_t *v);

/* How deeply v nests (a scalar 0, {} or [] 1, {"a": []} 2, ...), counted up to limit + 1
 * at most (so a deep value costs no more than limit levels to refuse). */
int jsonx_depth(const json_t *v, int limit);

#endif
