/* kvchunk ls, stat, evict, fsck, rm, pin, unpin: the store-only
 * subcommands, one frame for all. */
#include "kvchunk.h"

struct ls_out {
    FILE *f;
    int tty;        /* for a person: aligned, the time as a UTC date */
};

static int ls_line(void *ctx, const struct kv_store_entry *en)
{
    struct ls_out *o = ctx;
    char hex[33];
    kv_hex(en->key, hex);
    if (!o->tty) {
        fprintf(o->f, "%s %u %llu %d %llu %d %.0f\n", hex, en->n_tokens,
                (unsigned long long)en->bytes, en->base_pos,
                (unsigned long long)en->hits, en->pinned, en->last_access);
        return 0;
    }
    char when[32] = "-";
    struct tm tm;
    time_t tt = (time_t)en->last_access;
    if (en->last_access > 0 && gmtime_r(&tt, &tm))
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(o->f, "%s %7u %12llu %8d %6llu %6s %s\n", hex, en->n_tokens,
            (unsigned long long)en->bytes, en->base_pos,
            (unsigned long long)en->hits, en->pinned ? "yes" : "no", when);
    return 0;
}

static void fsck_line(void *ctx, const char *line)
{
    fprintf(ctx, "%s\n", line);
}

/* fsck -f json: each problem as {"problem": LINE}. */
static void fsck_line_json(void *ctx, const char *line)
{
    json_t *o = json_object();
    if (o)
        json_object_set_new(o, "problem", json_string(line));
    if (report_json(ctx, o) < 0)
        fputs("\n", ctx);      /* out of memory: the line reads as bad JSON */
}

/* The shared frame of the store-only subcommands. */
/* kvchunk ls: the entries, listed into memory first so that a failure
 * half way prints nothing. */
static int store_ls(struct kv_store *s)
{
    struct kv_err e;
    char *buf = NULL;
    size_t len = 0;
    int rc = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem)
        return kv_fail("out of memory");
    struct ls_out lo = {mem, kv_isatty(stdout)};
    if (lo.tty)
        fprintf(mem, "%-32s %7s %12s %8s %6s %6s %s\n", "KEY", "TOKENS",
                "BYTES", "BASE_POS", "HITS", "PINNED", "LAST_ACCESS");
    int bad = kv_store_ls(s, ls_line, &lo, &e) < 0;
    fclose(mem);
    if (bad)
        rc = kv_fail_err(&e);
    else
        fwrite(buf, 1, len, stdout);
    free(buf);
    return rc;
}

/* Names and values of a report's counters as one JSON line on stdout;
 * 0 or the exit code. */
static int counters_json(const char *const *names, const uint64_t *v,
                         size_t n)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++)
        json_object_set_new(o, names[i], json_integer((json_int_t)v[i]));
    return report_json(stdout, o) < 0 ? kv_fail("out of memory") : 0;
}

/* kvchunk stat: the store's counters. */
static int store_stat(struct kv_store *s, int json)
{
    struct kv_err e;
    struct kv_store_stats st;
    if (kv_store_stat(s, &st, &e) < 0)
        return kv_fail_err(&e);
    if (json) {
        static const char *const names[] = {
            "entries", "bytes", "hits", "misses", "evictions",
            "collisions_rejected", "checksum_failures", "puts" };
        const uint64_t v[] = { st.entries, st.bytes, st.hits, st.misses,
                               st.evictions, st.collisions,
                               st.checksum_failures, st.puts };
        return counters_json(names, v, 8);
    }
    printf("entries: %llu\nbytes: %llu\nhits: %llu\nmisses: %llu\n"
           "evictions: %llu\ncollisions_rejected: %llu\n"
           "checksum_failures: %llu\nputs: %llu\n",
           (unsigned long long)st.entries, (unsigned long long)st.bytes,
           (unsigned long long)st.hits, (unsigned long long)st.misses,
           (unsigned long long)st.evictions, (unsigned long long)st.collisions,
           (unsigned long long)st.checksum_failures,
           (unsigned long long)st.puts);
    return 0;
}

