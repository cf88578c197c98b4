/* Jinja's filters, tests, global functions and the Python methods
 * (str, dict, list) chat templates call, each as jinja2 and Python
 * define it. The sandbox is jinja2's immutable one: methods that change
 * a list or dict (append, pop, update, ...) are refused. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/mem.h"
#include "vocab/jinja_impl.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        cleave_status st_ = (x);                                                                   \
        if (st_) return st_;                                                                       \
    } while (0)

static bool is(jstr s, const char *w) { return s.n == strlen(w) && !memcmp(s.p, w, s.n); }

/* Argument idx by position, or by keyword name; NULL when absent. */
static const jvalue *arg(const jargs *a, size_t idx, const char *name) {
    if (idx < a->n_pos) return &a->pos[idx];
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (is(a->kw_names[k], name)) return &a->kw[k];
    return NULL;
}

static bool py_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

static cleave_status need_str(jctx *c, const jnode *at, const jvalue *v, const char *what) {
    if (v->t == JV_STR) return CLEAVE_OK;
    return jctx_fail(c, at, "%s: expected a string, got '%s'", what, jv_type_name(v));
}

static cleave_status make_str(jctx *c, const char *p, size_t n, jvalue *out) {
    return jv_new_str(&c->arena, p, n, out);
}

/* ---- strings ---- */

/* Whether a Python whitespace character starts at s[i] (its byte length in *len). */
static bool space_at(jstr s, size_t i, size_t *len) {
    return jv_py_space(jv_utf8_next(s.p + i, s.n - i, len));
}

/* Start of the code point that ends at s[b - 1]. */
static size_t char_start(jstr s, size_t a, size_t b) {
    size_t k = b - 1;
    while (k > a && ((unsigned char)s.p[k] & 0xC0) == 0x80)
        k--;
    return k;
}

static jvalue strip(jstr s, const jvalue *chars, bool left, bool right) {
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
        while (a < b && space_at(s, a, &len))
            a += len;
    if (right)
        while (b > a) {
            size_t k = char_start(s, a, b);
            if (!space_at((jstr){s.p, b}, k, &len)) break;
            b = k;
        }
    return jv_str(s.p + a, b - a);
}

static cleave_status case_map(jctx *c, jstr s, int mode, jvalue *out) {
    /* mode 0 lower, 1 upper, 2 capitalize, 3 jinja2's title, 4 Python's str.title */
    char *p = jarena_alloc(&c->arena, s.n + 1);
    if (!p) return CLEAVE_ERR_OOM;
    bool start = true;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        bool up;
        if (mode == 0)
            up = false;
        else if (mode == 1)
            up = true;
        else if (mode == 2)
            up = i == 0;
        else
            up = start;
        p[i] = (char)(ch >= 0x80 ? ch : up ? toupper(ch) : tolower(ch));
        if (mode == 3)
            start =
                ch == '-' || py_space((char)ch) || ch == '(' || ch == '{' || ch == '[' || ch == '<';
        else if (mode == 4)
            start = !isalpha(ch) && ch < 0x80;
    }
    *out = jv_str(p, s.n);
    return CLEAVE_OK;
}

