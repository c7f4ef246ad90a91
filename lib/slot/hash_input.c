/* hash_input.c - one prompt line for kvslot hash: token ids as text
 * (integers separated by blanks or commas; an empty line is an empty
 * prompt), a JSON array of them, or a JSON object
 *
 *   {"token_ids": [1, 2, 3], "cache_salt": "s", "lora_name": "a",
 *    "lora_path": "/p"}
 *
 * (prompt_token_ids is another name for token_ids; the other keys may be
 * left out or null; unknown keys are ignored).  JSON is parsed by
 * jansson. */
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "slot/hash.h"

void kv_hash_prompt_release(struct kv_hash_prompt *p)
{
    free(p->tok);
    free(p->salt);
    free(p->lora_name);
    free(p->lora_path);
    memset(p, 0, sizeof *p);
}

static int push(struct kv_hash_prompt *p, int64_t v, struct kv_err *e)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 256;
        int64_t *t = realloc(p->tok, cap * sizeof *t);
        if (!t)
            return kv_err_set(e, "out of memory");
        p->tok = t;
        p->cap = cap;
    }
    p->tok[p->n++] = v;
    return 0;
}

static int text_line(struct kv_hash_prompt *p, const char *s, size_t n,
                     struct kv_err *e)
{
    size_t i = 0;
    for (;;) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == ','))
            i++;
        if (i == n)
            return 0;
        char buf[32], *end;
        size_t j = i;
        while (j < n && s[j] != ' ' && s[j] != '\t' && s[j] != ',')
            j++;
        if (j - i >= sizeof buf)
            return kv_err_set(e, "token %zu: '%.30s...' is not an integer",
                              p->n + 1, s + i);
        memcpy(buf, s + i, j - i);
        buf[j - i] = 0;
        errno = 0;
        long long v = strtoll(buf, &end, 10);
        if (*end || end == buf)
            return kv_err_set(e, "token %zu: '%s' is not an integer",
                              p->n + 1, buf);
        if (errno == ERANGE)
            return kv_err_set(e, "token %zu: '%s' does not fit 64 bits",
                              p->n + 1, buf);
        if (push(p, (int64_t)v, e) < 0)
            return -1;
        i = j;
    }
}

static int get_str(json_t *o, const char *key, char **out, struct kv_err *e)
{
    json_t *x = json_object_get(o, key);
    if (!x || json_is_null(x))
        return 0;
    if (!json_is_string(x))
        return kv_err_set(e, "key '%s': expected a string", key);
    if (strlen(json_string_value(x)) != json_string_length(x))
        return kv_err_set(e, "key '%s': NUL in the string", key);
    *out = strdup(json_string_value(x));
    return *out ? 0 : kv_err_set(e, "out of memory");
}

static int json_line(struct kv_hash_prompt *p, const char *s, size_t n,
                     struct kv_err *e)
{
    json_error_t je;
    json_t *o = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je), *a = o;
    int rc = -1;
    if (!o)
        return kv_err_set(e, "column %d: malformed JSON: %s", je.column,
                          je.text);
    if (json_is_object(o)) {
        a = json_object_get(o, "token_ids");
        if (!a)
            a = json_object_get(o, "prompt_token_ids");
        if (!a) {
            kv_err_set(e, "missing key 'token_ids'");
            goto out;
        }
        if (get_str(o, "cache_salt", &p->salt, e) < 0 ||
            get_str(o, "lora_name", &p->lora_name, e) < 0 ||
            get_str(o, "lora_path", &p->lora_path, e) < 0)
            goto out;
        if (p->lora_path && !p->lora_name) {
            kv_err_set(e, "key 'lora_path' without 'lora_name'");
            goto out;
        }
    }
    if (!json_is_array(a)) {
        kv_err_set(e, "expected an array of token ids");
        goto out;
    }
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x)) {
            kv_err_set(e, "token %zu is not an integer", i + 1);
            goto out;
        }
        if (push(p, (int64_t)json_integer_value(x), e) < 0)
            goto out;
    }
    rc = 0;
out:
    json_decref(o);
    return rc;
}

int kv_hash_prompt_parse(struct kv_hash_prompt *p, const char *s, size_t n,
                         struct kv_err *e)
{
    size_t i = 0;
    p->n = 0;
    free(p->salt);
    free(p->lora_name);
    free(p->lora_path);
    p->salt = p->lora_name = p->lora_path = NULL;
    if (memchr(s, '\0', n))
        return kv_err_set(e, "NUL byte in the line");
    while (i < n && (s[i] == ' ' || s[i] == '\t'))
        i++;
    if (i < n && (s[i] == '[' || s[i] == '{'))
        return json_line(p, s + i, n - i, e);
    return text_line(p, s, n, e);
}
