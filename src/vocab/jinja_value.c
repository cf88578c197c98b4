/* Jinja values with Python's semantics: truth, ==, ordering, str() and
 * repr() as Python prints them (None, True, 1.0, ['a', 'b']), and JSON
 * as jinja2's tojson writes it (json.dumps with sorted keys, then <, >,
 * & and ' escaped for HTML). Also the arenas everything lives in. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "vocab/jinja_impl.h"

struct jarena_chunk {
    jarena_chunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN (64u << 10)

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    jarena_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > CHUNK_MIN ? n : CHUNK_MIN;
        if (a->limit && a->used + cap > a->limit) {
            a->over = true;
            err_set(CLEAVE_ERR_INVALID_ARG,
                    "the template used more than %zu MiB of memory (a limit)", a->limit >> 20);
            return NULL;
        }
        c = mem_alloc(sizeof *c + cap, "jinja values");
        if (!c) return NULL;
        c->cap = cap, c->used = 0, c->next = a->head;
        a->head = c;
        a->used += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a) {
    for (jarena_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL, a->used = 0;
}

cleave_status jbuf_put(jbuf *b, const char *s, size_t n) {
    if (!n) return CLEAVE_OK;
    if (b->limit && b->n + n > b->limit)
        return err_set(CLEAVE_ERR_INVALID_ARG, "the template's output passed %zu bytes (a limit)",
                       b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = mem_realloc(b->p, cap, "jinja output");
        if (!p) return CLEAVE_ERR_OOM;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return CLEAVE_OK;
}

cleave_status jbuf_putc(jbuf *b, char c) { return jbuf_put(b, &c, 1); }

jlist *jlist_new(jarena *a, size_t cap) {
    jlist *l = jarena_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (cap) {
        l->v = jarena_alloc(a, cap * sizeof *l->v);
        if (!l->v) return NULL;
        l->cap = cap;
    }
    return l;
}

cleave_status jlist_push(jarena *a, jlist *l, jvalue v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jvalue *p = jarena_alloc(a, cap * sizeof *p);
        if (!p) return CLEAVE_ERR_OOM;
        if (l->n) memcpy(p, l->v, l->n * sizeof *p);
        l->v = p, l->cap = cap;
    }
    l->v[l->n++] = v;
    return CLEAVE_OK;
}

jdict *jdict_new(jarena *a, size_t cap) {
    jdict *d = jarena_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap) {
        d->k = jarena_alloc(a, cap * sizeof *d->k);
        d->v = jarena_alloc(a, cap * sizeof *d->v);
        if (!d->k || !d->v) return NULL;
        d->cap = cap;
    }
    return d;
}

static bool hashable_equal(const jvalue *a, const jvalue *b) {
    /* dict keys: 1 and True and 1.0 are one key in Python */
    return jv_equal(a, b);
}

jvalue *jdict_get(const jdict *d, const jvalue *key) {
    for (size_t i = 0; i < d->n; i++)
        if (hashable_equal(&d->k[i], key)) return &d->v[i];
    return NULL;
}

jvalue *jdict_get_str(const jdict *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.p, key, n))
            return &d->v[i];
    return NULL;
}

cleave_status jdict_set(jarena *a, jdict *d, jvalue key, jvalue val) {
    jvalue *have = jdict_get(d, &key);
    if (have) return *have = val, CLEAVE_OK;
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jvalue *k = jarena_alloc(a, cap * sizeof *k), *v = jarena_alloc(a, cap * sizeof *v);
        if (!k || !v) return CLEAVE_ERR_OOM;
        if (d->n) memcpy(k, d->k, d->n * sizeof *k), memcpy(v, d->v, d->n * sizeof *v);
        d->k = k, d->v = v, d->cap = cap;
    }
    d->k[d->n] = key, d->v[d->n] = val;
    d->n++;
    return CLEAVE_OK;
}

