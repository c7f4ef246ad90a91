/* slot.c - vLLM's per-step attention metadata and slot mapping (see slot.h).
 *
 * kv_slot_compute first validates the whole step (every request's last
 * position against the table and max_model_len), then fills the arrays in
 * one pass per request.  The plain per-token formula is kv_slot_of(); the
 * no-CP fast path below must agree with it (tests/unit/slot.c). */
#include <stdlib.h>
#include <string.h>
#include "slot/slot.h"
#include "core/tensor.h"

static const char *const field_names[KV_SLOT_NFIELDS] = {
    "query_start_loc", "seq_lens", "num_computed_tokens",
    "num_scheduled_tokens", "positions", "req_indices", "token_indices",
    "block_table_indices", "block_numbers", "block_offsets", "slot_mapping",
    "cp_owner", "max_query_len", "num_tokens", "num_reqs", "block_table",
};

const char *kv_slot_field_name(enum kv_slot_field f)
{
    return (unsigned)f < KV_SLOT_NFIELDS ? field_names[f] : "?";
}

int kv_slot_field_parse(const char *s, enum kv_slot_field *out)
{
    for (int i = 0; i < KV_SLOT_NFIELDS; i++)
        if (strcmp(s, field_names[i]) == 0) {
            *out = (enum kv_slot_field)i;
            return 0;
        }
    return -1;
}

int kv_slot_geom_check(const struct kv_slot_geom *g, struct kv_err *e)
{
    int64_t share;

    if (g->block_size < 1)
        return kv_err_set(e, "block size %lld: expected >= 1",
                          (long long)g->block_size);
    if (g->kernel_block_size < 1 || g->block_size % g->kernel_block_size)
        return kv_err_set(e, "kernel block size %lld does not divide the "
                          "block size %lld", (long long)g->kernel_block_size,
                          (long long)g->block_size);
    if (g->max_model_len < 1)
        return kv_err_set(e, "max model len %lld: expected >= 1",
                          (long long)g->max_model_len);
    if (g->cp_world < 1 || g->cp_world > (1 << 20))
        return kv_err_set(e, "cp size %lld: expected 1 .. 1048576",
                          (long long)g->cp_world);
    if (g->cp_rank < 0 || g->cp_rank >= g->cp_world)
        return kv_err_set(e, "cp rank %lld is not below the cp size %lld",
                          (long long)g->cp_rank, (long long)g->cp_world);
    if (g->interleave < 1 || g->block_size % g->interleave)
        return kv_err_set(e, "interleave %lld does not divide the block "
                          "size %lld", (long long)g->interleave,
                          (long long)g->block_size);
    share = g->virt == KV_SLOT_VIRTUAL_PHYSICAL ? g->block_size
                                                : g->kernel_block_size;
    /* one rank: the interleave moves nothing, every slot is plain */
    if (g->cp_world > 1 && share % g->interleave)
        return kv_err_set(e, "interleave %lld does not divide the kernel "
                          "block size %lld: vLLM would write some slots "
                          "twice and others never (vllm-ascend builds the "
                          "virtual block from the allocation block instead)",
                          (long long)g->interleave,
                          (long long)g->kernel_block_size);
    if (g->block_size > INT64_MAX / g->cp_world)
        return kv_err_set(e, "block size %lld times cp size %lld overflows",
                          (long long)g->block_size, (long long)g->cp_world);
    return 0;
}

int kv_slot_expand_hybrid(const int64_t *ids, size_t n_rows, size_t n_cols,
                          int64_t block_size, int64_t kernel_block_size,
                          int64_t **out, size_t *out_cols, struct kv_err *e)
{
    int64_t k = block_size / kernel_block_size;
    size_t cols, n;
    int64_t *x;

    if (kernel_block_size < 1 || block_size % kernel_block_size)
        return kv_err_set(e, "kernel block size %lld does not divide the "
                          "block size %lld", (long long)kernel_block_size,
                          (long long)block_size);
    if (kv_size_mul(n_cols, (size_t)k, &cols) ||
        kv_size_mul(n_rows, cols, &n) ||
        kv_size_mul(n ? n : 1, sizeof *x, &n))
        return kv_err_set(e, "hybrid block table of %zu rows is too large",
                          n_rows);
    x = malloc(n);
    if (!x)
        return kv_err_set(e, "out of memory for a %zu-byte block table", n);
    for (size_t r = 0; r < n_rows; r++) {
        /* entries up to the last non-zero one are blocks in use (0 is
         * then the null block, expanded like any id); the rest of the
         * row is unused and stays 0 */
        size_t used = n_cols;
        while (used > 0 && ids[r * n_cols + used - 1] == 0)
            used--;
        for (size_t c = 0; c < n_cols; c++) {
            int64_t b = ids[r * n_cols + c];
            for (int64_t j = 0; j < k; j++) {
                int64_t v = 0;
                if (b == 0 && c < used) {
                    v = j;
                } else if (b > 0) {
                    if (b > (INT64_MAX - j) / k) {
                        free(x);
                        return kv_err_set(e, "block id %lld in row %zu is "
                                          "too large", (long long)b, r);
                    }
                    v = b * k + j;
                } else if (b < 0) {
                    v = b;
                }
                x[r * cols + c * (size_t)k + (size_t)j] = v;
            }
        }
    }
    *out = x;
    *out_cols = cols;
    return 0;
}

