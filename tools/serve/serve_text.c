/* What of a generated text a client may see yet. Tokens arrive as byte
 * pieces: a stop string can span several of them and so can one UTF-8
 * character, so the tail that might still become either is held back until
 * the next piece decides it. */
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "serve.h"

static const char *find(const char *hay, size_t n, const char *needle, size_t k) {
    if (k == 0 || k > n) return NULL;
    for (const char *p = hay, *end = hay + n - k; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, k) == 0) return p;
    }
    return NULL;
}

/* Bytes a UTF-8 sequence with this lead byte has (0: not a lead byte). */
static size_t utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) return 2;
    if (c >= 0xe0 && c <= 0xef) return 3;
    if (c >= 0xf0 && c <= 0xf4) return 4;
    return 0;
}

size_t serve_text_release(const char *text, size_t len, size_t from, char *const *stop, size_t n_stop,
                          bool final, bool *stop_found) {
    *stop_found = false;
    size_t best = len;
    for (size_t i = 0; i < n_stop; i++) {
        size_t k = strlen(stop[i]);
        if (!k) continue;
        size_t start = from >= k - 1 ? from - (k - 1) : 0; /* a match may straddle `from` */
        if (start >= len) continue;
        const char *p = find(text + start, len - start, stop[i], k);
        if (p && (size_t)(p - text) < best) best = (size_t)(p - text), *stop_found = true;
    }
    if (*stop_found || final) return best;
    size_t hold = 0; /* the longest tail that begins a stop string */
    for (size_t i = 0; i < n_stop; i++) {
        size_t k = strlen(stop[i]);
        for (size_t t = k > len ? len : k - (k > 0); t > hold; t--)
            if (memcmp(text + len - t, stop[i], t) == 0) {
                hold = t;
                break;
            }
    }
    size_t safe = len - hold;
    /* an unfinished character at the end waits for its other bytes */
    for (size_t back = 1; back <= 3 && back <= safe; back++) {
        unsigned char c = (unsigned char)text[safe - back];
        if ((c & 0xc0) == 0x80) continue; /* a continuation byte: look further back */
        size_t need = utf8_len(c);
        if (need > back) safe -= back;
        break;
    }
    return safe;
}

bool serve_buf_add(serve_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->cap ? b->cap * 2 : 256) + n;
        char *p = mem_realloc(b->p, cap, "a response's text"); /* checked: failures can be injected */
        if (!p) return false;
        b->p = p, b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n); /* s may be NULL when n is 0 (no text yet) */
    b->len += n;
    b->p[b->len] = '\0';
    return true;
}

bool serve_buf_add_utf8(serve_buf *b, const char *s, size_t n) {
    static const char replacement[] = "\xef\xbf\xbd";
    if (!n) return serve_buf_add(b, "", 0); /* s may be NULL: no offset from it */
    size_t i = 0, run = 0; /* valid bytes s[i - run, i) not yet copied */
    while (i < n) {
        const unsigned char *u = (const unsigned char *)s + i;
        size_t k = utf8_len(u[0]), ok = k && k <= n - i;
        for (size_t j = 1; ok && j < k; j++) ok = (u[j] & 0xc0) == 0x80;
        if (ok && k == 3) { /* no overlong forms, no surrogates */
            ok = !(u[0] == 0xe0 && u[1] < 0xa0) && !(u[0] == 0xed && u[1] >= 0xa0);
        } else if (ok && k == 4) {
            ok = !(u[0] == 0xf0 && u[1] < 0x90) && !(u[0] == 0xf4 && u[1] >= 0x90);
        }
        if (ok && u[0] != 0) { /* NUL would end the JSON string early: dropped as invalid */
            i += k, run += k;
            continue;
        }
        if (!serve_buf_add(b, s + i - run, run) || !serve_buf_add(b, replacement, 3)) return false;
        i++, run = 0;
    }
    return serve_buf_add(b, s + n - run, run);
}
