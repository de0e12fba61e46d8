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

void gpus_free(char **ids, int n)
{
    for (int i = 0; ids && i < n; i++)
        free(ids[i]);
    free(ids);
}