cleave_status jv_new_str(jarena *a, const char *s, size_t n, jvalue *out) {
    char *p = jarena_alloc(a, n + 1);
    if (!p) return CLEAVE_ERR_OOM;
    if (n) memcpy(p, s, n);
    *out = jv_str(p, n);
    return CLEAVE_OK;
}

bool jv_truthy(const jvalue *v) {
    switch (v->t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v->u.b;
    case JV_INT: return v->u.i != 0;
    case JV_FLOAT: return v->u.f != 0.0;
    case JV_STR: return v->u.s.n != 0;
    case JV_LIST:
    case JV_TUPLE: return v->u.l->n != 0;
    case JV_DICT: return v->u.d->n != 0;
    default: return true;
    }
}

bool jv_is_number(const jvalue *v) { return v->t == JV_INT || v->t == JV_FLOAT || v->t == JV_BOOL; }

double jv_as_double(const jvalue *v) {
    return v->t == JV_FLOAT  ? v->u.f
           : v->t == JV_INT  ? (double)v->u.i
           : v->t == JV_BOOL ? (double)v->u.b
                             : 0.0;
}

static bool str_eq(jstr a, jstr b) { return a.n == b.n && (!a.n || !memcmp(a.p, b.p, a.n)); }

bool jv_equal(const jvalue *a, const jvalue *b) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_BOOL ? a->u.b : a->u.i, y = b->t == JV_BOOL ? b->u.b : b->u.i;
            return x == y;
        }
        return jv_as_double(a) == jv_as_double(b);
    }
    bool seq_a = a->t == JV_LIST || a->t == JV_TUPLE, seq_b = b->t == JV_LIST || b->t == JV_TUPLE;
    if (seq_a || seq_b) {
        if (a->t != b->t || a->u.l->n != b->u.l->n) return false;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!jv_equal(&a->u.l->v[i], &b->u.l->v[i])) return false;
        return true;
    }
    if (a->t != b->t) return false;
    switch (a->t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return str_eq(a->u.s, b->u.s);
    case JV_DICT: {
        if (a->u.d->n != b->u.d->n) return false;
        for (size_t i = 0; i < a->u.d->n; i++) {
            jvalue *o = jdict_get(b->u.d, &a->u.d->k[i]);
            if (!o || !jv_equal(&a->u.d->v[i], o)) return false;
        }
        return true;
    }
    case JV_NAMESPACE: return a->u.d == b->u.d;
    case JV_MACRO: return a->u.macro == b->u.macro;
    case JV_BUILTIN: return a->u.builtin == b->u.builtin;
    case JV_METHOD: return a->u.m == b->u.m;
    case JV_LOOP: return a->u.loop == b->u.loop;
    default: return false;
    }
}

bool jv_compare(const jvalue *a, const jvalue *b, int *order) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a->t != JV_FLOAT && b->t != JV_FLOAT) {
            int64_t x = a->t == JV_BOOL ? a->u.b : a->u.i, y = b->t == JV_BOOL ? b->u.b : b->u.i;
            *order = x < y ? -1 : x > y;
        } else {
            double x = jv_as_double(a), y = jv_as_double(b);
            *order = x < y ? -1 : x > y;
        }
        return true;
    }
    if (a->t == JV_STR && b->t == JV_STR) {
        size_t m = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = m ? memcmp(a->u.s.p, b->u.s.p, m) : 0;
        *order = c ? (c < 0 ? -1 : 1) : a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
        return true;
    }
    if ((a->t == JV_LIST || a->t == JV_TUPLE) && a->t == b->t) {
        for (size_t i = 0; i < a->u.l->n && i < b->u.l->n; i++) {
            if (jv_equal(&a->u.l->v[i], &b->u.l->v[i])) continue;
            return jv_compare(&a->u.l->v[i], &b->u.l->v[i], order);
        }
        *order = a->u.l->n < b->u.l->n ? -1 : a->u.l->n > b->u.l->n;
        return true;
    }
    return false;
}

