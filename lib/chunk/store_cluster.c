/* store_cluster.c - the shared chunk store on a Redis Cluster:
 * redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT..].
 *
 * The value format, the pipelined reads and the verification of every read
 * are the Redis store's (store_redis.c): each master is a Redis store of its
 * own, and this layer routes.  A key belongs to hash slot CRC16(key) mod
 * 16384 (CRC-16/XMODEM, of the part between the first '{' and the next '}'
 * when that part is not empty: the Redis Cluster specification).  The slot
 * map comes from CLUSTER SLOTS, asked of the seeds and then of any node
 * known.  A MOVED reply refreshes the map and the command is sent again; an
 * ASK reply sends ASKING and the command once to the node named, without
 * changing the map; TRYAGAIN waits a little and retries.  CLUSTERDOWN, a
 * slot no master serves, or a node that does not answer within the timeout
 * is an error that says so.  Reads of several chunks pipeline one GET per
 * chunk per master, the masters in parallel.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <hiredis/hiredis.h>
#include "chunk/chunk.h"
#include "chunk/store.h"
#include "chunk/store_redis.h"

#define N_SLOTS 16384
#define KEY_PREFIX "kvc:1:"
#define STATS_KEY "kvc:1:stats"
#define MAX_REDIRECTS 8

struct node {
    char host[256];
    int port;
    struct kv_store *st;     /* open connection, or NULL */
};

struct cluster_store {
    struct kv_store base;
    char user[256], pass[512];
    struct node *nodes;
    size_t n_nodes, cap;
    int slot_node[N_SLOTS];  /* index into nodes, -1 when no master */
    char seeds[600];         /* for messages */
};

/* ---- hash slots ---------------------------------------------------------- */

uint16_t kv_redis_crc16(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int kv_redis_key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - key));
        if (close && close > open + 1)
            return kv_redis_crc16(open + 1, (size_t)(close - open - 1)) % N_SLOTS;
    }
    return kv_redis_crc16(key, len) % N_SLOTS;
}

static void key_name(const uint8_t key[16], char out[64])
{
    char hex[33];
    kv_hex(key, hex);
    snprintf(out, 64, KEY_PREFIX "%s", hex);
}

static int slot_of_key(const uint8_t key[16])
{
    char name[64];
    key_name(key, name);
    return kv_redis_key_slot(name, strlen(name));
}

/* ---- nodes and the slot map ---------------------------------------------- */

static int node_index(struct cluster_store *cs, const char *host, int port)
{
    for (size_t i = 0; i < cs->n_nodes; i++)
        if (cs->nodes[i].port == port && !strcmp(cs->nodes[i].host, host))
            return (int)i;
    if (cs->n_nodes == cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 8;
        struct node *p = realloc(cs->nodes, cap * sizeof *p);
        if (!p)
            return -1;
        cs->nodes = p;
        cs->cap = cap;
    }
    struct node *nd = &cs->nodes[cs->n_nodes];
    memset(nd, 0, sizeof *nd);
    snprintf(nd->host, sizeof nd->host, "%s", host);
    nd->port = port;
    return (int)cs->n_nodes++;
}

static void node_drop(struct node *nd)
{
    kv_store_close(nd->st);
    nd->st = NULL;
}

static struct kv_store *node_store(struct cluster_store *cs, int i,
                                   struct kv_err *e)
{
    struct node *nd = &cs->nodes[i];
    if (!nd->st && kv_redis_node_open(nd->host, nd->port, 0, cs->user,
                                      cs->pass[0] ? cs->pass : NULL, 1,
                                      &cs->base.opts, &nd->st, e) < 0)
        return NULL;
    return nd->st;
}

