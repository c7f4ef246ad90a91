/* segments.c - libFuzzer entry for the segment-list reader of kvslot plan
 * --chunk-cache (make fuzz): any input is refused with a message or gives
 * prompts whose segments tile them from 0, sys first, question last; a
 * plan over them either is refused or runs to its end, and in every step
 * the copies write exactly the tokens of the chunks looked up (a hit has
 * its segment's length). */
#include <stdlib.h>
#include <string.h>
#include "slot/ccplan.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    struct kv_cc_req *r = NULL;
    size_t n = 0;
    struct kv_err e;

    e.msg[0] = 0;
    if (kv_cc_read((const char *)data, size, "fuzz", &r, &n, &e) != 0) {
        if (!e.msg[0])
            abort();
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int64_t at = 0;
        if (r[i].segs[0].kind != KV_CC_SYS ||
            r[i].segs[r[i].n_segs - 1].kind != KV_CC_QUESTION)
            abort();
        for (size_t s = 0; s < r[i].n_segs; s++) {
            if (r[i].segs[s].off != at)
                abort();
            at += r[i].segs[s].len;
        }
        r[i].output_len = 2;
    }
    struct kv_cc_config c = {n, r, 4, 64, 8, 4096, 0, 64, 8, 512, 0};
    struct kv_cc *p = NULL;
    struct kv_cc_sizes sz;
    if (kv_cc_sizes(&c, &sz, &e) == 0) {
        /* the sizes it names are enough, and one block less is refused */
        struct kv_cc_config d = c;
        d.chunk_pool_blocks = sz.pool_blocks_least;
        if (kv_cc_new(&d, &p, &e) != 0)
            abort();
        kv_cc_free(p);
        p = NULL;
        d.chunk_pool_blocks = sz.pool_blocks_least - 1;
        if (d.chunk_pool_blocks > 0 && kv_cc_new(&d, &p, &e) == 0)
            abort();
        d.chunk_pool_blocks = sz.pool_blocks_least;
        d.num_blocks = sz.main_blocks_least - 1;
        if (d.num_blocks > 0 && kv_cc_new(&d, &p, &e) == 0)
            abort();
    }
    if (kv_cc_new(&c, &p, &e) == 0) {
        const struct kv_cc_step *st;
        for (int k = 0; k < 10000 && kv_cc_step(p, 1, &st, &e) == 1; k++) {
            int64_t looked = 0, copied = 0;
            for (size_t j = 0; j < st->chunk_tokens.n; j++)
                looked += st->chunk_tokens.v[j];
            for (size_t j = 0; j < st->copy_len.n; j++)
                copied += st->copy_len.v[j];
            if (looked != copied)
                abort();
        }
        kv_cc_free(p);
    }
    kv_cc_reqs_free(r, n);
    return 0;
}
