/* tables.c - libFuzzer entry for three text readers (make fuzz): the
 * integer tables every program reads (--block-table, --prompts: text rows
 * or an integer .npy), the 'kvchunk split' listing that 'kvchunk sim
 * from-split' turns into a trace, and the traces 'kvchunk sim' replays
 * (its own lines and Mooncake's JSONL, detected or named).  Any input is
 * refused with a message or read whole: a table of rows x cols values, a
 * trace of one line per question line, requests whose lengths are in
 * range. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/cli.h"
#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

/* The table reader on data, through a memory file. */
static void int_table(const unsigned char *data, size_t size)
{
    char path[64];
    int fd = memfd_create("table", 0);
    if (fd < 0 || write(fd, data, size) != (ssize_t)size)
        abort();
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int64_t *v = NULL;
    size_t rows = 0, cols = 0;
    struct kv_err e;
    e.msg[0] = 0;
    if (kv_read_int_table(path, -7, 1 << 20, &v, &rows, &cols, &e) != 0) {
        if (!e.msg[0])
            abort();
    } else {
        uint64_t sum = 0;  /* unsigned: any values, no overflow */
        for (size_t i = 0; i < rows * cols; i++)
            sum += (uint64_t)v[i];   /* every value readable */
        (void)sum;
        free(v);
    }
    close(fd);
}

/* The split-listing reader: one trace line per question line. */
static void from_split(const unsigned char *data, size_t size)
{
    FILE *in = fmemopen((void *)data, size, "r");
    char *out = NULL;
    size_t n_out = 0, questions = 0, lines = 0;
    struct kv_err e;
    if (!in)
        return;
    e.msg[0] = 0;
    if (kv_sim_from_split(in, "fuzz", 2.0, "t", 16, &out, &n_out, &e) != 0) {
        if (!e.msg[0])
            abort();
        fclose(in);
        return;
    }
    fclose(in);
    for (size_t i = 0; i < n_out; i++)
        lines += out[i] == '\n';
    if (n_out && out[n_out - 1] != '\n')
        abort();
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        while (p < le && (*p == ' ' || *p == '\t' || *p == '\r'))
            p++;
        if ((size_t)(le - p) >= 8 && !memcmp(p, "question", 8) &&
            (p + 8 == le || p[8] == ' ' || p[8] == '\t' || p[8] == '\r'))
            questions++;
        p = nl ? nl + 1 : end;
    }
    if (memchr(data, 0, size) == NULL && lines != questions)
        abort();
    free(out);
}

/* The trace reader in one format (AUTO, NATIVE or MOONCAKE): every
 * request to the end, or a refusal that says why. */
static void trace(const unsigned char *data, size_t size, int format)
{
    FILE *in = fmemopen((void *)data, size, "r");
    struct kv_sim_reader *r = NULL;
    struct kv_sim_req req;
    struct kv_err e;
    int rc;
    if (!in)
        return;
    e.msg[0] = 0;
    if (kv_sim_reader_open(&r, in, "fuzz", &e) != 0 ||
        kv_sim_reader_set_format(r, format, 16, &e) != 0) {
        if (!e.msg[0])
            abort();
        kv_sim_reader_free(r);
        fclose(in);
        return;
    }
    while ((rc = kv_sim_reader_next(r, &req, &e)) == 1) {
        if (req.q_len < 0 || req.out_len < 0 || req.sys.len < 0 || !(req.t >= 0))
            abort();
        for (size_t i = 0; i < req.n_chunks; i++)
            if (req.chunks[i].len < 0 || req.chunks[i].len > KV_SIM_MAX_LEN)
                abort();
    }
    if (rc < 0 && !e.msg[0])
        abort();
    kv_sim_reader_free(r);
    fclose(in);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    int_table(data, size);
    from_split(data, size);
    trace(data, size, KV_SIM_FORMAT_AUTO);
    trace(data, size, KV_SIM_FORMAT_MOONCAKE);
    return 0;
}
