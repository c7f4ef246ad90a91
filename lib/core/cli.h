/* cli.h - what every kvtools program shares: its name, the error funnel,
 * exit codes, stdin/stdout handling, safe output files, limits, threads,
 * a progress line, and small argument parsers.
 *
 * This is the one module of libkv that talks to the terminal, and it is used
 * only by tools/; it never exits on its own either: functions return codes
 * that main() returns.
 */
#ifndef KV_CLI_H
#define KV_CLI_H

#include <stdint.h>
#include <stdio.h>
#include <stddef.h>
#include "core/err.h"
#include "core/tensor.h"

enum { KV_EXIT_OK = 0, KV_EXIT_DATA = 1, KV_EXIT_USAGE = 2 };

/* Program name from argv[0] (basename). */
void kv_setprogname(const char *argv0);
const char *kv_progname(void);

/* "prog: message\n" on stderr. */
void kv_warn(const char *fmt, ...) KV_PRINTF(1, 2);
/* kv_warn then return KV_EXIT_DATA. */
int kv_fail(const char *fmt, ...) KV_PRINTF(1, 2);
/* Print the error in e ("prog: msg") and return KV_EXIT_DATA. */
int kv_fail_err(const struct kv_err *e);
/* "prog: message\nTry 'prog --help' for more information.\n", returns 2;
 * a message about resources ("out of memory", from a library call whose
 * errors are otherwise usage errors) is printed alone and returns 1. */
int kv_usage(const char *fmt, ...) KV_PRINTF(1, 2);

/* Standard argtable handling: prints --help/--version, or the parse errors
 * to stderr.  Returns -1 to go on, or the exit code main should return.
 * help/version may be NULL.  synopsis is printed by --help before the
 * option glossary; extra (may be NULL) after it. */
struct arg_lit; struct arg_end;
int kv_arg_parse(void **argtable, int argc, char **argv,
                 struct arg_lit *help, struct arg_lit *version,
                 struct arg_end *end, const char *synopsis,
                 const char *extra);

/* Name of a path for messages: "<stdin>"/"<stdout>" for "-" or NULL. */
const char *kv_path_name(const char *path, int is_output);

/* Open an input: "-" or NULL = stdin.  On failure fills e with
 * "cannot open 'x': reason" and returns NULL. */
FILE *kv_open_in(const char *path, struct kv_err *e);
void kv_close_in(FILE *f);

/* Output to a file or stdout.  kv_out_open("-"/NULL) uses stdout; a path is
 * written to a temporary file beside it which kv_out_commit() renames into
 * place after a checked fclose; kv_out_abort() removes it.  Nothing is
 * written to the final path on failure.  A symbolic link is followed (the
 * temporary file goes beside the file it names, and the link stays); a
 * path that exists and is not a regular file (a device such as /dev/null,
 * a FIFO) or names a descriptor (/dev/stdout, /dev/fd/N) is written in
 * place. */
struct kv_out {
    FILE *f;
    char *path;    /* the path given, NULL for stdout */
    char *tmp;     /* temporary path; NULL when writing in place */
    char *dest;    /* the file the path names, links followed (or NULL) */
};
int kv_out_open(struct kv_out *o, const char *path, struct kv_err *e);
int kv_out_commit(struct kv_out *o, struct kv_err *e);
void kv_out_abort(struct kv_out *o);
/* Commit outputs that belong together (a result and its LSE): standard
 * output is flushed first, then each file is renamed into place in order;
 * on the first failure the rest are aborted, so a failed write leaves the
 * old files (all of them but in a failed rename between two of them). */
int kv_out_commit_all(struct kv_out *const *o, size_t n, struct kv_err *e);

/* Refuse two outputs that would land in one place: paths[i] names the file
 * of option opts[i] (NULL = not given, "-" = standard output).  Two that
 * both write standard output, or that name one file (the same path, links
 * and ".." resolved, or the same inode), fill e with "OPT1 and OPT2 both
 * write 'x'" and return -1; a device or FIFO (/dev/null) may be named
 * twice.  Call it before any work: the caller reports a usage error. */
int kv_outputs_distinct(const char *const *opts, const char *const *paths,
                        size_t n, struct kv_err *e);

/* Flush and close stdout, checking for errors (ENOSPC, EPIPE...).  Returns
 * 0 or prints the error and returns KV_EXIT_DATA. */
int kv_close_stdout(void);

/* Output formats shared by the tensor-producing programs. */
enum kv_format { KV_FMT_AUTO = 0, KV_FMT_NPY, KV_FMT_TEXT };
/* Is stdout (or the given stream) a terminal? */
int kv_isatty(FILE *f);
/* Refuse to write binary to a terminal unless forced: returns 0 when it is
 * fine, else prints why and returns KV_EXIT_USAGE. */
