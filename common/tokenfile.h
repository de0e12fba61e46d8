/*
 * tokenfile.h - reading a credential from a file: the user and agent tokens of ddpd, the
 * agent's token. One rule for all of them, so that a weak or exposed token is said out loud.
 */
#ifndef DDP_COMMON_TOKENFILE_H
#define DDP_COMMON_TOKENFILE_H

#include <stddef.h>

#include "common/err.h"

/* Shortest token accepted: ddpd makes 64 hex digits; 16 bytes is far below that already. */
#define TOKEN_MIN_LEN 16
/* Largest token file read. */
#define TOKEN_FILE_MAX 4096

/*
 * Reads the token of the regular file path (what names it in messages: "user", "agent"),
 * without trailing white space. Refused with DDP_EINVAL naming the file: empty, shorter than
 * TOKEN_MIN_LEN bytes, or holding a space or a control character (it travels in an
 * Authorization header), or not a regular file (a link, a FIFO). DDP_ENOTFOUND when missing
 * (the caller may create it). A file that others than its owner may read or write is taken,
 * with one warning naming its mode and the chmod that fixes it. On success *out (caller
 * frees) holds the token.
 */
int token_file_read(const char *path, const char *what, char **out, struct ddp_err *err);
/* The rules above for a token held elsewhere (an environment variable: where names it):
 * text[0..len) must be at least TOKEN_MIN_LEN bytes without a space or control character.
 * 0, or DDP_EINVAL naming what and where. */
int token_check(const char *text, size_t len, const char *what, const char *where,
                struct ddp_err *err);

#endif
