/*
 * jsonx.c - strict typed access to JSON objects.
 */
#include "common/jsonx.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int jsonx_check_keys(const json_t *obj, const char *const *allowed, const char *where,
                     struct ddp_err *err)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        (void)v;
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, key) == 0) {
                ok = 1;
                break;
            }
        if (!ok)
            return err_set(err, DDP_EINVAL, "unknown field '%s'%s%s", key, where ? " in " : "",
                           where ? where : "");
    }
    return 0;
}

static json_t *jsonx_lookup(const json_t *obj, const char *key, int required, int *rc,
                            struct ddp_err *err)
{
    json_t *v = json_object_get(obj, key);
    *rc = 0;
    if (!v || json_is_null(v)) {
        if (required)
            *rc = err_set(err, DDP_EINVAL, "field '%s': required", key);
        return NULL;
    }
    return v;
}

int jsonx_get_string(const json_t *obj, const char *key, int required, const char **out,
                     struct ddp_err *err)
{
    int rc;
    json_t *v = jsonx_lookup(obj, key, required, &rc, err);
    if (!v)
        return rc;
    if (!json_is_string(v))
        return err_set(err, DDP_EINVAL, "field '%s': expected a string", key);
    *out = json_string_value(v);
    return 0;
}

int jsonx_get_int(const json_t *obj, const char *key, int required, int64_t min, int64_t max,
                  int64_t *out, struct ddp_err *err)
{
    int rc;
    json_t *v = jsonx_lookup(obj, key, required, &rc, err);
    if (!v)
        return rc;
    if (!json_is_integer(v))
        return err_set(err, DDP_EINVAL, "field '%s': expected an integer", key);
    json_int_t i = json_integer_value(v);
    if (i < min || i > max)
        return err_set(err, DDP_EINVAL, "field '%s': %lld is out of range [%lld, %lld]", key,
                       (long long)i, (long long)min, (long long)max);
    *out = i;
    return 0;
}

int jsonx_get_bool(const json_t *obj, const char *key, int required, int *out, struct ddp_err *err)
{
    int rc;
    json_t *v = jsonx_lookup(obj, key, required, &rc, err);
    if (!v)
        return rc;
    if (!json_is_boolean(v))
        return err_set(err, DDP_EINVAL, "field '%s': expected true or false", key);
    *out = json_is_true(v);
    return 0;
}

int jsonx_get_number(const json_t *obj, const char *key, int required, double *out,
                     struct ddp_err *err)
{
    int rc;
    json_t *v = jsonx_lookup(obj, key, required, &rc, err);
    if (!v)
        return rc;
    if (!json_is_number(v))
        return err_set(err, DDP_EINVAL, "field '%s': expected a number", key);
    *out = json_number_value(v);
    return 0;
}

int jsonx_get_array(const json_t *obj, const char *key, int required, json_t **out,
                    struct ddp_err *err)
{
    int rc;
    json_t *v = jsonx_lookup(obj, key, required, &rc, err);
    if (!v)
        return rc;
    if (!json_is_array(v))
        return err_set(err, DDP_EINVAL, "field '%s': expected an array", key);
    *out = v;
    return 0;
}

int jsonx_get_object(const json_t *obj, const char *key, int required, json_t **out,
                     struct ddp_err *err)
{
    int rc;
    json_t *v = jsonx_lookup(obj, key, required, &rc, err);
    if (!v)
        return rc;
    if (!json_is_object(v))
        return err_set(err, DDP_EINVAL, "field '%s': expected an object", key);
    *out = v;
    return 0;
}

int jsonx_parse_object(const char *text, size_t len, json_t **out, struct ddp_err *err)
{
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!v)
        return err_set(err, DDP_EINVAL, "body is not valid JSON: %s at line %d column %d",
                       jerr.text, jerr.line, jerr.column);
    if (!json_is_object(v)) {
        json_decref(v);
        return err_set(err, DDP_EINVAL, "body must be a JSON object");
    }
    *out = v;
    return 0;
}

char *jsonx_dumps(const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        abort();
    return s;
}

int jsonx_depth(const json_t *v, int limit)
{
    if (!json_is_object(v) && !json_is_array(v))
        return 0;
    if (limit < 0)
        return 1; /* past the limit: no need to look deeper */
    int deepest = 0;
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            int d = jsonx_depth(x, limit - 1);
            if (d > deepest)
                deepest = d;
            if (deepest > limit)
                break;
        }
    } else {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)v, k, x)
        {
            int d = jsonx_depth(x, limit - 1);
            if (d > deepest)
                deepest = d;
            if (deepest > limit)
                break;
        }
    }
    return 1 + deepest;
}
