/* rope.h - rotary position embedding (RoPE): frequencies, scalings, direct
 * rotation at a position, and the exact move of a stored K by a position
 * delta (spec chunk-cache.md section 2).
 *
 * A key head vector x of head_dim D has its first r = rotary_dim dims
 * rotated in r/2 planes; plane i turns by the angle p * theta_i at position
 * p.  NeoX style pairs (x_i, x_{i+r/2}); GPT-J style pairs (x_2i, x_2i+1).
 * Because rotations in one plane add, R(delta) R(p0) = R(p0 + delta): a K
 * stored at base position p0 moves to p0 + delta with one rotation.
 *
 * Precision rule of kvtools: angles (theta_i, delta * theta_i, the reduction
 * mod 2 pi, sin and cos) in double; the rotation itself in f32 for f16/bf16
 * storage (in double for f32 storage); one rounding to the storage dtype.
 * The cos/sin of a move are unit: a scaling's attention factor (YaRN mscale)
 * already lives in the stored K and is not applied again.
 */
#ifndef KV_ROPE_H
#define KV_ROPE_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "core/tensor.h"

enum kv_rope_style {
    KV_ROPE_NONE = 0,    /* no RoPE (NoPE, ALiBi): K is position-free */
    KV_ROPE_NEOX,        /* rotate_half: pairs (i, i + r/2) */
    KV_ROPE_GPTJ,        /* interleaved: pairs (2i, 2i + 1) */
    KV_ROPE_LEARNED      /* learned absolute positions: cannot be moved */
};

enum kv_rope_scaling {
    KV_ROPE_SCALE_NONE = 0,
    KV_ROPE_SCALE_LINEAR,   /* theta_i / factor */
    KV_ROPE_SCALE_NTK,      /* static NTK: base * factor^(r/(r-2)) */
    KV_ROPE_SCALE_LLAMA3,   /* wavelength-piecewise (Llama 3.1) */
    KV_ROPE_SCALE_YARN,     /* per-plane blend of interpolated/extrapolated */
    KV_ROPE_SCALE_DYNAMIC   /* HF dynamic NTK: default below max_pos only */
};

#define KV_ROPE_MAX_NOPE 256

/* A RoPE description.  kv_rope_init() fills the defaults (neox, theta
 * 10000, rotary_dim = head_dim, no scaling, llama3 1/4/8192, yarn 32/1). */
struct kv_rope {
    enum kv_rope_style style;
    int head_dim;            /* D */
    int rotary_dim;          /* r: even, 2 <= r <= D; 0 = D */
    double theta;            /* base */
    enum kv_rope_scaling scaling;
    double factor;           /* linear, ntk, llama3, yarn, dynamic */
    double low_freq_factor;  /* llama3 */
    double high_freq_factor; /* llama3 */
    int64_t original_max_pos; /* llama3, yarn: original max positions */
    double beta_fast;        /* yarn */
    double beta_slow;        /* yarn */
    double attention_factor; /* yarn mscale; 0 = 0.1 ln(factor) + 1 */
    int yarn_truncate;       /* yarn: round the correction range to whole
                              * planes (HF/vLLM default 1; gpt-oss 0) */
    int64_t max_pos;         /* dynamic: max_position_embeddings */
    /* Layers without RoPE in a RoPE model (Llama 4, Command A interleave
     * NoPE layers): their K is never rotated.  Sorted, distinct. */
    int n_nope;
    int32_t nope_layers[KV_ROPE_MAX_NOPE];
    /* Layers with a RoPE of their own (Gemma 3's sliding-window layers,
     * "rope_local_base_freq"): base local_theta, no scaling, the same
     * style and rotary dim.  Sorted, distinct; none when n_local is 0. */
    double local_theta;
    int n_local;
    int32_t local_layers[KV_ROPE_MAX_NOPE];
};

void kv_rope_init(struct kv_rope *r, int head_dim);

/* Parse a style name: "neox", "gptj", "none", "learned". */
int kv_rope_parse_style(const char *s, enum kv_rope_style *out,
                        struct kv_err *e);

/* Parse a scaling: "none", "linear:4", "linear:factor=4", "ntk:factor=2",
 * "llama3:factor=8,low_freq_factor=1,high_freq_factor=4,
 * original_max_position_embeddings=8192" (short keys: low, high, orig),
 * "yarn:factor=4,orig=32768,beta_fast=32,beta_slow=1[,attention_factor=m]
 * [,truncate=0]",
 * "dynamic:factor=2,max_position_embeddings=4096" (short: max_pos).  A bare
 * number after the colon is the factor. */
int kv_rope_parse_scaling(const char *s, struct kv_rope *r, struct kv_err *e);

/* Parse "3,7,11" into r's NoPE layers (sorted, duplicates dropped). */
int kv_rope_parse_nope(const char *s, struct kv_rope *r, struct kv_err *e);
/* Is layer l a NoPE layer of r? */
int kv_rope_layer_is_nope(const struct kv_rope *r, int64_t layer);
/* Is layer l one of r's local layers (with a RoPE of their own)? */
int kv_rope_layer_is_local(const struct kv_rope *r, int64_t layer);
/* The RoPE of r's local layers: r with theta = local_theta, no scaling and
 * no layer lists. */
void kv_rope_local(const struct kv_rope *r, struct kv_rope *out);

/* Validate r (dims, theta, factors).  Fills e with the reason. */
int kv_rope_check(const struct kv_rope *r, struct kv_err *e);

/* The rotary dim actually used (r->rotary_dim or head_dim). */
int kv_rope_dim(const struct kv_rope *r);

