/* store.c - unit tests of the dir: store: put/get, collisions, a flipped
 * bit, fsck and repair, LRU eviction that skips pinned and busy blobs,
 * several writers and readers in parallel, and put processes killed with
 * SIGKILL at random moments. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "tap.h"
#include "core/kv.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"
#include "chunk/store.h"
#include "chunk/store_redis.h"

static char root[256];
static struct kv_namespace ns;

/* A chunk: tokens id0..id0+n-1, payload bytes derived from the tokens. */
struct chunk {
    int32_t tok[64];
    size_t n;
    struct kv_chunk_req req;
    struct kv_blob_meta meta;
    uint8_t *hdr, *payload;
};

static void make_chunk(struct chunk *c, int32_t id0, size_t n, int32_t p0)
{
    struct kv_err e;
    memset(c, 0, sizeof *c);
    c->n = n;
    for (size_t i = 0; i < n; i++)
        c->tok[i] = id0 + (int32_t)i;
    kv_ns_digest(&ns, c->req.ns, &e);
    kv_ctx_digest(KV_CTX_NONE, NULL, 0, c->req.ctx);
    kv_chunk_key(c->req.ns, c->req.ctx, c->tok, n, c->req.key);
    c->req.tokens = c->tok;
    c->req.n_tokens = n;
    struct kv_blob_meta *m = &c->meta;
    memcpy(m->key, c->req.key, 16);
    memcpy(m->ns, c->req.ns, 16);
    memcpy(m->ctx, c->req.ctx, 16);
    m->n_tokens = (uint32_t)n;
    m->n_layers = (uint32_t)ns.n_layers;
    m->n_kv_heads = (uint32_t)ns.n_kv_heads;
    m->head_dim = (uint32_t)ns.head_dim;
    m->dtype = ns.dtype;
    m->base_pos = p0;
    kv_blob_payload_len(m, &m->payload_len, &e);
    c->payload = malloc(m->payload_len);
    for (size_t i = 0; i < m->payload_len; i++)
        c->payload[i] = (uint8_t)(id0 * 31 + (int)i * 7);
    m->payload_xxh3 = kv_blob_checksum(c->payload, m->payload_len);
    kv_blob_header(m, c->tok, &c->hdr, &e);
}

static void free_chunk(struct chunk *c)
{
    free(c->hdr);
    free(c->payload);
}

static struct kv_store *open_dir(void)
{
    struct kv_store *s = NULL;
    struct kv_err e;
    char spec[300];
    snprintf(spec, sizeof spec, "dir:%s", root);
    if (kv_store_open(spec, NULL, &s, &e) < 0)
        printf("# open: %s\n", e.msg);
    return s;
}

/* get one chunk: its status; on a hit, check the payload bytes. */
static int get1(struct kv_store *s, const struct chunk *c, int *payload_ok)
{
    struct kv_blob_ref ref;
    struct kv_err e, why;
    int st;
    if (kv_store_get(s, &c->req, 1, &ref, &st, &why, &e) < 0)
        return -1;
    if (payload_ok)
        *payload_ok = st == KV_GET_HIT &&
                      memcmp(ref.payload, c->payload, c->meta.payload_len) == 0;
    kv_blob_ref_release(&ref);
    return st;
}

static void blob_file(const struct chunk *c, char *buf, size_t len)
{
    char hex[33];
    kv_hex(c->req.key, hex);
    snprintf(buf, len, "%s/v1/objects/%.2s/%.2s/%s.kvc", root, hex, hex + 2,
             hex);
}

