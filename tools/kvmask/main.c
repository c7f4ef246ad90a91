/* kvmask - attention masks of every kind the engines build, dense or
 * compact, bit-exact (see man 1 kvmask).
 *
 * This program only turns options into a struct kv_mask (the rule) and a
 * struct kv_mask_values (what a dense element holds), then calls one writer
 * of lib/mask.  main.c holds the option table and the steps in order;
 * each step is in the file of its concern (see kvmask.h). */
#include "kvmask.h"

static const char synopsis[] =
    "\nKIND is causal, window, band, full, prefix, varlen, chunk, ascend,\nlocal or tree.\n"
    "Attention masks, dense (npy, text, pgm) or compact (bits, block, bsr,\n"
    "stats), bit-exact with vLLM, vllm-ascend, FlexAttention and FlashInfer.";

static const char extra[] =
    "Rules (i' = i + SKV - SQ, or i with --align top-left):\n"
    "  causal  j <= i'            window  i'-W < j <= i'\n"
    "  band    i'-P <= j <= i'+N  full    always\n"
    "  prefix  j < P or j <= i'   varlen  same request, causal inside\n"
    "  chunk   sys causal; chunk: all sys + own chunk causal; question: j <= i\n"
    "  ascend  vllm-ascend builder outputs: --preset attn|splitfuse|\n"
    "          splitfuse-310p|pooling|mla|pcp-mla|swa|mtp-cp\n"
    "Values: 0 = attend, fill = masked (default); --keep: 1 = attend.\n"
    "See man 1 kvmask.";

