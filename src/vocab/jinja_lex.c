/* Jinja lexer: template text into tokens, with jinja2's whitespace
 * control as Hugging Face configures it. trim_blocks drops the first
 * newline after a block or comment tag; lstrip_blocks drops the spaces
 * and tabs before a block or comment tag that starts its line; "-" at a
 * tag's edge strips all whitespace on that side, "+" keeps it. The
 * caller has already turned \r\n and \r into \n and dropped one trailing
 * newline, as jinja2 does. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "vocab/jinja_impl.h"

typedef struct {
    jarena *a;
    const char *src;
    size_t n;
    jtok *toks;
    size_t n_toks, cap;
    size_t pos_off; /* where line/col were last computed */
    int pos_line, pos_col;
} lexer;

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_name(char c) { return is_name_start(c) || is_digit(c); }

/* Line and column (1-based) of an offset; offsets are asked in order. */
static void where(lexer *L, size_t off, int *line, int *col) {
    if (off < L->pos_off) L->pos_off = 0, L->pos_line = 1, L->pos_col = 1;
    for (; L->pos_off < off && L->pos_off < L->n; L->pos_off++) {
        if (L->src[L->pos_off] == '\n')
            L->pos_line++, L->pos_col = 1;
        else
            L->pos_col++;
    }
    *line = L->pos_line, *col = L->pos_col;
}

static cleave_status fail_at(lexer *L, size_t off, const char *what) {
    int line, col;
    where(L, off, &line, &col);
    return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: %s", line, col, what);
}

static jtok *push(lexer *L, jtok_kind kind, size_t off) {
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *t = jarena_alloc(L->a, cap * sizeof *t);
        if (!t) return NULL;
        if (L->n_toks) memcpy(t, L->toks, L->n_toks * sizeof *t);
        L->toks = t, L->cap = cap;
    }
    jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    where(L, off, &t->line, &t->col);
    return t;
}

/* Template data before a tag: "-" strips its trailing whitespace;
 * lstrip (block and comment tags) its trailing spaces when they start a line. */
static cleave_status emit_text(lexer *L, size_t from, size_t to, char sign, bool lstrip,
                               bool line_starting) {
    if (sign == '-') {
        while (to > from && is_space(L->src[to - 1]))
            to--;
    } else if (sign != '+' && lstrip) {
        size_t nl = to;
        while (nl > from && L->src[nl - 1] != '\n')
            nl--;
        bool all_space = nl < to;
        for (size_t i = nl; i < to; i++)
            if (!is_space(L->src[i])) all_space = false;
        if ((nl > from || line_starting) && all_space) to = nl;
    }
    if (to == from) return CLEAVE_OK;
    jtok *t = push(L, JT_TEXT, from);
    if (!t) return CLEAVE_ERR_OOM;
    t->s = (jstr){L->src + from, to - from};
    return CLEAVE_OK;
}

/* After a tag's end marker: "-" eats all whitespace, "+" nothing, else
 * (blocks and comments, trim_blocks) one newline. */
static size_t after_end(lexer *L, size_t p, char sign, bool trim) {
    if (sign == '-') {
        while (p < L->n && is_space(L->src[p]))
            p++;
    } else if (sign != '+' && trim && p < L->n && L->src[p] == '\n') {
        p++;
    }
    return p;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t utf8_put(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)),
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)), o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A string literal's value: Python's unicode-escape decoding, as jinja2 applies it. */
static cleave_status lex_string(lexer *L, size_t *p, jtok *t) {
    char q = L->src[*p];
    size_t i = *p + 1, start = i;
    while (i < L->n && L->src[i] != q)
        i += L->src[i] == '\\' ? 2 : 1;
    if (i >= L->n) return fail_at(L, *p, "unterminated string");
    char *o = jarena_alloc(L->a, i - start + 1);
    if (!o) return CLEAVE_ERR_OOM;
    size_t k = 0;
    for (size_t j = start; j < i; j++) {
        char c = L->src[j];
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        char e = L->src[++j];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t cp = 0;
            for (int d = 1; d <= digits; d++) {
                int h = j + (size_t)d < i ? hexval(L->src[j + (size_t)d]) : -1;
                if (h < 0) return fail_at(L, j, "truncated \\x, \\u or \\U escape in a string");
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) return fail_at(L, j, "escape beyond Unicode in a string");
            k += utf8_put(o + k, cp); /* never longer than the escape's text */
            j += (size_t)digits;
            continue;
        }
        if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            int d = 0;
            while (d < 3 && j < i && L->src[j] >= '0' && L->src[j] <= '7')
                cp = cp * 8 + (uint32_t)(L->src[j++] - '0'), d++;
            j--;
            k += utf8_put(o + k, cp);
            continue;
        }
        if (e == 'N') return fail_at(L, j, "\\N{name} escapes in strings are not supported");
        switch (e) {
        case '\n': break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        default: o[k++] = '\\', o[k++] = e; break;
        }
    }
    t->s = (jstr){o, k};
    *p = i + 1;
    return CLEAVE_OK;
}

