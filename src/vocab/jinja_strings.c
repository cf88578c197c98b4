/* Python's str operations as chat templates use them (strip, split,
 * replace, case, find, str.format, printf-style %), shared by the
 * methods (jinja_methods.c) and the filters (jinja_filters.c). Text is
 * UTF-8; whitespace is Python's (Unicode spaces too). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/mem.h"
#include "vocab/jinja_impl.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        cleave_status st_ = (x);                                                                   \
        if (st_) return st_;                                                                       \
    } while (0)

cleave_status py_need_str(jctx *c, const jnode *at, const jvalue *v, const char *what) {
    if (v->t == JV_STR) return CLEAVE_OK;
    return jctx_fail(c, at, "%s: expected a string, got '%s'", what, jv_type_name(v));
}

cleave_status py_new_str(jctx *c, const char *p, size_t n, jvalue *out) {
    return jv_new_str(&c->arena, p, n, out);
}

/* Whether a Python whitespace character starts at s[i] (its byte length in *len). */
bool py_space_at(jstr s, size_t i, size_t *len) {
    return jv_py_space(jv_utf8_next(s.p + i, s.n - i, len));
}

/* Start of the code point that ends at s[b - 1]. */
static size_t char_start(jstr s, size_t a, size_t b) {
    size_t k = b - 1;
    while (k > a && ((unsigned char)s.p[k] & 0xC0) == 0x80)
        k--;
    return k;
}

jvalue py_strip(jstr s, const jvalue *chars, bool left, bool right) {
    size_t a = 0, b = s.n, len;
    if (chars && chars->t == JV_STR) {
        if (left)
            while (a < b && memchr(chars->u.s.p, s.p[a], chars->u.s.n))
                a++;
        if (right)
            while (b > a && memchr(chars->u.s.p, s.p[b - 1], chars->u.s.n))
                b--;
        return jv_str(s.p + a, b - a);
    }
    if (left)
        while (a < b && py_space_at(s, a, &len))
            a += len;
    if (right)
        while (b > a) {
            size_t k = char_start(s, a, b);
            if (!py_space_at((jstr){s.p, b}, k, &len)) break;
            b = k;
        }
    return jv_str(s.p + a, b - a);
}

/* Simple case pairs of the scripts chat text mostly uses (Latin-1,
 * Latin Extended-A, Greek, Cyrillic, fullwidth Latin), as Python maps
 * them; 0 where a code point has no such partner. */
static uint32_t case_pair(uint32_t cp, bool upper) {
    if (cp < 0x80) {
        if (upper && cp >= 'a' && cp <= 'z') return cp - 32;
        if (!upper && cp >= 'A' && cp <= 'Z') return cp + 32;
        return 0;
    }
    if (cp >= 0xC0 && cp <= 0xDE && cp != 0xD7) return upper ? 0 : cp + 0x20;
    if (cp >= 0xE0 && cp <= 0xFE && cp != 0xF7) return upper ? cp - 0x20 : 0;
    if (cp == 0xFF) return upper ? 0x178 : 0;
    if (cp == 0x178) return upper ? 0 : 0xFF;
    if (cp == 0xB5) return upper ? 0x39C : 0;
    if (cp == 0x131) return upper ? 'I' : 0;
    if (cp == 0x17F) return upper ? 'S' : 0;
    if ((cp >= 0x100 && cp <= 0x12F) || (cp >= 0x132 && cp <= 0x137) ||
        (cp >= 0x14A && cp <= 0x177) || (cp >= 0x460 && cp <= 0x481) ||
        (cp >= 0x48A && cp <= 0x4BF)) /* even upper, odd lower */
        return (cp & 1) ? (upper ? cp - 1 : 0) : (upper ? 0 : cp + 1);
    if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17E)) /* odd upper, even lower */
        return (cp & 1) ? (upper ? 0 : cp + 1) : (upper ? cp - 1 : 0);
    if ((cp >= 0x391 && cp <= 0x3A1) || (cp >= 0x3A3 && cp <= 0x3AB) ||
        (cp >= 0x410 && cp <= 0x42F) || (cp >= 0xFF21 && cp <= 0xFF3A))
        return upper ? 0 : cp + 0x20;
    if ((cp >= 0x3B1 && cp <= 0x3C1) || (cp >= 0x3C3 && cp <= 0x3CB) ||
        (cp >= 0x430 && cp <= 0x44F) || (cp >= 0xFF41 && cp <= 0xFF5A))
        return upper ? cp - 0x20 : 0;
    if (cp == 0x3C2) return upper ? 0x3A3 : 0;
    if (cp >= 0x400 && cp <= 0x40F) return upper ? 0 : cp + 0x50;
    if (cp >= 0x450 && cp <= 0x45F) return upper ? cp - 0x50 : 0;
    if (cp == 0x386) return upper ? 0 : 0x3AC;
    if (cp == 0x3AC) return upper ? 0x386 : 0;
    if (cp >= 0x388 && cp <= 0x38A) return upper ? 0 : cp + 0x25;
    if (cp >= 0x3AD && cp <= 0x3AF) return upper ? cp - 0x25 : 0;
    if (cp == 0x38C) return upper ? 0 : 0x3CC;
    if (cp == 0x3CC) return upper ? 0x38C : 0;
    if (cp == 0x38E || cp == 0x38F) return upper ? 0 : cp + 0x3F;
    if (cp == 0x3CD || cp == 0x3CE) return upper ? cp - 0x3F : 0;
    return 0;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)),
    o[2] = (char)(0x80 | (cp & 63));
    return 3;
}