static cleave_status replace(jctx *c, jstr s, jstr old, jstr new_, int64_t count, jvalue *out) {
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
    if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

static cleave_status split(jctx *c, const jnode *at, jstr s, const jvalue *sep, int64_t maxsplit,
                           jvalue *out) {
    jlist *l = jlist_new(&c->arena, 4);
    if (!l) return CLEAVE_ERR_OOM;
    if (!sep || sep->t == JV_NONE) {
        size_t i = 0, len;
        int64_t done = 0;
        for (;;) {
            while (i < s.n && space_at(s, i, &len))
                i += len;
            if (i >= s.n) break;
            size_t j = i;
            if (maxsplit >= 0 && done >= maxsplit) {
                TRY(jlist_push(&c->arena, l, strip((jstr){s.p + i, s.n - i}, NULL, false, true)));
                break;
            }
            while (j < s.n && !space_at(s, j, &len))
                j += len;
            TRY(jlist_push(&c->arena, l, jv_str(s.p + i, j - i)));
            done++;
            i = j;
        }
    } else {
        TRY(need_str(c, at, sep, "split"));
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

static bool affix(jstr s, jstr x, bool end) {
    if (x.n > s.n) return false;
    return !memcmp(end ? s.p + s.n - x.n : s.p, x.p, x.n);
}

static cleave_status affix_test(jctx *c, const jnode *at, jstr s, const jvalue *x, bool end,
                                bool *r) {
    if (x && x->t == JV_STR) return *r = affix(s, x->u.s, end), CLEAVE_OK;
    if (x && x->t == JV_TUPLE) {
        *r = false;
        for (size_t i = 0; i < x->u.l->n; i++) {
            if (x->u.l->v[i].t != JV_STR)
                return jctx_fail(c, at, "tuple for %s must only contain str",
                                 end ? "endswith" : "startswith");
            if (affix(s, x->u.l->v[i].u.s, end)) *r = true;
        }
        return CLEAVE_OK;
    }
    return jctx_fail(c, at, "%s first arg must be str or a tuple of str",
                     end ? "endswith" : "startswith");
}

static int64_t find(jstr s, jstr x, bool last) {
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
static cleave_status format(jctx *c, const jnode *at, jstr s, const jargs *a, jvalue *out) {
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
    if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

static cleave_status join(jctx *c, const jnode *at, const jlist *items, jstr sep, jvalue *out) {
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < items->n && !st; i++) {
        if (i) st = jbuf_put(&b, sep.p, sep.n);
        if (!st) st = jv_str_into(&b, &items->v[i]);
    }
    (void)at;
    if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
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
        while (i < f.n && isdigit((unsigned char)f.p[i]) && k < w0 + 5) spec[k++] = f.p[i++];
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
    if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

/* ---- methods ---- */

static const char *const STR_METHODS[] = {
    "strip",   "lstrip",  "rstrip",  "split",        "rsplit",       "startswith", "endswith",
    "replace", "upper",   "lower",   "title",        "capitalize",   "find",       "rfind",
    "count",   "format",  "join",    "splitlines",   "isdigit",      "isalpha",    "isalnum",
    "isspace", "isupper", "islower", "removeprefix", "removesuffix", "index",      NULL};
static const char *const DICT_METHODS[] = {"items",  "keys",  "values",  "get",
                                           "copy",   "pop",   "popitem", "setdefault",
                                           "update", "clear", NULL};
static const char *const LIST_METHODS[] = {"index",   "count",  "copy",   "append",
                                           "pop",     "extend", "insert", "remove",
                                           "reverse", "sort",   "clear",  NULL};

static bool listed(const char *const *names, jstr s) {
    for (; *names; names++)
        if (is(s, *names)) return true;
    return false;
}

bool jinja_has_method(const jvalue *self, jstr name) {
    if (self->t == JV_STR) return listed(STR_METHODS, name);
    if (self->t == JV_DICT) return listed(DICT_METHODS, name);
    if (self->t == JV_LIST) return listed(LIST_METHODS, name);
    if (self->t == JV_TUPLE) return is(name, "index") || is(name, "count");
    return false;
}

static cleave_status str_method(jctx *c, const jnode *at, jstr s, jstr name, const jargs *a,
                                jvalue *out) {
    const jvalue *a0 = arg(a, 0, NULL), *a1 = arg(a, 1, NULL);
    if (is(name, "strip") || is(name, "lstrip") || is(name, "rstrip")) {
        if (a0 && a0->t != JV_STR && a0->t != JV_NONE)
            return jctx_fail(c, at, "strip arg must be None or str");
        *out = strip(s, a0, name.p[0] != 'r', name.p[0] != 'l');
        return CLEAVE_OK;
    }
    if (is(name, "split") || is(name, "rsplit")) {
        const jvalue *sep = arg(a, 0, "sep"), *mx = arg(a, 1, "maxsplit");
        int64_t maxsplit = mx && mx->t == JV_INT ? mx->u.i : -1;
        if (is(name, "rsplit") && maxsplit >= 0)
            return jctx_fail(c, at, "rsplit with maxsplit is not supported");
        return split(c, at, s, sep, maxsplit, out);
    }
    if (is(name, "startswith") || is(name, "endswith")) {
        bool r = false;
        TRY(affix_test(c, at, s, a0, name.p[0] == 'e', &r));
        *out = jv_bool(r);
        return CLEAVE_OK;
    }
    if (is(name, "replace")) {
        const jvalue *cnt = arg(a, 2, "count");
        if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR)
            return jctx_fail(c, at, "replace takes two strings");
        return replace(c, s, a0->u.s, a1->u.s, cnt && cnt->t == JV_INT ? cnt->u.i : -1, out);
    }
    if (is(name, "upper")) return case_map(c, s, 1, out);
    if (is(name, "lower")) return case_map(c, s, 0, out);
    if (is(name, "capitalize")) return case_map(c, s, 2, out);
    if (is(name, "title")) return case_map(c, s, 4, out);
    if (is(name, "find") || is(name, "rfind") || is(name, "index")) {
        if (!a0 || a0->t != JV_STR)
            return jctx_fail(c, at, "%.*s takes a string", (int)name.n, name.p);
        int64_t i = find(s, a0->u.s, name.p[0] == 'r');
        if (i < 0 && is(name, "index")) return jctx_fail(c, at, "substring not found");
        *out = jv_int(i);
        return CLEAVE_OK;
    }
    if (is(name, "count")) {
        if (!a0 || a0->t != JV_STR) return jctx_fail(c, at, "count takes a string");
        int64_t k = 0;
        if (!a0->u.s.n)
            k = (int64_t)s.n + 1;
        else
            for (size_t i = 0; i + a0->u.s.n <= s.n;)
                if (!memcmp(s.p + i, a0->u.s.p, a0->u.s.n))
                    k++, i += a0->u.s.n;
                else
                    i++;
        *out = jv_int(k);
        return CLEAVE_OK;
    }
    if (is(name, "format")) return format(c, at, s, a, out);
    if (is(name, "join")) {
        if (!a0) return jctx_fail(c, at, "join takes an iterable");
        jlist *items;
        TRY(jctx_iterate(c, at, a0, &items));
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].t != JV_STR)
                return jctx_fail(c, at, "sequence item %zu: expected str instance", i);
        return join(c, at, items, s, out);
    }
    if (is(name, "splitlines")) {
        jlist *l = jlist_new(&c->arena, 4);
        if (!l) return CLEAVE_ERR_OOM;
        size_t from = 0;
        for (size_t i = 0; i < s.n; i++) {
            if (s.p[i] == '\n' || s.p[i] == '\r') {
                TRY(jlist_push(&c->arena, l, jv_str(s.p + from, i - from)));
                if (s.p[i] == '\r' && i + 1 < s.n && s.p[i + 1] == '\n') i++;
                from = i + 1;
            }
        }
        if (from < s.n) TRY(jlist_push(&c->arena, l, jv_str(s.p + from, s.n - from)));
        *out = (jvalue){.t = JV_LIST, .u.l = l};
        return CLEAVE_OK;
    }
    if (is(name, "removeprefix") || is(name, "removesuffix")) {
        if (!a0 || a0->t != JV_STR)
            return jctx_fail(c, at, "%.*s takes a string", (int)name.n, name.p);
        bool end = name.p[6] == 's';
        if (affix(s, a0->u.s, end))
            *out = jv_str(end ? s.p : s.p + a0->u.s.n, s.n - a0->u.s.n);
        else
            *out = jv_str(s.p, s.n);
        return CLEAVE_OK;
    }
    /* the is* predicates */
    bool r = s.n > 0, cased = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        if (is(name, "isdigit"))
            r &= isdigit(ch) != 0;
        else if (is(name, "isalpha"))
            r &= isalpha(ch) != 0;
        else if (is(name, "isalnum"))
            r &= isalnum(ch) != 0;
        else if (is(name, "isspace"))
            r &= py_space((char)ch);
        else if (is(name, "isupper"))
            r &= !islower(ch), cased |= isupper(ch) != 0;
        else if (is(name, "islower"))
            r &= !isupper(ch), cased |= islower(ch) != 0;
    }
    if (is(name, "isupper") || is(name, "islower")) r = r && cased;
    *out = jv_bool(r);
    return CLEAVE_OK;
}

static cleave_status items_of(jctx *c, const jdict *d, jvalue *out) {
    jlist *l = jlist_new(&c->arena, d->n);
    if (!l) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < d->n; i++) {
        jlist *pair = jlist_new(&c->arena, 2);
        if (!pair) return CLEAVE_ERR_OOM;
        pair->v[0] = d->k[i], pair->v[1] = d->v[i], pair->n = 2;
        l->v[l->n++] = (jvalue){.t = JV_TUPLE, .u.l = pair};
    }
    *out = (jvalue){.t = JV_LIST, .u.l = l};
    return CLEAVE_OK;
}

