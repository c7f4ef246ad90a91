/* chunk_assemble.c - unit tests of lib/chunk/assemble: the plan written
 * to a file by kv_assemble_report equals kv_assemble_plan's text, and a
 * report path that names standard output ("-", NULL) is refused rather
 * than printed, so that the library writes nothing to the caller's
 * stdout; a stored chunk of the other layout (latent for KV) is a
 * collision, not a hit, to kv_assemble_fetch and to kvchunk get. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include "tap.h"
#include "core/kv.h"
#include "chunk/assemble.h"
#include "chunk/ns_opts.h"
#include "chunk/chunk_put.h"
#include "chunk/blob.h"

/* The size of what fn wrote to file descriptor 1 while it ran. */
static long stdout_bytes(int (*fn)(const struct kv_assembly *, const char *,
                                   struct kv_err *),
                         const struct kv_assembly *a, const char *path,
                         int *rc, struct kv_err *e)
{
    char tmp[] = "/tmp/kv-asm-out-XXXXXX";
    int fd = mkstemp(tmp), saved;
    struct stat st;
    if (fd < 0)
        return -1;
    unlink(tmp);
    fflush(stdout);
    saved = dup(1);
    dup2(fd, 1);
    *rc = fn(a, path, e);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    long n = fstat(fd, &st) == 0 ? (long)st.st_size : -1;
    close(fd);
    return n;
}

/* kvchunk get (the program under $KV_BIN) of the n tokens stored in the
 * dir: store root under a KV namespace's key as a latent blob: a miss,
 * exit 3, "stored shape differs from --shape", nothing on stdout. */
static void get_other_layout(const char *root, const int32_t *tok, size_t n)
{
    const char *bin = getenv("KV_BIN");
    char cmd[1024], path[256], err[512] = "";
    if (!bin) {
        TAP_OK(1, "# SKIP kvchunk get: KV_BIN is not set");
        return;
    }
    snprintf(path, sizeof path, "%s/sys.txt", root);
    FILE *f = fopen(path, "w");
    for (size_t i = 0; f && i < n; i++)
        fprintf(f, "%d%c", tok[i], i + 1 < n ? ' ' : '\n');
    if (f)
        fclose(f);
    snprintf(cmd, sizeof cmd, "'%s/kvchunk' get --store 'dir:%s' --tokens "
             "'%s' --at 5 --shape 1,1,8 --dtype f32 --chunk-context none "
             "-f npy >'%s/get.out' 2>'%s/get.err'", bin, root, path, root,
             root);
    int st = system(cmd);
    snprintf(path, sizeof path, "%s/get.err", root);
    f = fopen(path, "r");
    size_t k = f ? fread(err, 1, sizeof err - 1, f) : 0;
    if (f)
        fclose(f);
    err[k] = 0;
    struct stat sb;
    snprintf(path, sizeof path, "%s/get.out", root);
    TAP_OK(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 3 &&
           strstr(err, "stored shape differs from --shape") &&
           stat(path, &sb) == 0 && sb.st_size == 0,
           "kvchunk get of the latent blob under the KV key: a miss, exit 3, "
           "stdout empty (status %d: %s)", st, err);
}

int main(void)
{
    struct kv_ns_options o;
    struct kv_namespace ns;
    struct kv_split sp;
    struct kv_assembly a;
    struct kv_store *s = NULL;
    struct kv_err e;
    int have_shape, rc;
    char root[] = "/tmp/kv-asm-XXXXXX", spec[64], path[64], text[256];
    const char *prompt = "sys##chunk##question";

    memset(&o, 0, sizeof o);
    o.shape = "1,1,8";
    o.dtype = "f32";
    if (!mkdtemp(root) ||
        kv_ns_from_options(&o, &ns, &have_shape, &e) < 0 ||
        kv_split_text(prompt, strlen(prompt), "##", &sp, &e) < 0) {
        TAP_OK(0, "setup: %s", e.msg);
        return tap_done();
    }
    snprintf(spec, sizeof spec, "dir:%s", root);
    TAP_OK(kv_store_open(spec, NULL, &s, &e) == 0, "open a dir: store");
    TAP_OK(kv_assemble_init(&a, &ns, &sp, 0, 1, &e) == 0 &&
           kv_assemble_fetch(&a, s, 1, &e) == 0 && a.n_miss == 3,
           "an empty store: three misses");

    /* the plan as text, then through a report file */
    FILE *m = fmemopen(text, sizeof text, "w");
    kv_assemble_plan(m, &a);
    fclose(m);
    snprintf(path, sizeof path, "%s/plan.txt", root);
    TAP_OK(stdout_bytes(kv_assemble_report, &a, path, &rc, &e) == 0 &&
           rc == 0, "report to a file: nothing on stdout");
    char got[256] = "";
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(got, 1, sizeof got - 1, f) : 0;
    if (f)
        fclose(f);
    got[n] = 0;
    TAP_OK(!strcmp(got, text) && strstr(text, "question 8 8 - miss 8\n"),
           "the report is the plan");

    /* standard output named as the report: refused, nothing printed */
    TAP_OK(stdout_bytes(kv_assemble_report, &a, "-", &rc, &e) == 0 &&
           rc == -1 && strstr(e.msg, "not '-'"),
           "report '-': refused (%s), stdout untouched", e.msg);
    TAP_OK(stdout_bytes(kv_assemble_report, &a, NULL, &rc, &e) == 0 &&
           rc == -1, "report NULL: refused, stdout untouched");

    kv_assemble_release(&a);

    /* a stored system prompt whose header says latent (an MLA model's
     * layout) under this KV namespace's key: of another shape, a miss,
     * not moved as KV */
    struct kv_namespace sn = ns;
    struct kv_tensor x;
    struct kv_blob_meta bm;
    uint8_t *hdr = NULL;
    int existed;
    int64_t shape[5] = {1, 2, 3, 1, 8};
    const int32_t *sys = sp.tokens + sp.segs[0].offset;
    sn.mask = KV_CTX_NONE;
    kv_tensor_init(&x);
    rc = kv_tensor_alloc(&x, KV_F32, 5, shape, 0, &e) ||
         kv_chunk_blob(&sn, NULL, 0, sys, 3, &x, 0, 0, &bm, &hdr, &e);
    free(hdr);
    hdr = NULL;
    bm.layout = KV_BLOB_LAYOUT_LATENT;
    bm.payload_xxh3 = kv_blob_checksum(x.data, x.nbytes / 2);
    rc = rc || kv_blob_header(&bm, sys, &hdr, &e) ||
         kv_store_put(s, &bm, hdr, x.data, &existed, &e);
    TAP_OK(rc == 0, "a latent blob under the KV key: stored");
    rc = kv_assemble_init(&a, &ns, &sp, 0, 1, &e) ||
         kv_assemble_fetch(&a, s, 1, &e);
    TAP_OK(rc == 0 && a.n_miss == 3 && a.status[0] == KV_GET_COLLISION,
           "  ... a collision, not a hit (%s)",
           rc ? e.msg : a.status[0] == KV_GET_HIT ? "a hit" : a.why[0].msg);
    get_other_layout(root, sys, 3);
    free(hdr);
    kv_tensor_release(&x);
    kv_assemble_release(&a);
    kv_split_release(&sp);
    kv_store_close(s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    TAP_OK(system(cmd) == 0, "clean up");
    return tap_done();
}