cleave_status py_case(jctx *c, jstr s, int mode, jvalue *out) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 jinja2's title, 4 Python's str.title */
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = CLEAVE_OK;
    bool start = true;
    for (size_t i = 0; i < s.n && !st;) {
        size_t len;
        uint32_t cp = jv_utf8_next(s.p + i, s.n - i, &len);
        bool up = mode == 1 || (mode == 2 && i == 0) || (mode >= 3 && start);
        uint32_t to = case_pair(cp, up);
        bool cased = to || case_pair(cp, !up);
        if (up && cp == 0xDF) { /* ß has no capital of its own: SS (Ss in titles) */
            st =
                jbuf_put(&b, mode == 1 || mode == 3 ? "SS" : "Ss", 2); /* jinja2's title: upper() */
        } else if (up && cp == 0x149) {                                /* ŉ */
            st = jbuf_put(&b, "\xca\xbcN", 3);
        } else if (!up && cp == 0x130) { /* İ: i and a combining dot */
            st = jbuf_put(&b, "i\xcc\x87", 3);
        } else if (to) {
            char tmp[4];
            st = jbuf_put(&b, tmp, put_utf8(tmp, to));
        } else {
            st = jbuf_put(&b, s.p + i, len);
        }
        if (mode == 3)
            start =
                cp == '-' || jv_py_space(cp) || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        else if (mode == 4)
            start = !cased;
        i += len;
    }
    if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

cleave_status py_replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count, jvalue *out) {
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = CLEAVE_OK;
    size_t i = 0;
    int64_t done = 0;
    if (!old.n) { /* Python inserts new between every character */
        for (; i <= s.n && !st; i++) {
            if (count < 0 || done < count) st = jbuf_put(&b, new_.p, new_.n), done++;
            if (!st && i < s.n) st = jbuf_putc(&b, s.p[i]);
        }
    } else {
        while (i < s.n && !st) {
            if ((count < 0 || done < count) && i + old.n <= s.n && !memcmp(s.p + i, old.p, old.n)) {
                st = jbuf_put(&b, new_.p, new_.n);
                i += old.n, done++;
            } else {
                st = jbuf_putc(&b, s.p[i++]);
            }
        }
    }
    if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

cleave_status py_split(jctx *c, const jnode *at, jstr s, const jvalue *sep, int64_t maxsplit,
                       jvalue *out) {
    jlist *l = jlist_new(&c->arena, 4);
    if (!l) return CLEAVE_ERR_OOM;
    if (!sep || sep->t == JV_NONE) {
        size_t i = 0, len;
        int64_t done = 0;
        for (;;) {
            while (i < s.n && py_space_at(s, i, &len))
                i += len;
            if (i >= s.n) break;
            size_t j = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                TRY(jlist_push(&c->arena, l,
                               py_strip((jstr){s.p + i, s.n - i}, NULL, false, true)));
                break;
            }
            while (j < s.n && !py_space_at(s, j, &len))
                j += len;
            TRY(jlist_push(&c->arena, l, jv_str(s.p + i, j - i)));
            done++;
            i = j;
        }
    } else {
        TRY(py_need_str(c, at, sep, "split"));
        jstr d = sep->u.s;
        if (!d.n) return jctx_fail(c, at, "empty separator");
        size_t i = 0, from = 0;
        int64_t done = 0;
        while (i + d.n <= s.n) {
            if ((maxsplit < 0 || done < maxsplit) && !memcmp(s.p + i, d.p, d.n)) {
                TRY(jlist_push(&c->arena, l, jv_str(s.p + from, i - from)));
                i += d.n, from = i, done++;
            } else {
                i++;
            }
        }
        TRY(jlist_push(&c->arena, l, jv_str(s.p + from, s.n - from)));
    }
    *out = (jvalue){.t = JV_LIST, .u.l = l};
    return CLEAVE_OK;
}

