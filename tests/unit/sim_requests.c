/* sim_requests.c - kv_sim_requests_read's memory limit (sim/requests.h):
 * max_bytes 0 is no limit, as libkv(3) states for every max_bytes, and
 * reads the same requests as a limit that fits; a limit below what the
 * token ids need refuses the trace, naming the limit. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sim/requests.h"
#include "tap.h"

static const char trace[] =
    "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, "
    "\"hash_ids\": [7, 2]}\n"
    "{\"timestamp\": 40, \"input_length\": 5, \"output_length\": 1, "
    "\"hash_ids\": [7]}\n";

static int read_trace(size_t max_bytes, struct kv_sim_requests *t,
                      struct kv_err *e)
{
    FILE *f = fmemopen((void *)trace, sizeof trace - 1, "r");
    if (!f)
        return kv_err_set(e, "fmemopen failed");
    memset(t, 0, sizeof *t);
    int rc = kv_sim_requests_read(f, "trace", 512, 10, max_bytes, t, e);
    fclose(f);
    return rc;
}

int main(void)
{
    struct kv_sim_requests a, b, c;
    struct kv_err e = {{0}};
    int ra = read_trace(0, &a, &e);
    TAP_OK(ra == 0 && a.n == 2 && a.prompt_lens[0] == 600 && a.bytes > 0,
           "max_bytes 0: no limit (%s)", e.msg);
    int rb = read_trace((size_t)1 << 20, &b, &e);
    int same = ra == 0 && rb == 0 && a.n == b.n;
    for (size_t i = 0; same && i < a.n; i++)
        same = a.prompt_lens[i] == b.prompt_lens[i] &&
               a.output_lens[i] == b.output_lens[i] &&
               a.arrivals[i] == b.arrivals[i] &&
               !memcmp(a.tokens[i], b.tokens[i],
                       (size_t)a.prompt_lens[i] * sizeof **a.tokens);
    TAP_OK(same && a.bytes == b.bytes, "the same requests as under a limit "
           "of 1 MiB (%zu bytes)", b.bytes);
    memset(&e, 0, sizeof e);
    int rc = read_trace(64, &c, &e);
    TAP_OK(rc < 0 && strstr(e.msg, "64"), "a limit of 64 bytes refuses the "
           "trace: '%s'", e.msg);
    kv_sim_requests_release(&a);
    kv_sim_requests_release(&b);
    return tap_done();
}