cleave_status jinja_method(jctx *c, const jnode *at, const jvalue *self, jstr name, const jargs *a,
                           jvalue *out) {
    if (self->t == JV_STR) return str_method(c, at, self->u.s, name, a, out);
    if (self->t == JV_LOOP && is(name, "cycle")) {
        if (!a->n_pos) return jctx_fail(c, at, "no items for cycling given");
        *out = a->pos[self->u.loop->index0 % a->n_pos];
        return CLEAVE_OK;
    }
    if (self->t == JV_DICT) {
        const jdict *d = self->u.d;
        if (is(name, "items")) {
            TRY(items_of(c, d, out));
            out->u.l->view = 1;
            return CLEAVE_OK;
        }
        if (is(name, "keys") || is(name, "values")) {
            jlist *l = jlist_new(&c->arena, d->n);
            if (!l) return CLEAVE_ERR_OOM;
            for (size_t i = 0; i < d->n; i++)
                l->v[l->n++] = name.p[0] == 'k' ? d->k[i] : d->v[i];
            l->view = name.p[0] == 'k' ? 2 : 3;
            *out = (jvalue){.t = JV_LIST, .u.l = l};
            return CLEAVE_OK;
        }
        if (is(name, "get")) {
            const jvalue *k = arg(a, 0, NULL), *def = arg(a, 1, NULL);
            if (!k) return jctx_fail(c, at, "get expected at least 1 argument, got 0");
            const jvalue *v = jdict_get(d, k);
            *out = v ? *v : def ? *def : jv_none();
            return CLEAVE_OK;
        }
        if (is(name, "copy")) {
            jdict *n = jdict_new(&c->arena, d->n);
            if (!n) return CLEAVE_ERR_OOM;
            for (size_t i = 0; i < d->n; i++)
                TRY(jdict_set(&c->arena, n, d->k[i], d->v[i]));
            *out = (jvalue){.t = JV_DICT, .u.d = n};
            return CLEAVE_OK;
        }
    }
    if (self->t == JV_LIST || self->t == JV_TUPLE) {
        const jlist *l = self->u.l;
        const jvalue *x = arg(a, 0, NULL);
        if (is(name, "index") || is(name, "count")) {
            if (!x) return jctx_fail(c, at, "%.*s takes one argument", (int)name.n, name.p);
            int64_t k = 0, first = -1;
            for (size_t i = 0; i < l->n; i++)
                if (jv_equal(&l->v[i], x)) k++, first = first < 0 ? (int64_t)i : first;
            if (is(name, "index") && first < 0) return jctx_fail(c, at, "value is not in list");
            *out = jv_int(is(name, "index") ? first : k);
            return CLEAVE_OK;
        }
        if (is(name, "copy")) {
            jlist *n = jlist_new(&c->arena, l->n);
            if (!n) return CLEAVE_ERR_OOM;
            memcpy(n->v, l->v, l->n * sizeof *l->v);
            n->n = l->n;
            *out = (jvalue){.t = JV_LIST, .u.l = n};
            return CLEAVE_OK;
        }
    }
    return jctx_fail(
        c, at, "access to attribute '%.*s' of '%s' object is unsafe (the sandbox is immutable)",
        (int)name.n, name.p, jv_type_name(self));
}

/* ---- global functions ---- */

cleave_status jinja_builtin(jctx *c, const jnode *at, int id, const jargs *a, jvalue *out) {
    switch (id) {
    case JB_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->n_pos < 1 || a->n_pos > 3 || a->n_kw)
            return jctx_fail(c, at, "range expected 1 to 3 integer arguments");
        for (size_t i = 0; i < a->n_pos; i++) {
            if (a->pos[i].t != JV_INT && a->pos[i].t != JV_BOOL)
                return jctx_fail(c, at, "'%s' object cannot be interpreted as an integer",
                                 jv_type_name(&a->pos[i]));
            int64_t x = a->pos[i].t == JV_INT ? a->pos[i].u.i : a->pos[i].u.b;
            if (a->n_pos == 1)
                v[1] = x;
            else
                v[i] = x;
        }
        if (!v[2]) return jctx_fail(c, at, "range() arg 3 must not be zero");
        double count = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                                : ceil(((double)v[0] - (double)v[1]) / (double)-v[2]);
        if (count < 0) count = 0;
        if (count > (double)c->lim.max_steps)
            return jctx_fail(c, at, "range of %.0f items is more than the step limit (%llu)", count,
                             (unsigned long long)c->lim.max_steps);
        jlist *l = jlist_new(&c->arena, (size_t)count);
        if (!l) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < (size_t)count; i++)
            l->v[l->n++] = jv_int(v[0] + (int64_t)i * v[2]);
        *out = (jvalue){.t = JV_LIST, .u.l = l};
        return CLEAVE_OK;
    }
    case JB_NAMESPACE:
    case JB_DICT: {
        jdict *d = jdict_new(&c->arena, a->n_kw);
        if (!d) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < a->n_pos; i++) {
            if (a->pos[i].t != JV_DICT && a->pos[i].t != JV_NAMESPACE)
                return jctx_fail(c, at, "%s() takes a mapping and keyword arguments",
                                 id == JB_DICT ? "dict" : "namespace");
            for (size_t k = 0; k < a->pos[i].u.d->n; k++)
                TRY(jdict_set(&c->arena, d, a->pos[i].u.d->k[k], a->pos[i].u.d->v[k]));
        }
        for (size_t k = 0; k < a->n_kw; k++)
            TRY(jdict_set(&c->arena, d, jv_str(a->kw_names[k].p, a->kw_names[k].n), a->kw[k]));
        *out = (jvalue){.t = id == JB_DICT ? JV_DICT : JV_NAMESPACE, .u.d = d};
        return CLEAVE_OK;
    }
    case JB_RAISE: {
        jvalue msg = jv_str("", 0);
        if (a->n_pos) TRY(jctx_str(c, &a->pos[0], &msg));
        c->raised = true;
        return err_set(CLEAVE_ERR_INVALID_ARG, "%.*s", (int)(msg.u.s.n > 2000 ? 2000 : msg.u.s.n),
                       msg.u.s.p);
    }
    case JB_STRFTIME: {
        if (a->n_pos != 1 || a->pos[0].t != JV_STR)
            return jctx_fail(c, at, "strftime_now takes one format string");
        time_t now = c->args->fixed_time ? (time_t)c->args->time : time(NULL);
        struct tm tm;
        if (!(c->args->fixed_time ? gmtime_r(&now, &tm) : localtime_r(&now, &tm)))
            return jctx_fail(c, at, "strftime_now: the time cannot be read");
        char fmt[256], buf[512];
        jstr f = a->pos[0].u.s;
        if (f.n >= sizeof fmt || memchr(f.p, 0, f.n))
            return jctx_fail(c, at, "strftime_now: format too long");
        /* transformers formats a naive datetime.now(): %Z and %z print nothing */
        size_t k = 0;
        for (size_t i = 0; i < f.n; i++) {
            if (f.p[i] == '%' && i + 1 < f.n && (f.p[i + 1] == 'Z' || f.p[i + 1] == 'z')) {
                i++;
                continue;
            }
            fmt[k++] = f.p[i];
            if (f.p[i] == '%' && i + 1 < f.n) fmt[k++] = f.p[++i];
        }
        fmt[k] = 0;
        size_t n = k ? strftime(buf, sizeof buf, fmt, &tm) : 0;
        return make_str(c, buf, n, out);
    }
    case JB_UNSUPPORTED: return jctx_fail(c, at, "lipsum, cycler and joiner are not supported");
    default: return jctx_fail(c, at, "unknown function");
    }
}