bool py_affix(jstr s, jstr x, bool end) {
    if (x.n > s.n) return false;
    return !memcmp(end ? s.p + s.n - x.n : s.p, x.p, x.n);
}

cleave_status py_affix_test(jctx *c, const jnode *at, jstr s, const jvalue *x, bool end, bool *r) {
    if (x && x->t == JV_STR) return *r = py_affix(s, x->u.s, end), CLEAVE_OK;
    if (x && x->t == JV_TUPLE) {
        *r = false;
        for (size_t i = 0; i < x->u.l->n; i++) {
            if (x->u.l->v[i].t != JV_STR)
                return jctx_fail(c, at, "tuple for %s must only contain str",
                                 end ? "endswith" : "startswith");
            if (py_affix(s, x->u.l->v[i].u.s, end)) *r = true;
        }
        return CLEAVE_OK;
    }
    return jctx_fail(c, at, "%s first arg must be str or a tuple of str",
                     end ? "endswith" : "startswith");
}

int64_t py_find(jstr s, jstr x, bool last) {
    if (x.n > s.n) return -1;
    if (last) {
        for (size_t i = s.n - x.n + 1; i-- > 0;)
            if (!memcmp(s.p + i, x.p, x.n)) return (int64_t)i;
        return -1;
    }
    for (size_t i = 0; i + x.n <= s.n; i++)
        if (!x.n || !memcmp(s.p + i, x.p, x.n)) return (int64_t)i;
    return -1;
}