/* One CLUSTER SLOTS reply into the map; asked of node i. */
static int read_slots(struct cluster_store *cs, int i, redisReply *rep,
                      struct kv_err *e)
{
    for (int s = 0; s < N_SLOTS; s++)
        cs->slot_node[s] = -1;
    for (size_t k = 0; k < rep->elements; k++) {
        redisReply *r = rep->element[k];
        if (r->type != REDIS_REPLY_ARRAY || r->elements < 3 ||
            r->element[0]->type != REDIS_REPLY_INTEGER ||
            r->element[1]->type != REDIS_REPLY_INTEGER ||
            r->element[2]->type != REDIS_REPLY_ARRAY ||
            r->element[2]->elements < 2 ||
            r->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            r->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
            return kv_err_set(e, "redis cluster: unexpected CLUSTER SLOTS reply");
        long long lo = r->element[0]->integer, hi = r->element[1]->integer;
        const char *host = r->element[2]->element[0]->str;
        char h[256];
        /* an empty or "?" host is the node asked */
        snprintf(h, sizeof h, "%s", host[0] && strcmp(host, "?")
                                        ? host : cs->nodes[i].host);
        int at = node_index(cs, h, (int)r->element[2]->element[1]->integer);
        if (at < 0)
            return kv_err_set(e, "out of memory");
        for (long long s = lo; s <= hi && s < N_SLOTS; s++)
            if (s >= 0)
                cs->slot_node[s] = at;
    }
    return 0;
}

/* Learn the slot map from the first node that answers. */
static int refresh(struct cluster_store *cs, struct kv_err *e)
{
    struct kv_err last = {{0}};
    for (size_t i = 0; i < cs->n_nodes; i++) {
        struct kv_store *st = node_store(cs, (int)i, &last);
        if (!st)
            continue;
        redisReply *rep = kv_redis_command(st, "CLUSTER SLOTS");
        if (!rep) {
            snprintf(last.msg, sizeof last.msg, "redis %s: no answer",
                     kv_redis_name(st));
            node_drop(&cs->nodes[i]);
            continue;
        }
        if (rep->type == REDIS_REPLY_ERROR) {
            int rc = kv_err_set(e, "redis cluster: %s: %.300s%s",
                                kv_redis_name(st), rep->str,
                                strstr(rep->str, "cluster support disabled")
                                ? " (use redis:// for a single server)" : "");
            freeReplyObject(rep);
            return rc;
        }
        int rc = rep->type == REDIS_REPLY_ARRAY ? read_slots(cs, (int)i, rep, e)
                 : kv_err_set(e, "redis cluster: unexpected CLUSTER SLOTS reply");
        freeReplyObject(rep);
        return rc;
    }
    return kv_err_set(e, "redis cluster %s: no node answers (%s)", cs->seeds,
                      last.msg[0] ? last.msg : "none known");
}

/* What a failed node command asks of the router. */
enum redirect { R_FAIL, R_MOVED, R_ASK, R_AGAIN, R_RECONNECT };

static enum redirect classify(const char *msg, char *host, size_t hlen, int *port)
{
    const char *m = strstr(msg, ": MOVED ");
    const char *a = strstr(msg, ": ASK ");
    if (m)
        return R_MOVED;
    if (a) {
        const char *sp = strchr(a + 6, ' ');
        const char *colon = sp ? strrchr(sp, ':') : NULL;
        if (!colon || (size_t)(colon - sp - 1) >= hlen)
            return R_FAIL;
        memcpy(host, sp + 1, (size_t)(colon - sp - 1));
        host[colon - sp - 1] = '\0';
        *port = atoi(colon + 1);
        return R_ASK;
    }
    if (strstr(msg, ": TRYAGAIN"))
        return R_AGAIN;
    if (strstr(msg, "Connection refused") || strstr(msg, "Connection reset") ||
        strstr(msg, "Server closed") || strstr(msg, "Broken pipe"))
        return R_RECONNECT;
    return R_FAIL;
}

static void nap(void)
{
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

/* The master of slot, opened; -1 with e when none. */
static int master_of(struct cluster_store *cs, int slot, struct kv_err *e)
{
    int i = cs->slot_node[slot];
    if (i < 0)
        return kv_err_set(e, "redis cluster %s: hash slot %d is not served "
                          "by any master (CLUSTERDOWN)", cs->seeds, slot);
    return node_store(cs, i, e) ? i : -1;
}

/* After a failed command on node i: 1 to try again (the map refreshed or
 * a pause taken), 0 for ASK (host/port filled), -1 to give up with e. */
static int recover(struct cluster_store *cs, int i, struct kv_err *e,
                   char *host, size_t hlen, int *port)
{
    struct kv_err r = {{0}};
    switch (classify(e->msg, host, hlen, port)) {
    case R_MOVED:
        return refresh(cs, &r) < 0 ? (kv_err_set(e, "%s", r.msg), -1) : 1;
    case R_ASK:
        return 0;
    case R_AGAIN:
        nap();
        return 1;
    case R_RECONNECT:
        node_drop(&cs->nodes[i]);
        nap();
        return refresh(cs, &r) < 0 ? -1 : 1;
    default:
        if (strstr(e->msg, "CLUSTERDOWN")) {
            char was[sizeof e->msg];
            memcpy(was, e->msg, sizeof was);   /* not formatted into itself */
            kv_err_set(e, "redis cluster %s: the cluster is down (%s)",
                       cs->seeds, was);
        }
        if (strstr(e->msg, "no answer within"))
            node_drop(&cs->nodes[i]);
        return -1;
    }
}

/* ---- one routed command ---------------------------------------------------- */

static int ctx_error(struct cluster_store *cs, int i, struct kv_err *e)
{
    return kv_redis_fail(cs->nodes[i].st, e);
}

/* ASKING, then the command, on host:port; the command's reply or NULL. */
static redisReply *ask(struct cluster_store *cs, const char *host, int port,
                       int argc, const char **argv, const size_t *lens,
                       struct kv_err *e)
{
    int i = node_index(cs, host, port);
    struct kv_store *st = i < 0 ? NULL : node_store(cs, i, e);
    if (!st)
        return NULL;
    redisContext *c = kv_redis_context(st);
    redisReply *ok = NULL, *rep = NULL;
    redisAppendCommand(c, "ASKING");
    redisAppendCommandArgv(c, argc, argv, lens);
    if (kv_redis_reply(st, (void **)&ok) != REDIS_OK ||
        kv_redis_reply(st, (void **)&rep) != REDIS_OK) {
        if (ok)
            freeReplyObject(ok);
        ctx_error(cs, i, e);
        node_drop(&cs->nodes[i]);
        return NULL;
    }
    freeReplyObject(ok);
    return rep;
}

/* Send argv for the key of slot to its master, following MOVED, ASK and
 * TRYAGAIN.  The reply (never an error reply) or NULL with e. */
static redisReply *routed(struct cluster_store *cs, int slot, int argc,
                          const char **argv, const size_t *lens, struct kv_err *e)
{
    for (int t = 0; t < MAX_REDIRECTS; t++) {
        int i = master_of(cs, slot, e);
        if (i < 0)
            return NULL;
        redisReply *rep = kv_redis_command_argv(cs->nodes[i].st, argc, argv,
                                                lens);
        if (!rep) {
            ctx_error(cs, i, e);
        } else if (rep->type == REDIS_REPLY_ERROR) {
            kv_err_set(e, "redis %s:%d: %.400s", cs->nodes[i].host,
                       cs->nodes[i].port, rep->str);
            freeReplyObject(rep);
        } else {
            return rep;
        }
        char host[256];
        int port = 0, r = recover(cs, i, e, host, sizeof host, &port);
        if (r < 0)
            return NULL;
        if (r == 0) {
            rep = ask(cs, host, port, argc, argv, lens, e);
            if (rep && rep->type == REDIS_REPLY_ERROR) {
                kv_err_set(e, "redis %s:%d: %.400s", host, port, rep->str);
                freeReplyObject(rep);
                return NULL;
            }
            return rep;
        }
    }
    kv_err_set(e, "redis cluster %s: more than %d redirections for slot %d",
               cs->seeds, MAX_REDIRECTS, slot);
    return NULL;
}

/* HINCRBY the cluster's counters (best effort: a counter is not data). */
static void bump(struct cluster_store *cs, const char *field, long long by)
{
    char n[32];
    struct kv_err e;
    if (!by)
        return;
    snprintf(n, sizeof n, "%lld", by);
    const char *argv[] = {"HINCRBY", STATS_KEY, field, n};
    size_t lens[] = {7, strlen(STATS_KEY), strlen(field), strlen(n)};
    redisReply *rep = routed(cs, kv_redis_key_slot(STATS_KEY, strlen(STATS_KEY)),
                             4, argv, lens, &e);
    if (rep)
        freeReplyObject(rep);
}

/* ---- reads ------------------------------------------------------------------- */

struct group {
    struct kv_store *st;
    int node;
    size_t n, *idx;
    struct kv_chunk_req *req;
    struct kv_blob_ref *refs;
    int *status, rc, copied;
    struct kv_err *why, e;
    const struct kv_get_sink *sink;   /* the caller's, or NULL */
};

/* A group's hit k is the caller's hit idx[k]. */
static int group_hit(void *ctx, size_t k, const struct kv_blob_ref *ref,
                     struct kv_err *why, struct kv_err *e)
{
    const struct group *g = ctx;
    return g->sink->hit(g->sink->ctx, g->idx[k], ref, why, e);
}

static void *group_run(void *arg)
{
    struct group *g = arg;
    struct kv_get_sink local = {group_hit, g};
    g->st->sink = g->sink ? &local : NULL;
    g->rc = g->st->ops->get(g->st, g->req, g->n, g->refs, g->status, g->why,
                            &g->e);
    g->st->sink = NULL;
    return NULL;
}

/* One chunk, on its own, following redirections (for ASK). */
static int get_one(struct cluster_store *cs, const struct kv_chunk_req *q,
                   size_t i, struct kv_blob_ref *ref, int *status,
                   struct kv_err *why, struct kv_err *e)
{
    const struct kv_get_sink *sink = cs->base.sink;
    char name[64];
    key_name(q->key, name);
    const char *argv[] = {"GET", name};
    size_t lens[] = {3, strlen(name)};
    redisReply *rep = routed(cs, slot_of_key(q->key), 2, argv, lens, e);
    if (!rep)
        return -1;
    if (rep->type == REDIS_REPLY_NIL) {
        freeReplyObject(rep);
        *status = KV_GET_ABSENT;
        return 0;
    }
    if (rep->type != REDIS_REPLY_STRING) {
        freeReplyObject(rep);
        return kv_err_set(e, "redis cluster: unexpected reply to GET");
    }
    struct kv_err w = {{0}};
    *status = kv_store_verify((const uint8_t *)rep->str, rep->len, q,
                              &ref->meta, &w);
    if (*status == KV_GET_HIT) {
        ref->reply = rep;
        ref->payload = (const uint8_t *)rep->str + ref->meta.header_len;
        if (!sink)
            return 0;
        int k = sink->hit(sink->ctx, i, ref, &w, e);
        kv_blob_ref_release(ref);
        if (k <= 0)
            return k;
        *status = KV_GET_COLLISION;
        if (why)
            *why = w;
        return 0;
    }
    freeReplyObject(rep);
    if (why)
        snprintf(why->msg, sizeof why->msg, "redis key %s: %.400s", name, w.msg);
    return 0;
}

static void release_all(struct kv_blob_ref *refs, const int *status, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (status[i] == KV_GET_HIT)
            kv_blob_ref_release(&refs[i]);
}

/* Group the pending chunks by master and read each group in one pipeline,
 * the groups in parallel.  Chunks to send again go back into pend. */
static int get_round(struct cluster_store *cs, const struct kv_chunk_req *req,
                     size_t *pend, size_t *n_pend, struct kv_blob_ref *refs,
                     int *status, struct kv_err *why, struct kv_err *e)
{
    struct group *g = calloc(cs->n_nodes ? cs->n_nodes : 1, sizeof *g);
    size_t ng = 0, n = *n_pend, again = 0;
    int rc = 0;
    if (!g)
        return kv_err_set(e, "out of memory");
    for (size_t k = 0; k < n && rc == 0; k++) {
        int i = master_of(cs, slot_of_key(req[pend[k]].key), e);
        size_t j = 0;
        if (i < 0) {
            rc = -1;
            break;
        }
        while (j < ng && g[j].node != i)
            j++;
        if (j == ng) {
            g[ng].node = i;
            g[ng].st = cs->nodes[i].st;
            g[ng].sink = cs->base.sink;
            g[ng].idx = calloc(n, sizeof(size_t));
            g[ng].req = calloc(n, sizeof *g[ng].req);
            g[ng].refs = calloc(n, sizeof *g[ng].refs);
            g[ng].status = calloc(n, sizeof(int));
            g[ng].why = why ? calloc(n, sizeof(struct kv_err)) : NULL;
            if (!g[ng].idx || !g[ng].req || !g[ng].refs || !g[ng].status ||
                (why && !g[ng].why))
                rc = kv_err_set(e, "out of memory");
            ng++;
        }
        if (rc == 0) {
            g[j].idx[g[j].n] = pend[k];
            g[j].req[g[j].n++] = req[pend[k]];
        }
    }
    if (rc == 0) {
        pthread_t th[64];
        size_t started = 0;
        for (size_t j = 1; j < ng; j++)
            if (j < 64 && pthread_create(&th[j], NULL, group_run, &g[j]) == 0)
                started |= (size_t)1 << j;
            else
                group_run(&g[j]);
        if (ng)
            group_run(&g[0]);
        for (size_t j = 1; j < ng && j < 64; j++)
            if (started & ((size_t)1 << j))
                pthread_join(th[j], NULL);
    }
    for (size_t j = 0; j < ng && rc == 0; j++) {
        if (g[j].rc == 0) {
            for (size_t k = 0; k < g[j].n; k++) {
                size_t at = g[j].idx[k];
                status[at] = g[j].status[k];
                refs[at] = g[j].refs[k];
                if (why)
                    why[at] = g[j].why[k];
            }
            g[j].copied = 1;
            continue;
        }
        char host[256];
        int port, r = recover(cs, g[j].node, &g[j].e, host, sizeof host, &port);
        if (r < 0) {
            *e = g[j].e;
            rc = -1;
        } else if (r == 1) {
            for (size_t k = 0; k < g[j].n; k++)
                pend[again++] = g[j].idx[k];
        } else {
            /* a slot migrating: each chunk of the group on its own */
            for (size_t k = 0; k < g[j].n && rc == 0; k++) {
                size_t at = g[j].idx[k];
                rc = get_one(cs, &req[at], at, &refs[at], &status[at],
                             why ? &why[at] : NULL, e);
            }
        }
    }
    for (size_t j = 0; j < ng; j++) {
        if (rc < 0 && g[j].rc == 0 && !g[j].copied)
            release_all(g[j].refs, g[j].status, g[j].n);
        free(g[j].idx);
        free(g[j].req);
        free(g[j].refs);
        free(g[j].status);
        free(g[j].why);
    }
    free(g);
    *n_pend = again;
    return rc;
}

static int cluster_get(struct kv_store *s, const struct kv_chunk_req *req,
                       size_t n, struct kv_blob_ref *refs, int *status,
                       struct kv_err *why, struct kv_err *e)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    size_t *pend = malloc((n ? n : 1) * sizeof *pend), n_pend = n;
    if (!pend)
        return kv_err_set(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        pend[i] = i;
        status[i] = KV_GET_ABSENT;
        memset(&refs[i], 0, sizeof refs[i]);
    }
    int rc = 0, t = 0;
    while (n_pend && rc == 0 && t++ < MAX_REDIRECTS)
        rc = get_round(cs, req, pend, &n_pend, refs, status, why, e);
    free(pend);
    if (rc == 0 && n_pend)
        rc = kv_err_set(e, "redis cluster %s: more than %d redirections",
                        cs->seeds, MAX_REDIRECTS);
    if (rc < 0) {
        release_all(refs, status, n);
        return -1;
    }
    long long hits = 0, miss = 0, coll = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        hits += status[i] == KV_GET_HIT;
        miss += status[i] != KV_GET_HIT;
        coll += status[i] == KV_GET_COLLISION;
        bad += status[i] == KV_GET_CORRUPT;
    }
    bump(cs, "hits", hits);
    bump(cs, "misses", miss);
    bump(cs, "collisions", coll);
    bump(cs, "checksum_failures", bad);
    return 0;
}

