/* err.c - filling struct kv_err. */
#include <stdio.h>
#include <string.h>
#include "core/err.h"

int kv_err_vset(struct kv_err *e, const char *fmt, va_list ap)
{
    if (e)
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    return -1;
}

int kv_err_set(struct kv_err *e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kv_err_vset(e, fmt, ap);
    va_end(ap);
    return -1;
}

int kv_err_prefix(struct kv_err *e, const char *fmt, ...)
{
    char head[KV_ERR_MAX], old[KV_ERR_MAX];
    va_list ap;

    if (!e)
        return -1;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    {
        size_t n = strlen(head);
        if (n > sizeof e->msg - 3)
            n = sizeof e->msg - 3;
        memcpy(e->msg, head, n);
        memcpy(e->msg + n, ": ", 2);
        n += 2;
        size_t m = strlen(old);
        if (m > sizeof e->msg - 1 - n)
            m = sizeof e->msg - 1 - n;
        memcpy(e->msg + n, old, m);
        e->msg[n + m] = '\0';
    }
    return -1;
}
