/*
 * procstat.c - /proc/PID/stat's state field (see procstat.h).
 */
#include "common/procstat.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

char proc_state(pid_t pid)
{
    char path[64], buf[512];
    if (pid <= 0)
        return '?';
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ESRCH ? 0 : '?';
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return n < 0 && errno == ESRCH ? 0 : '?';
    buf[n] = '\0';
    /* The command name may hold ')': the state follows the last one. */
    const char *rp = strrchr(buf, ')');
    if (!rp || rp[1] != ' ' || !rp[2])
        return '?';
    return rp[2];
}