/* ---- writes ------------------------------------------------------------------ */

static int cluster_put(struct kv_store *s, const struct kv_blob_meta *m,
                       const uint8_t *hdr, const void *payload, int *existed,
                       struct kv_err *e)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    int slot = slot_of_key(m->key);
    for (int t = 0; t < MAX_REDIRECTS; t++) {
        int i = master_of(cs, slot, e);
        if (i < 0)
            return -1;
        struct kv_store *st = cs->nodes[i].st;
        if (st->ops->put(st, m, hdr, payload, existed, e) == 0) {
            if (!*existed)
                bump(cs, "puts", 1);
            return 0;
        }
        char host[256];
        int port, r = recover(cs, i, e, host, sizeof host, &port);
        if (r < 0)
            return -1;
        if (r == 0) {
            /* the slot is migrating and the key is at host:port already */
            char name[64], ex[24];
            size_t len = (size_t)m->header_len + (size_t)m->payload_len;
            uint8_t *blob = malloc(len ? len : 1);
            if (!blob)
                return kv_err_set(e, "out of memory");
            memcpy(blob, hdr, m->header_len);
            memcpy(blob + m->header_len, payload, m->payload_len);
            key_name(m->key, name);
            snprintf(ex, sizeof ex, "%lld", (long long)s->opts.ttl);
            const char *argv[] = {"SET", name, (const char *)blob, "NX", "EX", ex};
            size_t lens[] = {3, strlen(name), len, 2, 2, strlen(ex)};
            redisReply *rep = ask(cs, host, port, s->opts.ttl > 0 ? 6 : 4, argv,
                                  lens, e);
            free(blob);
            if (!rep)
                return -1;
            int ok = rep->type == REDIS_REPLY_NIL || rep->type == REDIS_REPLY_STATUS;
            *existed = rep->type == REDIS_REPLY_NIL;
            if (!ok)
                kv_err_set(e, "redis %s:%d: %.400s", host, port,
                           rep->type == REDIS_REPLY_ERROR ? rep->str : "unexpected reply");
            freeReplyObject(rep);
            if (ok && !*existed)
                bump(cs, "puts", 1);
            return ok ? 0 : -1;
        }
    }
    return kv_err_set(e, "redis cluster %s: more than %d redirections",
                      cs->seeds, MAX_REDIRECTS);
}

