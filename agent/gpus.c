/*
 * gpus.c - the GPUs an agent hands out (gpus.h).
 */
#include "agent/gpus.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

void gpus_list(const char *visible, int found, char ***out, int *n)
{
    char **ids = xcalloc(GPUS_MAX + 1, sizeof(*ids));
    int k = 0;
    if (!visible) {
        for (int i = 0; i < found && k < GPUS_MAX; i++)
            ids[k++] = xasprintf("%d", i);
    } else if (strcmp(visible, "-1") != 0 && strcmp(visible, "none") != 0 &&
               strcmp(visible, "NoDevFiles") != 0) {
        const char *p = visible;
        while (*p && k < GPUS_MAX) {
            size_t len = strcspn(p, ",");
            const char *s = p, *e = p + len;
            while (s < e && (*s == ' ' || *s == '\t'))
                s++;
            while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
                e--;
            if (e > s)
                ids[k++] = xstrndup(s, (size_t)(e - s));
            p += len;
            if (*p == ',')
                p++;
        }
    }
    *out = ids;
    *n = k;
}

int gpus_pick(uint64_t busy, int n, int want, uint64_t *out)
{
    uint64_t got = 0;
    int k = 0;
    if (n > GPUS_MAX)
        n = GPUS_MAX;
    for (int i = 0; i < n && k < want; i++) {
        uint64_t bit = (uint64_t)1 << i;
        if (!(busy & bit)) {
            got |= bit;
            k++;
        }
    }
    if (k < want)
        return -1;
    *out = got;
    return 0;
}

char *gpus_visible(char *const *ids, int n, uint64_t mask)
{
    size_t len = 1;
    for (int i = 0; i < n && i < GPUS_MAX; i++)
        if (mask & ((uint64_t)1 << i))
            len += strlen(ids[i]) + 1;
    char *s = xcalloc(len, 1);
    size_t off = 0;
    for (int i = 0; i < n && i < GPUS_MAX; i++) {
        if (!(mask & ((uint64_t)1 << i)))
            continue;
        size_t l = strlen(ids[i]);
        if (off)
            s[off++] = ',';
        memcpy(s + off, ids[i], l);
        off += l;
    }
    s[off] = '\0';
    return s;
}

void gpus_free(char **ids, int n)
{
    for (int i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
}
