/* kvslot.h - what the kvslot subcommands share: the output writer
 * (out.c), the fields, options and output file (common.c), one step's
 * writer (step.c), and one entry per subcommand, cmd_NAME (main.c
 * dispatches). */
#ifndef KVSLOT_H
#define KVSLOT_H
#include <argtable2.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "core/kv.h"
#include "slot/mla_cp.h"
#include "slot/slot.h"
#include "slot/ccplan.h"
#include "slot/plan_cc.h"
#include "slot/plan.h"
#include "slot/pcp.h"

/* The fields, in the order of fnames (common.c). */
enum fid {
    F_STEP, F_REQ_IDS, F_QSL, F_SEQ_LENS, F_NUM_COMPUTED, F_NUM_SCHEDULED,
    F_POSITIONS, F_REQ_INDICES, F_TOKEN_INDICES, F_BTI, F_BLOCK_NUMBERS,
    F_BLOCK_OFFSETS, F_SLOT_MAPPING, F_CP_OWNER, F_MAX_QUERY_LEN,
    F_NUM_TOKENS, F_NUM_REQS, F_BLOCK_TABLE, F_WAITING, F_BLOCKED,
    F_PREEMPTED, F_FINISHED, F_FREE_BLOCKS, F_NUM_CACHED, F_SHARED,
    F_EVICTED,
    NF
};
extern const char *const fnames[NF];

/* struct out's npy: 0 text, 1 .npy, OUT_JSON plan -f json */
enum { OUT_JSON = 2 };

struct out {
    FILE *f;
    int npy;
    enum kv_dtype dtype;      /* KV_I64 or KV_I32 */
    struct kv_err err;
    int failed;
    const char *field;        /* the token field being written */
    FILE *held;               /* the real output while o->f is a memory
                                 stream (out_hold), else NULL */
    char *mem;
    size_t mem_len;
    char *buf;                /* text / conversion buffer */
    size_t cap, len;
};

/* A token-level field of a step written in pieces, never whole in memory:
 * n_ranks rows (one per CP rank, or 1) of n_tokens values followed by -1
 * up to row_len. */
struct tokfield {
    const struct kv_slot_geom *g;
    const struct kv_slot_table *t;
    size_t n_reqs;
    const int64_t *sched, *comp;
    enum kv_slot_field f;
    size_t n_ranks, row_len;
    int two_d;
};

#define N_ELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Common output options of every subcommand. */
struct common {
    struct arg_str *fields, *format, *dtype, *output;
    struct arg_lit *force, *help, *version;
    struct arg_end *end;
};

/* The context-parallel options map and plan share, and their values. */
struct cp_args {
    struct arg_str *cps, *cpr, *pcps, *pcpr, *il, *conv;
    struct arg_lit *all;
    int64_t W, R, P, Q, I;
};

struct stepview {
    const struct kv_slot_step *s;
    const int64_t *slot_all;   /* [n_ranks, n_slots] with --all-ranks */
    size_t n_ranks;
    size_t pad_to;             /* slot_mapping length (>= n_tokens) */
    const int64_t *slot_padded;/* n_slots entries */
    const int64_t *table;      /* block table rows */
    size_t t_rows, t_cols;
    const struct kv_plan_step *plan;  /* NULL for map */
    /* plan with KV-cache groups (0 without): each group's table
     * [n_groups][t_rows][t_cols] and slot mapping [n_groups][pad_to];
     * bt_sel / sm_sel: 1 for each group whose field is written */
    size_t n_groups;
    const int64_t *gtables, *gslots;
    const unsigned char *bt_sel, *sm_sel;
};

/* out.c */
int out_init(struct out *o, FILE *f, int npy, enum kv_dtype dtype);
void out_release(struct out *o);
void out_flush(struct out *o);
void out_hold(struct out *o);
void out_unhold(struct out *o);
void out_bytes(struct out *o, const char *s, size_t n);
/* out.c: "name":value of plan -f json, f (a jansson value) written
 * compact and freed. */
struct json_t;
void out_json_field(struct out *o, const char *name, struct json_t *f);
void emit(struct out *o, const char *name, int ndim,
          const int64_t *shape, const int64_t *v);
void emit_scalar(struct out *o, const char *name, int64_t v);
void emit_vec(struct out *o, const char *name, const int64_t *v,
              size_t n);
void emit_mat(struct out *o, const char *name, const int64_t *v,
              size_t rows, size_t cols);
void emit_tokens(struct out *o, const char *name,
                 const struct tokfield *tf);

/* common.c */
unsigned slot_want(enum fid f);
int parse_fields(const char *s, int is_plan, enum fid *list,
                 size_t *n);
int opt_i64(struct arg_str *a, const char *name, int64_t min,
            int64_t max, int64_t def, int64_t *out);
int opt_list(struct arg_str *a, const char *name, int64_t min,
             int64_t **out, size_t *n);
void common_make(struct common *c);
int common_add(struct common *c, void **t);
int open_output(struct common *c, struct kv_out *ko, struct out *o);
int close_output(struct kv_out *ko, struct out *o);
int parse_sub(const char *sub, void **argtable, int argc, char **argv,
              struct arg_lit *help, struct arg_lit *version,
              struct arg_end *end, const char *synopsis);
int slot_options_used(const enum fid *fl, size_t nf, int pad, int all);
size_t mem_add(size_t a, size_t b);
size_t mem_mul(size_t a, size_t b);
int mem_check(size_t need, size_t max_mem, const char *what);
int cp_args_make(struct cp_args *c, void **t);
int cp_numbers(struct cp_args *c);
int cp_options(const struct cp_args *c, int64_t B, int64_t *cpw,
               int64_t *cpr);

/* step.c */
void write_step(struct out *o, const enum fid *fl, size_t nf,
                const struct stepview *v);

/* local.c: the virtual batches of chunked local attention (kvslot local
 * and kvslot step --chunk-size); comp may be NULL.  Returns an exit code. */
int run_local(struct common *c, int64_t C, int64_t B, const char *table,
              const int64_t *sched, size_t n_sched, const int64_t *comp);

/* plan_cc.c */
char *cc_help_text(void);

/* the subcommands, one file each (plan: plan.c, --chunk-cache plan_cc.c) */
int cmd_map(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_plan_sched(int argc, char **argv);
int cmd_plan_cc(int argc, char **argv);
int cmd_pcp(int argc, char **argv);
int cmd_cplens(int argc, char **argv);
int cmd_reorg(int argc, char **argv);
int cmd_groups(int argc, char **argv);
int cmd_local(int argc, char **argv);
int cmd_step(int argc, char **argv);
int cmd_hash(int argc, char **argv);

#endif
