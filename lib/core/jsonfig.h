/* jsonfig.h - the pieces of a report's -f json line: figures as the text
 * output prints them, shapes as arrays, one compact object a line.
 * Header-only so that only the programs that write JSON link jansson. */
#ifndef KV_JSONFIG_H
#define KV_JSONFIG_H
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* x as the text output prints it with "%.{prec}g" (g nonzero) or
 * "%.{prec}f", read back: a decimal of at most 15 significant digits,
 * which kv_json_line writes back unchanged, so the JSON number equals the
 * text's figure.  null when x is not finite, which JSON cannot hold. */
static inline json_t *kv_json_fig(double x, int prec, int g)
{
    char buf[400];
    if (!isfinite(x))
        return json_null();
    if (g)
        snprintf(buf, sizeof buf, "%.*g", prec, x);
    else
        snprintf(buf, sizeof buf, "%.*f", prec, x);
    return json_real(strtod(buf, NULL));
}

/* n integers (a shape, an index) as a JSON array */
static inline json_t *kv_json_dims(int n, const int64_t *v)
{
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((json_int_t)v[i]))) {
            json_decref(a);
            return NULL;
        }
    return a;
}

/* Writes o compactly, keys in the order set, reals with 15 significant
 * digits (kv_json_fig's figures as the text has them), and a newline to
 * f; takes o's reference.  -1 when o is NULL (out of memory) or the write fails. */
static inline int kv_json_line(FILE *f, json_t *o)
{
    int rc = -1;
    if (o && json_dumpf(o, f, JSON_COMPACT | JSON_PRESERVE_ORDER |
                                    JSON_REAL_PRECISION(15)) == 0 &&
        fputc('\n', f) != EOF)
        rc = 0;
    json_decref(o);
    return rc;
}

#endif
