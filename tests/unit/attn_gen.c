/* attn_gen.c - lib/gen: each pattern produces the structure its comment
 * promises (measured on the causal attention of the last 128 of 256 rows,
 * in double), output is deterministic for any thread count, the seed
 * matters, and bad shapes are refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/gen.h"
#include "tap.h"

struct stats {
    double sink, local8, top8;   /* mean over heads */
};

/* Mean statistics over the heads; per head too when ph is not NULL (H of
 * them, each not divided by H). */
static struct stats measure(enum kv_gen_pattern pat, uint64_t seed, struct stats *ph)
{
    enum { H = 4, S = 256, D = 64 };
    struct kv_gen_spec s;
    struct kv_tensor q, k, v;
    struct kv_err e = {{0}};
    struct stats st = {0, 0, 0};
    memset(&s, 0, sizeof s);
    s.B = 1; s.Hq = H; s.Hkv = H; s.Lq = S; s.Lk = S; s.D = D;
    s.pattern = pat; s.seed = seed; s.dtype = KV_F32;
    kv_tensor_init(&q); kv_tensor_init(&k); kv_tensor_init(&v);
    if (kv_gen_qkv(&s, &q, &k, &v, &e))
        return st;
    const float *qf = q.data, *kf = k.data;
    static double p[S], col[S];
    for (int h = 0; h < H; h++) {
        struct stats before = st;
        memset(col, 0, sizeof col);
        for (int i = 128; i < S; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                double dot = 0;
                for (int d = 0; d < D; d++)
                    dot += (double)qf[(h * S + i) * D + d] * kf[(h * S + j) * D + d];
                p[j] = dot / 8.0;
                if (p[j] > mx)
                    mx = p[j];
            }
            for (int j = 0; j <= i; j++) {
                p[j] = exp(p[j] - mx);
                sum += p[j];
            }
            for (int j = 0; j <= i; j++) {
                p[j] /= sum;
                col[j] += p[j] / 128.0;
                if (j < 4)
                    st.sink += p[j] / (128.0 * H);
                if (i - j < 8)
                    st.local8 += p[j] / (128.0 * H);
            }
        }
        /* the 8 heaviest columns among 4..127 */
        for (int t = 0; t < 8; t++) {
            int best = 4;
            for (int j = 4; j < 128; j++)
                if (col[j] > col[best])
                    best = j;
            st.top8 += col[best] / H;
            col[best] = -1;
        }
        if (ph) {
            ph[h].sink = (st.sink - before.sink) * H;
            ph[h].local8 = (st.local8 - before.local8) * H;
            ph[h].top8 = (st.top8 - before.top8) * H;
        }
    }
    kv_tensor_release(&q); kv_tensor_release(&k); kv_tensor_release(&v);
    return st;
}

