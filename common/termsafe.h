/*
 * termsafe.h - text from others made safe for a terminal: control characters shown as \xNN
 * instead of acting (an escape sequence in a worker's log line could clear the screen or
 * paint a fake "state: SUCCEEDED"), as journalctl does.
 */
#ifndef DDP_COMMON_TERMSAFE_H
#define DDP_COMMON_TERMSAFE_H

#include <stddef.h>

/* Writes s[0..n) into out (size bytes, always NUL-terminated when size > 0) with every C0
 * control character but tab and newline, DEL, and every C1 control (UTF-8 U+0080..U+009F)
 * written as \xNN (a C1 control as its two bytes, \xc2\xNN). Returns how many input bytes
 * were taken: n when all fit, fewer when out filled up (never cutting an escape). */
size_t termsafe_escape(const char *s, size_t n, char *out, size_t size);

#endif
