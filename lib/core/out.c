/* out.c - the files every kvtools program reads and writes by name: the
 * names messages give them, -o through a temporary file renamed into place
 * (following symbolic links, writing devices and FIFOs in place), stdout's
 * close, and the .npy/text writer of a list of arrays (see cli.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/cli.h"
#include "core/kv.h"
#include "core/npy.h"

const char *kv_path_name(const char *path, int is_output)
{
    if (!path || strcmp(path, "-") == 0)
        return is_output ? "<stdout>" : "<stdin>";
    return path;
}

FILE *kv_open_in(const char *path, struct kv_err *e)
{
    FILE *f;
    if (!path || strcmp(path, "-") == 0)
        return stdin;
    f = fopen(path, "rb");
    if (!f)
        kv_err_set(e, "cannot open '%s': %s", path, strerror(errno));
    return f;
}

void kv_close_in(FILE *f)
{
    if (f && f != stdin)
        fclose(f);
}

/* The descriptor a path names that the caller already holds
 * (/dev/stdout, /dev/stderr, /dev/fd/N, /proc/self/fd/N), else -1: it is
 * written through a duplicate, keeping its offset and append mode, never
 * reopened (which would truncate it) nor replaced. */
static int named_descriptor(const char *path)
{
    const char *num = NULL;
    char *end;
    long v;

    if (strcmp(path, "/dev/stdout") == 0)
        return 1;
    if (strcmp(path, "/dev/stderr") == 0)
        return 2;
    if (strncmp(path, "/dev/fd/", 8) == 0)
        num = path + 8;
    else if (strncmp(path, "/proc/self/fd/", 14) == 0)
        num = path + 14;
    if (!num || *num < '0' || *num > '9')
        return -1;
    errno = 0;
    v = strtol(num, &end, 10);
    return *end || errno || v > INT32_MAX ? -1 : (int)v;
}

/* The file a path finally names, following symbolic links, as a malloc'd
 * path: realpath() when it exists, else the chain of links read one by
 * one (a link to a file not yet made: the file is made where the link
 * points).  NULL with e filled on failure. */
static char *out_target(const char *path, struct kv_err *e)
{
    struct stat st;
    char *cur, *r;

    if ((r = realpath(path, NULL)) != NULL)
        return r;
    if (errno != ENOENT)
        goto fail;
    cur = strdup(path);
    for (int hop = 0; cur; hop++) {
        char link[4096];
        ssize_t n;
        if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode))
            return cur;          /* not there yet: made at this path */
        if (hop == 40) {
            free(cur);
            errno = ELOOP;
            goto fail;
        }
        n = readlink(cur, link, sizeof link - 1);
        if (n < 0) {
            free(cur);
            goto fail;
        }
        link[n] = '\0';
        if (link[0] == '/') {
            free(cur);
            cur = strdup(link);
        } else {
            const char *slash = strrchr(cur, '/');
            size_t dl = slash ? (size_t)(slash - cur) + 1 : 0;
            char *next = malloc(dl + (size_t)n + 1);
            if (next) {
                memcpy(next, cur, dl);
                memcpy(next + dl, link, (size_t)n + 1);
            }
            free(cur);
            cur = next;
        }
    }
    return kv_err_set(e, "out of memory"), NULL;
fail:
    kv_err_set(e, "cannot create '%s': %s", path, strerror(errno));
    return NULL;
}

/* The file a path would write, as one string: the real path of an
 * existing file, or of its folder joined to its name; NULL for a device
 * or FIFO (which may take several outputs) or when even the folder does
 * not resolve (then the plain path is compared). */
static char *out_identity(const char *path, int *shared_ok)
{
    struct stat st;
    *shared_ok = 0;
    if (stat(path, &st) == 0) {
        if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
            *shared_ok = 1;
            return NULL;
        }
        return realpath(path, NULL);
    }
    /* not there yet: the file it will be made as, a dangling link
     * followed to the path it names */
    struct kv_err ignored;
    char *target = out_target(path, &ignored);
    if (target)
        path = target;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1)
                      : strdup(".");
    char *real = dir ? realpath(dir, NULL) : NULL;
    free(dir);
    if (!real) {
        free(target);
        return NULL;
    }
    const char *base = slash ? slash + 1 : path;
    size_t n = strlen(real) + strlen(base) + 2;
    char *id = malloc(n);
    if (id)
        snprintf(id, n, "%s/%s", real, base);
    free(real);
    free(target);
    return id;
}

