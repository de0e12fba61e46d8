/*
 * errfile.h - the error file of a failed worker: TORCHELASTIC_ERROR_FILE, which a PyTorch
 * program whose entry point is decorated with torch's @record (or any program) writes when it
 * dies of an exception, as torchrun reads it:
 *
 *   {"message": {"message": "ValueError: bad batch",
 *                "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1733090000"}}}
 *
 * (a "message" that is a plain string is taken too). The file belongs to the job's account:
 * it is opened by name in a folder the agent opened itself, without following links, must be
 * a regular file of one link and at most ERRFILE_MAX bytes, and is read once, after the
 * worker exited.
 */
#ifndef DDP_AGENT_ERRFILE_H
#define DDP_AGENT_ERRFILE_H

#include <stdint.h>

#include "common/err.h"

#define ERRFILE_MAX (256 * 1024)

struct errfile {
    char *message;     /* "ValueError: bad batch", at most 1024 bytes */
    char *frame;       /* the innermost frame, 'File "train.py", line 12, in step', or NULL */
    int64_t timestamp; /* seconds since the epoch of the error, 0 unknown */
};

/* Reads and parses the file name in the folder dir_fd (AT_FDCWD: the current one); path is
 * its full name, for messages only. 0 with *out (caller frees with errfile_free),
 * DDP_ENOTFOUND when there is no file, or another code with err saying why (a link, not a
 * regular file of one link, too big, not the expected JSON). */
int errfile_read(int dir_fd, const char *name, const char *path, struct errfile **out,
                 struct ddp_err *err);
/* Parses text (for tests and errfile_read). */
int errfile_parse(const char *text, struct errfile **out, struct ddp_err *err);
void errfile_free(struct errfile *e);

#endif
