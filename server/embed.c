/*
 * embed.c - lookup in the table of built-in files (the table itself is generated).
 */
#include "server/embed.h"

#include <string.h>

const struct embed_file *embed_find(const char *name)
{
    for (size_t i = 0; i < embed_nfiles; i++)
        if (strcmp(embed_files[i].name, name) == 0)
            return &embed_files[i];
    return NULL;
}
