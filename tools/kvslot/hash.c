/* kvslot hash: vLLM's prefix-caching block hashes of prompts, byte for
 * byte (lib/slot/hash.c), one hash a line; or with --cacheability the
 * share of their tokens an unbounded prefix cache serves, per block size.
 * Everything is read and computed before anything is written. */
#include <jansson.h>
#include "kvslot.h"
#include "slot/hash.h"

struct hopts {
    struct kv_hash_opts h;
    int json, as_int, cacheability;
    int64_t *sizes;
    size_t n_sizes;
    const char *input, *output;
};

/* All prompts of the input. */
struct prompts {
    struct kv_hash_prompt *p;
    size_t n, cap;
};

static void prompts_release(struct prompts *ps)
{
    for (size_t i = 0; i < ps->n; i++)
        kv_hash_prompt_release(&ps->p[i]);
    free(ps->p);
}

static int read_prompts(const char *path, struct prompts *ps)
{
    struct kv_err e;
    FILE *f = kv_open_in(path, &e);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    uint64_t no = 0;
    int rc = 0;
    if (!f)
        return kv_fail_err(&e);
    while ((got = getline(&line, &cap, f)) >= 0) {
        size_t n = (size_t)got;
        no++;
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            n--;
        if (ps->n == ps->cap) {
            size_t nc = ps->cap ? ps->cap * 2 : 64;
            struct kv_hash_prompt *q = realloc(ps->p, nc * sizeof *q);
            if (!q) {
                rc = kv_fail("out of memory");
                goto out;
            }
            memset(q + ps->cap, 0, (nc - ps->cap) * sizeof *q);
            ps->p = q;
            ps->cap = nc;
        }
        if (kv_hash_prompt_parse(&ps->p[ps->n], line, n, &e) < 0) {
            ps->n++;
            rc = kv_fail("'%s' line %llu: %s", kv_path_name(path, 0),
                         (unsigned long long)no, e.msg);
            goto out;
        }
        ps->n++;
    }
    if (ferror(f))
        rc = kv_fail("cannot read '%s'", kv_path_name(path, 0));
out:
    free(line);
    kv_close_in(f);
    return rc;
}

static void hex(FILE *f, const uint8_t *h, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    char buf[2 * KV_HASH_MAX_LEN];
    for (size_t i = 0; i < n; i++) {
        buf[2 * i] = digits[h[i] >> 4];
        buf[2 * i + 1] = digits[h[i] & 15];
    }
    fwrite(buf, 1, 2 * n, f);
}

/* The 64-bit integer vLLM's KV events publish with
 * VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: the digest's last 8 bytes,
 * big-endian. */
static uint64_t as_u64(const uint8_t *h, size_t n)
{
    uint64_t v = 0;
    for (size_t i = n - 8; i < n; i++)
        v = v << 8 | h[i];
    return v;
}

/* The hashes of every prompt, written to f. */
static int write_hashes(FILE *f, const struct hopts *o,
                        const struct prompts *ps)
{
    struct kv_hash *h = NULL;
    struct kv_err e;
    size_t hl = kv_hash_len(o->h.algo);
    uint8_t *buf = NULL;
    int rc = 0;
    if (kv_hash_create(&h, &o->h, &e) < 0)
        return kv_usage("%s", e.msg);
    for (size_t i = 0; i < ps->n && !rc; i++) {
        const struct kv_hash_prompt *p = &ps->p[i];
        size_t nb = p->n / (size_t)o->h.block_size;
        uint8_t *nbuf = realloc(buf, (nb ? nb : 1) * hl);
        if (!nbuf) {
            rc = kv_fail("out of memory");
            break;
        }
        buf = nbuf;
        if (kv_hash_blocks(h, p->tok, p->n, p->salt, p->lora_name,
                           p->lora_path, buf, &e) < 0) {
            rc = kv_fail("'%s' line %zu: %s", kv_path_name(o->input, 0),
                         i + 1, e.msg);
            break;
        }
        if (o->json) {
            fprintf(f, "{\"prompt\":%zu,\"tokens\":%zu,\"block_size\":%lld,"
                    "\"algo\":\"%s\",\"hashes\":[", i, p->n,
                    (long long)o->h.block_size, kv_hash_algo_name(o->h.algo));
            for (size_t b = 0; b < nb; b++) {
                fputs(b ? "," : "", f);
                if (o->as_int) {
                    fprintf(f, "%llu", (unsigned long long)as_u64(buf + b * hl,
                                                                  hl));
                } else {
                    fputc('"', f);
                    hex(f, buf + b * hl, hl);
                    fputc('"', f);
                }
            }
            fputs("]}\n", f);
            continue;
        }
        if (i)
            fputc('\n', f);
        for (size_t b = 0; b < nb; b++) {
            if (o->as_int)
                fprintf(f, "%llu", (unsigned long long)as_u64(buf + b * hl, hl));
            else
                hex(f, buf + b * hl, hl);
            fputc('\n', f);
        }
    }
    free(buf);
    kv_hash_free(h);
    return rc;
}