static int cluster_rm(struct kv_store *s, const uint8_t *key, int *found,
                      struct kv_err *e)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    char name[64];
    key_name(key, name);
    const char *argv[] = {"UNLINK", name};
    size_t lens[] = {6, strlen(name)};
    redisReply *rep = routed(cs, slot_of_key(key), 2, argv, lens, e);
    if (!rep)
        return -1;
    int ok = rep->type == REDIS_REPLY_INTEGER;
    *found = ok && rep->integer > 0;
    freeReplyObject(rep);
    return ok ? 0 : kv_err_set(e, "redis cluster: unexpected reply to UNLINK");
}

static int cluster_pin(struct kv_store *s, const uint8_t *key, int on,
                       int *found, struct kv_err *e)
{
    (void)s; (void)key; (void)on; (void)found;
    return kv_err_set(e, "pins belong to dir: stores; Redis evicts by its "
                      "own maxmemory-policy");
}

/* ---- every master ------------------------------------------------------------ */

/* The masters of the map, each once, opened; their count or -1. */
static int masters(struct cluster_store *cs, int *out, struct kv_err *e)
{
    int n = 0;
    if (refresh(cs, e) < 0)
        return -1;
    for (int s = 0; s < N_SLOTS; s++) {
        int i = cs->slot_node[s], k = 0;
        if (i < 0)
            continue;
        while (k < n && out[k] != i)
            k++;
        if (k == n) {
            if (!node_store(cs, i, e))
                return -1;
            out[n++] = i;
        }
    }
    return n;
}

