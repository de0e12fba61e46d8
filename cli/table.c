/*
 * table.c - aligned text tables (see table.h).
 *
 * Invariant: every row has exactly ncols cells (missing ones are empty strings), so
 * table_print never reads past a row.
 */
#include "cli/table.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

struct table {
    int ncols;
    int nrows; /* rows, header included */
    size_t cap;
    int next_col; /* next cell of the current row */
    char ***rows;
};

static void table_add_row(struct table *t)
{
    XGROW(t->rows, (size_t)t->nrows + 1, t->cap, 16);
    char **r = xcalloc((size_t)t->ncols, sizeof(*r));
    for (int i = 0; i < t->ncols; i++)
        r[i] = xstrdup("");
    t->rows[t->nrows++] = r;
    t->next_col = 0;
}

struct table *table_new(int ncols, const char *const *headers)
{
    struct table *t = xcalloc(1, sizeof(*t));
    t->ncols = ncols > TABLE_MAX_COLS ? TABLE_MAX_COLS : ncols;
    table_add_row(t);
    for (int i = 0; i < t->ncols; i++) {
        free(t->rows[0][i]);
        t->rows[0][i] = xstrdup(headers[i]);
    }
    return t;
}

void table_free(struct table *t)
{
    if (!t)
        return;
    for (int r = 0; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++)
            free(t->rows[r][i]);
        free(t->rows[r]);
    }
    free(t->rows);
    free(t);
}

void table_row(struct table *t)
{
    table_add_row(t);
}

void table_cell(struct table *t, const char *fmt, ...)
{
    if (t->nrows < 2 || t->next_col >= t->ncols)
        return;
    char buf[TABLE_MAX_CELL];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        buf[0] = '\0';
    /* Tabs and newlines would break the alignment. */
    for (char *p = buf; *p; p++)
        if (*p == '\n' || *p == '\t' || *p == '\r')
            *p = ' ';
    char **cell = &t->rows[t->nrows - 1][t->next_col++];
    free(*cell);
    *cell = xstrdup(buf);
}

void table_print(const struct table *t, FILE *out)
{
    table_print_opt(t, out, 1);
}

void table_print_opt(const struct table *t, FILE *out, int headers)
{
    size_t width[TABLE_MAX_COLS] = {0};
    for (int r = headers ? 0 : 1; r < t->nrows; r++)
        for (int i = 0; i < t->ncols; i++) {
            size_t w = strlen(t->rows[r][i]);
            if (w > width[i])
                width[i] = w;
        }
    for (int r = headers ? 0 : 1; r < t->nrows; r++) {
        for (int i = 0; i < t->ncols; i++) {
            const char *cell = t->rows[r][i];
            if (i == t->ncols - 1)
                fprintf(out, "%s", cell);
            else
                fprintf(out, "%-*s  ", (int)width[i], cell);
        }
        fputc('\n', out);
    }
}
