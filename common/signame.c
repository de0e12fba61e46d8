/*
 * signame.c - the table of signals a preemption notice may use (signame.h).
 */
#include "common/signame.h"

#include <signal.h>
#include <stddef.h>
#include <string.h>

static const struct {
    const char *name;
    int signo;
} signame_table[] = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP},     {"SIGINT", SIGINT},
    {"SIGTERM", SIGTERM}, {"SIGURG", SIGURG},   {"SIGWINCH", SIGWINCH},
};

#define SIGNAME_N (sizeof(signame_table) / sizeof(signame_table[0]))

int signame_parse(const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < SIGNAME_N; i++)
        if (strcmp(name, signame_table[i].name) == 0 ||
            strcmp(name, signame_table[i].name + 3) == 0)
            return signame_table[i].signo;
    return -1;
}

const char *signame_str(int signo)
{
    for (size_t i = 0; i < SIGNAME_N; i++)
        if (signame_table[i].signo == signo)
            return signame_table[i].name;
    return NULL;
}

const char *signame_allowed(void)
{
    return "SIGUSR1, SIGUSR2, SIGHUP, SIGINT, SIGTERM, SIGURG, SIGWINCH";
}