/* ---- tests ---- */

static cleave_status sort_values(jctx *c, const jnode *at, jvalue *v, size_t n, const jvalue *keys,
                                 bool rev);

cleave_status jinja_test(jctx *c, const jnode *at, jstr name, const jvalue *in, const jargs *a,
                         bool *out) {
    const jvalue *x = arg(a, 0, NULL);
    jv_kind t = in->t;
    if (is(name, "defined"))
        *out = t != JV_UNDEF;
    else if (is(name, "undefined"))
        *out = t == JV_UNDEF;
    else if (is(name, "none"))
        *out = t == JV_NONE;
    else if (is(name, "string"))
        *out = t == JV_STR;
    else if (is(name, "number"))
        *out = t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    else if (is(name, "integer"))
        *out = t == JV_INT;
    else if (is(name, "float"))
        *out = t == JV_FLOAT;
    else if (is(name, "boolean"))
        *out = t == JV_BOOL;
    else if (is(name, "true"))
        *out = t == JV_BOOL && in->u.b;
    else if (is(name, "false"))
        *out = t == JV_BOOL && !in->u.b;
    else if (is(name, "mapping"))
        *out = t == JV_DICT;
    else if (is(name, "iterable"))
        *out = t == JV_STR || t == JV_LIST || t == JV_TUPLE || t == JV_DICT || t == JV_UNDEF;
    else if (is(name, "sequence")) /* jinja2's Undefined has a length: it passes */
        *out = t == JV_STR || t == JV_LIST || t == JV_TUPLE || t == JV_DICT || t == JV_UNDEF;
    else if (is(name, "callable"))
        *out = t == JV_MACRO || t == JV_BUILTIN || t == JV_METHOD;
    else if (is(name, "escaped"))
        *out = false;
    else if (is(name, "sameas")) /* Python's "is": singletons and small cached ints */
        *out = x && t == x->t &&
               (t == JV_NONE || t == JV_UNDEF || (t == JV_BOOL && in->u.b == x->u.b) ||
                (t == JV_INT && in->u.i == x->u.i && in->u.i >= -5 && in->u.i <= 256) ||
                ((t == JV_LIST || t == JV_TUPLE) && in->u.l == x->u.l) ||
                ((t == JV_DICT || t == JV_NAMESPACE) && in->u.d == x->u.d));
    else if (is(name, "lower") || is(name, "upper")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        jargs none = {0};
        jvalue r;
        TRY(str_method(c, at, s.u.s,
                       is(name, "lower") ? (jstr){"islower", 7} : (jstr){"isupper", 7}, &none, &r));
        *out = r.u.b;
    } else if (is(name, "odd") || is(name, "even") || is(name, "divisibleby")) {
        if (t != JV_INT && t != JV_BOOL)
            return jctx_fail(c, at, "the '%.*s' test needs an integer", (int)name.n, name.p);
        int64_t v = t == JV_INT ? in->u.i : in->u.b;
        if (is(name, "divisibleby")) {
            if (!x || x->t != JV_INT || !x->u.i)
                return jctx_fail(c, at, "divisibleby needs a non-zero integer");
            *out = v % x->u.i == 0;
        } else {
            *out = (v % 2 != 0) == is(name, "odd");
        }
    } else {
        jop op;
        if (is(name, "eq") || is(name, "equalto") || is(name, "=="))
            op = JOP_EQ;
        else if (is(name, "ne") || is(name, "!="))
            op = JOP_NE;
        else if (is(name, "lt") || is(name, "lessthan"))
            op = JOP_LT;
        else if (is(name, "le"))
            op = JOP_LE;
        else if (is(name, "gt") || is(name, "greaterthan"))
            op = JOP_GT;
        else if (is(name, "ge"))
            op = JOP_GE;
        else if (is(name, "in"))
            op = JOP_IN;
        else
            return jctx_fail(c, at, "no test named '%.*s'", (int)name.n, name.p);
        if (!x) return jctx_fail(c, at, "the '%.*s' test needs an argument", (int)name.n, name.p);
        if (op == JOP_EQ || op == JOP_NE) {
            *out = jv_equal(in, x) == (op == JOP_EQ);
        } else if (op == JOP_IN) {
            /* reuse the 'in' operator through a filter-free path */
            bool r = false;
            if (x->t == JV_STR && in->t == JV_STR) {
                r = find(x->u.s, in->u.s, false) >= 0;
            } else if (x->t == JV_LIST || x->t == JV_TUPLE) {
                for (size_t i = 0; i < x->u.l->n; i++)
                    r |= jv_equal(&x->u.l->v[i], in);
            } else if (x->t == JV_DICT) {
                r = jdict_get(x->u.d, in) != NULL;
            } else if (x->t != JV_UNDEF) {
                return jctx_fail(c, at, "argument of type '%s' is not iterable", jv_type_name(x));
            }
            *out = r;
        } else {
            int o;
            if (!jv_compare(in, x, &o))
                return jctx_fail(c, at, "cannot compare '%s' and '%s'", jv_type_name(in),
                                 jv_type_name(x));
            *out = op == JOP_LT ? o < 0 : op == JOP_LE ? o <= 0 : op == JOP_GT ? o > 0 : o >= 0;
        }
    }
    return CLEAVE_OK;
}

/* ---- filters ---- */

