/* kvmask.h - what the files of kvmask share: the options as parsed
 * (struct margs) and as understood (struct opts), and the steps main()
 * runs: the kind and its geometry (kind.c, segments.c), the element values
 * (values.c, ascend.c), the output (output.c). */
#ifndef KVMASK_H
#define KVMASK_H
#include <argtable2.h>
#include <ctype.h>
#include <errno.h>
#include <sys/stat.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "core/kv.h"
#include "mask/mask.h"
#include "mask/blockmask.h"

enum fmt { F_AUTO, F_NPY, F_TEXT, F_PGM, F_BITS, F_BLOCK, F_BSR, F_STATS };
enum preset { P_NONE, P_ATTN, P_SPLITFUSE, P_SPLITFUSE_310P, P_POOLING,
              P_MLA, P_PCP_MLA, P_SWA, P_MTP_CP };

#define KIND_ASCEND 7
#define KIND_LOCAL 8
#define KIND_TREE 9
#include "mask/ascend.h"

struct opts {
    int kind;                       /* index into kind_names */
    enum preset preset;
    struct kv_mask_spec spec;
    struct kv_mask_values vals;
    struct kv_mask_out out;
    enum fmt fmt;
    int nz, force, verbose, no_mask, quiet;
    int json;                       /* -f json: F_STATS as JSON */
    int64_t bq, bk, cell;
    int have_block;
    const char *output;
    size_t max_mem;
    /* storage the spec points into */
    int64_t *q_lens, *kv_lens, *positions, *seg_lens, *hole_lo, *hole_hi, *parents;
    uint8_t *seg_kinds;
};

struct margs {
    struct arg_str *kind, *n, *sq, *skv, *w, *pre, *next, *prefix, *qlens, *kvlens, *sys, *chunks, *question, *segments, *preset, *seqlens, *positions, *cachedt, *history, *cpsize, *cprank, *interleave, *align, *dtype, *fill, *batch, *heads, *format, *layout, *block, *bitorder, *cell, *output, *maxmem, *jobs, *chunksize, *parents;
    struct arg_lit *fallback, *keep, *text, *nomask, *force, *quiet, *verbose, *help, *version;
    struct arg_end *end;
};

/* common.c */
void opts_release(struct opts *o);
int lookup(const char *const *names, const char *s);
int parse_len(const char *s, const char *opt, int64_t min, int64_t *v);
int parse_list(const char *s, const char *opt, int64_t min,
               int64_t **v, size_t *n);

/* segments.c */
int read_segments(struct opts *o, const char *path, struct kv_err *e);

/* ascend.c */
int setup_mtp(struct opts *o, struct arg_str *history,
              struct arg_str *qlens, struct arg_str *cpsize,
              struct arg_str *cprank, struct arg_str *interleave,
              int other_geometry);
int setup_ascend(struct opts *o, int have_dtype, enum kv_dtype dt,
                 const char *cache_dtype, int64_t n, int have_n,
                 int fallback);

/* kind.c */
int kind_options(const struct margs *a, struct opts *o);
int geometry(const struct margs *a, struct opts *o, int64_t *nv_out);

/* values.c */
int mask_values(const struct margs *a, struct opts *o, int64_t nv);

/* output.c */
int outer_dims(const struct margs *a, struct opts *o);
int output_options(const struct margs *a, struct opts *o);
int run(struct opts *o);
/* Arrays of n rows (or segments) of bytes each, held by kvmask and again
 * by the mask it makes (the splitfuse positions, the mtp-cp key ranges,
 * the segments), must fit --max-mem: checked before they are made.  0, or
 * -1 with e naming what and the size. */
int rows_over(const struct opts *o, double n, double bytes, const char *what,
              struct kv_err *e);
#endif
