/*
 * label.c - label characters (label.h).
 */
#include "common/label.h"

static int label_chars(const char *s, size_t n, size_t min, int slash)
{
    if (n < min || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || (slash && c == '/')))
            return 0;
    }
    return 1;
}

int label_key_ok(const char *s, size_t n)
{
    return label_chars(s, n, 1, 1);
}

int label_value_ok(const char *s, size_t n)
{
    return label_chars(s, n, 0, 0);
}
