/* mla_job.c - the work of an MLA call (mla.c's two forms): items planned
 * from the requests' shapes alone (query tiles of at most ROWS_MAX rows
 * and, for decode-sized requests, key chunks), run on the thread pool with
 * a pool of reusable scratch buffers, and their partial results merged in
 * chunk order (by the thread that finishes a group's last item), so that
 * the output never depends on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/mla_int.h"
#include "core/blas.h"
#include "core/cli.h"
#include "core/half.h"
#include "core/isa.h"

#define ROWS_MAX 256        /* query rows per item (queries x heads) */
#define CHUNK_K 4096        /* decode: keys per chunk */
#define DECODE_Q 4          /* at most this many queries: chunked keys */

/* The element-wise steps of a merge, one lane per element, each a single
 * IEEE operation, so the vector forms give the scalar form's bits: o +=
 * a * f (a product, then a sum: never fused), and o = o / l (times mul, a
 * power of two, when not 0).  vec: AVX-512F, which the caller has
 * checked. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define JOB_X86 1
__attribute__((target("avx512f")))
static void add_scaled_512(float *o, const float *a, float f, int64_t n)
{
    const __m512 vf = _mm512_set1_ps(f);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16)
        _mm512_storeu_ps(o + c, _mm512_add_ps(_mm512_loadu_ps(o + c),
                                              _mm512_mul_ps(_mm512_loadu_ps(a + c), vf)));
    for (; c < n; c++)
        o[c] += a[c] * f;
}

__attribute__((target("avx512f")))
static void div_512(float *o, int64_t n, float l, float mul)
{
    const __m512 vl = _mm512_set1_ps(l), vm = _mm512_set1_ps(mul);
    int64_t c = 0;
    for (; c + 16 <= n; c += 16) {
        __m512 x = _mm512_div_ps(_mm512_loadu_ps(o + c), vl);
        _mm512_storeu_ps(o + c, mul != 0.0f ? _mm512_mul_ps(x, vm) : x);
    }
    for (; c < n; c++) {
        o[c] = o[c] / l;
        if (mul != 0.0f)
            o[c] *= mul;
    }
}
#endif

static void add_scaled(float *o, const float *a, float f, int64_t n, int vec)
{
#ifdef JOB_X86
    if (vec) {
        add_scaled_512(o, a, f, n);
        return;
    }
#else
    (void)vec;
#endif
    for (int64_t c = 0; c < n; c++)
        o[c] += a[c] * f;
}

/* Final row values from merged m, l, acc (in o, in place): o = acc / l
 * (then times mul, a power of two, when not 0), lse = m + log l; a row
 * with nothing to attend gives 0 and -inf. */
static void finish_row(float m, float l, int64_t dv, float mul, float *o, float *lse, int vec)
{
    if (l == 0.0f || m == -INFINITY) {
        memset(o, 0, (size_t)dv * sizeof(float));
        *lse = -INFINITY;
        return;
    }
#ifdef JOB_X86
    if (vec) {
        div_512(o, dv, l, mul);
        *lse = m + logf(l);
        return;
    }
#else
    (void)vec;
#endif
    for (int64_t c = 0; c < dv; c++)
        o[c] = o[c] / l;
    if (mul != 0.0f)
        for (int64_t c = 0; c < dv; c++)
            o[c] *= mul;
    *lse = m + logf(l);
}

int mla_lens_check(const int64_t *lens, size_t n, int64_t total, const char *what,
                   int64_t *start, struct kv_err *e)
{
    int64_t s = 0;
    for (size_t i = 0; i < n; i++) {
        if (lens[i] < 0)
            return kv_err_set(e, "%s[%zu] is negative (%lld)", what, i, (long long)lens[i]);
        start[i] = s;
        s += lens[i];
        if (s > total)
            break;
    }
    if (s != total)
        return kv_err_set(e, "%s sum to %lld, the tensor has %lld tokens", what,
                          (long long)s, (long long)total);
    return 0;
}

/* A scratch buffer of at least n bytes from the job's pool: one slot per
 * item running at once, each kept and grown across the items it serves
 * (fresh buffers of this size come from mmap and are faulted in a page at
 * a time, which short items, as sparse MLA makes, paid for again and
 * again).  Returns the slot (give it back with mla_slot_put) or NULL. */
struct slot *mla_slot_get(struct job *j, size_t n)
{
    for (;;) {
        for (int i = 0; i < j->n_slots; i++) {
            struct slot *s = &j->slots[i];
            if (__atomic_exchange_n(&s->busy, 1, __ATOMIC_ACQUIRE))
                continue;
            if (s->n < n) {
                void *p = realloc(s->p, n);
                if (!p) {
                    __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
                    return NULL;
                }
                s->p = p;
                s->n = n;
            }
            return s;
        }
    }
}

void mla_slot_put(struct slot *s)
{
    __atomic_store_n(&s->busy, 0, __ATOMIC_RELEASE);
}