static cleave_status length(jctx *c, const jnode *at, const jvalue *v, int64_t *n) {
    switch (v->t) {
    case JV_UNDEF: *n = 0; return CLEAVE_OK;
    case JV_STR: {
        int64_t k = 0;
        for (size_t i = 0; i < v->u.s.n; i++)
            k += ((unsigned char)v->u.s.p[i] & 0xC0) != 0x80;
        *n = k;
        return CLEAVE_OK;
    }
    case JV_LIST:
    case JV_TUPLE: *n = (int64_t)v->u.l->n; return CLEAVE_OK;
    case JV_DICT:
    case JV_NAMESPACE: *n = (int64_t)v->u.d->n; return CLEAVE_OK;
    default: return jctx_fail(c, at, "object of type '%s' has no len()", jv_type_name(v));
    }
}

/* item.attribute for map/selectattr/sort's attribute= (dots walk deeper, digits index). */
static cleave_status attribute_of(jctx *c, const jnode *at, const jvalue *item, jstr path,
                                  jvalue *out) {
    *out = *item;
    size_t i = 0;
    while (i <= path.n) {
        size_t e = i;
        while (e < path.n && path.p[e] != '.')
            e++;
        jstr part = {path.p + i, e - i};
        bool digits = part.n > 0;
        for (size_t k = 0; k < part.n; k++)
            digits &= isdigit((unsigned char)part.p[k]) != 0;
        jvalue key = digits ? jv_int(strtoll(part.p, NULL, 10)) : jv_str(part.p, part.n);
        jvalue next;
        TRY(jctx_getitem(c, at, out, &key, &next));
        *out = next;
        i = e + 1;
    }
    return CLEAVE_OK;
}

/* Case-folded copy of a string for sorting and unique (case_sensitive false). */
static cleave_status sort_key(jctx *c, const jvalue *v, bool case_sensitive, jvalue *out) {
    if (v->t != JV_STR || case_sensitive) return *out = *v, CLEAVE_OK;
    return case_map(c, v->u.s, 0, out);
}

static cleave_status sort_values(jctx *c, const jnode *at, jvalue *v, size_t n, const jvalue *keys,
                                 bool rev) {
    /* stable insertion sort on keys (template lists are short); v follows */
    jvalue *k = jarena_alloc(&c->arena, (n ? n : 1) * sizeof *k);
    if (!k) return CLEAVE_ERR_OOM;
    memcpy(k, keys, n * sizeof *k);
    for (size_t i = 1; i < n; i++) {
        TRY(jctx_step(c, at));
        jvalue kx = k[i], vx = v[i];
        size_t j = i;
        while (j > 0) {
            int o;
            if (!jv_compare(&k[j - 1], &kx, &o))
                return jctx_fail(c, at, "'<' not supported between instances of '%s' and '%s'",
                                 jv_type_name(&k[j - 1]), jv_type_name(&kx));
            if (!(rev ? o < 0 : o > 0)) break;
            k[j] = k[j - 1], v[j] = v[j - 1], j--;
        }
        k[j] = kx, v[j] = vx;
    }
    return CLEAVE_OK;
}

static bool bool_arg(const jvalue *v, bool def) { return v ? jv_truthy(v) : def; }

static cleave_status select_items(jctx *c, const jnode *at, const jvalue *in, const jargs *a,
                                  bool by_attr, bool keep, jvalue *out) {
    jlist *items, *l;
    jvalue none = {.t = JV_UNDEF};
    if (!jv_truthy(in)) in = &none; /* jinja2 selects from a falsy value nothing, not an error */
    TRY(jctx_iterate(c, at, in, &items));
    l = jlist_new(&c->arena, items->n);
    if (!l) return CLEAVE_ERR_OOM;
    size_t first = by_attr ? 1 : 0;
    const jvalue *attr = by_attr ? arg(a, 0, NULL) : NULL;
    if (by_attr && (!attr || attr->t != JV_STR))
        return jctx_fail(c, at, "selectattr/rejectattr need an attribute name");
    const jvalue *test = a->n_pos > first ? &a->pos[first] : NULL;
    if (test && test->t != JV_STR) return jctx_fail(c, at, "the test's name must be a string");
    jargs targs = {a->n_pos > first + 1 ? a->pos + first + 1 : NULL,
                   a->n_pos > first + 1 ? a->n_pos - first - 1 : 0, NULL, NULL, 0};
    for (size_t i = 0; i < items->n; i++) {
        TRY(jctx_step(c, at));
        jvalue v = items->v[i];
        if (by_attr) TRY(attribute_of(c, at, &items->v[i], attr->u.s, &v));
        bool r = false;
        if (test)
            TRY(jinja_test(c, at, test->u.s, &v, &targs, &r));
        else
            r = jv_truthy(&v);
        if (r == keep) l->v[l->n++] = items->v[i];
    }
    *out = (jvalue){.t = JV_LIST, .u.l = l};
    return CLEAVE_OK;
}

static cleave_status to_list(jctx *c, const jnode *at, const jvalue *in, jvalue *out) {
    jlist *items;
    TRY(jctx_iterate(c, at, in, &items));
    jlist *l = jlist_new(&c->arena, items->n);
    if (!l) return CLEAVE_ERR_OOM;
    if (items->n) memcpy(l->v, items->v, items->n * sizeof *l->v);
    l->n = items->n;
    *out = (jvalue){.t = JV_LIST, .u.l = l};
    return CLEAVE_OK;
}

