/* store_wal.c - the dir: store's index stays small however many commands
 * use it: each command opens the store, reads, and closes it, as a
 * kvchunk process does, and the index's write-ahead log must not grow
 * with their number (every open reads the whole log), while every read
 * is still counted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "tap.h"
#include "core/kv.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"
#include "chunk/store.h"

enum { CYCLES = 600 };

static char root[256];

static long long wal_bytes(void)
{
    char p[320];
    struct stat st;
    snprintf(p, sizeof p, "%s/v1/index.db-wal", root);
    return stat(p, &st) == 0 ? (long long)st.st_size : 0;
}

int main(void)
{
    struct kv_namespace ns;
    struct kv_chunk_req req;
    struct kv_blob_meta m;
    struct kv_store_opts o;
    struct kv_store *s;
    struct kv_err e;
    int32_t tok[5] = {11, 12, 13, 14, 15};
    uint8_t *hdr = NULL, *payload;
    int existed, ok = 1;

    snprintf(root, sizeof root, "%s/kvchunk-wal.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    memset(&ns, 0, sizeof ns);
    ns.model = "test";
    ns.dtype = KV_F32;
    ns.n_layers = 1;
    ns.n_kv_heads = 1;
    ns.head_dim = 8;
    ns.mask = KV_CTX_NONE;
    kv_rope_init(&ns.rope, 8);

    memset(&req, 0, sizeof req);
    memset(&m, 0, sizeof m);
    kv_ns_digest(&ns, req.ns, &e);
    kv_ctx_digest(KV_CTX_NONE, NULL, 0, req.ctx);
    kv_chunk_key(req.ns, req.ctx, tok, 5, req.key);
    req.tokens = tok;
    req.n_tokens = 5;
    memcpy(m.key, req.key, 16);
    memcpy(m.ns, req.ns, 16);
    memcpy(m.ctx, req.ctx, 16);
    m.n_tokens = 5;
    m.n_layers = 1;
    m.n_kv_heads = 1;
    m.head_dim = 8;
    m.dtype = KV_F32;
    kv_blob_payload_len(&m, &m.payload_len, &e);
    payload = malloc(m.payload_len);
    for (size_t i = 0; i < m.payload_len; i++)
        payload[i] = (uint8_t)(i * 13 + 1);
    m.payload_xxh3 = kv_blob_checksum(payload, m.payload_len);
    kv_blob_header(&m, tok, &hdr, &e);

    char spec[300];
    snprintf(spec, sizeof spec, "dir:%s", root);
    kv_store_opts_init(&o);
    int rc = kv_store_open(spec, &o, &s, &e) == 0 &&
             kv_store_put(s, &m, hdr, payload, &existed, &e) == 0;
    TAP_OK(rc, "a chunk put%s%s", rc ? "" : ": ", rc ? "" : e.msg);
    kv_store_close(s);

    /* each cycle one command: open, a hit (its recency, hit count and
     * counters written), close */
    long long most = 0;
    o.must_exist = 1;
    for (int i = 0; i < CYCLES && ok; i++) {
        struct kv_blob_ref ref;
        int st = -1;
        if (kv_store_open(spec, &o, &s, &e) < 0 ||
            kv_store_get(s, &req, 1, &ref, &st, NULL, &e) < 0) {
            ok = 0;
            break;
        }
        ok = st == KV_GET_HIT &&
             memcmp(ref.payload, payload, m.payload_len) == 0;
        kv_blob_ref_release(&ref);
        kv_store_close(s);
        long long w = wal_bytes();
        if (w > most)
            most = w;
    }
    TAP_OK(ok, "%d commands in turn each read the chunk", CYCLES);
    /* the log is checkpointed and emptied at 256 pages (1 MiB and its
     * frame headers); one command adds a few pages.  Without that it
     * held a few pages for each command, about 7 MiB here */
    TAP_OK(most <= 2 * 1024 * 1024,
           "the index's log stays under 2 MiB (at most %lld bytes)", most);

    struct kv_store_stats t;
    rc = kv_store_open(spec, &o, &s, &e) == 0 && kv_store_stat(s, &t, &e) == 0;
    TAP_OK(rc && t.entries == 1 && t.hits == CYCLES && t.puts == 1,
           "every read counted: %llu entries, %llu hits, %llu puts",
           rc ? (unsigned long long)t.entries : 0,
           rc ? (unsigned long long)t.hits : 0,
           rc ? (unsigned long long)t.puts : 0);
    struct kv_fsck_report fr;
    rc = rc && kv_store_fsck(s, 0, NULL, NULL, &fr, &e) == 0;
    TAP_OK(rc && fr.checked == 1 && fr.corrupt == 0 && fr.orphan_rows == 0 &&
           fr.unindexed == 0, "fsck finds the blob and its row sound");
    kv_store_close(s);

    free(payload);
    free(hdr);
    char cmd[320];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", root);
    return tap_done();
}