/* Canonical one-line description, the same on every machine (doubles as
 * %.17g), for the key's namespace digest and for `kvchunk key -v`:
 * "neox theta=10000 rotary_dim=128 head_dim=128 scaling=none", then the
 * scaling's parameters, then " nope_layers=3,7" when there are any, then
 * " local_theta=10000 local_layers=0,1,2" when some layers have a base of
 * their own.
 * Returns the length, or -1 when it does not fit in len. */
int kv_rope_describe(const struct kv_rope *r, char *buf, size_t len);

/* The r/2 frequencies theta_i (radians per position) in double, scalings
 * applied.  inv_freq must hold kv_rope_dim(r)/2 doubles. */
int kv_rope_inv_freq(const struct kv_rope *r, double *inv_freq,
                     struct kv_err *e);

/* The attention factor a scaling folds into cos/sin when K is computed
 * (YaRN: 0.1 ln(factor) + 1 unless given; 1 otherwise).  Used by the toy
 * projection; never by a move. */
double kv_rope_mscale(const struct kv_rope *r);

/* Angle p * theta reduced to [-pi, pi], in double. */
double kv_rope_angle(int64_t p, double theta);

/* Can K computed for n_tokens tokens at base position p0 be moved to p_new
 * exactly?  Refuses learned absolute positions (unless p_new == p0) and HF
 * dynamic NTK once a sequence would reach past max_pos, moved or not
 * (seq_end is the length of the whole sequence the chunk lands in, 0 =
 * p_new + n_tokens).
 * Returns 0 or -1 with the reason. */
int kv_rope_can_move(const struct kv_rope *r, int64_t p0, int64_t p_new,
                     int64_t n_tokens, int64_t seq_end, struct kv_err *e);

/* A prepared move by delta: cos/sin per rotary dim, laid out so that
 * out[j] = x[j] * c[j] - x[partner(j)] * s[j] for j < r (partner = j +- r/2
 * for NeoX, j ^ 1 for GPT-J; s carries the sign).  Float and double
 * copies.  Owned by the struct; kv_rope_delta_release() frees, safe on a
 * zeroed struct. */
struct kv_rope_delta {
    enum kv_rope_style style;
    int head_dim, rotary_dim;
    int identity;            /* delta == 0 or style none: a plain copy */
    float *c, *s;            /* r floats each */
    double *cd, *sd;         /* r doubles each */
};

int kv_rope_delta_init(struct kv_rope_delta *d, const struct kv_rope *r,
                       int64_t delta, struct kv_err *e);
void kv_rope_delta_release(struct kv_rope_delta *d);

/* Rotate n_vecs consecutive head vectors (each head_dim elements of dtype
 * f16, bf16 or f32) from src into dst (may be the same buffer: in place).
 * Dims past rotary_dim are copied.  kv_rope_rotate picks a SIMD path at run
 * time; kv_rope_rotate_ref is the plain scalar reference.  They agree bit
 * for bit. */
void kv_rope_rotate(const struct kv_rope_delta *d, enum kv_dtype dtype,
                    const void *src, void *dst, size_t n_vecs);
void kv_rope_rotate_ref(const struct kv_rope_delta *d, enum kv_dtype dtype,
                        const void *src, void *dst, size_t n_vecs);
/* Tests compare the paths: 0 = the fastest the CPU has (AVX-512, AVX2),
 * 1 = the scalar reference only, 2 = at most AVX2. */
void kv_rope_force_scalar(int on);

/* Rotate one head vector x (head_dim doubles) in place to position p with
 * the scaled frequencies inv_freq (from kv_rope_inv_freq), times mscale:
 * the float64 "direct" rotation used by references and the toy model. */
void kv_rope_apply_f64(const struct kv_rope *r, const double *inv_freq,
                       int64_t p, double mscale, double *x);

/* Move a chunk's KV [L, 2, T, Hkv, D] by delta from src into dst: every
 * layer's K slab rotated, every V slab copied.  dst_stride_t is the number
 * of tokens in dst's T axis (dst's layout [L, 2, dst_stride_t, Hkv, D]
 * with the chunk at token offset dst_off), so a chunk lands directly in an
 * assembled tensor.  Elements of dtype f16/bf16/f32.  The K of a NoPE
 * layer is copied; a local layer's is turned with its own RoPE. */
struct kv_rope_chunk {
    int64_t n_layers, n_tokens, n_kv_heads, head_dim;
    enum kv_dtype dtype;
};
int kv_rope_move_kv(const struct kv_rope *r, const struct kv_rope_chunk *c,
                    int64_t delta, const void *src, void *dst,
                    int64_t dst_stride_t, int64_t dst_off, struct kv_err *e);

/* The error of a move, measured: n_vecs random raw head vectors k (each
 * element uniform in [-1, 1), from seed) are rotated to p0 in double and
 * rounded once to dtype (what an engine stores), moved to p_new by
 * kv_rope_rotate, and compared with the exact double rotation of k to
 * p_new.  Errors are relative to each vector's |k|max; an ulp is that of
 * 1.0 in dtype (2^-7 bf16, 2^-10 f16, 2^-23 f32).  Refusals of
 * kv_rope_can_move are errors. */
struct kv_rope_error {
    double max_rel, rms_rel;   /* max and RMS of |moved - exact| / |k|max */
    double max_ulp, rms_ulp;   /* the same in ulps of dtype */
    size_t n;                  /* values compared */
};
int kv_rope_measure(const struct kv_rope *r, enum kv_dtype dtype, int64_t p0,
                    int64_t p_new, size_t n_vecs, uint64_t seed,
                    struct kv_rope_error *out, struct kv_err *e);

#endif
