/* store_dir_index.c - the dir: store's SQLite index: opening it (WAL mode
 * and its checkpoints), its schema and the upgrade of an older one, its
 * rows, and the totals that stat reads.
 *
 * The schema's version is the database's PRAGMA user_version:
 *
 *   0  entries(key PRIMARY KEY, bytes, n_tokens, base_pos, created,
 *      last_access, hits, pinned), its LRU index, counters(name, value):
 *      the first stores; stat counted the rows, a scan of the index
 *   1  and totals(id = 0, entries, bytes): one row that three triggers on
 *      entries keep equal to count(*) and sum(bytes) of the rows, in the
 *      transaction of every insert, delete and change of size, whoever
 *      makes it (put, rm, evict, fsck, and an older kvtools writing to the
 *      same store), so that stat reads one row whatever the store holds.
 *      Rows are never written with INSERT OR REPLACE, whose deletions
 *      fire no trigger.
 *
 * An index below DIR_SCHEMA is brought up to it when a process that may
 * write opens it, in one transaction under the write lock (BEGIN
 * IMMEDIATE): the version read again, the tables and triggers made, the
 * totals filled from a scan of the rows, the version set.  Openers at the
 * same time wait for the lock and find the work done; a crash leaves the
 * old version whole; writers that opened the index before see the new
 * schema at their next statement (SQLite's schema cookie) and fire the
 * triggers from then on.  A process that opens the store read-only, or
 * cannot write the index, uses an old one as it is, and its stat counts
 * the rows.  A version above DIR_SCHEMA is a later kvtools', whose
 * versions only add to this one.
 */
#include "chunk/store_dir_impl.h"

enum { DIR_SCHEMA = 1 };

int dir_db_exec(sqlite3 *db, const char *sql)
{
    return sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
}

/* Frames in the WAL past which a commit checkpoints it and truncates it
 * (256 frames, 1 MiB of 4 KiB pages: a few hundred puts or gets). */
enum { DIR_WAL_FRAMES = 256 };

/* Every kvchunk process is the first to open the index's shared memory,
 * so SQLite rebuilds it by reading the whole WAL, frame by frame, and
 * takes none of it as checkpointed.  SQLite's own autocheckpoint copies
 * the frames but leaves the WAL to be restarted by the next write of the
 * same process, which a one-command process never makes: the WAL grew
 * with every put and get, and so did every open.  Here the commit that
 * takes the WAL past DIR_WAL_FRAMES checkpoints it and truncates it to
 * nothing, waiting for no one: when a reader is on the WAL the frames it
 * can copy are copied, and a later commit tries again. */
static int wal_hook(void *ctx, sqlite3 *db, const char *name, int frames)
{
    struct dir_store *d = ctx;
    if (frames < DIR_WAL_FRAMES)
        return SQLITE_OK;
    sqlite3_busy_handler(db, NULL, NULL);
    sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_TRUNCATE, NULL,
                              NULL);
    sqlite3_busy_timeout(db, d->busy_ms);
    return SQLITE_OK;
}

/* The tables of version 0, as the first stores made them. */
static const char schema_v0[] =
    "CREATE TABLE IF NOT EXISTS entries("
    "key TEXT PRIMARY KEY, bytes INTEGER NOT NULL, "
    "n_tokens INTEGER NOT NULL, base_pos INTEGER NOT NULL, "
    "created REAL NOT NULL, last_access REAL NOT NULL, "
    "hits INTEGER NOT NULL DEFAULT 0, "
    "pinned INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS entries_lru ON entries(last_access);"
    "CREATE TABLE IF NOT EXISTS counters("
    "name TEXT PRIMARY KEY, value INTEGER NOT NULL);";

/* What version 1 adds, and the totals of the rows already there. */
static const char schema_v1[] =
    "CREATE TABLE IF NOT EXISTS totals("
    "id INTEGER PRIMARY KEY CHECK (id = 0), "
    "entries INTEGER NOT NULL, bytes INTEGER NOT NULL);"
    "CREATE TRIGGER IF NOT EXISTS totals_add AFTER INSERT ON entries BEGIN "
    "UPDATE totals SET entries = entries + 1, bytes = bytes + NEW.bytes "
    "WHERE id = 0; END;"
    "CREATE TRIGGER IF NOT EXISTS totals_del AFTER DELETE ON entries BEGIN "
    "UPDATE totals SET entries = entries - 1, bytes = bytes - OLD.bytes "
    "WHERE id = 0; END;"
    "CREATE TRIGGER IF NOT EXISTS totals_size AFTER UPDATE OF bytes ON "
    "entries BEGIN UPDATE totals SET bytes = bytes - OLD.bytes + NEW.bytes "
    "WHERE id = 0; END;"
    "INSERT OR REPLACE INTO totals(id, entries, bytes) "
    "SELECT 0, count(*), coalesce(sum(bytes), 0) FROM entries;";

/* PRAGMA user_version, or -1 when it cannot be read. */
static int schema_version(sqlite3 *db)
{
    sqlite3_stmt *st;
    int v = -1;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL)
        != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Bring the index up to DIR_SCHEMA in one transaction (see the top of
 * the file).  0 done (or done by another opener meanwhile), -1 not. */
static int schema_upgrade(sqlite3 *db)
{
    char set[64];
    if (dir_db_exec(db, "BEGIN IMMEDIATE") < 0)
        return -1;
    int v = schema_version(db), ok = v >= 0;
    snprintf(set, sizeof set, "PRAGMA user_version = %d", DIR_SCHEMA);
    if (ok && v < DIR_SCHEMA)
        ok = dir_db_exec(db, schema_v0) == 0 &&
             dir_db_exec(db, schema_v1) == 0 && dir_db_exec(db, set) == 0;
    if (ok && dir_db_exec(db, "COMMIT") == 0)
        return 0;
    dir_db_exec(db, "ROLLBACK");
    return -1;
}