int kv_outputs_distinct(const char *const *opts, const char *const *paths,
                        size_t n, struct kv_err *e)
{
    for (size_t i = 0; i < n; i++) {
        if (!paths[i])
            continue;
        int out_i = strcmp(paths[i], "-") == 0, ok_i = 0;
        char *id_i = out_i ? NULL : out_identity(paths[i], &ok_i);
        for (size_t j = i + 1; j < n && !ok_i; j++) {
            if (!paths[j])
                continue;
            int out_j = strcmp(paths[j], "-") == 0, ok_j = 0, same;
            if (out_i || out_j) {
                same = out_i && out_j;
            } else {
                char *id_j = out_identity(paths[j], &ok_j);
                if (ok_j)
                    same = 0;
                else if (id_i && id_j)
                    same = strcmp(id_i, id_j) == 0;
                else
                    same = strcmp(paths[i], paths[j]) == 0;
                free(id_j);
            }
            if (same) {
                free(id_i);
                if (out_i)
                    return kv_err_set(e, "%s and %s both write standard "
                                      "output", opts[i], opts[j]);
                return kv_err_set(e, "%s and %s both write '%s'", opts[i],
                                  opts[j], paths[i]);
            }
        }
        free(id_i);
    }
    return 0;
}

int kv_out_open(struct kv_out *o, const char *path, struct kv_err *e)
{
    struct stat st;
    char *dest;

    memset(o, 0, sizeof *o);
    if (!path || strcmp(path, "-") == 0) {
        o->f = stdout;
        return 0;
    }
    if (!*path)
        return kv_err_set(e, "an empty output file name (use '-' for "
                          "standard output)");
    /* A device or FIFO (/dev/null, a named pipe), or a descriptor of the
     * caller (/dev/stdout), is written in place: renaming a file over it
     * would replace the device or the link. */
    int fd = named_descriptor(path);
    if (fd >= 0) {
        int dfd = dup(fd);
        o->f = dfd < 0 ? NULL : fdopen(dfd, "wb");
        if (!o->f) {
            int err = errno;
            if (dfd >= 0)
                close(dfd);
            return kv_err_set(e, "cannot open '%s': %s", path,
                              strerror(err));
        }
        o->path = strdup(path);
        if (!o->path) {
            fclose(o->f);
            o->f = NULL;
            return kv_err_set(e, "out of memory");
        }
        return 0;
    }
    const int exists = stat(path, &st) == 0;
    if (exists && S_ISDIR(st.st_mode))
        return kv_err_set(e, "cannot write '%s': %s", path, strerror(EISDIR));
    if (exists && !S_ISREG(st.st_mode)) {
        o->f = fopen(path, "wb");
        if (!o->f)
            return kv_err_set(e, "cannot open '%s': %s", path,
                              strerror(errno));
        o->path = strdup(path);
        if (!o->path) {
            fclose(o->f);
            o->f = NULL;
            return kv_err_set(e, "out of memory");
        }
        return 0;
    }
    /* A regular file (or none yet): a temporary file beside the file the
     * path finally names, renamed over it; a symbolic link on the way
     * stays a link. */
    if (!(dest = out_target(path, e)))
        return -1;
    size_t n = strlen(dest);
    o->path = strdup(path);
    o->dest = dest;
    o->tmp = malloc(n + 16);
    if (!o->path || !o->tmp) {
        free(o->path);
        free(o->tmp);
        free(o->dest);
        memset(o, 0, sizeof *o);
        return kv_err_set(e, "out of memory");
    }
    snprintf(o->tmp, n + 16, "%s.tmp.XXXXXX", dest);
    fd = mkstemp(o->tmp);
    if (fd < 0) {
        kv_err_set(e, "cannot create '%s': %s", path, strerror(errno));
        free(o->path);
        free(o->tmp);
        free(o->dest);
        memset(o, 0, sizeof *o);
        return -1;
    }
    {   /* mkstemp gives 0600; give what open(2) would under the umask */
        mode_t um = umask(0);
        umask(um);
        fchmod(fd, 0666 & ~um);
    }
    o->f = fdopen(fd, "wb");
    if (!o->f) {
        kv_err_set(e, "cannot open '%s': %s", o->tmp, strerror(errno));
        close(fd);
        unlink(o->tmp);
        free(o->path);
        free(o->tmp);
        free(o->dest);
        memset(o, 0, sizeof *o);
        return -1;
    }
    return 0;
}