static int cluster_ls(struct kv_store *s,
                      int (*cb)(void *, const struct kv_store_entry *),
                      void *ctx, struct kv_err *e)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    int *m = malloc((cs->n_nodes + 1) * sizeof *m), n;
    if (!m)
        return kv_err_set(e, "out of memory");
    n = masters(cs, m, e);
    for (int k = 0; k < n; k++) {
        struct kv_store *st = cs->nodes[m[k]].st;
        if (st->ops->ls(st, cb, ctx, e) < 0) {
            n = -1;
            break;
        }
    }
    free(m);
    return n < 0 ? -1 : 0;
}

static int count_entry(void *ctx, const struct kv_store_entry *en)
{
    struct kv_store_stats *st = ctx;
    st->entries++;
    st->bytes += en->bytes;
    return 0;
}

static int cluster_stat(struct kv_store *s, struct kv_store_stats *st,
                        struct kv_err *e)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    memset(st, 0, sizeof *st);
    if (cluster_ls(s, count_entry, st, e) < 0)
        return -1;
    const char *argv[] = {"HGETALL", STATS_KEY};
    size_t lens[] = {7, strlen(STATS_KEY)};
    redisReply *rep = routed(cs, kv_redis_key_slot(STATS_KEY, strlen(STATS_KEY)),
                             2, argv, lens, e);
    if (!rep)
        return -1;
    for (size_t i = 0; rep->type == REDIS_REPLY_ARRAY && i + 1 < rep->elements; i += 2) {
        const char *k = rep->element[i]->str;
        uint64_t v = strtoull(rep->element[i + 1]->str, NULL, 10);
        if (!strcmp(k, "hits")) st->hits = v;
        else if (!strcmp(k, "misses")) st->misses = v;
        else if (!strcmp(k, "collisions")) st->collisions = v;
        else if (!strcmp(k, "checksum_failures")) st->checksum_failures = v;
        else if (!strcmp(k, "puts")) st->puts = v;
    }
    freeReplyObject(rep);
    /* evictions: each master's own count */
    for (size_t i = 0; i < cs->n_nodes; i++) {
        int owns = 0;
        for (int sl = 0; sl < N_SLOTS && !owns; sl++)
            owns = cs->slot_node[sl] == (int)i;
        if (!owns || !cs->nodes[i].st)
            continue;
        rep = kv_redis_command(cs->nodes[i].st, "INFO stats");
        if (!rep)
            return ctx_error(cs, (int)i, e);
        const char *ev = rep->type == REDIS_REPLY_STRING
                         ? strstr(rep->str, "evicted_keys:") : NULL;
        if (ev)
            st->evictions += strtoull(ev + 13, NULL, 10);
        freeReplyObject(rep);
    }
    return 0;
}

