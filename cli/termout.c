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
#include <string.h>
#include <unistd.h>

#include "common/termsafe.h"

FILE *cli_term;

static ssize_t termout_write(void *cookie, const char *buf, size_t size)
{
    FILE *out = cookie;
    char esc[4096];
    size_t done = 0;
    while (done < size) {
        size_t took = termsafe_escape(buf + done, size - done, esc, sizeof(esc));
        if (took == 0)
            took = 1; /* cannot happen with a buffer this size; never loop forever */
        if (fputs(esc, out) < 0)
            return done ? (ssize_t)done : -1;
        done += took;
    }
    return (ssize_t)size;
}

static FILE *termout_wrap(FILE *out)
{
    cookie_io_functions_t io = {.write = termout_write};
    FILE *f = fopencookie(out, "w", io);
    if (!f)
        return out; /* unprotected rather than silent */
    setvbuf(f, NULL, _IOLBF, 0);
    return f;
}

void cli_term_protect(void)
{
    cli_term = stdout;
    if (isatty(STDOUT_FILENO))
        stdout = termout_wrap(stdout);
    if (isatty(STDERR_FILENO))
        stderr = termout_wrap(stderr);
}
