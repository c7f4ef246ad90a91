/* xattn_threshold.c - the selection threshold is used as the double it was
 * given, never rounded to f16 (0.9 is 0.89990234375 in f16) or f32: a row
 * whose decision falls between those values keeps the crossing block. */
#include <stdint.h>
#include <string.h>
#include "core/kv.h"
#include "attn/xattn.h"
#include "tap.h"

static const char *keep_str(const uint8_t *keep, int64_t n, char *buf)
{
    for (int64_t i = 0; i < n; i++)
        buf[i] = keep[i] ? '1' : '0';
    buf[n] = 0;
    return buf;
}

int main(void)
{
    int64_t scratch[6];
    uint8_t keep[3];
    char buf[4];

    /* total 1: after block 0 (0.89995) the accumulated mass is below 0.9
     * but above f16(0.9), so only the exact threshold takes block 2 too */
    const float row[3] = {0.89995f, 0.00005f, 0.1f};
    kv_xattn_select_row(row, 3, KV_XATTN_SEL_FREE, -1, 0.9, scratch, keep);
    TAP_OK(strcmp(keep_str(keep, 3, buf), "101") == 0,
           "threshold 0.9 as a double: the block crossing it is kept (%s)",
           buf);
    kv_xattn_select_row(row, 3, KV_XATTN_SEL_FREE, -1, 0.89990234375,
                        scratch, keep);
    TAP_OK(strcmp(keep_str(keep, 3, buf), "100") == 0,
           "f16(0.9) would stop after block 0 (%s)", buf);

    return tap_done();
}