static const char *const OPS[] = {"**", "//", "==", "!=", ">=", "<=", "+", "-", "/",
                                  "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                  ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};

/* The expression tokens of a {{ }} or {% %} tag, up to its end marker. */
static cleave_status lex_tag(lexer *L, size_t *pp, bool block, bool *ended_nl) {
    size_t p = *pp, open = p;
    int depth = 0;
    for (;;) {
        while (p < L->n && is_space(L->src[p]))
            p++;
        if (p >= L->n)
            return fail_at(L, open,
                           block ? "unterminated block tag: '%}' missing"
                                 : "unterminated '{{': '}}' missing");
        const char *s = L->src + p;
        size_t left = L->n - p;
        char end = block ? '%' : '}';
        if (!depth) {
            char sign = 0;
            size_t mk = 0;
            if (left >= 3 && (s[0] == '-' || s[0] == '+') && s[1] == end && s[2] == '}')
                sign = s[0], mk = 3;
            else if (left >= 2 && s[0] == end && s[1] == '}')
                mk = 2;
            if (mk && !(sign == '+' && !block)) {
                jtok *t = push(L, block ? JT_BLOCK_END : JT_VAR_END, p);
                if (!t) return CLEAVE_ERR_OOM;
                size_t q = after_end(L, p + mk, sign, block);
                *ended_nl = q > 0 && L->src[q - 1] == '\n';
                *pp = q;
                return CLEAVE_OK;
            }
        }
        if (is_digit(s[0])) {
            size_t q = p;
            while (q < L->n && (is_digit(L->src[q]) || L->src[q] == '_'))
                q++;
            bool is_float = false;
            if (q + 1 < L->n && L->src[q] == '.' && is_digit(L->src[q + 1])) {
                is_float = true;
                q++;
                while (q < L->n && (is_digit(L->src[q]) || L->src[q] == '_'))
                    q++;
            }
            if (q < L->n && (L->src[q] == 'e' || L->src[q] == 'E')) {
                size_t r = q + 1;
                if (r < L->n && (L->src[r] == '+' || L->src[r] == '-')) r++;
                if (r < L->n && is_digit(L->src[r])) {
                    is_float = true;
                    q = r;
                    while (q < L->n && is_digit(L->src[q]))
                        q++;
                }
            }
            char num[64];
            size_t k = 0;
            for (size_t i = p; i < q && k < sizeof num - 1; i++)
                if (L->src[i] != '_') num[k++] = L->src[i];
            num[k] = 0;
            jtok *t = push(L, is_float ? JT_FLOAT : JT_INT, p);
            if (!t) return CLEAVE_ERR_OOM;
            if (is_float) {
                t->f = strtod(num, NULL);
            } else {
                uint64_t v = 0;
                for (size_t i = 0; i < k; i++) {
                    if (v > (UINT64_MAX - 9) / 10 ||
                        v * 10 + (uint64_t)(num[i] - '0') > (uint64_t)INT64_MAX)
                        return fail_at(L, p, "integer literal too large");
                    v = v * 10 + (uint64_t)(num[i] - '0');
                }
                t->i = (int64_t)v;
            }
            p = q;
            continue;
        }
        if (is_name_start(s[0])) {
            size_t q = p;
            while (q < L->n && is_name(L->src[q]))
                q++;
            jtok *t = push(L, JT_NAME, p);
            if (!t) return CLEAVE_ERR_OOM;
            t->s = (jstr){s, q - p};
            p = q;
            continue;
        }
        if (s[0] == '\'' || s[0] == '"') {
            jtok *t = push(L, JT_STRING, p);
            if (!t) return CLEAVE_ERR_OOM;
            cleave_status st = lex_string(L, &p, t);
            if (st) return st;
            continue;
        }
        size_t k = 0;
        for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) {
            size_t m = strlen(OPS[i]);
            if (left >= m && !memcmp(s, OPS[i], m)) {
                k = m;
                break;
            }
        }
        if (!k) return fail_at(L, p, "unexpected character in a tag");
        if (s[0] == '(' || s[0] == '[' || s[0] == '{') depth++;
        if (s[0] == ')' || s[0] == ']' || s[0] == '}') {
            if (!depth) return fail_at(L, p, "unbalanced closing bracket");
            depth--;
        }
        jtok *t = push(L, JT_OP, p);
        if (!t) return CLEAVE_ERR_OOM;
        t->s = (jstr){s, k};
        p += k;
    }
}