const char *jv_type_name(const jvalue *v) {
    static const char *const names[] = {
        "Undefined", "NoneType",   "bool", "int",       "float", "str",
        "list",      "tuple",      "dict", "Namespace", "Macro", "builtin_function_or_method",
        "method",    "LoopContext"};
    return names[v->t];
}

/* Python's repr of a float: the shortest digits that read back the same,
 * positional from 1e-4 up to 1e16, else with an exponent. */
void jv_float_repr(double f, char out[48]) {
    if (isnan(f)) {
        strcpy(out, "nan");
        return;
    }
    if (isinf(f)) {
        strcpy(out, f < 0 ? "-inf" : "inf");
        return;
    }
    char e[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, f);
        if (strtod(e, NULL) == f) break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10 = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    if (*p == 'e') exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            *o++ = '0', *o++ = '.';
            for (int i = 0; i < -exp10 - 1; i++)
                *o++ = '0';
            for (int i = 0; i < nd; i++)
                *o++ = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++)
                *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > exp10 + 1) {
                for (int i = exp10 + 1; i < nd; i++)
                    *o++ = digits[i];
            } else {
                *o++ = '0';
            }
        }
        *o = 0;
        return;
    }
    *o++ = digits[0];
    if (nd > 1) {
        *o++ = '.';
        for (int i = 1; i < nd; i++)
            *o++ = digits[i];
    }
    snprintf(o, 16, "e%c%02d", exp10 < 0 ? '-' : '+', (exp10 < 0 ? -exp10 : exp10) % 1000);
}

/* The code point at s (UTF-8; a bad byte reads as itself). */
uint32_t jv_utf8_next(const char *s, size_t n, size_t *len) {
    unsigned char c = (unsigned char)s[0];
    int k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!k || (size_t)k > n) return *len = 1, c;
    uint32_t cp = k == 1 ? c : k == 2 ? (c & 31u) : k == 3 ? (c & 15u) : (c & 7u);
    for (int i = 1; i < k; i++) {
        unsigned char d = (unsigned char)s[i];
        if ((d >> 6) != 2) return *len = 1, c;
        cp = cp << 6 | (d & 63u);
    }
    *len = (size_t)k;
    return cp;
}

bool jv_py_space(uint32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

bool jv_py_printable(uint32_t cp) {
    if (cp == ' ') return true;
    if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || jv_py_space(cp)) return false;
    if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
        (cp >= 0x2060 && cp <= 0x206F) || cp == 0xFEFF || cp == 0x061C || cp == 0x180E)
        return false; /* format characters */
    if ((cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFFFE || cp == 0xFFFF || cp >= 0xF0000)
        return false; /* surrogates, private use, noncharacters */
    return (cp & 0xFFFF) < 0xFFFE && !(cp >= 0xFFF0 && cp <= 0xFFF8);
}

static cleave_status repr_str(jbuf *b, jstr s) {
    bool has_sq = memchr(s.p, '\'', s.n) != NULL, has_dq = memchr(s.p, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    cleave_status st = jbuf_putc(b, q);
    for (size_t i = 0; i < s.n && !st; i++) {
        char c = s.p[i];
        char tmp[8];
        if (c == q || c == '\\')
            tmp[0] = '\\', tmp[1] = c, st = jbuf_put(b, tmp, 2);
        else if (c == '\n')
            st = jbuf_put(b, "\\n", 2);
        else if (c == '\r')
            st = jbuf_put(b, "\\r", 2);
        else if (c == '\t')
            st = jbuf_put(b, "\\t", 2);
        else if ((unsigned char)c < 0x20 || c == 0x7f)
            snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned char)c), st = jbuf_put(b, tmp, 4);
        else if ((unsigned char)c < 0x80)
            st = jbuf_putc(b, c);
        else { /* Python escapes what it does not print: \xa0, \u3000, ... */
            size_t len;
            uint32_t cp = jv_utf8_next(s.p + i, s.n - i, &len);
            char esc[16];
            if (jv_py_printable(cp) && len > 1) {
                st = jbuf_put(b, s.p + i, len);
            } else {
                int k = snprintf(esc, sizeof esc,
                                 cp < 0x100     ? "\\x%02x"
                                 : cp < 0x10000 ? "\\u%04x"
                                                : "\\U%08x",
                                 cp);
                st = jbuf_put(b, esc, (size_t)k);
            }
            i += len - 1;
        }
    }
    return st ? st : jbuf_putc(b, q);
}

