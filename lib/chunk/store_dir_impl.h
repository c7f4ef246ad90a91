/* store_dir_impl.h - what store_dir.c and store_dir_fsck.c share: the
 * store's state and the helpers over its paths, blobs and index. */
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
    unsigned tmp_seq;
};

/* store_dir.c */
double dir_now_unix(void);
void dir_pathf(char *buf, size_t len, const char *fmt, ...) KV_PRINTF(3, 4);
void dir_blob_path(const struct dir_store *d, const uint8_t key[16],
                   char *buf, size_t len);
int dir_index_open(struct dir_store *d, int create);
int dir_index_add(sqlite3 *db, const struct kv_blob_meta *m, double t);
int dir_index_del(sqlite3 *db, const char *hex);
int dir_map_blob(const char *path, int lock, void **map, size_t *len,
                 int *fd_out, struct kv_err *e);

/* store_dir_fsck.c */
int dir_fsck(struct kv_store *s, int repair,
             void (*cb)(void *, const char *), void *ctx,
             struct kv_fsck_report *r, struct kv_err *e);

#endif
