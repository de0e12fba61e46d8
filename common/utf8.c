/*
 * utf8.c - well-formed UTF-8 (utf8.h).
 */
#include "common/utf8.h"

#include <string.h>

size_t utf8_char_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    unsigned int cp;
    if (c < 0x80)
        return c ? 1 : 0;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* The bytes of s that belong to no well-formed character; each made '?' in fix, when fix
 * is s (NULL: counted only). */
static size_t utf8_scan(const char *s, char *fix)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t left = strlen(s), bad = 0;
    while (left > 0) {
        size_t k = utf8_char_len(p, left);
        if (!k) {
            if (fix)
                fix[(const char *)p - s] = '?';
            k = 1;
            bad++;
        }
        p += k;
        left -= k;
    }
    return bad;
}

size_t utf8_repair(char *s)
{
    return utf8_scan(s, s);
}

int utf8_valid(const char *s)
{
    return utf8_scan(s, NULL) == 0;
}