static cleave_status put_int(jbuf *b, int64_t i) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%lld", (long long)i);
    return jbuf_put(b, tmp, (size_t)k);
}

static cleave_status put_float(jbuf *b, double f) {
    char tmp[48];
    jv_float_repr(f, tmp);
    return jbuf_put(b, tmp, strlen(tmp));
}

static cleave_status repr_any(jbuf *b, const jvalue *v, bool top);

static cleave_status repr_seq(jbuf *b, const jvalue *v) {
    static const char *const views[] = {"", "dict_items(", "dict_keys(", "dict_values("};
    bool tuple = v->t == JV_TUPLE;
    int view = v->u.l->view >= 0 && v->u.l->view <= 3 ? v->u.l->view : 0;
    cleave_status st = jbuf_put(b, views[view], strlen(views[view]));
    if (!st) st = jbuf_putc(b, tuple ? '(' : '[');
    for (size_t i = 0; i < v->u.l->n && !st; i++) {
        if (i) st = jbuf_put(b, ", ", 2);
        if (!st) st = repr_any(b, &v->u.l->v[i], false);
    }
    if (!st && tuple && v->u.l->n == 1) st = jbuf_putc(b, ',');
    if (!st) st = jbuf_putc(b, tuple ? ')' : ']');
    return st || !view ? st : jbuf_putc(b, ')');
}

static cleave_status repr_any(jbuf *b, const jvalue *v, bool top) {
    switch (v->t) {
    case JV_UNDEF: return top ? CLEAVE_OK : jbuf_put(b, "Undefined", 9);
    case JV_NONE: return jbuf_put(b, "None", 4);
    case JV_BOOL: return v->u.b ? jbuf_put(b, "True", 4) : jbuf_put(b, "False", 5);
    case JV_INT: return put_int(b, v->u.i);
    case JV_FLOAT: return put_float(b, v->u.f);
    case JV_STR: return top ? jbuf_put(b, v->u.s.p, v->u.s.n) : repr_str(b, v->u.s);
    case JV_LIST:
    case JV_TUPLE: return repr_seq(b, v);
    case JV_DICT: {
        cleave_status st = jbuf_putc(b, '{');
        for (size_t i = 0; i < v->u.d->n && !st; i++) {
            if (i) st = jbuf_put(b, ", ", 2);
            if (!st) st = repr_any(b, &v->u.d->k[i], false);
            if (!st) st = jbuf_put(b, ": ", 2);
            if (!st) st = repr_any(b, &v->u.d->v[i], false);
        }
        return st ? st : jbuf_putc(b, '}');
    }
    case JV_NAMESPACE: return jbuf_put(b, "<Namespace>", 11);
    case JV_MACRO: return jbuf_put(b, "<Macro>", 7);
    case JV_LOOP: return jbuf_put(b, "<LoopContext>", 13);
    default: return jbuf_put(b, "<built-in function>", 19);
    }
}

cleave_status jv_str_into(jbuf *b, const jvalue *v) { return repr_any(b, v, true); }
cleave_status jv_repr_into(jbuf *b, const jvalue *v) { return repr_any(b, v, false); }

