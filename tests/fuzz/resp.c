/* resp.c - libFuzzer entry for the streamed reader of a Redis store's GET
 * replies (make fuzz): the input is the server's side of the connection,
 * written into one end of a socketpair and shut down for writing; a node
 * store over the other end looks up three chunks with a sink, so that the
 * whole streamed read runs.  Invariants: no crash, leak or undefined
 * behaviour; the lookup either fails with a message or gives every chunk
 * a status (a collision or damaged blob with its reason); each hit the
 * sink gets is a verified blob whose bytes are, in the input, a bulk
 * string of exactly that announced length followed by CRLF; the sink sees
 * each chunk at most once and only hits.  Nothing past the input can be
 * read: the socket ends there.
 *
 * The seed of a hit (resp-corpus/hit) is made by this file built with
 * -DRESP_MKSEED as a program: it writes "$N\r\n<blob>\r\n" for chunk 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "chunk/store.h"
#include "chunk/store_redis.h"
#include "chunk/blob.h"

#define NREQ 3

static const int32_t tokens[1] = {7};

static void make_req(struct kv_chunk_req *req)
{
    memset(req, 0, NREQ * sizeof *req);
    for (int i = 0; i < NREQ; i++) {
        memset(req[i].key, 0x10 + i, 16);
        memset(req[i].ns, 0x20, 16);
        memset(req[i].ctx, 0x30, 16);
        req[i].tokens = tokens;
        req[i].n_tokens = 1;
    }
}

#ifdef RESP_MKSEED
int main(void)
{
    struct kv_chunk_req req[NREQ];
    struct kv_blob_meta m;
    struct kv_err e;
    uint8_t *hdr = NULL, payload[4] = {1, 2, 3, 4};
    make_req(req);
    memset(&m, 0, sizeof m);
    memcpy(m.key, req[0].key, 16);
    memcpy(m.ns, req[0].ns, 16);
    memcpy(m.ctx, req[0].ctx, 16);
    m.n_tokens = 1;
    m.n_layers = 1;
    m.n_kv_heads = 1;
    m.head_dim = 1;
    m.dtype = KV_F16;
    m.layout = KV_BLOB_LAYOUT_KV;
    m.payload_xxh3 = kv_blob_checksum(payload, sizeof payload);
    snprintf(m.producer, sizeof m.producer, "kvchunk fuzz seed");
    if (kv_blob_header(&m, tokens, &hdr, &e) < 0) {
        fprintf(stderr, "%s\n", e.msg);
        return 1;
    }
    printf("$%llu\r\n", (unsigned long long)(m.header_len + sizeof payload));
    fwrite(hdr, 1, m.header_len, stdout);
    fwrite(payload, 1, sizeof payload, stdout);
    printf("\r\n");
    free(hdr);
    return 0;
}
#else

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

struct seen {
    const unsigned char *data;
    size_t size;
    int mode;                   /* 0 keep, 1 reject, 2 fail: size % 3 */
    int hits[NREQ];
};

/* Is buf[0..len) in the input as "$len\r\n" buf "\r\n"? */
static int announced(const struct seen *s, const uint8_t *buf, size_t len)
{
    char pre[32];
    int np = snprintf(pre, sizeof pre, "$%zu\r\n", len);
    const unsigned char *p = s->data, *end = s->data + s->size;
    while ((p = memmem(p, (size_t)(end - p), pre, (size_t)np))) {
        const unsigned char *b = p + np;
        if ((size_t)(end - b) >= len + 2 && !memcmp(b, buf, len) &&
            b[len] == '\r' && b[len + 1] == '\n')
            return 1;
        p++;
    }
    return 0;
}

static int hit(void *ctx, size_t i, const struct kv_blob_ref *ref,
               struct kv_err *why, struct kv_err *e)
{
    struct seen *s = ctx;
    if (i >= NREQ || s->hits[i]++ || !ref->payload)
        abort();
    const uint8_t *blob = ref->payload - ref->meta.header_len;
    size_t len = ref->meta.header_len + ref->meta.payload_len;
    if (!announced(s, blob, len))
        abort();
    if (s->mode == 1)
        return kv_err_set(why, "rejected by the sink"), 1;
    if (s->mode == 2)
        return kv_err_set(e, "sink failed");
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
        return 0;
    /* the input must fit in the socket's buffer (max_len is far below) */
    size_t off = 0;
    while (off < size) {
        ssize_t k = write(sv[1], data + off, size - off);
        if (k <= 0)
            abort();
        off += (size_t)k;
    }
    shutdown(sv[1], SHUT_WR);

    struct kv_store_opts o;
    struct kv_store *st = NULL;
    struct kv_err e;
    kv_store_opts_init(&o);
    if (kv_redis_fd_open(sv[0], &o, &st, &e) < 0) {
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    struct kv_chunk_req req[NREQ];
    struct kv_blob_ref refs[NREQ];
    struct kv_err why[NREQ];
    int status[NREQ];
    struct seen s = {data, size, (int)(size % 3), {0}};
    struct kv_get_sink sink = {hit, &s};
    make_req(req);
    memset(refs, 0, sizeof refs);
    memset(why, 0, sizeof why);
    for (int i = 0; i < NREQ; i++)
        status[i] = -1;
    e.msg[0] = '\0';
    int rc = kv_store_get_each(st, req, NREQ, refs, status, why, &sink, &e);
    if (rc == 0) {
        for (int i = 0; i < NREQ; i++) {
            if (status[i] == KV_GET_HIT && (s.hits[i] != 1 || s.mode))
                abort();
            if (status[i] == KV_GET_ABSENT && s.hits[i])
                abort();
            if ((status[i] == KV_GET_COLLISION ||
                 status[i] == KV_GET_CORRUPT) && !why[i].msg[0])
                abort();
            if (status[i] < KV_GET_HIT || status[i] > KV_GET_CORRUPT)
                abort();
            if (refs[i].payload)
                abort();
        }
    } else if (rc != -1 || !e.msg[0]) {
        abort();
    }
    for (int i = 0; i < NREQ; i++)
        kv_blob_ref_release(&refs[i]);
    kv_store_close(st);         /* closes sv[0] */
    close(sv[1]);
    return 0;
}
#endif