/* kvmask's options, in the order --help lists them; returns the count. */
static int margs_make(struct margs *a, void **t)
{
    int k = 0;
    t[k++] = a->kind = arg_str0(NULL, NULL, "KIND", "mask kind (see below)");
    t[k++] = a->n = arg_str0("n", NULL, "N", "square mask: N rows, N columns");
    t[k++] = a->sq = arg_str0("q", NULL, "SQ", "query rows");
    t[k++] = a->skv = arg_str0("k", NULL, "SKV", "key columns");
    t[k++] = a->w = arg_str0("w", "window", "W", "window: W keys including self");
    t[k++] = a->pre = arg_str0(NULL, "pre", "P", "band: keys before i'");
    t[k++] = a->next = arg_str0(NULL, "next", "N", "band: keys after i'");
    t[k++] = a->prefix = arg_str0("p", "prefix", "P", "prefix: P leading keys seen by all");
    t[k++] = a->qlens = arg_str0(NULL, "q-lens", "a,b,..", "varlen: query length of each request");
    t[k++] = a->kvlens = arg_str0(NULL, "kv-lens", "c,d,..", "varlen: key length of each request (default: q-lens)");
    t[k++] = a->sys = arg_str0(NULL, "sys", "N", "chunk: system prompt tokens");
    t[k++] = a->chunks = arg_str0(NULL, "chunks", "a,b,..", "chunk: chunk lengths");
    t[k++] = a->question = arg_str0(NULL, "question", "M", "chunk: question tokens");
    t[k++] = a->segments = arg_str0(NULL, "segments", "FILE", "chunk: segments as written by kvchunk split");
    t[k++] = a->preset = arg_str0(NULL, "preset", "NAME", "ascend: the mask (see below)");
    t[k++] = a->seqlens = arg_str0(NULL, "seq-lens", "a,b,..", "ascend splitfuse: per-row mask of these requests");
    t[k++] = a->positions = arg_str0(NULL, "positions", "p,q,..", "ascend splitfuse: row positions (default from --q-lens)");
    t[k++] = a->fallback = arg_lit0(NULL, "fallback", "ascend splitfuse: the explicit -10000 fallback build");
    t[k++] = a->cachedt = arg_str0(NULL, "cache-dtype", "DT", "ascend attn: dtype of the call that built the cache");
    t[k++] = a->history = arg_str0(NULL, "history", "h1,h2,..", "ascend mtp-cp: tokens before each decode request");
    t[k++] = a->cpsize = arg_str0(NULL, "cp-size", "W", "ascend mtp-cp: context-parallel ranks (pcp x dcp)");
    t[k++] = a->cprank = arg_str0(NULL, "cp-rank", "R", "ascend mtp-cp: this rank");
    t[k++] = a->interleave = arg_str0(NULL, "interleave", "I", "ascend mtp-cp: tokens per rank in turn (default 1)");
    t[k++] = a->parents = arg_str0(NULL, "parents", "LIST", "tree: each draft token's parent, -1 = a root (-p P: the prefix)");
    t[k++] = a->chunksize = arg_str0(NULL, "chunk-size", "C", "local: the attention chunk (Llama 4)");
    t[k++] = a->align = arg_str0(NULL, "align", "SIDE", "diagonal at bottom-right (default) or top-left");
    t[k++] = a->keep = arg_lit0(NULL, "keep", "1/True = attend, 0 = masked");
    t[k++] = a->dtype = arg_str0(NULL, "dtype", "DT", "bool|u8|i8|f16|bf16|f32 (default bool)");
    t[k++] = a->fill = arg_str0(NULL, "fill", "-inf|min|NUM", "masked value of float dtypes (default -inf)");
    t[k++] = a->batch = arg_str0(NULL, "batch", "B", "leading batch dimension");
    t[k++] = a->heads = arg_str0(NULL, "heads", "H", "leading heads dimension");
    t[k++] = a->format = arg_str0("f", "format", "FMT", "npy|text|pgm|bits|block|bsr|stats|json");
    t[k++] = a->layout = arg_str0(NULL, "layout", "nd|nz", "dense layout (nz: Ascend FRACTAL_NZ)");
    t[k++] = a->block = arg_str0(NULL, "block-size", "B[,C]", "tile size of block/bsr/stats (default 128)");
    t[k++] = a->text = arg_lit0(NULL, "text", "compact formats as text fields");
    t[k++] = a->nomask = arg_lit0(NULL, "no-mask", "bsr: leave out the packed block mask");
    t[k++] = a->bitorder = arg_str0(NULL, "bitorder", "little|big", "bits/bsr bit order (default little, as FlashInfer attention)");
    t[k++] = a->cell = arg_str0(NULL, "cell", "K", "pgm: K x K pixels per element (default 1)");
    t[k++] = a->output = arg_str0("o", "output", "FILE", "write to FILE (temp file + rename)");
    t[k++] = a->force = arg_lit0(NULL, "force", "write binary to a terminal");
    t[k++] = a->maxmem = arg_str0(NULL, "max-mem", "SIZE", "refuse dense output larger than SIZE (default 75% of RAM)");
    t[k++] = a->jobs = arg_str0("j", "jobs", "N", "threads (output is the same for any N)");
    t[k++] = a->quiet = arg_lit0(NULL, "quiet", "no progress line");
    t[k++] = a->verbose = arg_lit0("v", "verbose", "print timings");
    t[k++] = a->help = arg_lit0("h", "help", "print this help and exit");
    t[k++] = a->version = arg_lit0(NULL, "version", "print the version and exit");
    t[k++] = a->end = arg_end(20);
    return k;
}

int main(int argc, char **argv)
{
    struct margs a;
    void *argtable[64];
    int n_args = margs_make(&a, argtable);
    struct opts o;
    int64_t nv = 0;
    int rc;

    kv_setprogname(argv[0]);
    memset(&o, 0, sizeof o);
    rc = kv_arg_parse(argtable, argc, argv, a.help, a.version, a.end, synopsis,
                      extra);
    if (rc >= 0 || (rc = kind_options(&a, &o)) || (rc = geometry(&a, &o, &nv)) ||
        (rc = mask_values(&a, &o, nv)) || (rc = outer_dims(&a, &o)) ||
        (rc = output_options(&a, &o))) {
        opts_release(&o);
        arg_freetable(argtable, (size_t)n_args);
        return rc;
    }
    o.force = a.force->count;
    o.verbose = a.verbose->count;
    o.quiet = a.quiet->count;
    rc = run(&o);
    arg_freetable(argtable, (size_t)n_args);
    return rc;
}