/* Items for every request: query tiles of at most ROWS_MAX rows and, for
 * requests of at most DECODE_Q queries, key chunks of CHUNK_K.  Returns
 * the count (0 on overflow of the allocation) with the parts' size. */
static size_t plan_items(struct job *j, size_t n_req, int per_head, struct item **out,
                         size_t *part_floats)
{
    size_t cap = 64, n = 0, pf = 0;
    struct item *it = malloc(cap * sizeof *it);
    if (!it)
        return 0;
    for (size_t b = 0; b < n_req; b++) {
        int64_t Lq = j->q_len[b], Lk = j->kv_len[b];
        int decode = Lq <= DECODE_Q && Lk > 0;
        int64_t ck = decode ? (j->chunk_k > 0 ? j->chunk_k : CHUNK_K) : (Lk > 0 ? Lk : 1);
        /* heads per item: one (naive), a group (a decode request of the
         * absorbed form, head_group), or all of them */
        int64_t g = per_head ? 1 : decode && j->head_group > 0 && j->head_group < j->H
                                   ? j->head_group : j->H;
        int64_t qt = ROWS_MAX / g > 0 ? ROWS_MAX / g : 1;
        for (int64_t h = 0; h < j->H; h += g) {
            for (int64_t i0 = 0; i0 < Lq; i0 += qt) {
                for (int64_t j0 = 0; j0 < (Lk > 0 ? Lk : 1); j0 += ck) {
                    if (n == cap) {
                        struct item *t = realloc(it, 2 * cap * sizeof *it);
                        if (!t) {
                            free(it);
                            return 0;
                        }
                        it = t;
                        cap *= 2;
                    }
                    struct item *x = &it[n++];
                    x->b = (int64_t)b;
                    x->h = h;
                    x->hn = h + g < j->H ? g : j->H - h;
                    x->i0 = i0;
                    x->i1 = i0 + qt < Lq ? i0 + qt : Lq;
                    x->j0 = j0;
                    x->j1 = j0 + ck < Lk ? j0 + ck : Lk;
                    x->part = pf;
                    pf += (size_t)(mla_item_rows(x) * (j->dv + 2));
                }
            }
        }
    }
    *out = it;
    *part_floats = pf;
    return n;
}

/* The items [a, z) of one (request, head, query tile) merged in chunk
 * order, their rows written to out [T, H, dv] and lse [T, H] (if not
 * NULL); orow scratch of dv floats.  Which thread merges a group never
 * changes the arithmetic. */
static void merge_group(const struct job *j, size_t a, size_t z, struct kv_tensor *out,
                        struct kv_tensor *lse, float *orow)
{
    const struct item *x = &j->items[a];
    size_t es = kv_dtype_size(out->dtype);
    int vec = 0;
#ifdef JOB_X86
    vec = kv_isa_has(KV_ISA_AVX512);
#endif
    int64_t n = mla_item_rows(x), heads = x->hn;
    for (int64_t r = 0; r < n; r++) {
        float m = -INFINITY, l = 0.0f;
        for (size_t c = a; c < z; c++) {
            float mc = j->parts[j->items[c].part + (size_t)r];
            m = mc > m || isnan(mc) ? mc : m;
        }
        memset(orow, 0, (size_t)j->dv * sizeof(float));
        for (size_t c = a; c < z; c++) {
            const float *p = j->parts + j->items[c].part;
            float mc = p[r], lc = p[n + r];
            if (mc == -INFINITY)
                continue;
            float f = mc == m ? 1.0f : expf(mc - m);
            l += lc * f;
            add_scaled(orow, p + 2 * n + r * j->dv, f, j->dv, vec);
        }
        float lv;
        int64_t i = x->i0 + r / heads, h = x->h + r % heads;
        size_t row = (size_t)((j->q_start[x->b] + i) * j->H + h);
        finish_row(m, l, j->dv, j->out_mul, orow, &lv, vec);
        kv_f32_store_n(out->dtype, orow, (char *)out->data + row * (size_t)j->dv * es,
                       (size_t)j->dv);
        if (lse)
            ((float *)lse->data)[row] = lv;
    }
}

/* The item idx, then, by the thread that finishes the last item of its
 * group, the group's merge: so the merges run on the pool too, beside
 * the other groups' items. */
