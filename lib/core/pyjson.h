/* pyjson.h - JSON as Python's json module writes it.
 *
 * Python's json.dump writes a float that is not finite as the bare words
 * NaN, Infinity and -Infinity, which strict JSON (and jansson) refuse, and
 * json.load reads them back.  Published Hugging Face config.json files
 * carry them (Nemotron-H's "time_step_limit": [0.0, Infinity]), and
 * transformers and vLLM read those files with Python's json.  This reader
 * takes them where json.load does: as a value, after ':', '[' or ',' and
 * before ',', ']', '}' or the end.  Each becomes the JSON string of its
 * word ("Infinity"), so a key read as a number reports a type error
 * instead of taking a made-up value.  Outside strings nothing else
 * changes; inside strings nothing does.
 */
#ifndef KV_PYJSON_H
#define KV_PYJSON_H

#include <jansson.h>
#include <stddef.h>

/* json_loadb over buf[0..len) with flags, Python's non-finite words read
 * as strings; NULL with je filled (line and column of buf, a column
 * counted after the quotes added on that line) when it does not parse or
 * memory runs out.  The caller owns the result (json_decref). */
json_t *kv_pyjson_loadb(const char *buf, size_t len, size_t flags,
                        json_error_t *je);

#endif
