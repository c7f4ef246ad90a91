/* lib_call.c - the C library's side of bench/bench-python.sh: the same
 * four computations the Python package makes, as one C program makes them
 * (libkv calls on inputs in memory), the best wall time of REPEAT calls
 * kept.  mask8192 allocates its buffer for each call, as a Python call
 * that returns a new array does; mask8192-out renders into one buffer
 * reused from call to call (kvmask.causal(..., out=buf)).  Prints the
 * best wall seconds per call and the process CPU seconds (every thread's)
 * of that call, and writes the last call's output (its data bytes, no
 * header) to OUT for the bench to compare.
 *
 *   lib_call mask16|slot1|mask8192[-out]|attn4096 REPEAT OUT [Q K V]
 *
 * Built and run by bench/bench-python.sh; not part of kvtools.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "core/cli.h"
#include "core/npy.h"
#include "core/tensor.h"
#include "mask/mask.h"
#include "mask/mask_mem.h"
#include "slot/slot.h"
#include "attn/attn.h"

static struct kv_err e;

/* CPU seconds of the process, all threads */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* kvmask causal -n N --dtype DT: rule, values, render (as kvmask.causal) */
static int mask_call(int64_t n, enum kv_dtype dt, int reuse, void **buf,
                     size_t *len)
{
    struct kv_mask m;
    struct kv_mask_spec s = { .kind = KV_MASK_CAUSAL, .n_q = n, .n_kv = n };
    struct kv_mask_values v;
    static int threads;
    if (!threads)
        threads = kv_nproc();          /* asked once, as the package does */
    struct kv_mask_out o = { .threads = threads };
    size_t bytes;
    kv_mask_init(&m);
    if (kv_mask_make(&m, &s, &e) || kv_mask_values_plain(&v, dt, 0, NULL, &e) ||
        kv_mask_dense_bytes(&m, &v, &o, 0, &bytes))
        return -1;
    if (!reuse || *len != bytes || !*buf) {
        free(*buf);
        *buf = malloc(bytes ? bytes : 1);
        *len = bytes;
        if (*buf)
            kv_advise_huge(*buf, bytes);
    }
    int rc = kv_mask_render(&m, &v, &o, *buf, bytes, &e);
    kv_mask_release(&m);
    return rc;
}

/* kvslot map -B 16 --block-table [[1, 2]] --scheduled 16: every field */
static int slot_call(void **buf, size_t *len)
{
    static const int64_t ids[2] = { 1, 2 }, sched[1] = { 16 };
    struct kv_slot_geom g = { .block_size = 16, .kernel_block_size = 16,
                              .max_model_len = 32, .cp_world = 1,
                              .interleave = 1,
                              .virt = KV_SLOT_VIRTUAL_PHYSICAL };
    struct kv_slot_table t = { .ids = ids, .n_rows = 1, .n_cols = 2 };
    struct kv_slot_step st;
    kv_slot_step_init(&st);
    if (kv_slot_compute(&g, &t, 1, sched, NULL, 1u << KV_SLOT_SLOT_MAPPING, &st, &e))
        return -1;
    free(*buf);
    *len = st.n_tokens * sizeof(int64_t);
    *buf = malloc(*len);
    memcpy(*buf, st.slot_mapping, *len);
    kv_slot_step_release(&st);
    return 0;
}

static int attn_call(const struct kv_tensor *q, const struct kv_tensor *k,
                     const struct kv_tensor *v, void **buf, size_t *len)
{
    struct kv_attn_req r;
    struct kv_tensor out, lse;
    memset(&r, 0, sizeof r);
    r.layout = KV_ATTN_BHSD;
    r.q = q;
    r.k = k;
    r.v = v;
    r.causal = 1;
    r.out_dtype = KV_NDTYPES;
    kv_tensor_init(&out);
    kv_tensor_init(&lse);
    if (kv_attn_run(&r, &out, &lse, &e))
        return -1;
    free(*buf);
    *buf = out.data;
    *len = out.nbytes;
    out.data = NULL;
    kv_tensor_release(&lse);
    return 0;
}

int main(int argc, char **argv)
{
    struct kv_tensor q = {0}, k = {0}, v = {0};
    void *buf = NULL;
    size_t len = 0;
    double best = -1, best_cpu = 0;

    if (argc < 4) {
        fprintf(stderr, "usage: lib_call CASE REPEAT OUT [Q K V]\n");
        return 2;
    }
    int reps = atoi(argv[2]);
    int attn = strcmp(argv[1], "attn4096") == 0;
    if (attn && (argc < 7 || kv_npy_load(argv[4], 0, &q, &e) ||
                 kv_npy_load(argv[5], 0, &k, &e) || kv_npy_load(argv[6], 0, &v, &e))) {
        fprintf(stderr, "lib_call: %s\n", argc < 7 ? "attn4096 needs Q K V" : e.msg);
        return 1;
    }
    /* tiny calls are timed in batches of 1000 */
    int batch = strcmp(argv[1], "mask16") == 0 || strcmp(argv[1], "slot1") == 0 ? 1000 : 1;
    for (int i = 0; i < reps; i++) {
        double t0 = kv_now(), c0 = cpu_now();
        int rc = 0;
        for (int b = 0; b < batch && rc == 0; b++) {
            if (strcmp(argv[1], "mask16") == 0)
                rc = mask_call(16, KV_BOOL, 0, &buf, &len);
            else if (strncmp(argv[1], "mask8192", 8) == 0)
                rc = mask_call(8192, KV_F16, argv[1][8] != '\0', &buf, &len);
            else if (strcmp(argv[1], "slot1") == 0)
                rc = slot_call(&buf, &len);
            else if (attn)
                rc = attn_call(&q, &k, &v, &buf, &len);
            else {
                fprintf(stderr, "lib_call: unknown case '%s'\n", argv[1]);
                return 2;
            }
        }
        if (rc) {
            fprintf(stderr, "lib_call: %s\n", e.msg);
            return 1;
        }
        double t = (kv_now() - t0) / batch;
        if (best < 0 || t < best) {
            best = t;
            best_cpu = (cpu_now() - c0) / batch;
        }
    }
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "lib_call: cannot write '%s'\n", argv[3]);
        return 1;
    }
    printf("%.9f %.9f\n", best, best_cpu);
    free(buf);
    kv_tensor_release(&q);
    kv_tensor_release(&k);
    kv_tensor_release(&v);
    return 0;
}