static void run_item(void *ctx, size_t idx)
{
    struct job *j = ctx;
    j->fn(j, idx);
    size_t g = j->group[idx];
    if (__atomic_sub_fetch(&j->left[g], 1, __ATOMIC_ACQ_REL) != 0 ||
        __atomic_load_n(&j->failed, __ATOMIC_RELAXED))
        return;
    float *orow = malloc((size_t)j->dv * sizeof(float) + 1);
    if (!orow) {
        __atomic_store_n(&j->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    merge_group(j, j->first[g], j->first[g + 1], j->out, j->lse, orow);
    free(orow);
}

/* The groups of consecutive items of one (request, head, query tile):
 * group[i] for each item, first[g] .. first[g + 1] the items of group g
 * (n + 1 entries), left[g] its count.  One allocation at *mem. */
static int plan_groups(struct job *j, size_t n, void **mem)
{
    size_t *p = malloc((3 * n + 1) * sizeof *p);
    if (!p)
        return -1;
    j->group = p;
    j->first = p + n;
    j->left = p + 2 * n + 1;
    size_t g = 0;
    for (size_t a = 0; a < n;) {
        const struct item *x = &j->items[a];
        size_t z = a + 1;
        while (z < n && j->items[z].b == x->b && j->items[z].h == x->h &&
               j->items[z].i0 == x->i0)
            z++;
        j->first[g] = a;
        j->left[g] = z - a;
        for (size_t i = a; i < z; i++)
            j->group[i] = g;
        g++;
        a = z;
    }
    j->first[g] = n;
    *mem = p;
    return 0;
}

int mla_budget_take(size_t *left, size_t n, const char *what, struct kv_err *e)
{
    if (*left != SIZE_MAX && n > *left)
        return kv_err_set(e, "%s need %zu bytes, more than the %zu left of the memory "
                          "limit", what, n, *left);
    if (*left != SIZE_MAX)
        *left -= n;
    return 0;
}

size_t mla_f32_bytes(const struct kv_tensor *t)
{
    size_t b;
    return kv_size_mul(kv_tensor_numel(t), sizeof(float), &b) ? SIZE_MAX : b;
}

/* Plan, run and merge (mla_int.h). */
int mla_job_run(struct job *j, size_t n_req, int per_head, void (*fn)(void *, size_t),
                int n_threads, size_t max_bytes, enum kv_dtype od, int64_t T,
                struct kv_tensor *out, struct kv_tensor *lse, struct kv_err *e)
{
    struct kv_tensor o, l;
    size_t pf = 0, bytes;
    /* every item multiplies with sgemm, except on the bf16 tiles */
    if (j->bf16 == KV_BF16_NONE && kv_blas_load(e))
        return -1;
    /* the items run on the pool, each product on its thread: an OpenBLAS
     * that another part of the process (numpy, in Python) started with
     * threads of its own split some products otherwise, with other
     * roundings than the program's */
    if (j->bf16 == KV_BF16_NONE)
        kv_blas_set_threads(1);
    size_t n_items = plan_items(j, n_req, per_head, &j->items, &pf);
    kv_tensor_init(&o);
    kv_tensor_init(&l);
    if (n_items == 0)
        return kv_err_set(e, "out of memory");
    size_t o_bytes, l_bytes = 0, total;
    if (kv_size_mul(pf, sizeof(float), &bytes) ||
        kv_size_mul((size_t)T * (size_t)j->H, (size_t)j->dv, &o_bytes) ||
        kv_size_mul(o_bytes, kv_dtype_size(od), &o_bytes) ||
        (lse && kv_size_mul((size_t)T * (size_t)j->H, sizeof(float), &l_bytes)) ||
        kv_size_add(bytes, o_bytes, &total) || kv_size_add(total, l_bytes, &total) ||
        total > max_bytes) {
        free(j->items);
        return kv_err_set(e, "partial results, output and LSE need %zu bytes, more than "
                          "the %zu left of the memory limit", bytes + o_bytes + l_bytes, max_bytes);
    }
    j->parts = malloc(bytes ? bytes : 1);
    void *groups = NULL;
    int64_t oshape[3] = {T, j->H, j->dv};
    int rc = -1;
    if (!j->parts || plan_groups(j, n_items, &groups)) {
        kv_err_set(e, "out of memory (%zu bytes of partial results)", bytes);
        goto out;
    }
    if (kv_tensor_alloc(&o, od, 3, oshape, max_bytes, e) ||
        (lse && kv_tensor_alloc(&l, KV_F32, 2, oshape, max_bytes, e)))
        goto out;
    j->fn = fn;
    j->out = &o;
    j->lse = lse ? &l : NULL;
    /* one scratch slot per item that can run at once */
    j->n_slots = n_threads > 0 ? n_threads : kv_nproc();
    j->n_slots = j->n_slots > 256 ? 256 : j->n_slots < 1 ? 1 : j->n_slots;
    j->slots = calloc((size_t)j->n_slots, sizeof *j->slots);
    if (!j->slots) {
        kv_err_set(e, "out of memory");
        goto out;
    }
    kv_parallel_for(n_items, n_threads, run_item, j);
    if (j->failed) {
        kv_err_set(e, "out of memory in a worker");
        goto out;
    }
    kv_tensor_move(out, &o);
    if (lse)
        kv_tensor_move(lse, &l);
    rc = 0;
out:
    kv_tensor_release(&o);
    kv_tensor_release(&l);
    for (int i = 0; j->slots && i < j->n_slots; i++)
        free(j->slots[i].p);
    free(j->slots);
    free(groups);
    free(j->parts);
    free(j->items);
    return rc;
}