static void test_basic(void)
{
    struct kv_store *s = open_dir();
    struct chunk a, b, fake;
    struct kv_err e;
    int existed, ok;
    make_chunk(&a, 100, 20, 0);
    make_chunk(&b, 500, 33, 0);
    TAP_OK(s != NULL, "open a new dir store");
    TAP_OK(get1(s, &a, NULL) == KV_GET_ABSENT, "empty store: absent");
    TAP_OK(kv_store_put(s, &a.meta, a.hdr, a.payload, &existed, &e) == 0 &&
           !existed, "put");
    TAP_OK(kv_store_put(s, &a.meta, a.hdr, a.payload, &existed, &e) == 0 &&
           existed, "put again: present");
    TAP_OK(get1(s, &a, &ok) == KV_GET_HIT && ok, "get: hit, same bytes");

    /* a blob stored under b's key but holding other tokens: a collision */
    make_chunk(&fake, 900, 33, 0);
    memcpy(fake.meta.key, b.req.key, 16);
    free(fake.hdr);
    kv_blob_header(&fake.meta, fake.tok, &fake.hdr, &e);
    kv_store_put(s, &fake.meta, fake.hdr, fake.payload, &existed, &e);
    TAP_OK(get1(s, &b, NULL) == KV_GET_COLLISION,
           "same key, other tokens: a collision, not data");
    int found;
    kv_store_rm(s, b.req.key, &found, &e);
    TAP_OK(found && get1(s, &b, NULL) == KV_GET_ABSENT, "rm");

    /* a flipped bit in the payload */
    char path[512];
    blob_file(&a, path, sizeof path);
    int fd = open(path, O_RDWR);
    uint8_t byte;
    off_t off = (off_t)a.meta.header_len + 1000;
    TAP_OK(pread(fd, &byte, 1, off) == 1, "read a payload byte");
    byte ^= 0x04;
    TAP_OK(pwrite(fd, &byte, 1, off) == 1, "flip one bit");
    close(fd);
    TAP_OK(get1(s, &a, NULL) == KV_GET_CORRUPT, "flipped bit: corrupt, a "
           "miss");
    struct kv_fsck_report r;
    kv_store_fsck(s, 0, NULL, NULL, &r, &e);
    TAP_OK(r.corrupt == 1 && access(path, F_OK) == 0, "fsck finds it, keeps "
           "it");
    kv_store_fsck(s, 1, NULL, NULL, &r, &e);
    TAP_OK(r.corrupt == 1 && r.repaired >= 1 && access(path, F_OK) != 0,
           "fsck --repair removes it");
    TAP_OK(get1(s, &a, NULL) == KV_GET_ABSENT, "then absent");
    kv_store_put(s, &a.meta, a.hdr, a.payload, &existed, &e);
    /* corrupt again, then put: the corrupt blob is replaced */
    fd = open(path, O_RDWR);
    TAP_OK(pwrite(fd, "X", 1, off) == 1, "corrupt again");
    close(fd);
    TAP_OK(kv_store_put(s, &a.meta, a.hdr, a.payload, &existed, &e) == 0 &&
           !existed && get1(s, &a, &ok) == KV_GET_HIT && ok,
           "put over a corrupt blob replaces it");

    struct kv_store_stats st;
    kv_store_stat(s, &st, &e);
    TAP_OK(st.entries == 1 && st.collisions == 1 && st.checksum_failures == 1
           && st.hits == 2 && st.puts == 4,
           "stat: entries %llu collisions %llu checksum failures %llu hits "
           "%llu puts %llu", (unsigned long long)st.entries,
           (unsigned long long)st.collisions,
           (unsigned long long)st.checksum_failures,
           (unsigned long long)st.hits, (unsigned long long)st.puts);
    kv_store_close(s);

    /* read-only: reads work, writes are refused */
    struct kv_store_opts o;
    kv_store_opts_init(&o);
    o.read_only = 1;
    char spec[300];
    snprintf(spec, sizeof spec, "dir:%s", root);
    TAP_OK(kv_store_open(spec, &o, &s, &e) == 0 && get1(s, &a, &ok) ==
           KV_GET_HIT && ok, "read-only open: get works");
    TAP_OK(kv_store_put(s, &b.meta, b.hdr, b.payload, &existed, &e) < 0,
           "read-only open: put refused: %s", e.msg);
    kv_store_close(s);
    s = open_dir();
    kv_store_rm(s, a.req.key, &found, &e);
    kv_store_close(s);
    free_chunk(&a);
    free_chunk(&b);
    free_chunk(&fake);
}