static cleave_status indent(jctx *c, const jnode *at, const jvalue *in, const jargs *a,
                            jvalue *out) {
    jvalue s, w;
    TRY(jctx_str(c, in, &s));
    const jvalue *width = arg(a, 0, "width");
    bool first = bool_arg(arg(a, 1, "first"), false), blank = bool_arg(arg(a, 2, "blank"), false);
    char spaces[256];
    if (!width || width->t == JV_INT) {
        int64_t k = width ? width->u.i : 4;
        if (k < 0) k = 0;
        if (k > 255) return jctx_fail(c, at, "indent wider than 255");
        memset(spaces, ' ', (size_t)k);
        w = jv_str(spaces, (size_t)k);
    } else if (width->t == JV_STR) {
        w = *width;
    } else {
        return jctx_fail(c, at, "indent width must be an integer or a string");
    }
    jbuf b = {.limit = c->lim.max_output};
    cleave_status st = first ? jbuf_put(&b, w.u.s.p, w.u.s.n) : CLEAVE_OK;
    /* jinja2 splits text + "\n" with str.splitlines: every segment of the text, the empty one
     * after a final newline included; empty lines get no indent unless blank */
    size_t i = 0, line = 0, n = s.u.s.n;
    const char *p = s.u.s.p;
    while (!st) {
        size_t e = i;
        while (e < n && p[e] != '\n' && p[e] != '\r')
            e++;
        if (line) {
            st = jbuf_putc(&b, '\n');
            if (!st && (blank || e > i)) st = jbuf_put(&b, w.u.s.p, w.u.s.n);
        }
        if (!st) st = jbuf_put(&b, p + i, e - i);
        line++;
        if (e >= n) break;
        if (p[e] == '\r' && e + 1 < n && p[e + 1] == '\n') e++;
        i = e + 1;
    }
    if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

static cleave_status to_int(jctx *c, const jvalue *in, const jargs *a, jvalue *out) {
    const jvalue *def = arg(a, 0, "default");
    jvalue d = def ? *def : jv_int(0);
    (void)c;
    if (in->t == JV_INT) return *out = *in, CLEAVE_OK;
    if (in->t == JV_BOOL) return *out = jv_int(in->u.b), CLEAVE_OK;
    if (in->t == JV_FLOAT) {
        if (!isfinite(in->u.f) || fabs(in->u.f) >= 9.2e18) return *out = d, CLEAVE_OK;
        return *out = jv_int((int64_t)in->u.f), CLEAVE_OK;
    }
    if (in->t == JV_STR) {
        char tmp[64];
        jvalue t = strip(in->u.s, NULL, true, true);
        if (t.u.s.n && t.u.s.n < sizeof tmp) {
            memcpy(tmp, t.u.s.p, t.u.s.n);
            tmp[t.u.s.n] = 0;
            char *end;
            long long v = strtoll(tmp, &end, 10);
            if (!*end) return *out = jv_int(v), CLEAVE_OK;
            double f = strtod(tmp, &end);
            if (!*end && isfinite(f) && fabs(f) < 9.2e18)
                return *out = jv_int((int64_t)f), CLEAVE_OK;
        }
    }
    *out = d;
    return CLEAVE_OK;
}

static cleave_status to_float(jctx *c, const jvalue *in, const jargs *a, jvalue *out) {
    const jvalue *def = arg(a, 0, "default");
    (void)c;
    if (jv_is_number(in)) return *out = jv_float(jv_as_double(in)), CLEAVE_OK;
    if (in->t == JV_STR) {
        char tmp[64];
        jvalue t = strip(in->u.s, NULL, true, true);
        if (t.u.s.n && t.u.s.n < sizeof tmp) {
            memcpy(tmp, t.u.s.p, t.u.s.n);
            tmp[t.u.s.n] = 0;
            char *end;
            double f = strtod(tmp, &end);
            if (!*end) return *out = jv_float(f), CLEAVE_OK;
        }
    }
    *out = def ? *def : jv_float(0.0);
    return CLEAVE_OK;
}

cleave_status jinja_filter(jctx *c, const jnode *at, jstr name, const jvalue *in, const jargs *a,
                           jvalue *out) {
    const jvalue *a0 = arg(a, 0, NULL);
    if (is(name, "length") || is(name, "count")) {
        int64_t n = 0;
        TRY(length(c, at, in, &n));
        *out = jv_int(n);
        return CLEAVE_OK;
    }
    if (is(name, "string")) return jctx_str(c, in, out);
    if (is(name, "safe")) return in->t == JV_STR ? (*out = *in, CLEAVE_OK) : jctx_str(c, in, out);
    if (is(name, "default") || is(name, "d")) {
        const jvalue *def = arg(a, 0, "default_value");
        bool boolean = bool_arg(arg(a, 1, "boolean"), false);
        if (in->t == JV_UNDEF || (boolean && !jv_truthy(in)))
            *out = def ? *def : jv_str("", 0);
        else
            *out = *in;
        return CLEAVE_OK;
    }
    if (is(name, "trim") || is(name, "upper") || is(name, "lower") || is(name, "title") ||
        is(name, "capitalize")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        if (is(name, "trim")) {
            const jvalue *chars = arg(a, 0, "chars");
            *out = strip(s.u.s, chars && chars->t == JV_STR ? chars : NULL, true, true);
            return CLEAVE_OK;
        }
        return case_map(c, s.u.s,
                        is(name, "lower")        ? 0
                        : is(name, "upper")      ? 1
                        : is(name, "capitalize") ? 2
                                                 : 3,
                        out);
    }
    if (is(name, "replace")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        const jvalue *old = arg(a, 0, "old"), *new_ = arg(a, 1, "new"), *cnt = arg(a, 2, "count");
        if (!old || !new_) return jctx_fail(c, at, "replace takes two arguments");
        jvalue so, sn;
        TRY(jctx_str(c, old, &so));
        TRY(jctx_str(c, new_, &sn));
        return replace(c, s.u.s, so.u.s, sn.u.s, cnt && cnt->t == JV_INT ? cnt->u.i : -1, out);
    }
    if (is(name, "join")) {
        const jvalue *sep = arg(a, 0, "d"), *attr = arg(a, 1, "attribute");
        jlist *items;
        TRY(jctx_iterate(c, at, in, &items));
        if (attr) {
            if (attr->t != JV_STR) return jctx_fail(c, at, "join's attribute must be a string");
            jlist *l = jlist_new(&c->arena, items->n);
            if (!l) return CLEAVE_ERR_OOM;
            for (size_t i = 0; i < items->n; i++)
                TRY(attribute_of(c, at, &items->v[i], attr->u.s, &l->v[l->n++]));
            items = l;
        }
        jvalue s = jv_str("", 0);
        if (sep) TRY(jctx_str(c, sep, &s));
        return join(c, at, items, s.u.s, out);
    }
    if (is(name, "first") || is(name, "last")) {
        jlist *items; /* an undefined value has no items: the result is undefined, as in jinja2 */
        TRY(jctx_iterate(c, at, in, &items));
        if (!items->n)
            *out = jv_undef("the first item of an empty sequence");
        else
            *out = items->v[name.p[0] == 'f' ? 0 : items->n - 1];
        return CLEAVE_OK;
    }
    if (is(name, "tojson")) {
        const jvalue *ind = arg(a, 0, "indent");
        int indent = -1;
        if (ind && ind->t == JV_INT)
            indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
        else if (ind && ind->t != JV_NONE)
            return jctx_fail(c, at, "tojson's indent must be an integer");
        jbuf b = {.limit = c->lim.max_output};
        cleave_status st = jv_json_into(&b, in, indent, 0);
        if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
        free(b.p);
        return st;
    }
    if (is(name, "int")) return to_int(c, in, a, out);
    if (is(name, "float")) return to_float(c, in, a, out);
    if (is(name, "list")) return to_list(c, at, in, out);
    if (is(name, "items")) {
        if (in->t == JV_UNDEF) {
            jlist *l = jlist_new(&c->arena, 0);
            if (!l) return CLEAVE_ERR_OOM;
            *out = (jvalue){.t = JV_LIST, .u.l = l};
            return CLEAVE_OK;
        }
        if (in->t != JV_DICT) return jctx_fail(c, at, "can only get item pairs from a mapping");
        return items_of(c, in->u.d, out);
    }
    if (is(name, "dictsort")) {
        if (in->t != JV_DICT) return jctx_fail(c, at, "dictsort: expected a mapping");
        bool cs = bool_arg(arg(a, 0, "case_sensitive"), false),
             rev = bool_arg(arg(a, 2, "reverse"), false);
        const jvalue *by = arg(a, 1, "by");
        bool by_value = by && by->t == JV_STR && is(by->u.s, "value");
        TRY(items_of(c, in->u.d, out));
        jlist *l = out->u.l;
        jvalue *keys = jarena_alloc(&c->arena, (l->n ? l->n : 1) * sizeof *keys);
        if (!keys) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < l->n; i++)
            TRY(sort_key(c, &l->v[i].u.l->v[by_value ? 1 : 0], cs, &keys[i]));
        return sort_values(c, at, l->v, l->n, keys, rev);
    }
    if (is(name, "sort") || is(name, "unique") || is(name, "min") || is(name, "max")) {
        bool srt = is(name, "sort");
        bool rev = srt && bool_arg(arg(a, 0, "reverse"), false);
        bool cs = bool_arg(arg(a, srt ? 1 : 0, "case_sensitive"), false);
        const jvalue *attr = arg(a, srt ? 2 : 1, "attribute");
        TRY(to_list(c, at, in, out));
        jlist *l = out->u.l;
        jvalue *keys = jarena_alloc(&c->arena, (l->n ? l->n : 1) * sizeof *keys);
        if (!keys) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < l->n; i++) {
            jvalue k = l->v[i];
            if (attr && attr->t == JV_STR) TRY(attribute_of(c, at, &l->v[i], attr->u.s, &k));
            TRY(sort_key(c, &k, cs, &keys[i]));
        }
        if (is(name, "unique")) {
            size_t m = 0;
            for (size_t i = 0; i < l->n; i++) {
                bool seen = false;
                for (size_t j = 0; j < i && !seen; j++)
                    seen = jv_equal(&keys[j], &keys[i]);
                if (!seen) l->v[m++] = l->v[i];
            }
            l->n = m;
            return CLEAVE_OK;
        }
        if (srt) return sort_values(c, at, l->v, l->n, keys, rev);
        if (!l->n) return *out = jv_undef("min or max of an empty sequence"), CLEAVE_OK;
        size_t best = 0;
        for (size_t i = 1; i < l->n; i++) {
            int o;
            if (!jv_compare(&keys[i], &keys[best], &o))
                return jctx_fail(c, at, "values cannot be compared");
            if (is(name, "min") ? o < 0 : o > 0) best = i;
        }
        *out = l->v[best];
        return CLEAVE_OK;
    }
    if (is(name, "reverse")) {
        if (in->t == JV_STR) {
            jlist *chars;
            TRY(jctx_iterate(c, at, in, &chars));
            char *p = jarena_alloc(&c->arena, in->u.s.n + 1);
            if (!p) return CLEAVE_ERR_OOM;
            size_t o = 0;
            for (size_t i = chars->n; i-- > 0;)
                memcpy(p + o, chars->v[i].u.s.p, chars->v[i].u.s.n), o += chars->v[i].u.s.n;
            *out = jv_str(p, o);
            return CLEAVE_OK;
        }
        TRY(to_list(c, at, in, out));
        jlist *l = out->u.l;
        for (size_t i = 0; i < l->n / 2; i++) {
            jvalue t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i], l->v[l->n - 1 - i] = t;
        }
        return CLEAVE_OK;
    }
    if (is(name, "selectattr")) return select_items(c, at, in, a, true, true, out);
    if (is(name, "rejectattr")) return select_items(c, at, in, a, true, false, out);
    if (is(name, "select")) return select_items(c, at, in, a, false, true, out);
    if (is(name, "reject")) return select_items(c, at, in, a, false, false, out);
    if (is(name, "map")) {
        jlist *items;
        jvalue none = {.t = JV_UNDEF};
        TRY(jctx_iterate(c, at, jv_truthy(in) ? in : &none,
                         &items)); /* falsy: nothing, as jinja2 */
        jlist *l = jlist_new(&c->arena, items->n);
        if (!l) return CLEAVE_ERR_OOM;
        const jvalue *attr = arg(a, SIZE_MAX, "attribute"), *def = arg(a, SIZE_MAX, "default");
        if (!attr && (!a0 || a0->t != JV_STR))
            return jctx_fail(c, at, "map needs a filter name or attribute=");
        jargs rest = {a->n_pos > 1 ? a->pos + 1 : NULL, a->n_pos > 1 ? a->n_pos - 1 : 0, NULL, NULL,
                      0};
        for (size_t i = 0; i < items->n; i++) {
            TRY(jctx_step(c, at));
            jvalue v;
            if (attr) {
                if (attr->t != JV_STR) return jctx_fail(c, at, "map's attribute must be a string");
                TRY(attribute_of(c, at, &items->v[i], attr->u.s, &v));
                if (v.t == JV_UNDEF && def) v = *def;
            } else {
                TRY(jinja_filter(c, at, a0->u.s, &items->v[i], &rest, &v));
            }
            l->v[l->n++] = v;
        }
        *out = (jvalue){.t = JV_LIST, .u.l = l};
        return CLEAVE_OK;
    }
    if (is(name, "indent")) return indent(c, at, in, a, out);
    if (is(name, "abs")) {
        if (in->t == JV_INT)
            return *out = jv_int(in->u.i < 0 && in->u.i != INT64_MIN ? -in->u.i : in->u.i),
                   CLEAVE_OK;
        if (in->t == JV_FLOAT) return *out = jv_float(fabs(in->u.f)), CLEAVE_OK;
        if (in->t == JV_BOOL) return *out = jv_int(in->u.b), CLEAVE_OK;
        return jctx_fail(c, at, "bad operand type for abs(): '%s'", jv_type_name(in));
    }
    if (is(name, "sum")) {
        const jvalue *attr = arg(a, 0, "attribute"), *start = arg(a, 1, "start");
        jlist *items;
        TRY(jctx_iterate(c, at, in, &items));
        jvalue acc = start ? *start : jv_int(0);
        for (size_t i = 0; i < items->n; i++) {
            jvalue v = items->v[i];
            if (attr && attr->t == JV_STR) TRY(attribute_of(c, at, &items->v[i], attr->u.s, &v));
            if (!jv_is_number(&v) || !jv_is_number(&acc))
                return jctx_fail(c, at, "sum of values that are not numbers");
            if (v.t == JV_FLOAT || acc.t == JV_FLOAT)
                acc = jv_float(jv_as_double(&acc) + jv_as_double(&v));
            else if (__builtin_add_overflow(acc.t == JV_BOOL ? acc.u.b : acc.u.i,
                                            v.t == JV_BOOL ? v.u.b : v.u.i, &acc.u.i))
                return jctx_fail(c, at, "integer overflow");
            else
                acc.t = JV_INT;
        }
        *out = acc;
        return CLEAVE_OK;
    }
    if (is(name, "attr")) {
        if (!a0 || a0->t != JV_STR) return jctx_fail(c, at, "attr needs a name");
        /* Python's getattr only: a dict's keys are no attributes */
        if (in->t == JV_DICT && !jinja_has_method(in, a0->u.s)) {
            *out = jv_undef("the attribute");
            return CLEAVE_OK;
        }
        return jctx_getattr(c, at, in, a0->u.s, out);
    }
    if (is(name, "format")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        jlist args = {(jvalue *)a->pos, a->n_pos, a->n_pos, 0};
        jvalue tuple = {.t = JV_TUPLE, .u.l = &args};
        return jinja_percent_format(c, at, s.u.s, &tuple, out);
    }
    if (is(name, "center")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        const jvalue *w = arg(a, 0, "width");
        int64_t width = w && w->t == JV_INT ? w->u.i : 80, len = 0;
        TRY(length(c, at, &s, &len));
        if (width > (int64_t)c->lim.max_output)
            return jctx_fail(c, at, "center wider than the output limit");
        if (width <= len) return *out = s, CLEAVE_OK;
        /* Python's str.center: the odd space goes left when the width's and length's parities
         * differ */
        int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
        char *p = jarena_alloc(&c->arena, s.u.s.n + (size_t)pad + 1);
        if (!p) return CLEAVE_ERR_OOM;
        memset(p, ' ', (size_t)left);
        memcpy(p + left, s.u.s.p, s.u.s.n);
        memset(p + left + s.u.s.n, ' ', (size_t)(pad - left));
        *out = jv_str(p, s.u.s.n + (size_t)pad);
        return CLEAVE_OK;
    }
    if (is(name, "wordcount")) {
        jvalue s, words;
        TRY(jctx_str(c, in, &s));
        TRY(split(c, at, s.u.s, NULL, -1, &words));
        *out = jv_int((int64_t)words.u.l->n);
        return CLEAVE_OK;
    }
    if (is(name, "round")) {
        const jvalue *pr = arg(a, 0, "precision"), *method = arg(a, 1, "method");
        int64_t p = pr && pr->t == JV_INT ? pr->u.i : 0;
        if (p < -20 || p > 20) return jctx_fail(c, at, "round: precision out of range");
        if (!jv_is_number(in)) return jctx_fail(c, at, "round: a number is required");
        if (in->t != JV_FLOAT && (!method || (method->t == JV_STR && is(method->u.s, "common"))) &&
            p >= 0)
            return *out = in->t == JV_BOOL ? jv_int(in->u.b) : *in, CLEAVE_OK;
        double x = jv_as_double(in), r;
        if (!method || (method->t == JV_STR && is(method->u.s, "common"))) {
            /* Python's round: correctly rounded, ties to even, as printf rounds the exact value */
            char tmp[400];
            if (p >= 0) {
                snprintf(tmp, sizeof tmp, "%.*f", (int)p, x);
                r = strtod(tmp, NULL);
            } else {
                double m = pow(10, (double)-p);
                r = nearbyint(x / m) * m;
            }
        } else if (method->t == JV_STR && (is(method->u.s, "floor") || is(method->u.s, "ceil"))) {
            double m = pow(10, (double)p);
            r = is(method->u.s, "floor") ? floor(x * m) / m : ceil(x * m) / m;
        } else {
            return jctx_fail(c, at, "method must be common, ceil or floor");
        }
        *out = jv_float(r);
        return CLEAVE_OK;
    }
    if (is(name, "escape") || is(name, "e")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        jbuf b = {.limit = c->lim.max_output};
        cleave_status st = CLEAVE_OK;
        for (size_t i = 0; i < s.u.s.n && !st; i++) {
            char ch = s.u.s.p[i];
            const char *rep = ch == '&'    ? "&amp;"
                              : ch == '<'  ? "&lt;"
                              : ch == '>'  ? "&gt;"
                              : ch == '"'  ? "&#34;"
                              : ch == '\'' ? "&#39;"
                                           : NULL;
            st = rep ? jbuf_put(&b, rep, strlen(rep)) : jbuf_putc(&b, ch);
        }
        if (!st) st = make_str(c, b.p ? b.p : "", b.n, out);
        free(b.p);
        return st;
    }
    if (is(name, "batch")) {
        const jvalue *sz = arg(a, 0, "linecount"), *fill = arg(a, 1, "fill_with");
        if (!sz || sz->t != JV_INT || sz->u.i <= 0)
            return jctx_fail(c, at, "batch needs a positive size");
        jlist *items, *l = jlist_new(&c->arena, 4), *cur = NULL;
        if (!l) return CLEAVE_ERR_OOM;
        TRY(jctx_iterate(c, at, in, &items));
        for (size_t i = 0; i < items->n; i++) {
            if (!cur || (int64_t)cur->n == sz->u.i) {
                cur = jlist_new(&c->arena, 4);
                if (!cur) return CLEAVE_ERR_OOM;
                TRY(jlist_push(&c->arena, l, (jvalue){.t = JV_LIST, .u.l = cur}));
            }
            TRY(jlist_push(&c->arena, cur, items->v[i]));
        }
        while (fill && cur && (int64_t)cur->n < sz->u.i)
            TRY(jlist_push(&c->arena, cur, *fill));
        *out = (jvalue){.t = JV_LIST, .u.l = l};
        return CLEAVE_OK;
    }
    return jctx_fail(c, at, "no filter named '%.*s'", (int)name.n, name.p);
}
