/*
 * embed.h - files built into ddpd at build time (server/embed.cmake writes the table):
 * the SQL migrations as "schema/NNN_*.sql", the OpenAPI document as "schema/openapi.json"
 * and the dashboard as "web/<path>". The data is read-only and lives as long as the process.
 */
#ifndef DDP_SERVER_EMBED_H
#define DDP_SERVER_EMBED_H

#include <stddef.h>

struct embed_file {
    const char *name;
    const unsigned char *data; /* NUL-terminated for convenience; len excludes the NUL */
    size_t len;
};

/* Sorted by name. */
extern const struct embed_file embed_files[];
extern const size_t embed_nfiles;

/* The file called name, or NULL. */
const struct embed_file *embed_find(const char *name);

#endif
