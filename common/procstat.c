/*
 * procstat.c - /proc/PID/stat's state field, and this process's usage (see procstat.h).
 * Reads the kernel's files with open/read, so a missing /proc gives -1 fields, never a crash.
 */
#include "common/procstat.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

/* Reads up to size - 1 bytes of path into buf (NUL-terminated): the count, or -1. */
static ssize_t proc_read(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return n;
}

/* Wall seconds since the epoch this process started, or -1. */
static double proc_start_time(void)
{
    char buf[1024];
    if (proc_read("/proc/self/stat", buf, sizeof(buf)) <= 0)
        return -1;
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    /* after ")": field 3 (state) onwards; starttime is field 22 */
    p++;
    for (int field = 3; field <= 22; field++) {
        while (*p == ' ')
            p++;
        if (!*p)
            return -1;
        if (field == 22)
            break;
        p += strcspn(p, " ");
    }
    char *end = NULL;
    unsigned long long ticks = strtoull(p, &end, 10);
    long hz = sysconf(_SC_CLK_TCK);
    if (end == p || hz <= 0)
        return -1;
    /* btime, a line of /proc/stat after the per-CPU lines */
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return -1;
    char line[512];
    unsigned long long btime = 0;
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        if (strncmp(line, "btime ", 6) == 0) {
            btime = strtoull(line + 6, &end, 10);
            found = end != line + 6;
        }
    fclose(f);
    if (!found)
        return -1;
    return (double)btime + (double)ticks / (double)hz;
}

void proc_self_usage(struct proc_usage *out)
{
    struct rusage ru;
    out->cpu_s = -1;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        out->cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
    out->rss_bytes = -1;
    char buf[256];
    if (proc_read("/proc/self/statm", buf, sizeof(buf)) > 0) {
        unsigned long long size = 0, res = 0;
        long page = sysconf(_SC_PAGESIZE);
        if (sscanf(buf, "%llu %llu", &size, &res) == 2 && page > 0)
            out->rss_bytes = (int64_t)res * page;
    }
    out->open_fds = -1;
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int64_t n = 0;
        const struct dirent *e;
        while ((e = readdir(d)) != NULL)
            if (e->d_name[0] != '.')
                n++;
        closedir(d);
        out->open_fds = n > 0 ? n - 1 : 0; /* the directory's own descriptor */
    }
    out->max_fds = -1;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        out->max_fds = (int64_t)rl.rlim_cur;
    out->start_time_s = proc_start_time();
}