static void test_evict(void)
{
    struct kv_store *s = open_dir();
    struct chunk c[6];
    struct kv_err e;
    int existed, found;
    uint64_t size = 0;
    for (int i = 0; i < 6; i++) {
        make_chunk(&c[i], 1000 + 100 * i, 40, 0);
        kv_store_put(s, &c[i].meta, c[i].hdr, c[i].payload, &existed, &e);
        size = c[i].meta.header_len + c[i].meta.payload_len;
    }
    /* recency: 1 2 3 4 5 0 (0 read last); pin 1; hold 2 open */
    for (int i = 1; i <= 6; i++) {
        get1(s, &c[i % 6], NULL);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    kv_store_pin(s, c[1].req.key, 1, &found, &e);
    struct kv_blob_ref held;
    int st;
    /* a read-only reader does not touch the LRU order */
    struct kv_store *reader = NULL;
    struct kv_store_opts ro;
    char spec[300];
    kv_store_opts_init(&ro);
    ro.read_only = 1;
    snprintf(spec, sizeof spec, "dir:%s", root);
    kv_store_open(spec, &ro, &reader, &e);
    kv_store_get(reader, &c[2].req, 1, &held, &st, NULL, &e);
    struct kv_evict_report r;
    TAP_OK(kv_store_evict(s, 4 * size, 0.5, &r, &e) == 0,
           "evict to 4 blobs, low watermark 0.5");
    TAP_OK(r.removed == 4 && r.skipped_busy == 1 && r.total_after <= 2 * size,
           "removed %llu (oldest first), skipped %llu being read, %llu of "
           "%llu bytes left", (unsigned long long)r.removed,
           (unsigned long long)r.skipped_busy,
           (unsigned long long)r.total_after, (unsigned long long)(2 * size));
    TAP_OK(get1(s, &c[1], NULL) == KV_GET_HIT, "pinned entry kept");
    TAP_OK(st == KV_GET_HIT && held.payload[5] == c[2].payload[5],
           "reader's blob intact");
    TAP_OK(get1(s, &c[2], NULL) == KV_GET_HIT && get1(s, &c[3], NULL) ==
           KV_GET_ABSENT && get1(s, &c[4], NULL) == KV_GET_ABSENT &&
           get1(s, &c[5], NULL) == KV_GET_ABSENT && get1(s, &c[0], NULL) ==
           KV_GET_ABSENT, "least recently used removed, busy one kept");
    kv_blob_ref_release(&held);
    kv_store_close(reader);
    struct kv_store_stats sst;
    kv_store_stat(s, &sst, &e);
    TAP_OK(sst.evictions == 4, "stat counts 4 evictions");
    for (int i = 0; i < 6; i++) {
        kv_store_rm(s, c[i].req.key, &found, &e);
        free_chunk(&c[i]);
    }
    kv_store_close(s);
}

/* Several processes put and get overlapping chunks at once. */
static void test_concurrency(void)
{
    enum { NPROC = 5, NCHUNK = 7, ITER = 25 };
    pid_t pid[NPROC];
    for (int p = 0; p < NPROC; p++) {
        pid[p] = fork();
        if (pid[p] == 0) {
            struct kv_store *s = open_dir();
            struct chunk c[NCHUNK];
            struct kv_err e;
            int bad = !s;
            for (int i = 0; i < NCHUNK; i++)
                make_chunk(&c[i], 7000 + 50 * i, 30 + i, 0);
            unsigned seed = (unsigned)p * 17 + 1;
            for (int it = 0; it < ITER && !bad; it++) {
                int i = rand_r(&seed) % NCHUNK, existed, ok;
                if (rand_r(&seed) % 2) {
                    if (kv_store_put(s, &c[i].meta, c[i].hdr, c[i].payload,
                                     &existed, &e) < 0) {
                        fprintf(stderr, "put: %s\n", e.msg);
                        bad = 1;
                    }
                } else {
                    int st = get1(s, &c[i], &ok);
                    if (st < 0 || st == KV_GET_CORRUPT ||
                        st == KV_GET_COLLISION || (st == KV_GET_HIT && !ok))
                        bad = 1;
                }
            }
            kv_store_close(s);
            _exit(bad);
        }
    }
    int fails = 0;
    for (int p = 0; p < NPROC; p++) {
        int status;
        waitpid(pid[p], &status, 0);
        fails += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    TAP_OK(fails == 0, "%d writers/readers in parallel: no errors, no "
           "corrupt reads", NPROC);
    struct kv_store *s = open_dir();
    struct kv_fsck_report r;
    struct kv_err e;
    kv_store_fsck(s, 0, NULL, NULL, &r, &e);
    TAP_OK(r.corrupt == 0 && r.unindexed == 0 && r.orphan_rows == 0 &&
           r.stale_tmp == 0, "index consistent with the blobs (%llu checked)",
           (unsigned long long)r.checked);
    kv_store_close(s);
}

/* A put loop killed with SIGKILL at random moments. */
static void test_crash(void)
{
    enum { ROUNDS = 30 };
    unsigned seed = 99;
    int32_t next = 20000;
    for (int round = 0; round < ROUNDS; round++) {
        int32_t first = next;
        next += 64 * 40;
        /* The child says when its first put is done, so the kill lands
         * inside the loop however slow the machine (a sanitizer build, a
         * loaded CI host) and some chunks are always there to read. */
        int ready[2];
        if (pipe(ready) < 0) {
            TAP_OK(0, "pipe");
            return;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(ready[0]);
            struct kv_store *s = open_dir();
            struct kv_err e;
            for (int i = 0; i < 40; i++) {
                struct chunk c;
                int existed;
                make_chunk(&c, first + 64 * i, 64, 0);
                kv_store_put(s, &c.meta, c.hdr, c.payload, &existed, &e);
                free_chunk(&c);
                if (i == 0 && write(ready[1], "1", 1) != 1)
                    _exit(1);
            }
            kv_store_close(s);
            _exit(0);
        }
        close(ready[1]);
        char byte;
        if (read(ready[0], &byte, 1) < 0)
            byte = 0;
        close(ready[0]);
        struct timespec ts = {0, (long)(rand_r(&seed) % 6000) * 1000};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    struct kv_store *s = open_dir();
    struct kv_fsck_report r;
    struct kv_err e;
    kv_store_fsck(s, 0, NULL, NULL, &r, &e);
    TAP_OK(r.corrupt == 0, "after %d SIGKILLed put loops: no corrupt blob "
           "(%llu checked, %llu unindexed, %llu stale temporary files)",
           ROUNDS, (unsigned long long)r.checked,
           (unsigned long long)r.unindexed, (unsigned long long)r.stale_tmp);
    int bad = 0, hits = 0;
    for (int32_t id = 20000; id < next; id += 64) {
        struct chunk c;
        int ok;
        make_chunk(&c, id, 64, 0);
        int st = get1(s, &c, &ok);
        if (st == KV_GET_HIT)
            hits++;
        if (!(st == KV_GET_ABSENT || (st == KV_GET_HIT && ok)))
            bad++;
        free_chunk(&c);
    }
    TAP_OK(bad == 0 && hits > 0, "every get misses or returns verified data "
           "(%d hits)", hits);
    kv_store_fsck(s, 1, NULL, NULL, &r, &e);
    kv_store_fsck(s, 0, NULL, NULL, &r, &e);
    TAP_OK(r.corrupt == 0 && r.unindexed == 0 && r.orphan_rows == 0 &&
           r.stale_tmp == 0, "after fsck --repair: clean");
    kv_store_close(s);
}

/* Redis Cluster key slots, on the Redis Cluster specification's examples. */
static void test_slots(void)
{
    static const char *const same[][2] = {
        {"{user1000}.following", "{user1000}.followers"}, /* the tag */
        {"foo{{bar}}zap", "{bar"},           /* from the first '{' */
        {"foo{bar}{zap}", "bar"},            /* to the first '}' after it */
    };
    TAP_OK(kv_redis_crc16("123456789", 9) == 0x31C3,
           "CRC16 of \"123456789\" is 0x31C3 (XMODEM)");
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        TAP_OK(kv_redis_key_slot(same[i][0], strlen(same[i][0])) ==
                   kv_redis_key_slot(same[i][1], strlen(same[i][1])),
               "slot of '%s' = slot of '%s'", same[i][0], same[i][1]);
    TAP_OK(kv_redis_key_slot("foo{}{bar}", 10) ==
               kv_redis_crc16("foo{}{bar}", 10) % 16384,
           "an empty tag: the whole key is hashed");
    TAP_OK(kv_redis_key_slot("foo", 3) == (kv_redis_crc16("foo", 3) & 16383) &&
               kv_redis_key_slot("foo", 3) == 12182,
           "slot of 'foo' is 12182");
}

/* Store URLs: passwords redacted, hosts (IPv6 in brackets) and ports read,
 * each case against the value written by hand. */
static void test_urls(void)
{
    static const struct { const char *in, *out; } red[] = {
        {"redis://admin:s3cr3t@127.0.0.1:6379/1", "redis://admin:***@127.0.0.1:6379/1"},
        {"redis://:s3cr3t@h:1", "redis://:***@h:1"},
        {"redis://s3cr3t@h:1", "redis://***@h:1"},
        {"redis://u:p@ss:w@rd@h:1", "redis://u:***@h:1"},
        {"redis-cluster://u:pw@[::1]:7000,h:7001", "redis-cluster://u:***@[::1]:7000,h:7001"},
        {"redis://h:1/0", "redis://h:1/0"},
        {"dir:/tmp/a@b", "dir:/tmp/a@b"},
        {"x://@", "x://***@"},
    };
    char buf[128];
    for (size_t i = 0; i < sizeof red / sizeof red[0]; i++) {
        kv_store_redact(red[i].in, buf, sizeof buf);
        TAP_OK(!strcmp(buf, red[i].out), "redact '%s' -> '%s' (got '%s')",
               red[i].in, red[i].out, buf);
    }
    char tiny[12];
    kv_store_redact("redis://user:secret@host:1", tiny, sizeof tiny);
    TAP_OK(!strstr(tiny, "secret") && strlen(tiny) == 11,
           "redact into a short buffer: cut, never the password ('%s')", tiny);

    static const struct { const char *in; int rc; const char *host; long port; } hp[] = {
        {"127.0.0.1:6380", 0, "127.0.0.1", 6380},
        {"host", 0, "host", 6379},
        {"[::1]:17001", 0, "::1", 17001},
        {"[::1]", 0, "::1", 6379},
        {"[fe80::1%eth0]:5", 0, "fe80::1%eth0", 5},
        {"::1:17001", -1, "", 0},
        {"[::1", -1, "", 0},
        {"[]:1", -1, "", 0},
        {"[host]:1", -1, "", 0},
        {":1", -1, "", 0},
        {"h:1:2", -1, "", 0},
        {"h:", -2, "", 0},
        {"h:0", -2, "", 0},
        {"h:65536", -2, "", 0},
        {"h:65535", 0, "h", 65535},
        {"h:12x", -2, "", 0},
        {"[::1]x", -2, "", 0},
        {"[::1]:", -2, "", 0},
        {"h:0000006379", -2, "", 0},
    };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; i++) {
        char host[64] = "";
        long port = 0;
        int rc = kv_redis_parse_hostport(hp[i].in, strlen(hp[i].in), host,
                                         sizeof host, &port, 6379);
        TAP_OK(rc == hp[i].rc && (rc || (!strcmp(host, hp[i].host) &&
                                         port == hp[i].port)),
               "host:port '%s': %d %s %ld (got %d %s %ld)", hp[i].in,
               hp[i].rc, hp[i].host, hp[i].port, rc, host, port);
    }
    char host[64];
    long port = 0;
    TAP_OK(kv_redis_parse_hostport("h", 1, host, sizeof host, &port, 0) == -2,
           "host:port: a port required when there is no default");
    char name[64];
    kv_redis_hostport_name("::1", 7000, name, sizeof name);
    TAP_OK(!strcmp(name, "[::1]:7000"), "an IPv6 node named in brackets");
    kv_redis_hostport_name("10.0.0.1", 7000, name, sizeof name);
    TAP_OK(!strcmp(name, "10.0.0.1:7000"), "an IPv4 node named plainly");
}

int main(void)
{
    test_slots();
    test_urls();
    snprintf(root, sizeof root, "%s/kvchunk-store.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    memset(&ns, 0, sizeof ns);
    ns.model = "test";
    ns.dtype = KV_BF16;
    ns.n_layers = 2;
    ns.n_kv_heads = 2;
    ns.head_dim = 16;
    ns.mask = KV_CTX_NONE;
    kv_rope_init(&ns.rope, 16);
    test_basic();
    test_evict();
    test_concurrency();
    test_crash();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        printf("# could not remove %s\n", root);
    return tap_done();
}
