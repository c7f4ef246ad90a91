/* npy.c - libFuzzer entry for the .npy stream reader (make fuzz).  Reads
 * every array of the input with a 64 MiB limit, then writes each one back
 * and reads it again: the second read must give the same bytes.  The
 * one-array reader must accept the input exactly when its first array
 * ends at the last byte. */
#include <stdlib.h>
#include <string.h>
#include "core/npy.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    FILE *f = fmemopen((void *)data, size ? size : 1, "rb");
    struct kv_tensor t, u;
    struct kv_err e;

    if (!f)
        return 0;
    if (size == 0) {
        fclose(f);
        return 0;
    }
    kv_tensor_init(&t);
    kv_tensor_init(&u);
    for (int i = 0; i < 16; i++) {
        char *mem = NULL;
        size_t msz = 0;
        if (kv_npy_read(f, (size_t)64 << 20, &t, &e) != 0)
            break;
        FILE *w = open_memstream(&mem, &msz);
        if (kv_npy_write(w, &t, &e) != 0)
            abort();
        fclose(w);
        FILE *r = fmemopen(mem, msz, "rb");
        if (kv_npy_read(r, 0, &u, &e) != 0 || u.nbytes != t.nbytes ||
            u.dtype != t.dtype ||
            (t.nbytes && memcmp(u.data, t.data, t.nbytes) != 0))
            abort();
        fclose(r);
        free(mem);
    }
    fclose(f);

    /* one array: accepted iff the first array is the whole input */
    f = fmemopen((void *)data, size, "rb");
    if (!f)
        abort();
    int whole = kv_npy_read(f, (size_t)64 << 20, &t, &e) == 0 &&
                ftell(f) == (long)size;
    rewind(f);
    e.msg[0] = 0;
    int one = kv_npy_read_one(f, (size_t)64 << 20, &u, &e);
    if ((one == 0) != whole || (one < 0 && !e.msg[0]))
        abort();
    if (one == 0 && (u.nbytes != t.nbytes ||
                     (t.nbytes && memcmp(u.data, t.data, t.nbytes) != 0)))
        abort();
    fclose(f);
    kv_tensor_release(&t);
    kv_tensor_release(&u);
    return 0;
}