/* --cacheability: per block size, the tokens an unbounded prefix cache
 * serves when the prompts arrive in order. */
static int write_cacheability(FILE *f, const struct hopts *o,
                              const struct prompts *ps)
{
    struct kv_err e;
    size_t hl = kv_hash_len(o->h.algo);
    uint8_t *buf = NULL;
    int rc = 0;
    if (!o->json)
        fprintf(f, "block_size prompts tokens hit_tokens share\n");
    for (size_t k = 0; k < o->n_sizes && !rc; k++) {
        struct kv_hash_opts ho = o->h;
        struct kv_hash *h = NULL;
        struct kv_hash_set *set = NULL;
        int64_t tokens = 0, hits = 0;
        ho.block_size = o->sizes[k];
        if (kv_hash_create(&h, &ho, &e) < 0 ||
            kv_hash_set_create(&set, &e) < 0) {
            kv_hash_free(h);
            return kv_usage("%s", e.msg);
        }
        for (size_t i = 0; i < ps->n && !rc; i++) {
            const struct kv_hash_prompt *p = &ps->p[i];
            size_t nb = p->n / (size_t)ho.block_size;
            int64_t hit;
            uint8_t *nbuf = realloc(buf, (nb ? nb : 1) * hl);
            if (!nbuf) {
                rc = kv_fail("out of memory");
                break;
            }
            buf = nbuf;
            if (kv_hash_blocks(h, p->tok, p->n, p->salt, p->lora_name,
                               p->lora_path, buf, &e) < 0 ||
                kv_hash_set_feed(set, buf, hl, (int64_t)p->n, ho.block_size,
                                 &hit, &e) < 0) {
                rc = kv_fail("'%s' line %zu: %s",
                             kv_path_name(o->input, 0), i + 1, e.msg);
                break;
            }
            tokens += (int64_t)p->n;
            hits += hit;
        }
        double share = tokens ? (double)hits / (double)tokens : 0.0;
        if (o->json)
            fprintf(f, "{\"block_size\":%lld,\"prompts\":%zu,\"tokens\":%lld,"
                    "\"hit_tokens\":%lld,\"share\":%.6f}\n",
                    (long long)ho.block_size, ps->n, (long long)tokens,
                    (long long)hits, share);
        else
            fprintf(f, "%lld %zu %lld %lld %.6f\n", (long long)ho.block_size,
                    ps->n, (long long)tokens, (long long)hits, share);
        kv_hash_set_free(set);
        kv_hash_free(h);
    }
    free(buf);
    return rc;
}

static int run(const struct hopts *o)
{
    struct prompts ps = { 0 };
    struct kv_out ko;
    struct kv_err e;
    char *mem = NULL;
    size_t mem_len = 0;
    FILE *m;
    int rc = read_prompts(o->input, &ps);
    if (rc)
        goto done;
    if (!(m = open_memstream(&mem, &mem_len))) {
        rc = kv_fail("out of memory");
        goto done;
    }
    rc = o->cacheability ? write_cacheability(m, o, &ps)
                         : write_hashes(m, o, &ps);
    if (fclose(m) && !rc)
        rc = kv_fail("out of memory");
    if (rc)
        goto done;
    if (kv_out_open(&ko, o->output, &e) < 0) {
        rc = kv_fail_err(&e);
        goto done;
    }
    fwrite(mem, 1, mem_len, ko.f);
    if (o->output) {
        if (kv_out_commit(&ko, &e) < 0) {
            rc = kv_fail_err(&e);
            goto done;
        }
    }
    rc = kv_close_stdout();
done:
    free(mem);
    prompts_release(&ps);
    return rc;
}

