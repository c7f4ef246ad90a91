/* kvattn.h - what the kvattn subcommands share: the inputs read from
 * files (loaded or mapped), the option parsers and writers (common.c), and
 * one entry per subcommand, cmd_NAME (main.c dispatches). */
#ifndef KVATTN_H
#define KVATTN_H
#include <argtable2.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/kv.h"
#include "attn/attn.h"
#include "attn/bf16.h"
#include "attn/bound.h"
#include "chunk/chunk.h"
#include "chunk/model.h"
#include "attn/cmp.h"
#include "attn/gen.h"
#include "attn/mla.h"
#include "chunk/latent.h"
#include "chunk/rope.h"
#include "chunk/toy.h"

/* A tensor read from a file: either loaded into memory or, for large
 * regular files, mapped read-only (then t.data points into the mapping and
 * must not be freed). */
struct input {
    struct kv_tensor t;
    void *map;
    size_t map_len;
};

void input_release(struct input *in);
int input_load(struct input *in, const char *path, size_t max_bytes,
               struct kv_err *e);
double process_cpu(void);
int parse_dtype_opt(struct arg_str *a, const char *opt, enum kv_dtype *out);
int parse_format(struct arg_str *a, enum kv_format *out);
int parse_max_mem(struct arg_str *a, size_t *out);
int parse_fp8_scale(struct arg_str *a, const char *opt, float *out);
int outputs_distinct(const char *const *opts, const char *const *paths, size_t n);
int parse_threads(struct arg_int *a, int *out);
int parse_lse_base(struct arg_str *a, int *base2);
void scale_tensor(struct kv_tensor *t, double f);
int mask_looks_binary(const struct kv_tensor *m);
int write_tensors(const char *path, enum kv_format fmt, int force,
                  const struct kv_tensor *const *ts, int n);
/* Outputs written together (a result and its LSE, Q K and V): all are
 * opened and written before any is committed, standard output flushed
 * first, so a failure in one leaves every file as it was.  At most 8. */
struct tensor_out {
    const char *path;                   /* NULL or "-": standard output */
    enum kv_format fmt;
    int force;
    const struct kv_tensor *const *ts;
    int n;
};
int write_outputs(const struct tensor_out *w, int n);
int parse_list(struct arg_str *a, const char *opt, int64_t **v, size_t *n);
int is_stdin(const char *path);
void shortest_double(char *buf, size_t n, double x);
int mem_after(size_t max_mem, const struct kv_tensor *const *ts, size_t n, size_t extra,
              size_t *left, struct kv_err *e);
int load_shared(const char *path, size_t max_mem, size_t *left, struct kv_tensor *t,
                struct kv_err *e);

int cmd_run(int argc, char **argv);
int cmd_merge(int argc, char **argv);
int cmd_cmp(int argc, char **argv);
int cmd_gen(int argc, char **argv);
int cmd_bound(int argc, char **argv);
int cmd_mla(int argc, char **argv);
int cmd_quant(int argc, char **argv);
int cmd_index(int argc, char **argv);
/* quant.c: an FP8 input (u8 bytes of enum kv_fp8 fmt) replaced by its f32
 * values, the first split elements times scale_a, the rest times scale_b. */
int fp8_dequant_input(struct input *in, int fmt, float scale_a,
                      float scale_b, size_t split, size_t max_bytes,
                      struct kv_err *e);
#endif
