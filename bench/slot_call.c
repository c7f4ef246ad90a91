/* slot_call.c - kvslot map's slot mapping timed the way its NumPy peer is:
 * the library call on a block table and counts already in memory,
 * repeated in one process, the best wall time kept.  The bench compares it
 * with the peer's in-process time (bench/kvslot_peer.py peer), so both
 * sides leave out process start-up, reading the inputs and writing the
 * output.
 *
 *   slot_call BT.npy SCHED.txt COMPUTED.txt BLOCK_SIZE REPEAT OUT.npy
 *
 * BT.npy: an int32 block table, used in place as kvslot map uses it.
 * Prints the best seconds; writes the last call's slot mapping to OUT.npy
 * (int64), which the bench compares with the peer's array.  Built and run
 * by bench/bench-kvslot-map.sh; not part of kvtools.
 */
#include <stdio.h>
#include <stdlib.h>
#include "core/cli.h"
#include "core/npy.h"
#include "core/tensor.h"
#include "slot/slot.h"

static int64_t *read_list(const char *path, size_t *n, struct kv_err *e)
{
    char *buf = NULL;
    size_t len;
    int64_t *v = NULL;

    if (kv_read_all(path, 0, &buf, &len, e) ||
        kv_parse_i64_list(buf, path, 0, INT64_MAX, &v, n, e))
        v = NULL;
    free(buf);
    return v;
}

int main(int argc, char **argv)
{
    struct kv_tensor bt = {0};
    struct kv_slot_geom g = {0};
    struct kv_slot_table t = {0};
    struct kv_err e = {0};
    int64_t *sched, *comp;
    FILE *out;
    size_t ns, nc;
    double best = -1.0;
    int reps;

    if (argc < 7) {
        fprintf(stderr, "usage: slot_call BT.npy SCHED.txt COMPUTED.txt "
                        "BLOCK_SIZE REPEAT OUT.npy\n");
        return 2;
    }
    if (kv_npy_load(argv[1], 0, &bt, &e) ||
        !(sched = read_list(argv[2], &ns, &e)) ||
        !(comp = read_list(argv[3], &nc, &e))) {
        fprintf(stderr, "slot_call: %s\n", e.msg);
        return 1;
    }
    if (bt.dtype != KV_I32 || bt.ndim != 2 || nc != ns) {
        fprintf(stderr, "slot_call: wants a 2-D int32 table and as many "
                        "computed counts as scheduled\n");
        return 1;
    }
    g.block_size = g.kernel_block_size = atoll(argv[4]);
    g.max_model_len = bt.shape[1] * g.block_size;
    g.cp_world = 1;
    g.interleave = 1;
    t.ids32 = (const int32_t *)bt.data;
    t.n_rows = (size_t)bt.shape[0];
    t.n_cols = (size_t)bt.shape[1];
    reps = atoi(argv[5]);
    if (reps < 1 || !(out = fopen(argv[6], "wb"))) {
        fprintf(stderr, "slot_call: REPEAT must be at least 1 and OUT.npy "
                        "writable\n");
        return 1;
    }
    for (int r = 0; r < reps; r++) {
        struct kv_slot_step s;
        double t0, dt;
        kv_slot_step_init(&s);
        t0 = kv_now();
        if (kv_slot_compute(&g, &t, ns, sched, comp,
                            1u << KV_SLOT_SLOT_MAPPING, &s, &e)) {
            fprintf(stderr, "slot_call: %s\n", e.msg);
            return 1;
        }
        dt = kv_now() - t0;
        best = best < 0.0 || dt < best ? dt : best;
        if (r == reps - 1) {
            int64_t n = (int64_t)s.n_tokens;
            if (kv_npy_write_header(out, KV_I64, 1, &n, &e) ||
                fwrite(s.slot_mapping, sizeof(int64_t), s.n_tokens, out) != s.n_tokens ||
                fclose(out)) {
                fprintf(stderr, "slot_call: %s: cannot write\n", argv[6]);
                return 1;
            }
        }
        kv_slot_step_release(&s);
    }
    printf("%.6f\n", best);
    free(sched);
    free(comp);
    kv_tensor_release(&bt);
    return 0;
}