int cmd_hash(int argc, char **argv)
{
    struct arg_str *bs = arg_str0("B", "block-size", "N",
                                  "tokens per block (16)");
    struct arg_str *algo = arg_str0(NULL, "algo", "NAME",
                                    "sha256, sha256_cbor, xxhash or "
                                    "xxhash_cbor (sha256)");
    struct arg_str *seed = arg_str0(NULL, "hash-seed", "S",
                                    "PYTHONHASHSEED, which NONE_HASH is "
                                    "derived from (vllm-none-hash)");
    struct arg_str *salt = arg_str0(NULL, "salt", "S",
                                    "cache_salt of every prompt");
    struct arg_str *lname = arg_str0(NULL, "lora-name", "NAME",
                                     "LoRA adapter name of every prompt");
    struct arg_str *lpath = arg_str0(NULL, "lora-path", "PATH",
                                     "its path (with --lora-name)");
    struct arg_str *fmt = arg_str0("f", "format", "FMT",
                                   "text or json (text)");
    struct arg_lit *as_int = arg_lit0(NULL, "int",
                                      "64-bit integers, as KV events with "
                                      "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES");
    struct arg_lit *cach = arg_lit0(NULL, "cacheability",
                                    "share of tokens an unbounded prefix "
                                    "cache serves, per block size");
    struct arg_str *sizes = arg_str0(NULL, "block-sizes", "B,B..",
                                     "--cacheability's block sizes "
                                     "(16,32,64,128,256,512)");
    struct arg_file *out = arg_file0("o", "output", "FILE",
                                     "write to FILE");
    struct arg_file *in = arg_filen(NULL, NULL, "FILE", 0, 1,
                                    "prompts, one a line (default stdin)");
    struct arg_lit *help = arg_lit0("h", "help", "print this help and exit");
    struct arg_lit *version = arg_lit0(NULL, "version", "print the version");
    struct arg_end *end = arg_end(20);
    void *argtable[] = { bs, algo, seed, salt, lname, lpath, fmt, as_int,
                         cach, sizes, out, in, help, version, end };
    struct hopts o;
    int64_t B = 16;
    int rc;

    memset(&o, 0, sizeof o);
    rc = parse_sub("hash", argtable, argc, argv, help, version, end,
                   "\nvLLM 0.33.0's prefix-caching block hashes of prompts "
                   "(token ids, one prompt a line, or JSON lines), one full "
                   "block's hash a line (man 1 kvslot).");
    if (rc >= 0)
        goto done;
    if ((rc = opt_i64(bs, "--block-size", 1, 1 << 24, 16, &B)))
        goto done;
    o.h.block_size = B;
    if (algo->count) {
        struct kv_err e;
        if (kv_hash_algo_parse(algo->sval[0], &o.h.algo, &e) < 0) {
            rc = kv_usage("--algo: %s", e.msg);
            goto done;
        }
    }
    o.h.seed = seed->count ? seed->sval[0] : NULL;
    o.h.cache_salt = salt->count ? salt->sval[0] : NULL;
    o.h.lora_name = lname->count ? lname->sval[0] : NULL;
    o.h.lora_path = lpath->count ? lpath->sval[0] : NULL;
    if (lpath->count && !lname->count) {
        rc = kv_usage("--lora-path without --lora-name");
        goto done;
    }
    if (fmt->count) {
        if (!strcmp(fmt->sval[0], "json"))
            o.json = 1;
        else if (strcmp(fmt->sval[0], "text")) {
            rc = kv_usage("--format: expected text or json, got '%s'",
                          fmt->sval[0]);
            goto done;
        }
    }
    o.as_int = as_int->count > 0;
    o.cacheability = cach->count > 0;
    if (sizes->count && !o.cacheability) {
        rc = kv_usage("--block-sizes goes with --cacheability");
        goto done;
    }
    if (o.cacheability && (o.as_int || bs->count)) {
        rc = kv_usage("--cacheability takes --block-sizes, not %s",
                      o.as_int ? "--int" : "--block-size");
        goto done;
    }
    if (o.cacheability) {
        if (sizes->count) {
            if ((rc = opt_list(sizes, "--block-sizes", 1, &o.sizes,
                               &o.n_sizes)))
                goto done;
            for (size_t i = 0; i < o.n_sizes; i++)
                if (o.sizes[i] > 1 << 24) {
                    rc = kv_usage("--block-sizes: %lld is above 2^24",
                                  (long long)o.sizes[i]);
                    goto done;
                }
        } else {
            static const int64_t def[6] = { 16, 32, 64, 128, 256, 512 };
            o.sizes = malloc(sizeof def);
            if (!o.sizes) {
                rc = kv_fail("out of memory");
                goto done;
            }
            memcpy(o.sizes, def, sizeof def);
            o.n_sizes = 6;
        }
    }
    /* options that need no input are checked before reading it */
    {
        struct kv_hash *h;
        struct kv_err e;
        if (kv_hash_create(&h, &o.h, &e) < 0) {
            rc = kv_usage("%s", e.msg);
            goto done;
        }
        kv_hash_free(h);
    }
    o.input = in->count ? in->filename[0] : NULL;
    o.output = out->count ? out->filename[0] : NULL;
    rc = run(&o);
done:
    free(o.sizes);
    arg_freetable(argtable, sizeof argtable / sizeof *argtable);
    return rc;
}
