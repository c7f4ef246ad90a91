/* slot_call.c - kvslot map's slot mapping timed the way its NumPy peer is:
 * the library call on a block table and counts already in memory,
 * repeated in one process, the best wall time kept.  The bench compares it
 * with the peer's in-process time (bench/kvslot_peer.py peer), so both
 * sides leave out process start-up, reading the inputs and writing the
 * output.
 *
 *   slot_call BT.npy SCHED.txt COMPUTED.txt BLOCK_SIZE REPEAT
 *
 * BT.npy: an int32 block table, used in place as kvslot map uses it.
 * Prints the best seconds and the sum of the slot mapping (the bench checks
 * it against the peer's array).  Built and run by bench/bench-kvslot.sh;
 * not part of kvtools.
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
    int64_t *sched, *comp, sum = 0;
    size_t ns, nc;
    double best = -1.0;
    int reps;

    if (argc < 6) {
        fprintf(stderr, "usage: slot_call BT.npy SCHED.txt COMPUTED.txt "
                        "BLOCK_SIZE REPEAT\n");
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
        if (r == reps - 1)
            for (size_t i = 0; i < s.n_tokens; i++)
                sum += s.slot_mapping[i];
        kv_slot_step_release(&s);
    }
    printf("%.6f %lld\n", best, (long long)sum);
    free(sched);
    free(comp);
    kv_tensor_release(&bt);
    return 0;
}
