/* store_dir_impl.h - what store_dir.c, store_dir_index.c and
 * store_dir_fsck.c share: the store's state and the helpers over its
 * paths, blobs and index. */
#ifndef KV_STORE_DIR_IMPL_H
#define KV_STORE_DIR_IMPL_H
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "chunk/store.h"
#include "chunk/chunk.h"

struct dir_store {
    struct kv_store base;
    char *root;          /* ROOT/v1 */
    sqlite3 *db;         /* NULL when the index cannot be opened */
    char db_err[256];    /* why, for operations that need it */
    int busy_ms;         /* the index's busy timeout, as last set */
    int totals;          /* 1: the index keeps totals (schema 1 and up) */
    unsigned tmp_seq;
};

/* store_dir.c */
double dir_now_unix(void);
void dir_pathf(char *buf, size_t len, const char *fmt, ...) KV_PRINTF(3, 4);
void dir_blob_path(const struct dir_store *d, const uint8_t key[16],
                   char *buf, size_t len);
int dir_map_blob(const char *path, int lock, void **map, size_t *len,
                 int *fd_out, struct kv_err *e);

/* store_dir_index.c */
int dir_db_exec(sqlite3 *db, const char *sql);
/* Open the index (d->db), upgrading an old schema when the store may be
 * written; 0, or -1 with d->db_err set. */
int dir_index_open(struct dir_store *d, int create);
int dir_index_add(sqlite3 *db, const struct kv_blob_meta *m, double t);
int dir_index_del(sqlite3 *db, const char *hex);
/* The number of rows and the sum of their bytes: the totals row, or a
 * count of the rows in an index that keeps none.  0 or -1. */
int dir_index_totals(struct dir_store *d, uint64_t *entries,
                     uint64_t *bytes);
/* Compare the totals row with a count of the rows (one snapshot), and
 * look for the three triggers that keep it: 0 all is well (or the index
 * keeps no totals), 1 not, -1 error.  With repair, what is missing is
 * made again and the totals counted again, under the write lock. */
struct dir_totals_check {
    int64_t kept[2];     /* entries, bytes of the totals row; -1 -1: none */
    int64_t rows[2];     /* count(*), sum(bytes) of the rows */
    int triggers;        /* of the three that keep the row */
};
int dir_index_check_totals(struct dir_store *d, int repair,
                           struct dir_totals_check *c);

/* store_dir_fsck.c */
int dir_fsck(struct kv_store *s, int repair,
             void (*cb)(void *, const char *), void *ctx,
             struct kv_fsck_report *r, struct kv_err *e);

#endif
