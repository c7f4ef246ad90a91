/* mask_out.c - the output stream of the writers: two large buffers and a
 * writer thread, .npy headers, the first error kept. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "mask/mask_int.h"
#include "core/npy.h"

static void *aout_writer(void *arg)
{
    struct aout *a = arg;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (a->pending < 0 && !a->done)
            pthread_cond_wait(&a->cv, &a->mu);
        if (a->pending < 0)
            break;
        int k = a->pending;
        size_t n = a->pending_len;
        pthread_mutex_unlock(&a->mu);
        int err = 0;
        if (n && fwrite(a->buf[k], 1, n, a->f) != n)
            err = errno ? errno : EIO;
        pthread_mutex_lock(&a->mu);
        if (err && !a->err)
            a->err = err;
        a->pending = -1;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    return NULL;
}

int mask_aout_open(struct aout *a, FILE *f, int threads, struct kv_err *e)
{
    memset(a, 0, sizeof *a);
    a->f = f;
    a->cap = CHUNK_BYTES;
    a->pending = -1;
    a->threaded = threads > 1;
    /* a character device (a terminal, /dev/null) takes writes without
     * copying them: a writer thread would only add hand-offs */
    struct stat st;
    int fd = fileno(f);
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode))
        a->threaded = 0;
    a->buf[0] = malloc(a->cap);
    a->buf[1] = a->threaded ? malloc(a->cap) : NULL;
    if (!a->buf[0] || (a->threaded && !a->buf[1])) {
        free(a->buf[0]);
        free(a->buf[1]);
        return kv_err_set(e, "out of memory");
    }
    if (a->threaded) {
        pthread_mutex_init(&a->mu, NULL);
        pthread_cond_init(&a->cv, NULL);
        if (pthread_create(&a->th, NULL, aout_writer, a) != 0) {
            pthread_mutex_destroy(&a->mu);
            pthread_cond_destroy(&a->cv);
            a->threaded = 0;       /* fall back to writing in place */
        }
    }
    return 0;
}

/* Hand the filled buffer to the writer (or write it). */
int mask_aout_flush(struct aout *a, struct kv_err *e)
{
    if (a->len == 0)
        return 0;
    if (!a->threaded) {
        int rc = kv_write_all(a->f, a->buf[0], a->len, e);
        a->len = 0;
        return rc;
    }
    pthread_mutex_lock(&a->mu);
    while (a->pending >= 0)
        pthread_cond_wait(&a->cv, &a->mu);
    int err = a->err;
    if (!err) {
        a->pending = a->cur;
        a->pending_len = a->len;
        pthread_cond_broadcast(&a->cv);
    }
    pthread_mutex_unlock(&a->mu);
    if (err)
        return kv_err_set(e, "write error: %s", strerror(err));
    a->cur ^= 1;
    a->len = 0;
    return 0;
}


int mask_aout_put(struct aout *a, const void *data, size_t n,
             struct kv_err *e)
{
    const uint8_t *p = data;
    while (n > 0) {
        if (a->len == a->cap && mask_aout_flush(a, e) != 0)
            return -1;
        size_t k = a->cap - a->len < n ? a->cap - a->len : n;
        memcpy(a->buf[a->cur] + a->len, p, k);
        a->len += k;
        p += k;
        n -= k;
    }
    return 0;
}

int mask_aout_header(struct aout *a, enum kv_dtype dt, int nd,
                const int64_t *shape, struct kv_err *e)
{
    char *h = NULL;
    size_t hl = 0;
    FILE *m = open_memstream(&h, &hl);
    if (!m)
        return kv_err_set(e, "out of memory");
    int rc = kv_npy_write_header(m, dt, nd, shape, e);
    if (fclose(m) != 0 && rc == 0)
        rc = kv_err_set(e, "out of memory");
    if (rc == 0)
        rc = mask_aout_put(a, h, hl, e);
    free(h);
    return rc;
}

/* Write what is left, stop the writer, free; returns the first error. */
int mask_aout_close(struct aout *a, int rc, struct kv_err *e)
{
    if (rc == 0)
        rc = mask_aout_flush(a, e);
    if (a->threaded) {
        pthread_mutex_lock(&a->mu);
        while (a->pending >= 0)
            pthread_cond_wait(&a->cv, &a->mu);
        a->done = 1;
        pthread_cond_broadcast(&a->cv);
        int err = a->err;
        pthread_mutex_unlock(&a->mu);
        pthread_join(a->th, NULL);
        pthread_mutex_destroy(&a->mu);
        pthread_cond_destroy(&a->cv);
        if (err && rc == 0)
            rc = kv_err_set(e, "write error: %s", strerror(err));
    }
    free(a->buf[0]);
    free(a->buf[1]);
    a->buf[0] = a->buf[1] = NULL;
    return rc;
}
