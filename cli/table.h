/*
 * table.h - aligned text tables for ddpctl's table output: add rows of cells, then print
 * with each column as wide as its widest cell. Bounded: at most TABLE_MAX_COLS columns; a
 * cell longer than TABLE_MAX_CELL bytes is cut.
 */
#ifndef DDP_CLI_TABLE_H
#define DDP_CLI_TABLE_H

#include <stdio.h>

#define TABLE_MAX_COLS 16
#define TABLE_MAX_CELL 512

struct table;

/* headers: ncols column titles (borrowed, copied). Caller frees with table_free(). */
struct table *table_new(int ncols, const char *const *headers);
void table_free(struct table *t);

/* Starts a new row; the following table_cell() calls fill it left to right. */
void table_row(struct table *t);
/* Sets the next cell of the current row (printf-style); extra cells are ignored. */
void table_cell(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints the header and every row, columns separated by two spaces, the last column unpadded. */
void table_print(const struct table *t, FILE *out);
/* The same, without the header line when headers is 0. */
void table_print_opt(const struct table *t, FILE *out, int headers);

#endif