static int cluster_evict(struct kv_store *s, uint64_t max_bytes, double low,
                         struct kv_evict_report *rp, struct kv_err *e)
{
    (void)s; (void)max_bytes; (void)low; (void)rp;
    return kv_err_set(e, "a Redis Cluster evicts by itself: run every master "
                      "with maxmemory and maxmemory-policy allkeys-lru");
}

static int cluster_fsck(struct kv_store *s, int repair,
                        void (*cb)(void *, const char *), void *ctx,
                        struct kv_fsck_report *rp, struct kv_err *e)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    int *m = malloc((cs->n_nodes + 1) * sizeof *m), n;
    if (!m)
        return kv_err_set(e, "out of memory");
    n = masters(cs, m, e);
    for (int k = 0; k < n; k++) {
        struct kv_store *st = cs->nodes[m[k]].st;
        if (st->ops->fsck(st, repair, cb, ctx, rp, e) < 0) {
            n = -1;
            break;
        }
    }
    free(m);
    return n < 0 ? -1 : 0;
}

static void cluster_close(struct kv_store *s)
{
    struct cluster_store *cs = (struct cluster_store *)s;
    for (size_t i = 0; i < cs->n_nodes; i++)
        kv_store_close(cs->nodes[i].st);
    memset(cs->pass, 0, sizeof cs->pass);
    free(cs->nodes);
    free(cs);
}

