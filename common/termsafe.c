/*
 * termsafe.c - control characters as text (see termsafe.h).
 */
#include "common/termsafe.h"

#include <stdio.h>

size_t termsafe_escape(const char *s, size_t n, char *out, size_t size)
{
    if (size == 0)
        return 0;
    size_t i = 0, o = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        int c1 = c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 &&
                 (unsigned char)s[i + 1] <= 0x9f;
        if (c1) {
            if (o + 8 >= size)
                break;
            snprintf(out + o, size - o, "\\x%02x\\x%02x", c, (unsigned char)s[i + 1]);
            o += 8;
            i += 2;
        } else if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f) {
            if (o + 4 >= size)
                break;
            snprintf(out + o, size - o, "\\x%02x", c);
            o += 4;
            i++;
        } else {
            if (o + 1 >= size)
                break;
            out[o++] = (char)c;
            i++;
        }
    }
    out[o] = '\0';
    return i;
}
