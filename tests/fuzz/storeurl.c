/* storeurl.c - libFuzzer entry for the store URL helpers (make fuzz): any
 * spec is redacted into a bounded, terminated string that keeps nothing
 * between a URL's user name and its last '@'; any HOST[:PORT] is read into
 * a host without brackets and a port in [1, 65535], or refused. */
#include <stdlib.h>
#include <string.h>
#include "chunk/store.h"
#include "chunk/store_redis.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    char *s = malloc(size + 1), buf[96], host[64];
    long port = 0;
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    kv_store_redact(s, buf, sizeof buf);
    if (strnlen(buf, sizeof buf) == sizeof buf)
        abort();
    /* the secret: after the user's ':' and before the last '@' */
    const char *sch = strstr(s, "://");
    const char *at = sch ? strrchr(sch + 3, '@') : NULL;
    const char *colon = at ? memchr(sch + 3, ':', (size_t)(at - sch - 3)) : NULL;
    if (colon && at - colon > 1) {
        /* the redacted text is the part before the secret, ":***", and
         * the part from the '@' on (each cut to the buffer) */
        size_t pre = (size_t)(colon - s);
        if (strncmp(buf, s, pre < sizeof buf - 1 ? pre : sizeof buf - 1))
            abort();
        if (pre + 4 < sizeof buf - 1 && strncmp(buf + pre, ":***", 4))
            abort();
    }
    int rc = kv_redis_parse_hostport(s, strlen(s), host, sizeof host, &port,
                                     size % 2 ? 6379 : 0);
    if (rc == 0 && (!host[0] || strchr(host, '[') || strchr(host, ']') ||
                    port < 1 || port > 65535 || strlen(host) >= sizeof host))
        abort();
    if (rc != 0 && rc != -1 && rc != -2)
        abort();
    free(s);
    return 0;
}
