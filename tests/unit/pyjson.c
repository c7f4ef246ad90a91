/* pyjson.c - unit tests of lib/core/pyjson.c: Python's NaN, Infinity and
 * -Infinity taken as values where json.load takes them (each read as the
 * string of its word), refused where json.load refuses them, and nothing
 * else changed (strings, escapes, numbers, error positions). */
#include <string.h>
#include "core/pyjson.h"
#include "tap.h"

static json_t *load(const char *s, json_error_t *je)
{
    return kv_pyjson_loadb(s, strlen(s), JSON_REJECT_DUPLICATES, je);
}

/* The string at key of s's object (an index into it when idx >= 0). */
static const char *str_at(const char *s, const char *key, int idx,
                          char *buf, size_t len)
{
    json_error_t je;
    json_t *o = load(s, &je), *x;
    buf[0] = 0;
    if (!o)
        return "(no parse)";
    x = json_object_get(o, key);
    if (idx >= 0)
        x = json_array_get(x, (size_t)idx);
    if (json_is_string(x))
        snprintf(buf, len, "%s", json_string_value(x));
    else
        snprintf(buf, len, "(not a string)");
    json_decref(o);
    return buf;
}

static void test_values(void)
{
    char b[64];
    TAP_OK(!strcmp(str_at("{\"time_step_limit\": [0.0, Infinity]}",
                          "time_step_limit", 1, b, sizeof b), "Infinity"),
           "Infinity in a list (Nemotron-H's time_step_limit): '%s'", b);
    TAP_OK(!strcmp(str_at("{\"a\": NaN, \"b\": 1}", "a", -1, b, sizeof b),
                   "NaN"), "NaN as a value: '%s'", b);
    TAP_OK(!strcmp(str_at("{\"b\": 1, \"a\":-Infinity\n}", "a", -1, b,
                          sizeof b), "-Infinity"),
           "-Infinity before a newline and '}': '%s'", b);
    TAP_OK(!strcmp(str_at("{\"a\": [Infinity ,NaN]}", "a", 0, b, sizeof b),
                   "Infinity"), "a blank before the ',': '%s'", b);
    TAP_OK(!strcmp(str_at("{\"a\": \"NaN, Infinity\"}", "a", -1, b,
                          sizeof b), "NaN, Infinity"),
           "inside a string nothing changes: '%s'", b);
    TAP_OK(!strcmp(str_at("{\"a\": \"x\\\", Infinity]\"}", "a", -1, b,
                          sizeof b), "x\", Infinity]"),
           "nor after an escaped quote: '%s'", b);

    json_error_t je;
    json_t *o = load("{\"a\": -1, \"b\": -1.5e3, \"c\": [true, null]}", &je);
    TAP_OK(o && json_integer_value(json_object_get(o, "a")) == -1 &&
               json_real_value(json_object_get(o, "b")) == -1500.0,
           "numbers stay numbers");
    json_decref(o);
    o = load("[Infinity]", &je);
    TAP_OK(o && json_is_string(json_array_get(o, 0)), "a top-level list");
    json_decref(o);
}

static void test_refused(void)
{
    static const char *const bad[] = {
        "{NaN: 1}",                 /* a key */
        "{\"a\": NaNx}",            /* part of a longer word */
        "{\"a\": Infinity1}",
        "{\"a\": infinity}",        /* json.load's words only */
        "{\"a\": -NaN}",
        "{\"a\": [1 Infinity]}",    /* no ',' before it */
        "{\"a\": 1}Infinity",       /* after the document */
        "{\"a\": Infinity \"b\"}",  /* no ',' after it */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_error_t je;
        json_t *o = load(bad[i], &je);
        TAP_OK(!o, "refused: %s", bad[i]);
        json_decref(o);
    }
}

/* With no word to quote the result is json_loadb's, error position too. */
static void test_untouched(void)
{
    const char *s = "{\n  \"a\": 1,\n  \"b\": ]\n}";
    json_error_t je1, je2;
    json_t *o1 = load(s, &je1), *o2 = json_loadb(s, strlen(s), 0, &je2);
    TAP_OK(!o1 && !o2 && je1.line == je2.line && je1.column == je2.column &&
               !strcmp(je1.text, je2.text),
           "a syntax error reported as json_loadb does (line %d, column %d)",
           je1.line, je1.column);
    json_decref(o1);
    json_decref(o2);
    o1 = load("{\"a\": 1, \"a\": 2}", &je1);
    TAP_OK(!o1, "flags pass through (duplicate keys refused)");
    json_decref(o1);
}

int main(void)
{
    test_values();
    test_refused();
    test_untouched();
    return tap_done();
}
