/*
 * procstat.h - readers of /proc: a process's scheduler state letter, and this process's own
 * usage (CPU, memory, descriptors, start time) for /metrics.
 */
#ifndef DDP_COMMON_PROCSTAT_H
#define DDP_COMMON_PROCSTAT_H

#include <stdint.h>
#include <sys/types.h>

/* The state field of /proc/PID/stat ('R', 'S', 'D', 'T', 't', 'Z', 'X', ...), read past the
 * command name (in parentheses, which may hold spaces and parentheses itself). 0 when pid
 * does not exist (ENOENT); '?' when the file exists but cannot be read or parsed. */
char proc_state(pid_t pid);

/* This process's usage. A field that cannot be read is -1. */
struct proc_usage {
    double cpu_s;        /* user + system CPU seconds (getrusage) */
    int64_t rss_bytes;   /* resident set (/proc/self/statm) */
    int64_t open_fds;    /* entries of /proc/self/fd, the one reading them left out */
    int64_t max_fds;     /* RLIMIT_NOFILE's soft limit */
    double start_time_s; /* wall seconds since the epoch the process started (boot time of
                          * /proc/stat plus starttime of /proc/self/stat) */
};
/* Fills *out; fields it cannot read are -1 (never fails as a whole). */
void proc_self_usage(struct proc_usage *out);

#endif
