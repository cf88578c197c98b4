/* Who may talk to the server. A keyless server on 127.0.0.1 is reachable
 * from any web page the user opens: a page's cross-origin POST runs (the
 * browser only hides the answer), and a DNS-rebinding host name makes the
 * page same-origin with the server. So, by default: no CORS headers; on a
 * loopback address only loopback Host names; a request that a browser
 * marks with a foreign Origin refused; --cors names the origins that may
 * call and read. The API key is compared in constant time. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"

/* The host part of a Host header or an origin's authority: "[::1]:8080",
 * "localhost:8080", "127.0.0.1" -> its name without port, lower-case. */
static void host_name(const char *s, size_t n, char *out, size_t cap) {
    size_t end = n;
    if (n && s[0] == '[') { /* an IPv6 literal: up to its bracket */
        const char *rb = memchr(s, ']', n);
        end = rb ? (size_t)(rb - s) + 1 : n;
    } else {
        const char *colon = memchr(s, ':', n);
        if (colon) end = (size_t)(colon - s);
    }
    size_t k = end < cap - 1 ? end : cap - 1;
    for (size_t i = 0; i < k; i++) out[i] = (char)tolower((unsigned char)s[i]);
    out[k] = '\0';
}

static bool loopback_name(const char *name) {
    if (!strcmp(name, "localhost") || !strcmp(name, "[::1]")) return true;
    unsigned a, b, c, d;
    char extra;
    return sscanf(name, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4 && a == 127 && b < 256 && c < 256 && d < 256;
}

bool serve_host_allowed(bool loopback, const char *host) {
    if (!loopback || !host) return true; /* HTTP/1.0 may leave Host out: no name to rebind */
    char name[256];
    host_name(host, strlen(host), name, sizeof name);
    return loopback_name(name);
}

bool serve_origin_allowed(const char *cors, bool loopback, const char *origin) {
    if (!origin) return true; /* not a browser's cross-site call */
    if (cors) { /* --cors: the listed origins, or "*" */
        size_t n = strlen(origin);
        for (const char *p = cors; *p;) {
            const char *comma = strchr(p, ',');
            size_t k = comma ? (size_t)(comma - p) : strlen(p);
            if ((k == 1 && *p == '*') || (k == n && !strncmp(p, origin, n))) return true;
            p += k + (comma ? 1 : 0);
        }
    }
    if (!loopback) return false;
    /* a page served from this machine's loopback (a local UI) */
    const char *auth = strstr(origin, "://");
    if (!auth) return false;
    auth += 3;
    char name[256];
    host_name(auth, strcspn(auth, "/"), name, sizeof name);
    return loopback_name(name);
}

bool serve_key_matches(const char *key, const char *auth) {
    if (!auth || strncmp(auth, "Bearer ", 7) != 0) return false;
    const char *given = auth + 7;
    size_t lk = strlen(key), lg = strlen(given);
    /* every byte of the key read whatever the given one holds, so the time
     * says nothing of how much of it matched */
    unsigned char diff = lk != lg;
    for (size_t i = 0; i < lk; i++) diff |= (unsigned char)(key[i] ^ given[i < lg ? i : 0]);
    return lk > 0 && diff == 0;
}
