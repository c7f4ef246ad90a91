/* err.h - the one error type of libkv.
 *
 * Library functions never print and never exit: on failure they return -1
 * and write one short sentence into the caller's struct kv_err.  Output
 * arguments are left untouched on failure.
 */
#ifndef KV_ERR_H
#define KV_ERR_H

#include <stdarg.h>

#define KV_ERR_MAX 512

struct kv_err {
    char msg[KV_ERR_MAX];
};

#if defined(__GNUC__)
#define KV_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KV_PRINTF(a, b)
#endif

/* Fill e (which may be NULL) with a formatted message; always returns -1 so
 * that callers can write `return kv_err_set(e, "...")`. */
int kv_err_set(struct kv_err *e, const char *fmt, ...) KV_PRINTF(2, 3);
int kv_err_vset(struct kv_err *e, const char *fmt, va_list ap);

/* Prefix the message already in e with "prefix: " (used to add a file name
 * or an option name as context).  Returns -1. */
int kv_err_prefix(struct kv_err *e, const char *fmt, ...) KV_PRINTF(2, 3);

#endif