static const struct kv_store_ops cluster_ops = {
    "redis-cluster", cluster_get, cluster_put, cluster_rm, cluster_pin,
    cluster_ls, cluster_stat, cluster_evict, cluster_fsck, cluster_close,
};

/* redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT..] */
int kv_store_cluster_open(const char *url, const struct kv_store_opts *o,
                          struct kv_store **out, struct kv_err *e)
{
    const char *p = url + strlen("redis-cluster://");
    int auth;
    struct cluster_store *cs = calloc(1, sizeof *cs);
    if (!cs)
        return kv_err_set(e, "out of memory");
    cs->base.ops = &cluster_ops;
    cs->base.opts = *o;
    if (cs->base.opts.timeout <= 0)
        cs->base.opts.timeout = 2.0;
    if (kv_redis_parse_auth(&p, cs->user, sizeof cs->user, cs->pass,
                            sizeof cs->pass, &auth, e) < 0)
        goto fail;
    snprintf(cs->seeds, sizeof cs->seeds, "%s", p);
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char host[256];
        long port;
        int hp = kv_redis_parse_hostport(p, len, host, sizeof host, &port, 0);
        if (hp == -1 || (hp == -2 && (!len || p[len - 1] == ']' ||
                                      !memchr(p, ':', len)))) {
            kv_err_set(e, "--store: expected HOST:PORT in '%.*s' (an IPv6 "
                       "address in brackets: [::1]:7000)", (int)len, p);
            goto fail;
        }
        if (hp == -2) {
            kv_err_set(e, "--store: bad port in '%.*s'", (int)len, p);
            goto fail;
        }
        if (node_index(cs, host, (int)port) < 0) {
            kv_err_set(e, "out of memory");
            goto fail;
        }
        p += len + (end ? 1 : 0);
        if (end && !*p) {
            kv_err_set(e, "--store: empty node after ','");
            goto fail;
        }
    }
    if (!cs->n_nodes) {
        kv_err_set(e, "--store: redis-cluster:// needs at least one HOST:PORT");
        goto fail;
    }
    if (refresh(cs, e) < 0)
        goto fail;
    *out = &cs->base;
    return 0;
fail:
    cluster_close(&cs->base);
    return -1;
}