static cleave_status json_str(jbuf *b, jstr s) {
    cleave_status st = jbuf_putc(b, '"');
    for (size_t i = 0; i < s.n && !st;) {
        size_t len;
        uint32_t cp = jv_utf8_next(s.p + i, s.n - i, &len);
        i += len;
        char tmp[16];
        switch (cp) {
        case '"': st = jbuf_put(b, "\\\"", 2); continue;
        case '\\': st = jbuf_put(b, "\\\\", 2); continue;
        case '\n': st = jbuf_put(b, "\\n", 2); continue;
        case '\r': st = jbuf_put(b, "\\r", 2); continue;
        case '\t': st = jbuf_put(b, "\\t", 2); continue;
        case '\b': st = jbuf_put(b, "\\b", 2); continue;
        case '\f': st = jbuf_put(b, "\\f", 2); continue;
        default: break;
        }
        /* ensure_ascii, then jinja2's HTML-safe replacements of < > & ' */
        if (cp < 0x20 || cp >= 0x7f || cp == '<' || cp == '>' || cp == '&' || cp == '\'') {
            if (cp >= 0x10000) {
                uint32_t c = cp - 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (c >> 10),
                         0xDC00 + (c & 0x3FF));
                st = jbuf_put(b, tmp, 12);
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
                st = jbuf_put(b, tmp, 6);
            }
        } else {
            st = jbuf_putc(b, (char)cp);
        }
    }
    return st ? st : jbuf_putc(b, '"');
}

static cleave_status json_newline(jbuf *b, int indent, int depth) {
    cleave_status st = jbuf_putc(b, '\n');
    for (int i = 0; i < indent * depth && !st; i++)
        st = jbuf_putc(b, ' ');
    return st;
}

/* Keys in sorted order (json.dumps(sort_keys=True)); false when they are not all strings. */
static bool sorted_keys(const jdict *d, size_t *idx) {
    for (size_t i = 0; i < d->n; i++) {
        if (d->k[i].t != JV_STR) return false;
        idx[i] = i;
    }
    for (size_t i = 1; i < d->n; i++) { /* insertion sort: dicts here are small */
        size_t x = idx[i], j = i;
        int o;
        while (j > 0 && jv_compare(&d->k[idx[j - 1]], &d->k[x], &o) && o > 0)
            idx[j] = idx[j - 1], j--;
        idx[j] = x;
    }
    return true;
}

cleave_status jv_json_into(jbuf *b, const jvalue *v, int indent, int depth) {
    if (depth > 64) return err_set(CLEAVE_ERR_INVALID_ARG, "tojson: values nested too deeply");
    char tmp[48];
    switch (v->t) {
    case JV_NONE: return jbuf_put(b, "null", 4);
    case JV_BOOL: return v->u.b ? jbuf_put(b, "true", 4) : jbuf_put(b, "false", 5);
    case JV_INT: return put_int(b, v->u.i);
    case JV_FLOAT:
        if (isnan(v->u.f)) return jbuf_put(b, "NaN", 3);
        if (isinf(v->u.f))
            return v->u.f < 0 ? jbuf_put(b, "-Infinity", 9) : jbuf_put(b, "Infinity", 8);
        jv_float_repr(v->u.f, tmp);
        return jbuf_put(b, tmp, strlen(tmp));
    case JV_STR: return json_str(b, v->u.s);
    case JV_LIST:
    case JV_TUPLE: {
        if (v->u.l->view)
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "tojson: Object of type %s is not JSON serializable",
                           v->u.l->view == 1   ? "dict_items"
                           : v->u.l->view == 2 ? "dict_keys"
                                               : "dict_values");
        if (!v->u.l->n) return jbuf_put(b, "[]", 2);
        cleave_status st = jbuf_putc(b, '[');
        for (size_t i = 0; i < v->u.l->n && !st; i++) {
            if (i) st = indent >= 0 ? jbuf_putc(b, ',') : jbuf_put(b, ", ", 2);
            if (!st && indent >= 0) st = json_newline(b, indent, depth + 1);
            if (!st) st = jv_json_into(b, &v->u.l->v[i], indent, depth + 1);
        }
        if (!st && indent >= 0) st = json_newline(b, indent, depth);
        return st ? st : jbuf_putc(b, ']');
    }
    case JV_DICT: {
        const jdict *d = v->u.d;
        if (!d->n) return jbuf_put(b, "{}", 2);
        size_t *idx = mem_alloc(d->n * sizeof *idx, "tojson keys");
        if (!idx) return CLEAVE_ERR_OOM;
        cleave_status st = CLEAVE_OK;
        if (!sorted_keys(d, idx))
            st = err_set(CLEAVE_ERR_INVALID_ARG, "tojson: a dict's keys are not all strings");
        if (!st) st = jbuf_putc(b, '{');
        for (size_t i = 0; i < d->n && !st; i++) {
            if (i) st = indent >= 0 ? jbuf_putc(b, ',') : jbuf_put(b, ", ", 2);
            if (!st && indent >= 0) st = json_newline(b, indent, depth + 1);
            if (!st) st = json_str(b, d->k[idx[i]].u.s);
            if (!st) st = jbuf_put(b, ": ", 2);
            if (!st) st = jv_json_into(b, &d->v[idx[i]], indent, depth + 1);
        }
        if (!st && indent >= 0) st = json_newline(b, indent, depth);
        if (!st) st = jbuf_putc(b, '}');
        free(idx);
        return st;
    }
    default:
        return err_set(CLEAVE_ERR_INVALID_ARG, "tojson: Object of type %s is not JSON serializable",
                       jv_type_name(v));
    }
}