/* At src+p, "{%" [sign] ws "name" ws: the position after, or 0. */
static size_t match_tag_word(lexer *L, size_t p, const char *word, char *sign) {
    if (p + 2 > L->n || L->src[p] != '{' || L->src[p + 1] != '%') return 0;
    p += 2;
    *sign = 0;
    if (p < L->n && (L->src[p] == '-' || L->src[p] == '+')) *sign = L->src[p++];
    while (p < L->n && is_space(L->src[p]))
        p++;
    size_t m = strlen(word);
    if (p + m > L->n || memcmp(L->src + p, word, m) || (p + m < L->n && is_name(L->src[p + m])))
        return 0;
    p += m;
    while (p < L->n && is_space(L->src[p]))
        p++;
    return p;
}

/* {% raw %} ... {% endraw %}: the text between, as data. */
static cleave_status lex_raw(lexer *L, size_t *pp, bool *line_starting) {
    size_t p = *pp;
    for (size_t q = p; q + 1 < L->n; q++) {
        char sign;
        size_t r = match_tag_word(L, q, "endraw", &sign);
        if (!r) continue;
        char esign = 0;
        if (r < L->n && (L->src[r] == '-' || L->src[r] == '+')) esign = L->src[r++];
        if (r + 1 >= L->n || L->src[r] != '%' || L->src[r + 1] != '}') continue;
        cleave_status st = emit_text(L, p, q, sign, true, *line_starting);
        if (st) return st;
        size_t e = after_end(L, r + 2, esign, true);
        *line_starting = e > 0 && L->src[e - 1] == '\n';
        *pp = e;
        return CLEAVE_OK;
    }
    return fail_at(L, p, "missing end of raw directive ({% endraw %})");
}

cleave_status jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *n_toks) {
    lexer L = {.a = a, .src = src, .n = n, .pos_line = 1, .pos_col = 1};
    size_t p = 0;
    bool line_starting = true;
    while (p < n) {
        size_t q = p;
        while (q + 1 < n &&
               !(src[q] == '{' && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#')))
            q++;
        if (q + 1 >= n) {
            cleave_status st = emit_text(&L, p, n, 0, false, line_starting);
            if (st) return st;
            break;
        }
        char kind = src[q + 1];
        char sign = q + 2 < n && (src[q + 2] == '-' || src[q + 2] == '+') ? src[q + 2] : 0;
        char rsign;
        size_t raw = kind == '%' ? match_tag_word(&L, q, "raw", &rsign) : 0;
        if (raw) {
            char esign = 0;
            if (raw < n && src[raw] == '-') esign = src[raw++];
            if (raw + 1 < n && src[raw] == '%' && src[raw + 1] == '}') {
                cleave_status st = emit_text(&L, p, q, rsign, true, line_starting);
                if (st) return st;
                p = esign == '-' ? after_end(&L, raw + 2, '-', false) : raw + 2;
                line_starting = p > 0 && src[p - 1] == '\n';
                st = lex_raw(&L, &p, &line_starting);
                if (st) return st;
                continue;
            }
        }
        cleave_status st = emit_text(&L, p, q, sign, kind != '{', line_starting);
        if (st) return st;
        size_t body = q + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t e = body;
            while (e + 1 < n && !(src[e] == '#' && src[e + 1] == '}'))
                e++;
            if (e + 1 >= n) return fail_at(&L, q, "missing end of comment tag ('#}')");
            char esign = e > body && (src[e - 1] == '-' || src[e - 1] == '+') ? src[e - 1] : 0;
            p = after_end(&L, e + 2, esign, true);
            line_starting = p > 0 && src[p - 1] == '\n';
            continue;
        }
        if (!push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, q)) return CLEAVE_ERR_OOM;
        p = body;
        st = lex_tag(&L, &p, kind == '%', &line_starting);
        if (st) return st;
    }
    if (!push(&L, JT_EOF, n)) return CLEAVE_ERR_OOM;
    *toks = L.toks, *n_toks = L.n_toks;
    return CLEAVE_OK;
}
