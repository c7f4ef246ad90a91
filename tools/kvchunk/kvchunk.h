/* kvchunk.h - what the kvchunk subcommands share: the option groups
 * and their values (common.c), the inputs (input.c), and one entry per
 * subcommand, cmd_NAME (main.c dispatches). */
#ifndef KVCHUNK_H
#define KVCHUNK_H
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <pthread.h>
#include <unistd.h>
#include <argtable2.h>
#include <xxhash.h>
#include <jansson.h>
#include "core/kv.h"
#include "chunk/chunk.h"
#include "chunk/blob.h"
#include "chunk/store.h"
#include "chunk/model.h"
#include "chunk/latent.h"
#include "chunk/rope.h"
#include "chunk/toy.h"
#include "chunk/assemble.h"
#include "chunk/slice.h"
#include "chunk/rope_selftest.h"
#include "sim/sim.h"

enum { EXIT_MISS = 3 };

struct ns_args {
    struct arg_str *model_config, *model, *tokenizer, *lora, *salt, *dtype,
                   *shape, *rope, *theta, *rotary_dim, *scaling, *nope,
                   *chunk_context, *base_policy;
};

struct store_args {
    struct arg_str *store, *timeout;
};

struct common {
    struct arg_lit *help, *verbose, *quiet;
    struct arg_str *max_mem;
    struct arg_end *end;
};

struct table {
    void *v[80];
    int n;
};

/* The output options -f (when formats is given), -o and --force. */
struct out_args {
    struct arg_str *fmt, *out;
    struct arg_lit *force;
};

struct nsv {
    struct kv_namespace ns;
    int have_shape, have_dtype;
};

struct prompt_args {
    struct arg_str *sep, *sep_ids;
    struct arg_lit *ids;
    struct arg_file *prompt;
};

struct tok_args {
    struct arg_str *tokens, *context;
};

/* common.c */
void add(struct table *t, void *a);
void add_ns(struct table *t, struct ns_args *a, int with_shape);
void add_store(struct table *t, struct store_args *a);
void add_out(struct table *t, struct out_args *a, const char *formats);
void add_common(struct table *t, struct common *c);
const char *sval(struct arg_str *a);
int parse(struct table *t, struct common *c, int argc, char **argv,
          const char *synopsis);
void free_table(struct table *t);
int ns_values(const struct ns_args *a, int verbose, struct nsv *v,
              struct kv_err *e);
int ns_finish(struct nsv *v, struct kv_err *e);
int store_is_redis(const struct store_args *a);
int store_usage(const struct store_args *a, double *timeout);
int open_store(const struct store_args *a, int read_only,
               int64_t ttl, int durable, size_t lim, struct kv_store **s);
int max_mem(const struct common *c, size_t *out);
int out_format(struct arg_str *f, FILE *out, int force,
               enum kv_format *fmt);
int report_format(struct arg_str *f, int *json);
int report_json(FILE *f, json_t *o);
int chunk_req(const struct kv_namespace *ns, const int32_t *ctx,
              size_t n_ctx, const int32_t *tok, size_t n,
              struct kv_chunk_req *r, struct kv_err *e);
int load_tokens(const char *path, const char *opt, size_t lim,
                struct kv_tokens *t, struct kv_err *e);

/* input.c */
void add_prompt(struct table *t, struct prompt_args *p);
int read_prompt(const struct prompt_args *p, size_t lim, size_t per_seg,
                struct kv_split *sp, struct kv_err *e);
int prompt_usage(const struct prompt_args *p);
void add_tok(struct table *t, struct tok_args *a);
int stdin_once(const struct tok_args *a, struct arg_str *kv,
               struct kv_err *e);
int context_used(const struct tok_args *a, const struct nsv *v,
                 struct kv_err *e);
int tok_values(const struct tok_args *a, size_t lim,
               struct kv_tokens *tok, struct kv_tokens *ctx,
               struct kv_err *e);

/* get.c */
const char *status_name(int st);

/* the subcommands, one file each (store.c holds ls to unpin, sim*.c sim) */
int cmd_split(int argc, char **argv);
int cmd_key(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_put(int argc, char **argv);
int cmd_get(int argc, char **argv);
int cmd_assemble(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_stat(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_fsck(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_pin(int argc, char **argv);
int cmd_unpin(int argc, char **argv);
int cmd_toy(int argc, char **argv);
int cmd_slice(int argc, char **argv);
int cmd_selftest_rope(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_sim_gen(int argc, char **argv);
int cmd_sim_from_split(int argc, char **argv);
int cmd_sim_replay(int argc, char **argv);

#endif