int kv_out_commit(struct kv_out *o, struct kv_err *e)
{
    int rc = 0;
    if (!o->f)
        return 0;
    if (o->f == stdout) {
        o->f = NULL;
        return 0;
    }
    if (fflush(o->f) != 0 || ferror(o->f)) {
        rc = kv_err_set(e, "write error on '%s': %s", o->path,
                        strerror(errno));
        fclose(o->f);
    } else if (fclose(o->f) != 0) {
        rc = kv_err_set(e, "write error on '%s': %s", o->path,
                        strerror(errno));
    } else if (o->tmp && rename(o->tmp, o->dest ? o->dest : o->path) != 0) {
        rc = kv_err_set(e, "cannot rename to '%s': %s", o->path,
                        strerror(errno));
    }
    o->f = NULL;
    if (rc < 0 && o->tmp)
        unlink(o->tmp);
    free(o->path);
    free(o->tmp);
    free(o->dest);
    o->path = o->tmp = o->dest = NULL;
    return rc;
}

int kv_out_commit_all(struct kv_out *const *o, size_t n, struct kv_err *e)
{
    size_t i;
    for (i = 0; i < n; i++)
        if (o[i]->f == stdout && (fflush(stdout) != 0 || ferror(stdout))) {
            kv_err_set(e, "write error on <stdout>: %s",
                       strerror(errno ? errno : EIO));
            clearerr(stdout);
            goto fail;
        }
    for (i = 0; i < n; i++)
        if (kv_out_commit(o[i], e))
            goto fail;
    return 0;
fail:
    for (i = 0; i < n; i++)
        kv_out_abort(o[i]);
    return -1;
}

void kv_out_abort(struct kv_out *o)
{
    if (o->f && o->f != stdout) {
        fclose(o->f);
        if (o->tmp)
            unlink(o->tmp);
    }
    free(o->path);
    free(o->tmp);
    free(o->dest);
    memset(o, 0, sizeof *o);
}

int kv_close_stdout(void)
{
    int err = 0;
    if (fflush(stdout) != 0 || ferror(stdout))
        err = errno ? errno : EIO;
    if (fclose(stdout) != 0 && !err)
        err = errno ? errno : EIO;
    if (err) {
        kv_warn("write error on <stdout>: %s", strerror(err));
        return KV_EXIT_DATA;
    }
    return 0;
}

int kv_isatty(FILE *f)
{
    return isatty(fileno(f));
}

int kv_check_binary_ok(FILE *f, int force)
{
    if (force || !kv_isatty(f))
        return 0;
    return kv_usage("refusing to write binary .npy to a terminal; use "
                    "'-f text', redirect the output, or add --force");
}

int kv_write_tensors(const char *path, enum kv_format fmt, int force,
                     const struct kv_tensor *t, size_t n)
{
    struct kv_out o;
    struct kv_err e;
    int rc;

    if (kv_out_open(&o, path, &e) < 0)
        return kv_fail_err(&e);
    if (fmt == KV_FMT_AUTO)
        fmt = kv_isatty(o.f) ? KV_FMT_TEXT : KV_FMT_NPY;
    if (fmt == KV_FMT_NPY && (rc = kv_check_binary_ok(o.f, force)) != 0) {
        kv_out_abort(&o);
        return rc;
    }
    for (size_t i = 0; i < n; i++) {
        if ((fmt == KV_FMT_NPY ? kv_npy_write(o.f, &t[i], &e)
                               : kv_text_write(o.f, &t[i], &e)) < 0) {
            kv_out_abort(&o);
            return kv_fail_err(&e);
        }
    }
    if (o.path)
        return kv_out_commit(&o, &e) < 0 ? kv_fail_err(&e) : 0;
    return kv_close_stdout();
}