/* kvchunk evict: down to lw * max_size, and what it removed. */
static int store_evict(struct kv_store *s, size_t max_size, double lw)
{
    struct kv_err e;
    struct kv_evict_report r;
    if (kv_store_evict(s, max_size, lw, &r, &e) < 0)
        return kv_fail_err(&e);
    printf("removed: %llu\nremoved_bytes: %llu\nskipped_busy: %llu\n"
           "bytes_before: %llu\nbytes_after: %llu\n",
           (unsigned long long)r.removed, (unsigned long long)r.removed_bytes,
           (unsigned long long)r.skipped_busy,
           (unsigned long long)r.total_before,
           (unsigned long long)r.total_after);
    return 0;
}

/* kvchunk fsck: the problems (printed after the walk, so that a failure
 * leaves stdout empty) and the counts.  Problems left unrepaired close
 * stdout here and return 1. */
static int store_fsck(struct kv_store *s, int repair, int json)
{
    struct kv_err e;
    struct kv_fsck_report r;
    char *buf = NULL;
    size_t len = 0;
    int rc = 0;
    FILE *mem = open_memstream(&buf, &len);
    if (!mem)
        return kv_fail("out of memory");
    if (kv_store_fsck(s, repair, json ? fsck_line_json : fsck_line, mem, &r,
                      &e) < 0) {
        fclose(mem);
        free(buf);
        return kv_fail_err(&e);
    }
    fclose(mem);
    fwrite(buf, 1, len, stdout);
    free(buf);
    if (json) {
        static const char *const names[] = {
            "checked", "corrupt", "unindexed", "orphan_rows", "stale_tmp",
            "repaired", "index_unreadable", "wrong_totals" };
        const uint64_t v[] = { r.checked, r.corrupt, r.unindexed,
                               r.orphan_rows, r.stale_tmp, r.repaired,
                               r.index_unreadable, r.wrong_totals };
        if ((rc = counters_json(names, v, 8)))
            return rc;
    } else {
        printf("checked: %llu\ncorrupt: %llu\nunindexed: %llu\n"
               "orphan_rows: %llu\nstale_tmp: %llu\nrepaired: %llu\n"
               "index_unreadable: %llu\nwrong_totals: %llu\n",
               (unsigned long long)r.checked, (unsigned long long)r.corrupt,
               (unsigned long long)r.unindexed,
               (unsigned long long)r.orphan_rows,
               (unsigned long long)r.stale_tmp, (unsigned long long)r.repaired,
               (unsigned long long)r.index_unreadable,
               (unsigned long long)r.wrong_totals);
    }
    uint64_t problems = r.corrupt + r.unindexed + r.orphan_rows + r.stale_tmp +
                        r.index_unreadable + r.wrong_totals;
    if (problems && !repair) {
        rc = kv_close_stdout();
        if (rc == 0) {
            kv_warn("%llu problems found; 'fsck --repair' fixes them",
                    (unsigned long long)problems);
            rc = 1;
        }
    }
    return rc;
}

/* kvchunk rm, pin and unpin: each key (checked already) in turn, stopping
 * at the first that fails or is absent. */
static int store_keys(struct kv_store *s, const struct arg_str *keys,
                      int is_rm, int is_pin)
{
    struct kv_err e;
    uint8_t kb[16];
    int rc = 0;
    for (int i = 0; i < keys->count && rc == 0; i++) {
        int found = 0;
        kv_unhex(keys->sval[i], kb);
        int r2 = is_rm ? kv_store_rm(s, kb, &found, &e)
                       : kv_store_pin(s, kb, is_pin, &found, &e);
        if (r2 < 0)
            rc = kv_fail_err(&e);
        else if (!found)
            rc = kv_fail("%s: no such entry", keys->sval[i]);
    }
    return rc;
}

