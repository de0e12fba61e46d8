/*
 * utf8.h - well-formed UTF-8 (RFC 3629): no overlong form, no surrogate, at most U+10FFFF.
 * For text from others that must stay valid UTF-8 (log lines, JSON strings).
 */
#ifndef DDP_COMMON_UTF8_H
#define DDP_COMMON_UTF8_H

#include <stddef.h>

/* Length (1..4) of the well-formed UTF-8 character at p, of which n bytes may be read; 0 when
 * the bytes there are not one, or p[0] is NUL. */
size_t utf8_char_len(const unsigned char *p, size_t n);

/* Makes NUL-terminated s well-formed in place: every byte that does not belong to a
 * well-formed character becomes '?' (a text cut to a buffer's size inside a character, bytes
 * of another encoding). The length stays. Returns the number of bytes replaced. */
size_t utf8_repair(char *s);

/* 1 when NUL-terminated s is well-formed UTF-8 (JSON text must be), else 0. */
int utf8_valid(const char *s);

#endif
