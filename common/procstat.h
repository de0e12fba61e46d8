/*
 * procstat.h - one reader of /proc/PID/stat: a process's scheduler state letter.
 */
#ifndef DDP_COMMON_PROCSTAT_H
#define DDP_COMMON_PROCSTAT_H

#include <sys/types.h>

/* The state field of /proc/PID/stat ('R', 'S', 'D', 'T', 't', 'Z', 'X', ...), read past the
 * command name (in parentheses, which may hold spaces and parentheses itself). 0 when pid
 * does not exist (ENOENT); '?' when the file exists but cannot be read or parsed. */
char proc_state(pid_t pid);

#endif
