/* kvxattn.h - what the kvxattn subcommands share: the options, the
 * inputs (input.c), the output formats, the writers and the progress line
 * (common.c), and one entry per subcommand, cmd_NAME (main.c
 * dispatches). */
#ifndef KVXATTN_H
#define KVXATTN_H
#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <argtable2.h>
#include "core/kv.h"
#include "mask/blockmask.h"
#include "attn/bf16.h"
#include "attn/xattn.h"

enum { FMT_AUTO, FMT_NPY, FMT_TEXT, FMT_PGM, FMT_STATS, FMT_BLOCK,
       FMT_ROWS, FMT_JSON };

struct opts {
    const char *qpath, *kpath, *mpath;
    const char *out, *sums, *per_block, *thr_file;
    int thd, fmt, force, verbose, quiet, text;
    int64_t layer;
    double threshold;
    struct kv_xattn_opts x;
};

/* An input tensor, read into memory or mapped from its file. */
struct input {
    struct kv_tensor t;
    enum kv_dtype src;  /* the file's dtype (t is f32) */
    void *map;          /* mapping to munmap, or NULL (t owns its data) */
    size_t map_len;
    int unchecked;      /* a bf16 mapping whose finite check was deferred */
};

/* input.c */
void input_release(struct input *in);
int load_qk(const char *path, const char *what, int thd, size_t max,
            int nthreads, int bf16, struct input *in, struct kv_err *e);
int input_check(struct input *in, const char *what, const char *path,
                int thd, int nthreads, struct kv_err *e);
int read_thresholds(const char *path, int64_t layer, int64_t hq,
                    size_t max, double **out, struct kv_err *e);

/* common.c */
int write_pgm(FILE *f, const struct kv_tensor *m, struct kv_err *e);
void write_density(FILE *f, const struct kv_tensor *m, int causal,
                   int64_t q_offset, int64_t lq, int64_t block,
                   const char *prefix, const double *rmin,
                   const double *rmean);
int write_block(FILE *f, const struct kv_tensor *m, int causal,
                int64_t q_offset, int64_t lq, int64_t lk, int64_t bs,
                int text, struct kv_err *e);
void on_progress(void *ctx, uint64_t done, uint64_t total);
/* A failure for scores not finite in f32 (e from the library) when an
 * option the user gave (given) scaled them: e is said again with what it
 * did ("divided by", "--norm", x) and the way out ("larger"). */
void scores_overflow(struct kv_err *e, int given, const char *how,
                     const char *opt, double x, const char *fix);
/* --max-mem counts what the tools hold beside the library's work (the
 * masks spread out, the results, the BlockMask tensors): mem_add adds
 * a * b * c * size bytes to *sum (-1 on overflow); mem_take takes extra
 * out of the budget *max (0 = none) before the work, or fills e with the
 * size needed; mem_need turns the library's refusal under what was left
 * into the whole need against the real max. */
int mem_add(size_t *sum, size_t a, size_t b, size_t c, size_t size);
int mem_take(size_t *max, size_t extra, struct kv_err *e);
void mem_need(struct kv_err *e, size_t extra, size_t max);
int parse_format(const char *s, int recall, int *fmt);
/* Writes t as one .npy file to path, complete or not at all: a side
 * output (--sums, --per-block), written before the main one. */
/* A side output (--sums, --per-block) opened and written but not
 * committed: kv_out_commit_all commits it with the main output, so a
 * failure in either leaves both files as they were.  No path: so stays
 * empty (committing or aborting it does nothing). */
int open_side_npy(struct kv_out *so, const char *path, const struct kv_tensor *t,
                  struct kv_err *e);

int cmd_estimate(int argc, char **argv);
int cmd_recall(int argc, char **argv);
#endif