/* str.format: {} {0} {name} fields (no format specs), {{ and }}. */
cleave_status py_str_format(jctx *c, const jnode *at, jstr s, const jargs *a, jvalue *out) {
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = CLEAVE_OK;
    size_t auto_idx = 0;
    for (size_t i = 0; i < s.n && !st;) {
        char ch = s.p[i];
        if ((ch == '{' || ch == '}') && i + 1 < s.n && s.p[i + 1] == ch) {
            st = jbuf_putc(&b, ch), i += 2;
            continue;
        }
        if (ch == '}') {
            st = jctx_fail(c, at, "Single '}' encountered in format string");
            break;
        }
        if (ch != '{') {
            st = jbuf_putc(&b, ch), i++;
            continue;
        }
        size_t e = i + 1;
        while (e < s.n && s.p[e] != '}')
            e++;
        if (e >= s.n) {
            st = jctx_fail(c, at, "Single '{' encountered in format string");
            break;
        }
        jstr field = {s.p + i + 1, e - i - 1};
        const jvalue *v = NULL;
        if (memchr(field.p, ':', field.n) || memchr(field.p, '!', field.n)) {
            st = jctx_fail(c, at, "format specifications in str.format are not supported");
            break;
        }
        if (!field.n) {
            v = auto_idx < a->n_pos ? &a->pos[auto_idx] : NULL;
            auto_idx++;
        } else if (isdigit((unsigned char)field.p[0])) {
            size_t k = (size_t)strtoul(field.p, NULL, 10);
            v = k < a->n_pos ? &a->pos[k] : NULL;
        } else {
            for (size_t k = 0; k < a->n_kw; k++)
                if (a->kw_names[k].n == field.n && !memcmp(a->kw_names[k].p, field.p, field.n))
                    v = &a->kw[k];
        }
        if (!v) {
            st = jctx_fail(c, at, "str.format: replacement field {%.*s} has no argument",
                           (int)field.n, field.p);
            break;
        }
        st = jv_str_into(&b, v);
        i = e + 1;
    }
    if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

cleave_status py_join(jctx *c, const jnode *at, const jlist *items, jstr sep, jvalue *out) {
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < items->n && !st; i++) {
        if (i) st = jbuf_put(&b, sep.p, sep.n);
        if (!st) st = jv_str_into(&b, &items->v[i]);
    }
    (void)at;
    if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

/* ---- printf-style formatting ---- */

cleave_status jinja_percent_format(jctx *c, const jnode *at, jstr f, const jvalue *args,
                                   jvalue *out) {
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = CLEAVE_OK;
    bool tuple = args->t == JV_TUPLE;
    size_t next = 0, n_args = tuple ? args->u.l->n : 1;
    bool used_dict = false;
    for (size_t i = 0; i < f.n && !st;) {
        if (f.p[i] != '%') {
            st = jbuf_putc(&b, f.p[i++]);
            continue;
        }
        i++;
        const jvalue *v = NULL;
        if (i < f.n && f.p[i] == '(') {
            size_t e = i + 1;
            while (e < f.n && f.p[e] != ')')
                e++;
            if (e >= f.n || args->t != JV_DICT) {
                st = jctx_fail(c, at, "format requires a mapping");
                break;
            }
            v = jdict_get_str(args->u.d, f.p + i + 1, e - i - 1);
            if (!v) {
                st = jctx_fail(c, at, "format key '%.*s' missing", (int)(e - i - 1), f.p + i + 1);
                break;
            }
            used_dict = true;
            i = e + 1;
        }
        char spec[32] = "%";
        size_t k = 1;
        while (i < f.n && strchr("-+ 0#", f.p[i]) && k < 8)
            spec[k++] = f.p[i++];
        /* width and precision: at most 4 digits each (wider is refused below) */
        size_t w0 = k;
        while (i < f.n && isdigit((unsigned char)f.p[i]) && k < w0 + 5)
            spec[k++] = f.p[i++];
        int prec = -1;
        if (i < f.n && f.p[i] == '.') {
            spec[k++] = f.p[i++];
            prec = 0;
            size_t p0 = k;
            while (i < f.n && isdigit((unsigned char)f.p[i]) && k < p0 + 5)
                prec = prec * 10 + (f.p[i] - '0'), spec[k++] = f.p[i++];
        }
        if (k - w0 > 10 || (i < f.n && isdigit((unsigned char)f.p[i]))) {
            st = jctx_fail(c, at, "a format width or precision above 9999");
            break;
        }
        if (i >= f.n) {
            st = jctx_fail(c, at, "incomplete format");
            break;
        }
        char conv = f.p[i++];
        if (conv == '%') {
            st = jbuf_putc(&b, '%');
            continue;
        }
        if (!v) {
            if (next >= n_args) {
                st = jctx_fail(c, at, "not enough arguments for format string");
                break;
            }
            v = tuple ? &args->u.l->v[next] : args;
            next++;
        }
        char tmp[512];
        int len = -1;
        if (strchr("sra", conv)) {
            jbuf t = {.limit = c->lim.max_output};
            st = conv == 's' ? jv_str_into(&t, v) : jv_repr_into(&t, v);
            const char *tp = t.p ? t.p : "";
            size_t tn = t.n;
            if (!st && prec >= 0 && (size_t)prec < tn)
                tn = (size_t)prec; /* (bytes; fine for ASCII) */
            spec[k] = 0;
            /* width: pad the text, Python style */
            int width = atoi(spec + 1 + strspn(spec + 1, "-+ 0#"));
            bool left = strchr(spec, '-') != NULL;
            for (int pad = width - (int)tn; !st && !left && pad > 0; pad--)
                st = jbuf_putc(&b, ' ');
            if (!st) st = jbuf_put(&b, tp, tn);
            for (int pad = width - (int)tn; !st && left && pad > 0; pad--)
                st = jbuf_putc(&b, ' ');
            free(t.p);
            continue;
        }
        if (!jv_is_number(v)) {
            st = jctx_fail(c, at, "%%%c format: a real number is required, not %s", conv,
                           jv_type_name(v));
            break;
        }
        if (strchr("diuxXoc", conv)) {
            int64_t x = v->t == JV_FLOAT ? (int64_t)v->u.f : v->t == JV_BOOL ? v->u.b : v->u.i;
            if (conv == 'c') {
                tmp[0] = (char)x, len = 1;
            } else {
                spec[k++] = 'l', spec[k++] = 'l',
                spec[k++] = conv == 'i' || conv == 'u' ? 'd' : conv, spec[k] = 0;
                len = snprintf(tmp, sizeof tmp, spec, (long long)x);
            }
        } else if (strchr("fFeEgG", conv)) {
            spec[k++] = conv, spec[k] = 0;
            len = snprintf(tmp, sizeof tmp, spec, jv_as_double(v));
        } else {
            st = jctx_fail(c, at, "unsupported format character '%c'", conv);
            break;
        }
        if (len < 0 || len >= (int)sizeof tmp) {
            st = jctx_fail(c, at, "a formatted number too wide");
            break;
        }
        st = jbuf_put(&b, tmp, (size_t)len);
    }
    if (!st && !used_dict && tuple && next < n_args)
        st = jctx_fail(c, at, "not all arguments converted during string formatting");
    if (!st && !used_dict && !tuple && next == 0 && args->t != JV_DICT)
        st = jctx_fail(c, at, "not all arguments converted during string formatting");
    if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}
