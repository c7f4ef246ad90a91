/* store.c - the store interface: opening by spec, dispatch to the dir and
 * Redis backends, and the verification every read goes through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <hiredis/hiredis.h>
#include "chunk/store.h"

void kv_store_opts_init(struct kv_store_opts *o)
{
    memset(o, 0, sizeof *o);
    o->timeout = 2.0;
}

const char *kv_store_redact(const char *spec, char *buf, size_t len)
{
    const char *scheme = strstr(spec, "://"), *at = NULL;
    if (scheme)
        at = strrchr(scheme + 3, '@');   /* as kv_redis_parse_auth reads it */
    if (!at) {
        snprintf(buf, len, "%s", spec);
        return buf;
    }
    /* the user name stays: it is no secret, and it says who logs in */
    const char *user = scheme + 3;
    const char *colon = memchr(user, ':', (size_t)(at - user));
    snprintf(buf, len, "%.*s%s%s", (int)((colon ? colon : user) - spec), spec,
             colon ? ":***" : "***", at);
    return buf;
}

int kv_store_open(const char *spec, const struct kv_store_opts *o,
                  struct kv_store **out, struct kv_err *e)
{
    struct kv_store_opts def;
    if (!o) {
        kv_store_opts_init(&def);
        o = &def;
    }
    if (!spec || !*spec)
        return kv_err_set(e, "--store: empty store name");
    if (strncmp(spec, "redis://", 8) == 0)
        return kv_store_redis_open(spec, o, out, e);
    if (strncmp(spec, "redis-cluster://", 16) == 0)
        return kv_store_cluster_open(spec, o, out, e);
    if (strncmp(spec, "dir:", 4) == 0)
        spec += 4;
    else if (strstr(spec, "://")) {
        char safe[512];
        return kv_err_set(e, "--store: expected dir:PATH, "
                          "redis://HOST:PORT[/DB] or "
                          "redis-cluster://HOST:PORT[,HOST:PORT..], got '%s'",
                          kv_store_redact(spec, safe, sizeof safe));
    }
    if (!*spec)
        return kv_err_set(e, "--store: dir: needs a path");
    return kv_store_dir_open(spec, o, out, e);
}

void kv_store_close(struct kv_store *s)
{
    if (s)
        s->ops->close(s);
}

const char *kv_store_kind(const struct kv_store *s)
{
    return s->ops->kind;
}

void kv_blob_ref_release(struct kv_blob_ref *r)
{
    if (r->map)
        munmap(r->map, r->map_len);
    if (r->fd > 0)
        close(r->fd);
    if (r->reply)
        freeReplyObject(r->reply);
    free(r->owned);
    memset(r, 0, sizeof *r);
}

int kv_store_get(struct kv_store *s, const struct kv_chunk_req *req,
                 size_t n, struct kv_blob_ref *refs, int *status,
                 struct kv_err *why, struct kv_err *e)
{
    for (size_t i = 0; i < n; i++) {
        memset(&refs[i], 0, sizeof refs[i]);
        status[i] = KV_GET_ABSENT;
        if (why)
            why[i].msg[0] = '\0';
    }
    return s->ops->get(s, req, n, refs, status, why, e);
}

int kv_store_get_each(struct kv_store *s, const struct kv_chunk_req *req,
                      size_t n, struct kv_blob_ref *refs, int *status,
                      struct kv_err *why, const struct kv_get_sink *sink,
                      struct kv_err *e)
{
    s->sink = sink;
    int rc = kv_store_get(s, req, n, refs, status, why, e);
    s->sink = NULL;
    return rc;
}

int kv_store_put(struct kv_store *s, const struct kv_blob_meta *m,
                 const uint8_t *hdr, const void *payload, int *existed,
                 struct kv_err *e)
{
    if (s->opts.read_only)
        return kv_err_set(e, "store opened read-only");
    return s->ops->put(s, m, hdr, payload, existed, e);
}

int kv_store_rm(struct kv_store *s, const uint8_t key[16], int *found,
                struct kv_err *e)
{
    return s->ops->rm(s, key, found, e);
}

int kv_store_pin(struct kv_store *s, const uint8_t key[16], int on,
                 int *found, struct kv_err *e)
{
    return s->ops->pin(s, key, on, found, e);
}

int kv_store_ls(struct kv_store *s,
                int (*cb)(void *ctx, const struct kv_store_entry *),
                void *ctx, struct kv_err *e)
{
    return s->ops->ls(s, cb, ctx, e);
}

int kv_store_stat(struct kv_store *s, struct kv_store_stats *st,
                  struct kv_err *e)
{
    memset(st, 0, sizeof *st);
    return s->ops->stat(s, st, e);
}

int kv_store_evict(struct kv_store *s, uint64_t max_bytes, double low,
                   struct kv_evict_report *r, struct kv_err *e)
{
    memset(r, 0, sizeof *r);
    if (!(low > 0 && low <= 1))
        return kv_err_set(e, "low watermark %g must be in (0, 1]", low);
    return s->ops->evict(s, max_bytes, low, r, e);
}

int kv_store_fsck(struct kv_store *s, int repair,
                  void (*cb)(void *ctx, const char *line), void *ctx,
                  struct kv_fsck_report *r, struct kv_err *e)
{
    memset(r, 0, sizeof *r);
    return s->ops->fsck(s, repair, cb, ctx, r, e);
}

int kv_store_verify(const uint8_t *buf, size_t len,
                    const struct kv_chunk_req *req, struct kv_blob_meta *m,
                    struct kv_err *why)
{
    struct kv_blob_meta t;
    struct kv_err scratch;
    if (!why)
        why = &scratch;
    if (kv_blob_peek(buf, len, &t, why) < 0)
        return KV_GET_CORRUPT;
    if (len < t.header_len || len - t.header_len != t.payload_len) {
        kv_err_set(why, "blob is %zu bytes, its header says %llu", len,
                   (unsigned long long)(t.header_len + t.payload_len));
        return KV_GET_CORRUPT;
    }
    if (kv_blob_check_header(buf, &t, why) != KV_BLOB_OK)
        return KV_GET_CORRUPT;
    /* the header is sound: a mismatch is a collision, and the payload of
     * a blob we will not use need not be read */
    if (kv_blob_match(buf, &t, req->key, req->ns, req->ctx, req->tokens,
                      req->n_tokens, why) != KV_BLOB_OK)
        return KV_GET_COLLISION;
    if (kv_blob_checksum(buf + t.header_len, t.payload_len) !=
        t.payload_xxh3) {
        kv_err_set(why, "payload checksum mismatch");
        return KV_GET_CORRUPT;
    }
    *m = t;
    return KV_GET_HIT;
}
