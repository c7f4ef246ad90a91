/* npy_rows.c - a .npy file read by rows (kv_npy_file_open,
 * kv_npy_file_rows): the rows asked for and no other, runs of adjacent
 * rows, rows out of order or past the data refused; a file whose size is
 * not its header's (short, long), stdin or a directory not taken; and a
 * file cut short while it is open: the rows it still holds are read, a
 * row it lost fails with a message, the process does not fault. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/npy.h"
#include "tap.h"

/* A [10, 3] f32 array, element (i, j) = 3 i + j, into path; extra bytes
 * cut (negative) or added after it. */
static size_t write_rows(const char *path, long extra)
{
    struct kv_tensor t;
    struct kv_err e = {{0}};
    int64_t sh[2] = {10, 3};
    kv_tensor_init(&t);
    if (kv_tensor_alloc(&t, KV_F32, 2, sh, 0, &e))
        return 0;
    for (int i = 0; i < 30; i++)
        ((float *)t.data)[i] = (float)i;
    FILE *f = fopen(path, "wb");
    if (!f || kv_npy_write(f, &t, &e)) {
        kv_tensor_release(&t);
        return 0;
    }
    for (long x = 0; x < extra; x++)
        fputc(0, f);
    long size = ftell(f);
    fclose(f);
    kv_tensor_release(&t);
    if (extra < 0 && truncate(path, size + extra) != 0)
        return 0;
    return (size_t)(size + (extra < 0 ? extra : 0));
}

int main(void)
{
    char path[] = "/tmp/kv_npy_rows_XXXXXX";
    int fd = mkstemp(path);
    struct kv_npy_file nf;
    struct kv_err e = {{0}};
    float got[12];
    TAP_OK(fd >= 0, "a temporary file");
    if (fd < 0)
        return tap_done();
    close(fd);

    size_t size = write_rows(path, 0);
    TAP_OK(size > 120 && kv_npy_file_open(path, 0, &nf) == 0 && nf.h.dtype == KV_F32 &&
           nf.h.ndim == 2 && nf.h.shape[0] == 10 && nf.data_off + 120 == size,
           "open: the header, and the data at its end");
    const int64_t rows[4] = {1, 2, 5, 9};
    int ok = kv_npy_file_rows(&nf, 12, rows, 4, got, &e) == 0;
    for (int r = 0; ok && r < 4; r++)
        for (int j = 0; j < 3; j++)
            ok &= got[r * 3 + j] == (float)(3 * rows[r] + j);
    TAP_OK(ok, "rows 1, 2 (one read), 5 and 9, and only those");
    const int64_t back[2] = {5, 2}, twice[2] = {2, 2}, past[1] = {10}, neg[1] = {-1};
    TAP_OK(kv_npy_file_rows(&nf, 12, back, 2, got, &e) == -1 && strstr(e.msg, "in order"),
           "rows out of order refused: %s", e.msg);
    TAP_OK(kv_npy_file_rows(&nf, 12, twice, 2, got, &e) == -1, "a row twice refused");
    TAP_OK(kv_npy_file_rows(&nf, 12, past, 1, got, &e) == -1, "a row past the data refused");
    TAP_OK(kv_npy_file_rows(&nf, 12, neg, 1, got, &e) == -1, "a negative row refused");
    TAP_OK(kv_npy_file_rows(&nf, 12, rows, 0, got, &e) == 0, "no rows: nothing read");

    /* the file cut to 6 rows while it is open */
    TAP_OK(truncate(path, (off_t)(nf.data_off + 6 * 12)) == 0, "the file cut short");
    const int64_t kept[3] = {0, 4, 5}, lost[2] = {5, 6};
    e.msg[0] = 0;
    TAP_OK(kv_npy_file_rows(&nf, 12, kept, 3, got, &e) == 0 && got[3] == 12.0f &&
           got[8] == 17.0f, "rows it still holds are read");
    e.msg[0] = 0;
    TAP_OK(kv_npy_file_rows(&nf, 12, lost, 2, got, &e) == -1 && strstr(e.msg, "shrank"),
           "a row it lost fails: %s", e.msg);
    kv_npy_file_close(&nf);
    kv_npy_file_close(&nf);   /* twice is safe */

    TAP_OK(write_rows(path, -12) && kv_npy_file_open(path, 0, &nf) == -1 && !nf.f,
           "a file shorter than its header says is not taken");
    TAP_OK(write_rows(path, 5) && kv_npy_file_open(path, 0, &nf) == -1,
           "a file longer than its header says is not taken");
    TAP_OK(kv_npy_file_open("-", 0, &nf) == -1, "stdin is not taken");
    TAP_OK(kv_npy_file_open("/tmp", 0, &nf) == -1, "a directory is not taken");
    TAP_OK(write_rows(path, 0) && kv_npy_file_open(path, 64, &nf) == -1,
           "data over max_bytes is not taken");
    unlink(path);
    TAP_OK(kv_npy_file_open(path, 0, &nf) == -1, "a missing file is not taken");
    return tap_done();
}
