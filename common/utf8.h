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

#endif
