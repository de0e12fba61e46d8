/*
 * termout.c - ddpctl's output to a terminal is text, never control sequences from others.
 *
 * Log lines, reasons, names and commands come from jobs and other users: an escape sequence in
 * one could clear the screen or paint a fake "state: SUCCEEDED". When stdout (stderr) is a
 * terminal, cli_term_protect() puts a stream in front of it that writes every control
 * character as \xNN (common/termsafe.h, as journalctl does); ddpctl's own control sequences
 * (watch's redrawn progress line) go to cli_term, the terminal itself. Pipes and files get
 * the bytes unchanged, so scripts read what the jobs wrote.
 */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/termsafe.h"
#include "common/xalloc.h"

FILE *cli_term;

/* A protected stream: the terminal, and a first byte of a C1 control (0xc2) held back when a
 * write ended on it, since glibc hands the stream its buffer in chunks cut anywhere: the
 * next byte decides whether the pair is a control to escape. */
struct termout {
    FILE *out;
    int held;  /* a 0xc2 ended the last write */
    int owned; /* allocated by cli_term_wrap (freed at close); else one of term_std */
};

/* stdout's and stderr's: they live until the process ends, never closed */
static struct termout term_std[2];

static int termout_put(FILE *out, const char *buf, size_t size)
{
    char esc[4096];
    size_t done = 0;
    while (done < size) {
        size_t took = termsafe_escape(buf + done, size - done, esc, sizeof(esc));
        if (took == 0)
            took = 1; /* cannot happen with a buffer this size; never loop forever */
        if (fputs(esc, out) < 0)
            return -1;
        done += took;
    }
    return 0;
}

static ssize_t termout_write(void *cookie, const char *buf, size_t size)
{
    struct termout *t = cookie;
    if (size == 0)
        return 0;
    size_t from = 0;
    if (t->held) {
        char pair[2] = {(char)0xc2, buf[0]};
        unsigned char c = (unsigned char)buf[0];
        int c1 = c >= 0x80 && c <= 0x9f;
        if (termout_put(t->out, pair, c1 ? 2 : 1) < 0)
            return -1;
        t->held = 0;
        from = c1 ? 1 : 0;
    }
    size_t upto = size;
    if (size > from && (unsigned char)buf[size - 1] == 0xc2) {
        upto = size - 1;
        t->held = 1;
    }
    if (termout_put(t->out, buf + from, upto - from) < 0)
        return -1;
    return (ssize_t)size;
}

static int termout_close(void *cookie)
{
    struct termout *t = cookie;
    int rc = 0;
    if (t->held && fputc(0xc2, t->out) == EOF) /* a stray lead byte at the end: as it is */
        rc = -1;
    if (fflush(t->out) != 0)
        rc = -1;
    if (t->owned)
        free(t);
    return rc;
}

static FILE *term_wrap_in(FILE *out, struct termout *t)
{
    t->out = out;
    cookie_io_functions_t io = {.write = termout_write, .close = termout_close};
    FILE *f = fopencookie(t, "w", io);
    if (!f)
        return NULL;
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

FILE *cli_term_wrap(FILE *out)
{
    struct termout *t = xcalloc(1, sizeof(*t));
    t->owned = 1;
    FILE *f = term_wrap_in(out, t);
    if (!f) {
        free(t);
        return out; /* unprotected rather than silent */
    }
    return f;
}

void cli_term_protect(void)
{
    cli_term = stdout;
    FILE *f;
    if (isatty(STDOUT_FILENO) && (f = term_wrap_in(stdout, &term_std[0])) != NULL)
        stdout = f;
    if (isatty(STDERR_FILENO) && (f = term_wrap_in(stderr, &term_std[1])) != NULL)
        stderr = f;
}
