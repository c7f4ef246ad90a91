/* map_groups.h - one step's metadata with KV-cache groups (kvslot map
 * --model-config / --kv-groups), as vLLM 0.33.0's MultiGroupBlockTable
 * computes it: the groups of a model or of a spec (groups.h), each
 * group's block table given by name (gK=) or in group order, the fields
 * with the per-group ones named NAME.gK, and each group's step computed
 * in the group's own block size (no slot mapping for a Mamba group: its
 * table holds its state blocks).  kvslot map and the Python binding both
 * call these, in this order:
 *
 *   kv_map_groups_load     the groups, the context parallelism each
 *                          attention group's slot mapping is computed
 *                          under (vLLM 0.33.0's DCP: --cp-size, --cp-rank,
 *                          --interleave), and the options refused with
 *                          them (PCP, DCP beside a sliding window)
 *   kv_map_groups_tables   which table is whose
 *   kv_map_groups_fields   the fields, and the groups each is written for
 *   kv_map_groups_compute  once a group whose table is read (use_table),
 *                          with the table the caller read
 *   kv_map_groups_pad      the slot mapping's length (--pad-to)
 *   kv_map_groups_entries, kv_map_output_check  the output's size
 *                          against --max-mem, before any of it
 *   kv_map_groups_i32_check  before int32 output
 *
 * Each returns 0, or -1 with e filled; the programs exit 2 (usage) for
 * the refusals of load (unless *usage says 0), tables, fields and pad,
 * and 1 for the others.  Also here: the table reader and the checks map
 * without groups and plan share (kv_map_cp_parse, kv_map_table_read,
 * kv_map_table_len, kv_map_i32_check). */
#ifndef KV_MAP_GROUPS_H
#define KV_MAP_GROUPS_H

#include <stddef.h>
#include <stdint.h>
#include "core/err.h"
#include "slot/groups.h"
#include "slot/slot.h"

/* The options as given (NULL: absent); numbers are parsed and
 * range-checked here, after the refusals, as the program does. */
struct kv_map_groups_opts {
    const char *model_config;   /* a config.json path ("-": stdin), or */
    const char *kv_groups;      /* a spec (kvslot(1), GROUPS) */
    const char *block_size;     /* -B (NULL: vLLM's default, 16) */
    const char *max_model_len;  /* NULL: the config's; for a spec, each
                                   table's capacity */
    const char *kernel_block;   /* the backend's smallest kernel block
                                   (NULL: 16) */
    const char *cp_size;        /* --cp-size (DCP world; NULL: 1) */
    const char *cp_rank;        /* --cp-rank (NULL: 0) */
    const char *pcp_size;       /* --pcp-size (NULL: 1) */
    const char *pcp_rank;       /* --pcp-rank (NULL: 0) */
    const char *interleave;     /* --interleave (NULL: 1) */
    const char *cp_convention;  /* "pcp-dcp" or "dcp" (NULL: pcp-dcp) */
    const char *virtual_block;  /* "physical" or "kernel" (NULL:
                                   physical; the same with groups, each
                                   group's kernel block being its block) */
    int all_ranks;              /* --all-ranks was given (refused) */
    int kernel_block_size;      /* --kernel-block-size was given */
};

/* One group of the step. */
struct kv_map_group {
    enum kv_cache_kind kind;
    const char *path;           /* its table's name as given (after gK=);
                                   NULL: none given (kv_map_groups_tables) */
    size_t table;               /* its table's index among those given */
    int use_table;              /* its table is read and computed: an
                                   attention group, or a Mamba group
                                   whose block_table is written */
    unsigned char sel[KV_SLOT_NFIELDS]; /* its per-group fields written */
    struct kv_slot_geom geom;   /* in the group's block size */
    struct kv_slot_table t;     /* borrowed (kv_map_groups_compute) */
    struct kv_slot_step st;     /* an attention group's step */
};

/* The groups and the step; owns its arrays (kv_map_groups_release, safe
 * on an initialised struct), not the tables. */
struct kv_map_groups {
    size_t n;
    struct kv_map_group *g;
    size_t first;               /* the first attention group: the fields
                                   shared by every group are its */
    int64_t max_model_len;      /* given or the config's; 0: each table's */
    enum kv_slot_field fl[KV_SLOT_NFIELDS]; /* the fields, each once, in
                                               the order written */
    size_t nf;
    size_t n_slots;             /* slot_mapping.gK's length */
};

void kv_map_groups_init(struct kv_map_groups *m);
void kv_map_groups_release(struct kv_map_groups *m);

/* The groups of o into m.  On failure *usage is 1 for a refused option
 * (exit 2), 0 for a bad config file or no memory (exit 1). */
int kv_map_groups_load(struct kv_map_groups *m,
                       const struct kv_map_groups_opts *o, int *usage,
                       struct kv_err *e);

/* The --block-table values: every one "gK=NAME" (group K's) or none of
 * them (then one a group, in order).  Sets each group's path and table;
 * every group but a Mamba one needs a table. */