void kv_slot_step_init(struct kv_slot_step *s)
{
    memset(s, 0, sizeof *s);
}

void kv_slot_step_release(struct kv_slot_step *s)
{
    free(s->query_start_loc);
    free(s->seq_lens);
    free(s->num_computed_tokens);
    free(s->num_scheduled_tokens);
    free(s->positions);
    free(s->req_indices);
    free(s->token_indices);
    free(s->block_table_indices);
    free(s->block_numbers);
    free(s->block_offsets);
    free(s->slot_mapping);
    free(s->cp_owner);
    memset(s, 0, sizeof *s);
}

/* Per-rank share V/W of a virtual block. */
static int64_t rank_share(const struct kv_slot_geom *g)
{
    return g->virt == KV_SLOT_VIRTUAL_PHYSICAL ? g->block_size
                                               : g->kernel_block_size;
}

/* Where position p lives: owner rank, kernel table column, offset. */
static void locate(const struct kv_slot_geom *g, int64_t p, int64_t *owner,
                   int64_t *column, int64_t *offset)
{
    int64_t w = g->cp_world, i = g->interleave, k = g->kernel_block_size;
    int64_t share = rank_share(g);
    int64_t v = share * w;
    int64_t o = p % v;
    int64_t local = (o / (w * i)) * i + o % i;

    *owner = (o / i) % w;
    *column = (p / v) * (share / k) + local / k;
    *offset = local % k;
}

int64_t kv_slot_of(const struct kv_slot_geom *g, const int64_t *row,
                   int64_t p, int64_t *owner, int64_t *column,
                   int64_t *offset)
{
    int64_t own, col, off;

    locate(g, p, &own, &col, &off);
    if (owner)
        *owner = own;
    if (column)
        *column = col;
    if (offset)
        *offset = off;
    if (own != g->cp_rank)
        return KV_SLOT_PAD;
    return row[col] * g->kernel_block_size + off;
}

/* Entry i of the table, whichever width it is stored in. */
static inline int64_t table_id(const struct kv_slot_table *t, size_t i)
{
    return t->ids32 ? t->ids32[i] : t->ids[i];
}

/* Smallest and largest kernel table column that positions [c, c+n) touch
 * (the same on every rank; n >= 1).  Without CP the column grows with the
 * position; with CP the offset inside a virtual block does not, so walk. */
static void column_range(const struct kv_slot_geom *g, int64_t c, int64_t n,
                         int64_t *lo, int64_t *hi)
{
    int64_t own, col, off;

    if (g->cp_world == 1) {     /* both virtual blocks give p / K then */
        *lo = c / g->kernel_block_size;
        *hi = (c + n - 1) / g->kernel_block_size;
        return;
    }
    *lo = INT64_MAX;
    *hi = -1;
    for (int64_t p = c; p < c + n; p++) {
        locate(g, p, &own, &col, &off);
        if (col < *lo)
            *lo = col;
        if (col > *hi)
            *hi = col;
    }
}

