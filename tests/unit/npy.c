/* npy.c - the .npy reader and writer: round trips of every dtype, headers
 * of versions 1-3 written by hand, streams of several arrays, and a set of
 * broken headers that must each fail with a message. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/cli.h"
#include "core/npy.h"
#include "tap.h"

/* Build a .npy image by hand: version, dict text, data. */
static size_t mk(unsigned char *buf, int ver, const char *dict,
                 const void *data, size_t n)
{
    size_t dl = strlen(dict), pre = ver == 1 ? 10 : 12, off;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)ver;
    buf[7] = 0;
    buf[8] = (unsigned char)(dl & 0xff);
    buf[9] = (unsigned char)(dl >> 8);
    if (ver != 1) {
        buf[10] = 0;
        buf[11] = 0;
    }
    memcpy(buf + pre, dict, dl);
    off = pre + dl;
    memcpy(buf + off, data, n);
    return off + n;
}

static int read_mem(const unsigned char *buf, size_t len, struct kv_tensor *t,
                    struct kv_err *e)
{
    FILE *f = fmemopen((void *)buf, len, "rb");
    int rc = kv_npy_read(f, 0, t, e);
    fclose(f);
    return rc;
}

int main(void)
{
    struct kv_err e;
    struct kv_tensor t, u;
    unsigned char buf[4096];
    size_t len;
    float fdata[6] = {1, 2, 3, 4, 5, -0.0f};

    kv_tensor_init(&t);
    kv_tensor_init(&u);

    /* round trip of every dtype through a two-array stream */
    for (int d = 0; d < KV_NDTYPES; d++) {
        int64_t shape[3] = {2, 3, 1};
        char *mem = NULL;
        size_t msz = 0;
        FILE *f = open_memstream(&mem, &msz);
        int ok = kv_tensor_alloc(&t, (enum kv_dtype)d, 3, shape, 0, &e) == 0;
        for (size_t i = 0; ok && i < t.nbytes; i++)
            ((unsigned char *)t.data)[i] = (unsigned char)(i * 37 + 1);
        ok = ok && kv_npy_write(f, &t, &e) == 0 && kv_npy_write(f, &t, &e) == 0;
        fclose(f);
        ok = ok && (msz - 2 * t.nbytes) % 128 == 0;
        f = fmemopen(mem, msz, "rb");
        int r1 = kv_npy_read(f, 0, &u, &e);
        int same = r1 == 0 && u.dtype == t.dtype && u.ndim == 3 &&
                   u.shape[1] == 3 && memcmp(u.data, t.data, t.nbytes) == 0;
        int r2 = kv_npy_read(f, 0, &u, &e);
        int r3 = kv_npy_read(f, 0, &u, &e);
        fclose(f);
        free(mem);
        TAP_OK(ok && same && r2 == 0 && r3 == 1,
               "%s: write, read back twice, then a clean end of stream",
               kv_dtype_name((enum kv_dtype)d));
    }

    /* header layout: v1.0, 64-byte aligned data, exact dict text */
    {
        int64_t shape[1] = {6};
        char *mem = NULL;
        size_t msz = 0;
        FILE *f = open_memstream(&mem, &msz);
        kv_tensor_alloc(&t, KV_F32, 1, shape, 0, &e);
        memcpy(t.data, fdata, sizeof fdata);
        kv_npy_write(f, &t, &e);
        fclose(f);
        const char *want = "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (6,), }";
        TAP_OK(msz == 128 + 24 && mem[6] == 1 && mem[7] == 0 &&
               mem[8] == 118 && memcmp(mem + 10, want, strlen(want)) == 0 &&
               mem[127] == 10, "1-d f32 header is numpy's, padded to 64");
        free(mem);
    }
    {
        int64_t shape[2] = {2, 2};
        char *mem = NULL;
        size_t msz = 0;
        FILE *f = open_memstream(&mem, &msz);
        kv_tensor_alloc(&t, KV_BF16, 2, shape, 0, &e);
        kv_npy_write(f, &t, &e);
        fclose(f);
        TAP_OK(strstr(mem + 10, "'descr': '<V2'") != NULL &&
               strstr(mem + 10, "'shape': (2, 2), }") != NULL,
               "bf16 is written as '<V2'");
        free(mem);
    }

    /* versions 2.0 and 3.0, other spellings numpy accepts */
    len = mk(buf, 2, "{\"descr\":\"<f4\",\"fortran_order\":False,"
             "\"shape\":(2,3)}\n", fdata, 24);
    TAP_OK(read_mem(buf, len, &t, &e) == 0 && t.dtype == KV_F32 &&
           t.ndim == 2 && t.shape[0] == 2 && ((float *)t.data)[5] == 0,
           "version 2.0 header with double quotes, no spaces");
    len = mk(buf, 3, "{'shape': (), 'fortran_order': False, 'descr': '<f4'}  "
             "\n", fdata, 4);
    TAP_OK(read_mem(buf, len, &t, &e) == 0 && t.ndim == 0 &&
           ((float *)t.data)[0] == 1, "version 3.0, keys in another order, "
           "0-d array");
    len = mk(buf, 1, "{'descr': '|V2', 'fortran_order': False, 'shape': "
             "(0, 4), }\n", "", 0);
    TAP_OK(read_mem(buf, len, &t, &e) == 0 && t.dtype == KV_BF16 &&
           t.shape[0] == 0 && t.shape[1] == 4, "empty bf16 array '|V2'");

    /* broken inputs: each must fail and say why */
    static const struct {
        const char *dict;
        size_t data;
        const char *expect;
        const char *title;
    } bad[] = {
        {"{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", 4,
         "big-endian", "big-endian refused"},
        {"{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }", 4,
         "Fortran", "Fortran order refused"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", 8,
         "object", "object arrays refused"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }",
         4, "structured", "structured dtypes refused"},
        {"{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", 8,
         "unsupported dtype", "complex refused"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 4,
         "truncated data", "truncated data: 8 bytes needed, 4 present"},
        {"{'descr': '<f4', 'fortran_order': False}", 0, "missing key",
         "missing shape"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", 0,
         "non-negative", "negative dimension"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': "
         "(4294967296, 4294967296, 4294967296), }", 0, "too large",
         "shape product overflow"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", 0,
         "unexpected key", "unknown key"},
        {"['descr', '<f4']", 0, "expected '{'", "not a dict"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,2", 0,
         "shape", "unterminated shape"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}", 0,
         "expected ','", "missing comma"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", 0,
         "after the dict", "trailing junk"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        static unsigned char zeros[64];
        len = mk(buf, 1, bad[i].dict, zeros, bad[i].data);
        e.msg[0] = 0;
        int rc = read_mem(buf, len, &t, &e);
        TAP_OK(rc == -1 && strstr(e.msg, bad[i].expect) != NULL,
               "%s (%s)", bad[i].title, e.msg);
    }
    memcpy(buf, "\x93NUMPZ\x01\x00", 8);
    TAP_OK(read_mem(buf, 8, &t, &e) == -1 && strstr(e.msg, "magic"),
           "bad magic (%s)", e.msg);
    memcpy(buf, "\x93NUMPY\x04\x00\x10\x00", 10);
    TAP_OK(read_mem(buf, 10, &t, &e) == -1 && strstr(e.msg, "version"),
           "version 4 refused (%s)", e.msg);
    memcpy(buf, "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
    TAP_OK(read_mem(buf, 17, &t, &e) == -1 && strstr(e.msg, "truncated"),
           "truncated header (%s)", e.msg);
    TAP_OK(read_mem(buf, 3, &t, &e) == -1, "3 stray bytes are an error");
    TAP_OK(read_mem(buf, 0, &t, &e) == 1, "empty input is a clean end");
    {
        struct kv_npy_header h;
        const char *d = "{'descr': '<f8', 'fortran_order': False, "
                        "'shape': (1000, 1000), }";
        TAP_OK(kv_npy_parse_dict(d, strlen(d), 1000, &h, &e) == -1 &&
               strstr(e.msg, "8000000 bytes"),
               "a size above the limit is refused before reading (%s)",
               e.msg);
    }

    /* a file read as one array: a second array or any trailing byte is an
     * error, for kv_npy_load and for the integer tables */
    {
        static const int32_t ids[4] = {5, 6, 7, 8};
        const char *dict = "{'descr': '<i4', 'fortran_order': False, "
                           "'shape': (1, 4), }";
        char path[] = "/tmp/kvnpyXXXXXX";
        int fd = mkstemp(path);
        size_t one = mk(buf, 1, dict, ids, sizeof ids);
        const struct {
            size_t len;
            const char *extra, *expect, *title;
        } cases[] = {
            {0, "", NULL, "one array"},
            {one, "", "more than one array", "two arrays"},
            {3, "abc", "extra data", "three bytes of garbage"},
            {1, "\n", "extra data", "a newline"},
            {6, "\x93NUMPY", "more than one array", "the magic alone"},
        };
        for (size_t i = 0; fd >= 0 && i < sizeof cases / sizeof cases[0];
             i++) {
            FILE *f = fopen(path, "wb");
            int64_t *tab = NULL;
            size_t rows = 0, cols = 0;
            fwrite(buf, 1, one, f);
            if (i == 1)
                fwrite(buf, 1, one, f);
            else
                fwrite(cases[i].extra, 1, cases[i].len, f);
            fclose(f);
            e.msg[0] = 0;
            int rc = kv_npy_load(path, 0, &t, &e);
            if (!cases[i].expect)
                TAP_OK(rc == 0 && t.shape[1] == 4 &&
                       ((int32_t *)t.data)[3] == 8, "load: %s",
                       cases[i].title);
            else
                TAP_OK(rc == -1 && strstr(e.msg, cases[i].expect) &&
                       strstr(e.msg, path), "load: %s refused (%s)",
                       cases[i].title, e.msg);
            e.msg[0] = 0;
            rc = kv_read_int_table(path, -1, 0, &tab, &rows, &cols, &e);
            if (!cases[i].expect)
                TAP_OK(rc == 0 && rows == 1 && cols == 4 && tab[0] == 5,
                       "int table: %s", cases[i].title);
            else
                TAP_OK(rc == -1 && strstr(e.msg, cases[i].expect),
                       "int table: %s refused (%s)", cases[i].title, e.msg);
            free(tab);
        }
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        TAP_OK(fd >= 0, "temporary file for the one-array cases");
    }

    kv_tensor_release(&t);
    kv_tensor_release(&u);
    kv_tensor_release(&u);   /* release twice is safe */
    return tap_done();
}