int kv_map_groups_tables(struct kv_map_groups *m, const char *const *specs,
                         size_t n_specs, struct kv_err *e);

/* The --fields list (NULL: map's defaults): NAME.gK writes group K's
 * field (block_table_indices, block_numbers, block_offsets, slot_mapping,
 * block_table), a plain per-group NAME every group's that has it; each
 * name once, at its first place (m->fl).  After kv_map_groups_tables. */
int kv_map_groups_fields(struct kv_map_groups *m, const char *fields,
                         struct kv_err *e);

/* Group k's step from its table t (n_sched rows at least; ids or ids32),
 * named name in messages: an attention group's fields in its block size
 * (with arrays, the token-level arrays of the fields written for it are
 * filled; without, only the counts, for a caller that streams them with
 * kv_slot_fill); a Mamba group's table kept for its block_table.  t is
 * borrowed until m is released. */
int kv_map_groups_compute(struct kv_map_groups *m, size_t k,
                          const struct kv_slot_table *t, const char *name,
                          const int64_t *scheduled, const int64_t *computed,
                          size_t n_sched, int arrays, struct kv_err *e);

/* Whether field f comes from a group's block size and table, and so is
 * written per group as NAME.gK (block_table_indices, block_numbers,
 * block_offsets, slot_mapping, block_table). */
int kv_map_field_per_group(enum kv_slot_field f);

/* m->n_slots: the scheduled tokens, or pad_to (>= them) when >= 0. */
int kv_map_groups_pad(struct kv_map_groups *m, int64_t pad_to,
                      struct kv_err *e);

/* Whether every value of the fields written fits int32 (for --dtype
 * i32), each attention group checked as kv_map_i32_check does. */
int kv_map_groups_i32_check(const struct kv_map_groups *m, struct kv_err *e);

/* The entries kvslot map writes, the size its --max-mem bounds before
 * any output: kv_map_entries for the fields fl[0..nf) of a step of
 * n_sched requests and n_tokens tokens (slot_mapping n_ranks rows of
 * n_slots, n_ranks > 1 with --all; block_table n_sched rows of n_cols),
 * kv_map_groups_entries for a step with groups (the shared fields once,
 * each group's own in its table's width); SIZE_MAX when the count
 * overflows.  kv_map_output_check refuses entries of entry_size bytes
 * (8, or 4 for int32 .npy) over max_mem: "the output of N entries needs
 * B bytes, more than --max-mem M; raise --max-mem" (exit 1). */
size_t kv_map_entries(const enum kv_slot_field *fl, size_t nf, size_t n_tokens,
                      size_t n_sched, size_t n_cols, size_t n_ranks, size_t n_slots);
size_t kv_map_groups_entries(const struct kv_map_groups *m, size_t n_sched);
int kv_map_output_check(size_t entries, size_t entry_size, size_t max_mem,
                        struct kv_err *e);

/* The context-parallel options of kvslot map and plan as given (NULL: not
 * given), each in its range, the ranks below their sizes and the
 * convention pcp-dcp or dcp: cp[0..4] = DCP size, DCP rank, PCP size, PCP
 * rank, interleave (1, 0, 1, 0, 1 when not given).  0 or -1 (a usage
 * error). */
int kv_map_cp_parse(const char *cp_size, const char *cp_rank, const char *pcp_size,
                    const char *pcp_rank, const char *interleave, const char *convention,
                    int64_t cp[5], struct kv_err *e);

/* The token-table row width a table of n_cols columns of K-token blocks
 * over W ranks holds (max_model_len when not given); -1 for a table
 * without columns (named name). */
int kv_map_table_len(size_t n_cols, int64_t K, int64_t W, const char *name,
                     int64_t *out, struct kv_err *e);

/* A block table FILE as kvslot map reads it (kv_read_int_table: text
 * rows or an integer .npy, "-" stdin) into *ids [*rows, *cols]; the
 * caller frees *ids.  A text row shorter than the table is padded with 0,
 * after checking that no request reaches past its row's end: request r
 * (of n_reqs, sched[r] tokens after comp[r], comp NULL for 0) needs
 * column (comp[r] + sched[r] - 1) / span, span being the positions a
 * column covers (the block size times the CP world); the message names
 * the request, the column, the row's line and its length.  span 0: no
 * request reads through the table (a Mamba group's state indices), short
 * rows are padded with 0 unchecked. */
int kv_map_table_read(const char *path, size_t max_mem, size_t n_reqs,
                      const int64_t *sched, const int64_t *comp, int64_t span,
                      int64_t **ids, size_t *rows, size_t *cols,
                      struct kv_err *e);

/* Whether the fields (bits 1 << enum kv_slot_field) of step st, table t
 * (kernel blocks of K tokens), row width M and a slot mapping of n_slots
 * entries fit int32: the block ids up to each request's last position
 * give its slots, the whole table matters for block_table.  The message
 * names the request, block or index and its value. */
int kv_map_i32_check(unsigned fields, const struct kv_slot_step *st,
                     const struct kv_slot_table *t, int64_t K, int64_t M,
                     size_t n_slots, struct kv_err *e);

#endif