int kv_slot_check(const struct kv_slot_geom *g, const struct kv_slot_table *t,
                  size_t n_reqs, const int64_t *scheduled,
                  const int64_t *computed, struct kv_err *e)
{
    int64_t total = 0;

    if (kv_slot_geom_check(g, e))
        return -1;
    if (n_reqs > t->n_rows)
        return kv_err_set(e, "%zu requests but the block table has %zu "
                          "rows", n_reqs, t->n_rows);
    for (size_t r = 0; r < n_reqs; r++) {
        int64_t n = scheduled[r], c = computed ? computed[r] : 0;
        int64_t first_col, last_col, max_id;

        if (n < 0)
            return kv_err_set(e, "request %zu: scheduled token count %lld "
                              "is negative", r, (long long)n);
        if (c < 0)
            return kv_err_set(e, "request %zu: computed token count %lld "
                              "is negative", r, (long long)c);
        if (n > g->max_model_len || c > g->max_model_len - n)
            return kv_err_set(e, "request %zu: %lld computed + %lld "
                              "scheduled tokens exceed the max model len "
                              "%lld", r, (long long)c, (long long)n,
                              (long long)g->max_model_len);
        if (n > INT64_MAX - total)
            return kv_err_set(e, "request %zu: token count overflows", r);
        total += n;
        if (n == 0)
            continue;
        column_range(g, c, n, &first_col, &last_col);
        if ((uint64_t)last_col >= t->n_cols)
            return kv_err_set(e, "request %zu: position %lld needs block "
                              "table column %lld, the table has %zu columns",
                              r, (long long)(c + n - 1), (long long)last_col,
                              t->n_cols);
        max_id = INT64_MAX / g->kernel_block_size - 1;
        for (int64_t col = first_col; col <= last_col; col++) {
            int64_t b = table_id(t, r * t->n_cols + (size_t)col);
            if (b < 0 || b > max_id)
                return kv_err_set(e, "request %zu: block table column %lld "
                                  "holds block %lld", r, (long long)col,
                                  (long long)b);
        }
    }
    if ((uint64_t)total > (SIZE_MAX / 16))
        return kv_err_set(e, "%lld tokens are too many", (long long)total);
    return 0;
}

static int alloc_i64(int64_t **p, size_t n, struct kv_err *e)
{
    *p = malloc((n ? n : 1) * sizeof **p);
    if (!*p)
        return kv_err_set(e, "out of memory for %zu entries", n);
    return 0;
}

/* The plain block walk of one field without CP: positions [p, end) of row
 * r, one block at a time, no division per token.  T is the entry type. */
#define FILL_PLAIN(T)                                                       \
    static void fill_plain_##T(enum kv_slot_field f, const T *row,          \
                               size_t r, int64_t ncols, int64_t k,          \
                               int64_t p, int64_t end, int64_t *out)        \
    {                                                                       \
        while (p < end) {                                                   \
            int64_t col = p / k, off = p % k;                               \
            int64_t len = k - off < end - p ? k - off : end - p;            \
            int64_t v = 0, step = 0;                                        \
            switch (f) {                                                    \
            case KV_SLOT_SLOT_MAPPING:                                      \
                v = (int64_t)row[col] * k + off; step = 1; break;           \
            case KV_SLOT_BLOCK_NUMBERS: v = row[col]; break;                \
            case KV_SLOT_BLOCK_OFFSETS: v = off; step = 1; break;           \
            case KV_SLOT_BLOCK_TABLE_INDICES:                               \
                v = (int64_t)r * ncols + col; break;                        \
            default: v = 0; break;   /* cp_owner: always rank 0 */          \
            }                                                               \
            for (int64_t j = 0; j < len; j++)                               \
                out[j] = v + step * j;                                      \
            out += len;                                                     \
            p += len;                                                       \
        }                                                                   \
    }
FILL_PLAIN(int64_t)
FILL_PLAIN(int32_t)
#undef FILL_PLAIN