int dir_index_open(struct dir_store *d, int create)
{
    char path[PATH_MAX];
    sqlite3 *db = NULL;
    dir_pathf(path, sizeof path, "%s/index.db", d->root);
    int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) |
                SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        dir_pathf(d->db_err, sizeof d->db_err, "cannot open index '%s': %s",
                 path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    d->busy_ms = 15000;
    sqlite3_busy_timeout(db, d->busy_ms);
    /* the last reader to close must not checkpoint (and fsync) on its way
     * out: a get would wait for the disk; the WAL is checkpointed as it
     * grows instead, by wal_hook */
    sqlite3_db_config(db, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, (int *)NULL);
    sqlite3_wal_hook(db, wal_hook, d);
    d->totals = 0;
    int ok = dir_db_exec(db, "PRAGMA journal_mode=WAL") == 0 &&
             dir_db_exec(db, "PRAGMA synchronous=NORMAL") == 0;
    if (ok && schema_version(db) >= DIR_SCHEMA)
        d->totals = 1;
    else if (ok && !d->base.opts.read_only && schema_upgrade(db) == 0)
        d->totals = 1;
    else if (ok)
        ok = dir_db_exec(db, schema_v0) == 0;  /* an old index, as it is */
    if (!ok) {
        dir_pathf(d->db_err, sizeof d->db_err, "cannot use index '%s': %s",
                 path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    d->db = db;
    return 0;
}

/* Add (or keep) the row of a blob. */
int dir_index_add(sqlite3 *db, const struct kv_blob_meta *m, double t)
{
    sqlite3_stmt *st;
    char hex[33];
    int rc;
    kv_hex(m->key, hex);
    if (sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO entries(key, bytes, "
                           "n_tokens, base_pos, created, last_access) "
                           "VALUES(?1, ?2, ?3, ?4, ?5, ?5)", -1, &st, NULL)
        != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, (int64_t)(m->header_len + m->payload_len));
    sqlite3_bind_int64(st, 3, m->n_tokens);
    sqlite3_bind_int64(st, 4, m->base_pos);
    sqlite3_bind_double(st, 5, t);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

int dir_index_del(sqlite3 *db, const char *hex)
{
    sqlite3_stmt *st;
    int rc;
    if (sqlite3_prepare_v2(db, "DELETE FROM entries WHERE key = ?1", -1, &st,
                           NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : -1;
}

/* One row of two integers from sql into v; 1 a row, 0 none, -1 error. */
static int row2(sqlite3 *db, const char *sql, int64_t v[2])
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        v[0] = sqlite3_column_int64(st, 0);
        v[1] = sqlite3_column_int64(st, 1);
    }
    sqlite3_finalize(st);
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

int dir_index_totals(struct dir_store *d, uint64_t *entries, uint64_t *bytes)
{
    int64_t v[2];
    int rc = d->totals ? row2(d->db, "SELECT entries, bytes FROM totals "
                              "WHERE id = 0", v) : 0;
    if (rc != 1)        /* an old index, or its totals lost: count */
        rc = row2(d->db, "SELECT count(*), coalesce(sum(bytes), 0) FROM "
                  "entries", v);
    if (rc <= 0)
        return -1;
    *entries = (uint64_t)v[0];
    *bytes = (uint64_t)v[1];
    return 0;
}

/* One integer from sql, or -1. */
static int64_t int1(sqlite3 *db, const char *sql)
{
    int64_t v = -1;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

int dir_index_check_totals(struct dir_store *d, int repair,
                           struct dir_totals_check *c)
{
    int64_t v[4];
    sqlite3_stmt *st;
    if (!d->db || !d->totals)
        return 0;
    c->kept[0] = c->kept[1] = -1;
    c->triggers = (int)int1(d->db, "SELECT count(*) FROM sqlite_master "
                            "WHERE type = 'trigger' AND name IN "
                            "('totals_add', 'totals_del', 'totals_size')");
    int table = int1(d->db, "SELECT count(*) FROM sqlite_master WHERE "
                     "type = 'table' AND name = 'totals'") == 1;
    /* one statement: the totals and the rows of one snapshot */
    if (sqlite3_prepare_v2(d->db, table ?
                           "SELECT (SELECT entries FROM totals WHERE id = 0), "
                           "(SELECT bytes FROM totals WHERE id = 0), "
                           "count(*), coalesce(sum(bytes), 0) FROM entries" :
                           "SELECT NULL, NULL, count(*), "
                           "coalesce(sum(bytes), 0) FROM entries",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    int rc = sqlite3_step(st), have = 0;
    if (rc == SQLITE_ROW) {
        have = sqlite3_column_type(st, 0) == SQLITE_INTEGER &&
               sqlite3_column_type(st, 1) == SQLITE_INTEGER;
        for (int i = 0; i < 4; i++)
            v[i] = sqlite3_column_int64(st, i);
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW)
        return -1;
    if (have) {
        c->kept[0] = v[0];
        c->kept[1] = v[1];
    }
    c->rows[0] = v[2];
    c->rows[1] = v[3];
    if (have && v[0] == v[2] && v[1] == v[3] && c->triggers == 3)
        return 0;
    /* what version 1 adds made again where missing, and the totals
     * counted again, under the write lock, whatever changed since */
    if (repair && (dir_db_exec(d->db, "BEGIN IMMEDIATE") < 0 ||
                   dir_db_exec(d->db, schema_v1) < 0 ||
                   dir_db_exec(d->db, "COMMIT") < 0)) {
        dir_db_exec(d->db, "ROLLBACK");
        return -1;
    }
    return 1;
}
