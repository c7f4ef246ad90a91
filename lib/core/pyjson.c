/* pyjson.c - JSON with Python's NaN, Infinity and -Infinity (pyjson.h). */
#include "core/pyjson.h"

#include <stdlib.h>
#include <string.h>

static const char *const words[] = { "NaN", "Infinity", "-Infinity" };

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The length of the non-finite word at buf[i] when it stands where
 * json.load takes it, a value between prev (the last character outside
 * blanks, 0 at the start) and ',', ']', '}' or the end; else 0. */
static size_t word_at(const char *buf, size_t len, size_t i, char prev)
{
    if (prev != 0 && prev != ':' && prev != '[' && prev != ',')
        return 0;
    for (size_t k = 0; k < sizeof words / sizeof *words; k++) {
        size_t n = strlen(words[k]), j = i + n;
        if (len - i < n || memcmp(buf + i, words[k], n))
            continue;
        while (j < len && blank(buf[j]))
            j++;
        if (j == len || buf[j] == ',' || buf[j] == ']' || buf[j] == '}')
            return n;
    }
    return 0;
}

/* Copies buf to out (when out is not NULL) with each word quoted; returns
 * the length of the copy. */
static size_t quote_words(const char *buf, size_t len, char *out)
{
    size_t o = 0;
    char prev = 0;
    int in_str = 0, esc = 0;

    for (size_t i = 0; i < len; i++) {
        char ch = buf[i];
        size_t n;
        if (in_str) {
            if (esc)
                esc = 0;
            else if (ch == '\\')
                esc = 1;
            else if (ch == '"')
                in_str = 0;
        } else if (ch == '"') {
            in_str = 1;
        } else if ((ch == 'N' || ch == 'I' || ch == '-') &&
                   (n = word_at(buf, len, i, prev)) > 0) {
            if (out) {
                out[o] = '"';
                memcpy(out + o + 1, buf + i, n);
                out[o + 1 + n] = '"';
            }
            o += n + 2;
            i += n - 1;
            prev = '"';
            continue;
        }
        if (!blank(ch))
            prev = ch;
        if (out)
            out[o] = ch;
        o++;
    }
    return o;
}

json_t *kv_pyjson_loadb(const char *buf, size_t len, size_t flags,
                        json_error_t *je)
{
    size_t n = quote_words(buf, len, NULL);
    if (n == len)
        return json_loadb(buf, len, flags, je);
    char *copy = malloc(n);
    if (!copy) {
        memset(je, 0, sizeof *je);
        strcpy(je->text, "out of memory");
        return NULL;
    }
    quote_words(buf, len, copy);
    json_t *root = json_loadb(copy, n, flags, je);
    free(copy);
    return root;
}