int kv_check_binary_ok(FILE *f, int force);

/* Write the tensors t[0..n) to path ("-" or NULL = stdout, a file through
 * kv_out_open) as one .npy stream or as text; KV_FMT_AUTO is text on a
 * terminal and .npy elsewhere, and .npy goes to a terminal only when
 * forced.  Prints any error; returns the exit status (0, 1 or 2). */
int kv_write_tensors(const char *path, enum kv_format fmt, int force,
                     const struct kv_tensor *t, size_t n);

/* Memory limit: parse "--max-mem" ("512M", "4G", "75%", plain bytes); NULL
 * gives the default, 75% of physical RAM. */
int kv_parse_size(const char *s, size_t *out, struct kv_err *e);
size_t kv_default_max_mem(void);
int kv_parse_max_mem(const char *s, size_t *out, struct kv_err *e);

/* Threads: 0 = all online cores.  kv_parallel_for calls fn(ctx, i) for i in
 * [0, n) over nthreads pthreads, handing out indices dynamically.  The
 * result must not depend on which thread ran which index. */
int kv_nproc(void);
void kv_parallel_for(size_t n, int nthreads, void (*fn)(void *ctx, size_t i),
                     void *ctx);

/* Progress line on stderr, only when stderr is a terminal, not quiet, and
 * the work has run for more than about a second.  done/total in any unit. */
struct kv_progress {
    const char *what;
    int enabled;
    double t0, last;
    double delay;   /* seconds before the line appears (KV_PROGRESS_DELAY) */
    int shown;
};
void kv_progress_start(struct kv_progress *p, const char *what, int quiet);
void kv_progress_update(struct kv_progress *p, uint64_t done, uint64_t total);
void kv_progress_end(struct kv_progress *p);

/* Monotonic time in seconds. */
double kv_now(void);

/* Parse a decimal (or argtable-style) integer/float with range checks; the
 * option name is used in the message: "-n: expected an integer >= 1, got 'x'". */
int kv_parse_i64(const char *s, const char *opt, int64_t min, int64_t max,
                 int64_t *out, struct kv_err *e);
int kv_parse_f64(const char *s, const char *opt, double *out,
                 struct kv_err *e);
/* An option given as text, or NULL when absent (*out then untouched):
 * kv_parse_i64, and a number in [min, max]. */
int kv_parse_i64_opt(const char *s, const char *opt, int64_t min, int64_t max,
                     int64_t *out, struct kv_err *e);
int kv_parse_f64_opt(const char *s, const char *opt, double min, double max,
                     double *out, struct kv_err *e);
/* An optional integer option given as text (argtable's own int is 32-bit
 * and takes hex and suffixes): absent leaves *out as it is; a bad or
 * out-of-range value prints a usage error.  Returns 0 or KV_EXIT_USAGE. */
struct arg_str;
int kv_opt_i64(const struct arg_str *a, const char *opt, int64_t min,
               int64_t max, int64_t *out);

/* Comma-separated integer list "3,2,8" -> malloc'd array (caller frees).
 * Every element must be in [min, max].  An empty string gives n = 0. */
int kv_parse_i64_list(const char *s, const char *opt, int64_t min, int64_t max,
                      int64_t **out, size_t *n, struct kv_err *e);
/* A per-request list "N" or "a,b,..": every item given and >= min, a bad
 * one named "OPT: request K: ..." (K from 0).  The caller frees *out. */
int kv_parse_request_list(const char *s, const char *opt, int64_t min,
                          int64_t **out, size_t *n, struct kv_err *e);

/* Read a whole input ("-" or NULL = stdin) into a malloc'd buffer with a
 * NUL after the last byte; more than max_bytes (0 = no limit) is an error.
 * The caller frees *buf. */
int kv_read_all(const char *path, size_t max_bytes, char **buf, size_t *len,
                struct kv_err *e);

/* Read whitespace-separated integers from a text stream or an integer .npy
 * (detected by its magic).  For block tables: rows are lines; *n_cols is
 * the longest row and short rows are padded with pad.  Caller frees *out. */
int kv_read_int_table(const char *path, int64_t pad, size_t max_bytes,
                      int64_t **out, size_t *n_rows, size_t *n_cols,
                      struct kv_err *e);

/* Write a tensor as text: the last axis is one line, numbers separated by a
 * single space; leading axes become consecutive lines (a blank line between
 * matrices when ndim >= 3).  Floats print with %.9g (f32), %.17g (f64),
 * f16/bf16 as their f32 value, "-inf"/"inf"/"nan". */
int kv_text_write(FILE *f, const struct kv_tensor *t, struct kv_err *e);
/* A named 1-d field: "name: v v v\n". */
int kv_text_field_i64(FILE *f, const char *name, const int64_t *v, size_t n,
                      struct kv_err *e);

#endif
