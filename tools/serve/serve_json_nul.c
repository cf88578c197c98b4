/* Text with a NUL: JSON may carry one as \u0000, but the parsed strings
 * end at it, so "a\u0000b" would run as the prompt "a", a silently
 * different request. This scan finds such an escape in a request body's
 * strings and names the top-level field that holds it. */
#include <string.h>

#include "serve.h"

#define NUL_SCAN_DEPTH 64 /* nesting tracked for keys; deeper strings still scanned */

bool serve_json_nul_field(const char *body, size_t len, char *field, size_t cap) {
    bool is_obj[NUL_SCAN_DEPTH] = {false}, want_key[NUL_SCAN_DEPTH] = {false};
    size_t depth = 0, str_start = 0;
    bool in_str = false, esc = false, str_is_key = false;
    if (cap) field[0] = '\0';
    for (size_t i = 0; i < len; i++) {
        const char c = body[i];
        if (in_str) {
            if (esc) {
                esc = false;
                if (c == 'u' && len - i > 4 && !memcmp(body + i + 1, "0000", 4)) return true;
            } else if (c == '\\') {
                esc = true;
            } else if (c == '"') {
                in_str = false;
                if (str_is_key && depth == 1 && cap) { /* a top-level key: the field a later NUL is in */
                    size_t n = i - str_start < cap - 1 ? i - str_start : cap - 1;
                    memcpy(field, body + str_start, n);
                    field[n] = '\0';
                }
            }
            continue;
        }
        const size_t at = depth < NUL_SCAN_DEPTH ? depth : NUL_SCAN_DEPTH - 1;
        switch (c) {
        case '"':
            in_str = true, str_start = i + 1;
            str_is_key = depth > 0 && is_obj[at] && want_key[at];
            if (str_is_key) want_key[at] = false;
            break;
        case '{':
        case '[':
            depth++;
            if (depth < NUL_SCAN_DEPTH) is_obj[depth] = c == '{', want_key[depth] = c == '{';
            break;
        case '}':
        case ']':
            if (depth) depth--;
            break;
        case ',':
            if (is_obj[at]) want_key[at] = true;
            break;
        default: break;
        }
    }
    return false;
}