/* ---- the evaluation's basic services: a failure at a line, a step, a
 * value's text and items (used by every part of the interpreter) ---- */

cleave_status jctx_fail(jctx *c, const jnode *at, const char *fmt, ...) {
    (void)c;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) return err_set(CLEAVE_ERR_INVALID_ARG, "line %d: %s", at->line, msg);
    return err_set(CLEAVE_ERR_INVALID_ARG, "%s", msg);
}

cleave_status jctx_step(jctx *c, const jnode *at) {
    if (++c->steps > c->lim.max_steps)
        return jctx_fail(c, at, "the template ran more than %llu steps (a limit)",
                         (unsigned long long)c->lim.max_steps);
    return CLEAVE_OK;
}

cleave_status jctx_str(jctx *c, const jvalue *v, jvalue *out) {
    if (v->t == JV_STR) return *out = *v, CLEAVE_OK;
    if (v->t == JV_UNDEF) return *out = jv_str("", 0), CLEAVE_OK;
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = jv_str_into(&b, v);
    if (!st) st = jv_new_str(&c->arena, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

cleave_status jctx_iterate(jctx *c, const jnode *at, const jvalue *v, jlist **out) {
    switch (v->t) {
    case JV_UNDEF: *out = jlist_new(&c->arena, 0); return *out ? CLEAVE_OK : CLEAVE_ERR_OOM;
    case JV_LIST:
    case JV_TUPLE: *out = v->u.l; return CLEAVE_OK;
    case JV_DICT: {
        jlist *l = jlist_new(&c->arena, v->u.d->n);
        if (!l) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < v->u.d->n; i++)
            l->v[l->n++] = v->u.d->k[i];
        *out = l;
        return CLEAVE_OK;
    }
    case JV_STR: {
        jlist *l = jlist_new(&c->arena, v->u.s.n);
        if (!l) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < v->u.s.n;) {
            size_t k = 1;
            unsigned char ch = (unsigned char)v->u.s.p[i];
            if (ch >= 0xF0)
                k = 4;
            else if (ch >= 0xE0)
                k = 3;
            else if (ch >= 0xC0)
                k = 2;
            if (i + k > v->u.s.n) k = v->u.s.n - i;
            l->v[l->n++] = jv_str(v->u.s.p + i, k);
            i += k;
        }
        *out = l;
        return CLEAVE_OK;
    }
    default: return jctx_fail(c, at, "'%s' object is not iterable", jv_type_name(v));
    }
}

cleave_status jctx_undefined(jctx *c, const jnode *at, const jvalue *v) {
    if (v->u.undef) return jctx_fail(c, at, "%s is undefined", v->u.undef);
    return jctx_fail(c, at, "a value is undefined");
}

bool jarg_bool(const jvalue *v, bool def) { return v ? jv_truthy(v) : def; }