/* evict's --max-size and --low-watermark; 0 or the usage exit code. */
static int evict_options(struct arg_str *maxsize, struct arg_str *low,
                         size_t *max_size,
                         double *lw)
{
    struct kv_err e;
    if (!sval(maxsize))
        return kv_usage("--max-size SIZE is required");
    if (kv_parse_size(sval(maxsize), max_size, &e) < 0 ||
        (sval(low) && kv_parse_f64(sval(low), "--low-watermark", lw, &e) < 0))
        return kv_usage("%s", e.msg);
    if (!(*lw > 0 && *lw <= 1))
        return kv_usage("--low-watermark: expected a number in (0, 1], "
                        "got '%s'", sval(low));
    return 0;
}

static int simple_store_cmd(int argc, char **argv, const char *what)
{
    struct table t = {{0}, 0};
    struct store_args sa;
    struct common c;
    struct arg_str *maxsize = NULL, *low = NULL, *keys = NULL, *fmt = NULL;
    struct arg_lit *repair = NULL;
    int is_ls = !strcmp(what, "ls"), is_stat = !strcmp(what, "stat"),
        is_evict = !strcmp(what, "evict"), is_fsck = !strcmp(what, "fsck"),
        is_rm = !strcmp(what, "rm"), is_pin = !strcmp(what, "pin"),
        is_unpin = !strcmp(what, "unpin");
    add_store(&t, &sa);
    if (is_evict) {
        add(&t, maxsize = arg_str0(NULL, "max-size", "SIZE", "evict when the "
                                   "store is larger (512M, 4G, ...)"));
        add(&t, low = arg_str0(NULL, "low-watermark", "F", "evict down to "
                               "F * SIZE (default 0.9)"));
    }
    if (is_fsck)
        add(&t, repair = arg_lit0(NULL, "repair", "remove corrupt blobs, fix "
                                  "the index, clean temporary files"));
    if (is_stat || is_fsck)
        add(&t, fmt = arg_str0("f", "format", "text|json",
                               "output format (default text)"));
    if (is_rm || is_pin || is_unpin)
        add(&t, keys = arg_strn(NULL, NULL, "KEY", 1, 100000, "chunk keys "
                                "(32 hex digits)"));
    add_common(&t, &c);
    const char *syn = is_ls ? "\nList the entries: KEY TOKENS BYTES BASE_POS "
                              "HITS PINNED LAST_ACCESS."
                    : is_stat ? "\nPrint the store's counters."
                    : is_evict ? "\nEvict least recently used entries."
                    : is_fsck ? "\nCheck every blob and the index."
                    : is_rm ? "\nRemove entries."
                    : "\nPin or unpin entries.";
    int rc = parse(&t, &c, argc, argv, syn);
    size_t max_size = 0;
    double lw = 0.9;
    uint8_t kb[16];
    struct kv_store *s = NULL;
    int json = 0;
    if (rc >= 0 || (is_evict && (rc = evict_options(maxsize, low, &max_size,
                                                    &lw)) != 0) ||
        (fmt && (rc = report_format(fmt, &json)) != 0))
        goto done;
    for (int i = 0; keys && i < keys->count; i++)
        if (kv_unhex(keys->sval[i], kb) < 0) {
            rc = kv_usage("KEY: expected 32 hex digits, got '%s'",
                          keys->sval[i]);
            goto done;
        }
    size_t lim;
    if ((rc = max_mem(&c, &lim)) != 0 ||
        (rc = open_store(&sa, is_ls || is_stat, 0, 0, lim, &s)) != 0)
        goto done;
    rc = is_ls ? store_ls(s)
       : is_stat ? store_stat(s, json)
       : is_evict ? store_evict(s, max_size, lw)
       : is_fsck ? store_fsck(s, repair->count > 0, json)
       : store_keys(s, keys, is_rm, is_pin);
    kv_store_close(s);
    if (rc == 0)
        rc = kv_close_stdout();
done:
    free_table(&t);
    return rc;
}

int cmd_ls(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "ls");
}
int cmd_stat(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "stat");
}
int cmd_evict(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "evict");
}
int cmd_fsck(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "fsck");
}
int cmd_rm(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "rm");
}
int cmd_pin(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "pin");
}
int cmd_unpin(int argc, char **argv)
{
    return simple_store_cmd(argc, argv, "unpin");
}
