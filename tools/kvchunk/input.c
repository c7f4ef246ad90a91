/* kvchunk: the inputs several subcommands read: the prompt and its
 * segments (split, assemble) and the chunk's and context's tokens (key,
 * put, get). */
#include "kvchunk.h"

void add_prompt(struct table *t, struct prompt_args *p)
{
    add(t, p->sep = arg_str0(NULL, "sep", "S", "separator of text prompts "
                             "(default ##)"));
    add(t, p->ids = arg_lit0(NULL, "ids", "the prompt is token ids"));
    add(t, p->sep_ids = arg_str0(NULL, "sep-ids", "A,B,..",
                                 "separator token ids (with --ids)"));
    add(t, p->prompt = arg_file0(NULL, NULL, "PROMPT", "prompt file (default "
                                 "stdin)"));
}

/* Occurrences of sep (n_sep items of size bytes each) in a[0..n): an
 * upper bound of the separators a split finds (an escaped one is text). */
static size_t count_sep(const void *a, size_t n, const void *sep,
                        size_t n_sep, size_t size)
{
    const char *p = a, *s = sep;
    size_t k = 0, len = n * size, sl = n_sep * size;
    for (size_t i = 0; sl && i + sl <= len; i += size)
        if (!memcmp(p + i, s, sl)) {
            k++;
            i += sl - size;
        }
    return k;
}

/* The split of a prompt of n tokens, n_seg segments at most, beside what
 * is held already (held bytes) and what the caller keeps per segment
 * (per_seg bytes): the token ids, the segments and those must fit lim. */
static int split_fits(size_t n, size_t n_seg, size_t held, size_t per_seg,
                      size_t lim, struct kv_err *e)
{
    double need = (double)held + 4.0 * (double)n +
                  (double)n_seg * (double)(sizeof(struct kv_segment) + per_seg);
    if (lim && need > (double)lim)
        return kv_err_set(e, "the prompt's %zu tokens and up to %zu segments "
                          "need %.0f bytes, more than --max-mem %zu", n, n_seg,
                          need, lim);
    return 0;
}

/* Read and split the prompt; lim also holds per_seg bytes a segment that
 * the caller will keep. */
int read_prompt(const struct prompt_args *p, size_t lim, size_t per_seg,
                struct kv_split *sp, struct kv_err *e)
{
    const char *path = p->prompt->count ? p->prompt->filename[0] : "-";
    if (p->ids->count) {
        int64_t *sv = NULL;
        size_t ns = 0;
        struct kv_tokens t;
        memset(&t, 0, sizeof t);
        if (!sval(p->sep_ids))
            return kv_err_set(e, "--ids needs --sep-ids");
        if (kv_parse_i64_list(sval(p->sep_ids), "--sep-ids", INT32_MIN,
                              INT32_MAX, &sv, &ns, e) < 0)
            return -1;
        if (ns == 0) {
            free(sv);
            return kv_err_set(e, "--sep-ids: empty separator");
        }
        int32_t sep[64];
        if (ns > 64) {
            free(sv);
            return kv_err_set(e, "--sep-ids: at most 64 ids");
        }
        for (size_t i = 0; i < ns; i++)
            sep[i] = (int32_t)sv[i];
        free(sv);
        if (load_tokens(path, "PROMPT", lim, &t, e) < 0)
            return -1;
        if (split_fits(t.n, count_sep(t.ids, t.n, sep, ns, sizeof *sep) + 1,
                       t.n * sizeof *t.ids, per_seg, lim, e) < 0) {
            kv_tokens_release(&t);
            return -1;
        }
        int rc = kv_split_ids(t.ids, t.n, sep, ns, sp, e);
        kv_tokens_release(&t);
        return rc;
    }
    if (sval(p->sep_ids))
        return kv_err_set(e, "--sep-ids needs --ids");
    FILE *f = kv_open_in(path, e);
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) {
        kv_close_in(f);
        return kv_err_set(e, "out of memory");
    }
    for (;;) {
        if (n == cap) {
            if (cap >= lim) {
                free(buf);
                kv_close_in(f);
                return kv_err_set(e, "'%s' is larger than --max-mem",
                                  kv_path_name(path, 0));
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                kv_close_in(f);
                return kv_err_set(e, "out of memory");
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (!got)
            break;
    }
    int bad = ferror(f);
    kv_close_in(f);
    if (bad) {
        free(buf);
        return kv_err_set(e, "cannot read '%s'", kv_path_name(path, 0));
    }
    const char *sep = sval(p->sep) ? sval(p->sep) : "##";
    if (split_fits(n, count_sep(buf, n, sep, strlen(sep), 1) + 1, cap,
                   per_seg, lim, e) < 0) {
        free(buf);
        return -1;
    }
    int rc = kv_split_text(buf, n, sep, sp, e);
    free(buf);
    return rc;
}

/* Usage checks of the prompt options. */
int prompt_usage(const struct prompt_args *p)
{
    if (p->ids->count && !sval(p->sep_ids))
        return kv_usage("--ids needs --sep-ids");
    if (!p->ids->count && sval(p->sep_ids))
        return kv_usage("--sep-ids needs --ids");
    if (sval(p->sep) && p->ids->count)
        return kv_usage("--sep is for text prompts; use --sep-ids with --ids");
    return 0;
}

void add_tok(struct table *t, struct tok_args *a)
{
    add(t, a->tokens = arg_str0(NULL, "tokens", "FILE", "the chunk's token "
                                "ids (text or int .npy; - = stdin)"));
    add(t, a->context = arg_str0(NULL, "context", "FILE", "the sys tokens "
                                 "the chunk attended to (default none)"));
}

/* Standard input can be read once: at most one of the inputs may be "-"
 * (kv may be NULL for subcommands without --kv). */
int stdin_once(const struct tok_args *a, struct arg_str *kv,
               struct kv_err *e)
{
    const char *v[3] = {sval(a->tokens), sval(a->context),
                        kv ? sval(kv) : NULL};
    int n = 0;
    for (int i = 0; i < 3; i++)
        n += v[i] && !strcmp(v[i], "-");
    if (n > 1)
        return kv_err_set(e, "only one of --tokens, --context%s can be '-' "
                          "(standard input)", kv ? " and --kv" : "");
    return 0;
}

/* --context names what the chunk attended to: refused when the namespace
 * says it attended to nothing (--chunk-context none), where it would be
 * left out of the key without a word. */
int context_used(const struct tok_args *a, const struct nsv *v,
                 struct kv_err *e)
{
    if (sval(a->context) && v->ns.mask == KV_CTX_NONE)
        return kv_err_set(e, "--context: a chunk of --chunk-context none "
                          "attended to no context; leave out --context '%s' "
                          "or use --chunk-context sys", sval(a->context));
    return 0;
}

/* Load the chunk and context tokens. */
int tok_values(const struct tok_args *a, size_t lim,
               struct kv_tokens *tok, struct kv_tokens *ctx,
               struct kv_err *e)
{
    memset(tok, 0, sizeof *tok);
    memset(ctx, 0, sizeof *ctx);
    if (load_tokens(sval(a->tokens), "--tokens", lim, tok, e) < 0)
        return -1;
    if (sval(a->context) && load_tokens(sval(a->context), "--context", lim,
                                        ctx, e) < 0) {
        kv_tokens_release(tok);
        return -1;
    }
    return 0;
}
