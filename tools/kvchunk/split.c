/* kvchunk split: a prompt -> segments sys, chunks, question (+ keys). */
#include "kvchunk.h"

int cmd_split(int argc, char **argv)
{
    struct table t = {{0}, 0};
    struct ns_args na;
    struct prompt_args pa;
    struct common c;
    struct out_args oa;
    add_prompt(&t, &pa);
    add_ns(&t, &na, 1);
    add_out(&t, &oa, "text|npy");
    add_common(&t, &c);
    int rc = parse(&t, &c, argc, argv, "\nSplit a prompt sys##chunk##..."
                   "##question into segments: KIND OFFSET LENGTH [KEY].\n"
                   "Keys are printed when --shape is given.");
    if (rc >= 0) {
        free_table(&t);
        return rc;
    }
    struct nsv v;
    struct kv_err e;
    size_t lim;
    if (ns_values(&na, c.verbose->count, &v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    if ((rc = max_mem(&c, &lim)) != 0 || (rc = prompt_usage(&pa)) != 0) {
        free_table(&t);
        return rc;
    }
    if (v.have_shape && ns_finish(&v, &e) < 0) {
        free_table(&t);
        return kv_usage("%s", e.msg);
    }
    struct kv_split sp;
    memset(&sp, 0, sizeof sp);
    /* per segment: its request (key), and its row of the output */
    if (read_prompt(&pa, lim, sizeof(struct kv_chunk_req) + 3 * 8 + 16, &sp,
                    &e) < 0) {
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_chunk_req *req = calloc(sp.n_segs, sizeof *req);
    if (!req || (v.have_shape && kv_split_keys(&v.ns, &sp, req, &e) < 0)) {
        if (!req)
            kv_err_set(&e, "out of memory");
        free(req);
        kv_split_release(&sp);
        free_table(&t);
        return kv_fail_err(&e);
    }
    struct kv_out o;
    enum kv_format f;
    if (kv_out_open(&o, sval(oa.out), &e) < 0) {
        free(req);
        kv_split_release(&sp);
        free_table(&t);
        return kv_fail_err(&e);
    }
    if ((rc = out_format(oa.fmt, o.f, oa.force->count, &f)) != 0) {
        kv_out_abort(&o);
        free(req);
        kv_split_release(&sp);
        free_table(&t);
        return rc;
    }
    int bad = 0;
    if (f == KV_FMT_TEXT) {
        for (size_t i = 0; i < sp.n_segs; i++) {
            const struct kv_segment *g = &sp.segs[i];
            char hex[33];
            fprintf(o.f, "%s %lld %lld", kv_seg_kind_name(g->kind),
                    (long long)g->offset, (long long)g->length);
            if (v.have_shape && g->kind != KV_SEG_QUESTION) {
                kv_hex(req[i].key, hex);
                fprintf(o.f, " %s", hex);
            }
            fputc('\n', o.f);
        }
    } else {
        struct kv_tensor st;
        int64_t shape[2] = {(int64_t)sp.n_segs, 3};
        kv_tensor_init(&st);
        if (kv_tensor_alloc(&st, KV_I64, 2, shape, 0, &e) < 0) {
            bad = 1;
        } else {
            int64_t *d = st.data;
            for (size_t i = 0; i < sp.n_segs; i++) {
                d[3 * i] = sp.segs[i].kind;
                d[3 * i + 1] = sp.segs[i].offset;
                d[3 * i + 2] = sp.segs[i].length;
            }
            bad = kv_npy_write(o.f, &st, &e) < 0;
            kv_tensor_release(&st);
            if (!bad && v.have_shape) {
                int64_t ks[2] = {(int64_t)sp.n_segs, 16};
                if (kv_tensor_alloc(&st, KV_U8, 2, ks, 0, &e) < 0) {
                    bad = 1;
                } else {
                    for (size_t i = 0; i < sp.n_segs; i++)
                        memcpy((uint8_t *)st.data + 16 * i, req[i].key, 16);
                    bad = kv_npy_write(o.f, &st, &e) < 0;
                    kv_tensor_release(&st);
                }
            }
        }
    }
    free(req);
    kv_split_release(&sp);
    free_table(&t);
    if (bad) {
        kv_out_abort(&o);
        return kv_fail_err(&e);
    }
    if (o.path) {
        if (kv_out_commit(&o, &e) < 0)
            return kv_fail_err(&e);
        return 0;
    }
    return kv_close_stdout();
}