int main(void)
{
    struct stats r = measure(KV_GEN_RANDOM, 3, NULL), ro = measure(KV_GEN_ROPE, 3, NULL);
    struct stats lo = measure(KV_GEN_LOCAL, 3, NULL), si = measure(KV_GEN_SINK, 3, NULL);
    struct stats sp = measure(KV_GEN_STRIPES, 3, NULL);
    struct stats mx[4];
    measure(KV_GEN_MIX, 3, mx);

    TAP_OK(r.sink < 0.06 && r.local8 < 0.08 && r.top8 < 0.1,
           "random: flat (sink %.3f, local %.3f, top columns %.3f)", r.sink, r.local8, r.top8);
    TAP_OK(ro.local8 > 1.5 * r.local8, "rope: more mass near the diagonal than random "
           "(%.3f vs %.3f)", ro.local8, r.local8);
    TAP_OK(lo.local8 > 0.15 && lo.local8 > 2 * ro.local8,
           "local: a sharp band (%.3f of the mass within 8 keys)", lo.local8);
    TAP_OK(si.sink > 0.2, "sink: the first 4 keys take %.3f of the mass", si.sink);
    TAP_OK(sp.top8 > 0.15 && sp.top8 > 2 * r.top8,
           "stripes: 8 columns take %.3f of the mass (random %.3f)", sp.top8, r.top8);

    /* mix: kv head g takes rope, local, sink, stripes for g mod 4, all with
     * sinks (kvattn.1) */
    double min_sink = mx[0].sink;
    for (int h = 1; h < 4; h++)
        min_sink = fmin(min_sink, mx[h].sink);
    TAP_OK(min_sink > 0.15 && min_sink > 4 * r.sink,
           "mix: every head has sinks (least %.3f of the mass on 4 keys, random %.3f)",
           min_sink, r.sink);
    TAP_OK(mx[0].local8 > 1.5 * r.local8,
           "mix: head 0 is rope (%.3f near the diagonal, random %.3f)", mx[0].local8, r.local8);
    TAP_OK(mx[1].local8 > 0.15 && mx[1].local8 > mx[0].local8 && mx[1].local8 > mx[2].local8 &&
           mx[1].local8 > mx[3].local8,
           "mix: head 1 is local (%.3f within 8 keys, the most of the 4 heads)", mx[1].local8);
    TAP_OK(mx[2].sink > mx[0].sink && mx[2].sink > mx[1].sink && mx[2].sink > mx[3].sink,
           "mix: head 2 is sink (%.3f, the most of the 4 heads)", mx[2].sink);
    TAP_OK(mx[3].top8 > 2 * r.top8 && mx[3].top8 > mx[0].top8 && mx[3].top8 > mx[1].top8 &&
           mx[3].top8 > mx[2].top8,
           "mix: head 3 is stripes (8 columns take %.3f, random %.3f)", mx[3].top8, r.top8);

    /* determinism and the seed */
    struct kv_gen_spec s;
    struct kv_tensor a[3], b[3], c[3];
    struct kv_err e = {{0}};
    memset(&s, 0, sizeof s);
    s.B = 2; s.Hq = 8; s.Hkv = 2; s.Lq = 33; s.Lk = 50; s.D = 16;
    s.pattern = KV_GEN_MIX; s.seed = 11; s.dtype = KV_BF16; s.n_threads = 1;
    for (int i = 0; i < 3; i++) {
        kv_tensor_init(&a[i]); kv_tensor_init(&b[i]); kv_tensor_init(&c[i]);
    }
    int ok = kv_gen_qkv(&s, &a[0], &a[1], &a[2], &e) == 0;
    s.n_threads = 3;
    ok &= kv_gen_qkv(&s, &b[0], &b[1], &b[2], &e) == 0;
    s.seed = 12;
    ok &= kv_gen_qkv(&s, &c[0], &c[1], &c[2], &e) == 0;
    int same = ok, differ = ok;
    for (int i = 0; ok && i < 3; i++) {
        same &= a[i].nbytes == b[i].nbytes && memcmp(a[i].data, b[i].data, a[i].nbytes) == 0;
        differ &= memcmp(a[i].data, c[i].data, a[i].nbytes) != 0;
    }
    TAP_OK(same, "bit-identical for 1 and 3 threads");
    TAP_OK(differ, "another seed gives other tensors");
    TAP_OK(ok && a[0].ndim == 4 && a[0].shape[1] == 8 && a[0].shape[2] == 33 &&
           a[1].shape[1] == 2 && a[1].shape[2] == 50 && a[1].dtype == KV_BF16,
           "shapes Q [2, 8, 33, 16], K [2, 2, 50, 16], bf16");
    for (int i = 0; i < 3; i++) {
        kv_tensor_release(&a[i]); kv_tensor_release(&b[i]); kv_tensor_release(&c[i]);
    }
    s.Hkv = 3;
    TAP_OK(kv_gen_qkv(&s, &a[0], &a[1], &a[2], &e) == -1 && strstr(e.msg, "multiple"),
           "heads 8 over kv heads 3 refused: %s", e.msg);
    enum kv_gen_pattern pp;
    TAP_OK(kv_gen_pattern_parse("stripes", &pp, &e) == 0 && pp == KV_GEN_STRIPES &&
           kv_gen_pattern_parse("nope", &pp, &e) == -1, "pattern names parse");
    return tap_done();
}
