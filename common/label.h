/*
 * label.h - the characters of a node label, shared by the agent (its --label flags) and ddpd
 * (registrations and job node_selectors), so both take the same labels: a key is 1..63 of
 * [A-Za-z0-9._/-], a value 0..63 of [A-Za-z0-9._-].
 */
#ifndef DDP_COMMON_LABEL_H
#define DDP_COMMON_LABEL_H

#include <stddef.h>

/* 1 when s[0..n) is a valid label key. */
int label_key_ok(const char *s, size_t n);
/* 1 when s[0..n) is a valid label value. */
int label_value_ok(const char *s, size_t n);

#endif