int kv_slot_fill(const struct kv_slot_geom *g, const struct kv_slot_table *t,
                 size_t r, int64_t p, int64_t n, enum kv_slot_field f,
                 int64_t *out)
{
    size_t base = r * t->n_cols;
    int64_t ncols = (int64_t)t->n_cols, k = g->kernel_block_size;

    switch (f) {
    case KV_SLOT_POSITIONS:
        for (int64_t j = 0; j < n; j++)
            out[j] = p + j;
        return 0;
    case KV_SLOT_REQ_INDICES:
        for (int64_t j = 0; j < n; j++)
            out[j] = (int64_t)r;
        return 0;
    case KV_SLOT_TOKEN_INDICES:
        for (int64_t j = 0; j < n; j++)
            out[j] = (int64_t)r * g->max_model_len + p + j;
        return 0;
    case KV_SLOT_SLOT_MAPPING: case KV_SLOT_BLOCK_NUMBERS:
    case KV_SLOT_BLOCK_OFFSETS: case KV_SLOT_BLOCK_TABLE_INDICES:
    case KV_SLOT_CP_OWNER:
        break;
    default:
        return -1;
    }
    if (g->cp_world == 1) {
        if (t->ids32)
            fill_plain_int32_t(f, t->ids32 + base, r, ncols, k, p, p + n, out);
        else
            fill_plain_int64_t(f, t->ids + base, r, ncols, k, p, p + n, out);
        return 0;
    }
    for (int64_t j = 0; j < n; j++) {
        int64_t own, col, off, b;
        locate(g, p + j, &own, &col, &off);
        b = table_id(t, base + (size_t)col);
        switch (f) {
        case KV_SLOT_SLOT_MAPPING:
            out[j] = own == g->cp_rank ? b * k + off : KV_SLOT_PAD;
            break;
        case KV_SLOT_BLOCK_NUMBERS: out[j] = b; break;
        case KV_SLOT_BLOCK_OFFSETS: out[j] = off; break;
        case KV_SLOT_BLOCK_TABLE_INDICES: out[j] = (int64_t)r * ncols + col;
            break;
        default: out[j] = own; break;
        }
    }
    return 0;
}

int kv_slot_compute(const struct kv_slot_geom *g,
                    const struct kv_slot_table *t, size_t n_reqs,
                    const int64_t *scheduled, const int64_t *computed,
                    unsigned want, struct kv_slot_step *out, struct kv_err *e)
{
    struct kv_slot_step s;
    size_t n_tok = 0;
    int64_t **arr[KV_SLOT_NFIELDS] = { 0 };

    if (kv_slot_check(g, t, n_reqs, scheduled, computed, e))
        return -1;
    for (size_t r = 0; r < n_reqs; r++)
        n_tok += (size_t)scheduled[r];
    kv_slot_step_init(&s);
    s.n_reqs = n_reqs;
    s.n_tokens = n_tok;
    arr[KV_SLOT_POSITIONS] = &s.positions;
    arr[KV_SLOT_REQ_INDICES] = &s.req_indices;
    arr[KV_SLOT_TOKEN_INDICES] = &s.token_indices;
    arr[KV_SLOT_BLOCK_TABLE_INDICES] = &s.block_table_indices;
    arr[KV_SLOT_BLOCK_NUMBERS] = &s.block_numbers;
    arr[KV_SLOT_BLOCK_OFFSETS] = &s.block_offsets;
    arr[KV_SLOT_SLOT_MAPPING] = &s.slot_mapping;
    arr[KV_SLOT_CP_OWNER] = &s.cp_owner;
    if (alloc_i64(&s.query_start_loc, n_reqs + 1, e) ||
        alloc_i64(&s.seq_lens, n_reqs, e) ||
        alloc_i64(&s.num_computed_tokens, n_reqs, e) ||
        alloc_i64(&s.num_scheduled_tokens, n_reqs, e))
        goto fail;
    for (int f = 0; f < KV_SLOT_NFIELDS; f++)
        if (arr[f] && (want & (1u << f)) && alloc_i64(arr[f], n_tok, e))
            goto fail;
    s.query_start_loc[0] = 0;
    s.max_query_len = 0;
    for (size_t r = 0, q = 0; r < n_reqs; r++) {
        int64_t n = scheduled[r], c = computed ? computed[r] : 0;

        s.num_scheduled_tokens[r] = n;
        s.num_computed_tokens[r] = c;
        s.seq_lens[r] = c + n;
        s.query_start_loc[r + 1] = s.query_start_loc[r] + n;
        if (n > s.max_query_len)
            s.max_query_len = n;
        for (int f = 0; f < KV_SLOT_NFIELDS; f++)
            if (arr[f] && *arr[f])
                (void)kv_slot_fill(g, t, r, c, n, (enum kv_slot_field)f,
                                   *arr[f] + q);
        q += (size_t)n;
    }
    *out = s;
    return 0;
fail:
    kv_slot_step_release(&s);
    return -1;
}

void kv_slot_cp_local_lens(int64_t len, int64_t world, int64_t interleave,
                           int64_t *out)
{
    int64_t base = len / interleave / world * interleave;
    int64_t rem = len - base * world;

    for (int64_t r = 0; r < world; r++) {
        int64_t x = rem - r * interleave;
        out[r] = base + (x < 0 ? 0 : x > interleave ? interleave : x);
    }
}
