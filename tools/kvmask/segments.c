/* kvmask chunk --segments: the segments of a prompt, as text or as
 * kvchunk split's .npy stream, read by mask/segments.h. */
#include "kvmask.h"
#include "mask/segments.h"

/* --max-mem for the segments read (rows_over). */
static int segments_over(void *ctx, double n, double bytes, const char *what,
                         struct kv_err *e)
{
    return rows_over(ctx, n, bytes, what, e);
}

int read_segments(struct opts *o, const char *path, struct kv_err *e)
{
    size_t n;
    if (kv_mask_segments_read(path, o->max_mem, segments_over, o,
                              &o->seg_kinds, &o->seg_lens, &n, e))
        return -1;
    o->spec.seg_kinds = o->seg_kinds;
    o->spec.seg_lens = o->seg_lens;
    o->spec.n_seg = n;
    return 0;
}
