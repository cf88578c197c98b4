/* Jinja's filters as jinja2 3.1 defines them: length, trim, default,
 * join, tojson, selectattr and the other list filters, indent, int,
 * round, ... Falsy inputs to select/reject/map give nothing, as there. */
#include <ctype.h>
#include <math.h>
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
    return py_case(c, v->u.s, 0, out);
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


static cleave_status select_items(jctx *c, const jnode *at, const jvalue *in, const jargs *a,
                                  bool by_attr, bool keep, jvalue *out) {
    jlist *items, *l;
    jvalue none = {.t = JV_UNDEF};
    if (!jv_truthy(in)) in = &none; /* jinja2 selects from a falsy value nothing, not an error */
    TRY(jctx_iterate(c, at, in, &items));
    l = jlist_new(&c->arena, items->n);
    if (!l) return CLEAVE_ERR_OOM;
    size_t first = by_attr ? 1 : 0;
    const jvalue *attr = by_attr ? jarg(a, 0, NULL) : NULL;
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
    const jvalue *width = jarg(a, 0, "width");
    bool first = jarg_bool(jarg(a, 1, "first"), false),
         blank = jarg_bool(jarg(a, 2, "blank"), false);
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
    if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

/* A string's stripped text in buf (NUL-terminated) for int() and float():
 * false when it is no string, empty, or too long to be a number. */
static bool number_text(const jvalue *in, char *buf, size_t cap) {
    if (in->t != JV_STR) return false;
    jvalue t = py_strip(in->u.s, NULL, true, true);
    if (!t.u.s.n || t.u.s.n >= cap) return false;
    memcpy(buf, t.u.s.p, t.u.s.n);
    buf[t.u.s.n] = 0;
    return true;
}

static cleave_status to_int(jctx *c, const jvalue *in, const jargs *a, jvalue *out) {
    const jvalue *def = jarg(a, 0, "default");
    jvalue d = def ? *def : jv_int(0);
    (void)c;
    if (in->t == JV_INT) return *out = *in, CLEAVE_OK;
    if (in->t == JV_BOOL) return *out = jv_int(in->u.b), CLEAVE_OK;
    if (in->t == JV_FLOAT) {
        if (!isfinite(in->u.f) || fabs(in->u.f) >= 9.2e18) return *out = d, CLEAVE_OK;
        return *out = jv_int((int64_t)in->u.f), CLEAVE_OK;
    }
    char tmp[64], *end;
    if (number_text(in, tmp, sizeof tmp)) {
        long long v = strtoll(tmp, &end, 10);
        if (!*end) return *out = jv_int(v), CLEAVE_OK;
        double f = strtod(tmp, &end);
        if (!*end && isfinite(f) && fabs(f) < 9.2e18) return *out = jv_int((int64_t)f), CLEAVE_OK;
    }
    *out = d;
    return CLEAVE_OK;
}

static cleave_status to_float(jctx *c, const jvalue *in, const jargs *a, jvalue *out) {
    const jvalue *def = jarg(a, 0, "default");
    (void)c;
    if (jv_is_number(in)) return *out = jv_float(jv_as_double(in)), CLEAVE_OK;
    char tmp[64], *end;
    if (number_text(in, tmp, sizeof tmp)) {
        double f = strtod(tmp, &end);
        if (!*end) return *out = jv_float(f), CLEAVE_OK;
    }
    *out = def ? *def : jv_float(0.0);
    return CLEAVE_OK;
}

cleave_status jinja_filter(jctx *c, const jnode *at, jstr name, const jvalue *in, const jargs *a,
                           jvalue *out) {
    const jvalue *a0 = jarg(a, 0, NULL);
    if (jname_is(name, "length") || jname_is(name, "count")) {
        int64_t n = 0;
        TRY(length(c, at, in, &n));
        *out = jv_int(n);
        return CLEAVE_OK;
    }
    if (jname_is(name, "string")) return jctx_str(c, in, out);
    if (jname_is(name, "safe"))
        return in->t == JV_STR ? (*out = *in, CLEAVE_OK) : jctx_str(c, in, out);
    if (jname_is(name, "default") || jname_is(name, "d")) {
        const jvalue *def = jarg(a, 0, "default_value");
        bool boolean = jarg_bool(jarg(a, 1, "boolean"), false);
        if (in->t == JV_UNDEF || (boolean && !jv_truthy(in)))
            *out = def ? *def : jv_str("", 0);
        else
            *out = *in;
        return CLEAVE_OK;
    }
    if (jname_is(name, "trim") || jname_is(name, "upper") || jname_is(name, "lower") ||
        jname_is(name, "title") || jname_is(name, "capitalize")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        if (jname_is(name, "trim")) {
            const jvalue *chars = jarg(a, 0, "chars");
            *out = py_strip(s.u.s, chars && chars->t == JV_STR ? chars : NULL, true, true);
            return CLEAVE_OK;
        }
        return py_case(c, s.u.s,
                       jname_is(name, "lower")        ? 0
                       : jname_is(name, "upper")      ? 1
                       : jname_is(name, "capitalize") ? 2
                                                      : 3,
                       out);
    }
    if (jname_is(name, "replace")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        const jvalue *old = jarg(a, 0, "old"), *new_ = jarg(a, 1, "new"),
                     *cnt = jarg(a, 2, "count");
        if (!old || !new_) return jctx_fail(c, at, "replace takes two arguments");
        jvalue so, sn;
        TRY(jctx_str(c, old, &so));
        TRY(jctx_str(c, new_, &sn));
        return py_replace(c, s.u.s, so.u.s, sn.u.s, cnt && cnt->t == JV_INT ? cnt->u.i : -1, out);
    }
    if (jname_is(name, "join")) {
        const jvalue *sep = jarg(a, 0, "d"), *attr = jarg(a, 1, "attribute");
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
        return py_join(c, at, items, s.u.s, out);
    }
    if (jname_is(name, "first") || jname_is(name, "last")) {
        jlist *items; /* an undefined value has no items: the result is undefined, as in jinja2 */
        TRY(jctx_iterate(c, at, in, &items));
        if (!items->n)
            *out = jv_undef("the first item of an empty sequence");
        else
            *out = items->v[name.p[0] == 'f' ? 0 : items->n - 1];
        return CLEAVE_OK;
    }
    if (jname_is(name, "tojson")) {
        const jvalue *ind = jarg(a, 0, "indent");
        int indent = -1;
        if (ind && ind->t == JV_INT)
            indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
        else if (ind && ind->t != JV_NONE)
            return jctx_fail(c, at, "tojson's indent must be an integer");
        jbuf b = {.limit = c->lim.max_output};
        cleave_status st = jv_json_into(&b, in, indent, 0);
        if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
        free(b.p);
        return st;
    }
    if (jname_is(name, "int")) return to_int(c, in, a, out);
    if (jname_is(name, "float")) return to_float(c, in, a, out);
    if (jname_is(name, "list")) return to_list(c, at, in, out);
    if (jname_is(name, "items")) {
        if (in->t == JV_UNDEF) {
            jlist *l = jlist_new(&c->arena, 0);
            if (!l) return CLEAVE_ERR_OOM;
            *out = (jvalue){.t = JV_LIST, .u.l = l};
            return CLEAVE_OK;
        }
        if (in->t != JV_DICT) return jctx_fail(c, at, "can only get item pairs from a mapping");
        return jinja_items(c, in->u.d, out);
    }
    if (jname_is(name, "dictsort")) {
        if (in->t != JV_DICT) return jctx_fail(c, at, "dictsort: expected a mapping");
        bool cs = jarg_bool(jarg(a, 0, "case_sensitive"), false),
             rev = jarg_bool(jarg(a, 2, "reverse"), false);
        const jvalue *by = jarg(a, 1, "by");
        bool by_value = by && by->t == JV_STR && jname_is(by->u.s, "value");
        TRY(jinja_items(c, in->u.d, out));
        jlist *l = out->u.l;
        jvalue *keys = jarena_alloc(&c->arena, (l->n ? l->n : 1) * sizeof *keys);
        if (!keys) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < l->n; i++)
            TRY(sort_key(c, &l->v[i].u.l->v[by_value ? 1 : 0], cs, &keys[i]));
        return sort_values(c, at, l->v, l->n, keys, rev);
    }
    if (jname_is(name, "sort") || jname_is(name, "unique") || jname_is(name, "min") ||
        jname_is(name, "max")) {
        bool srt = jname_is(name, "sort");
        bool rev = srt && jarg_bool(jarg(a, 0, "reverse"), false);
        bool cs = jarg_bool(jarg(a, srt ? 1 : 0, "case_sensitive"), false);
        const jvalue *attr = jarg(a, srt ? 2 : 1, "attribute");
        TRY(to_list(c, at, in, out));
        jlist *l = out->u.l;
        jvalue *keys = jarena_alloc(&c->arena, (l->n ? l->n : 1) * sizeof *keys);
        if (!keys) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < l->n; i++) {
            jvalue k = l->v[i];
            if (attr && attr->t == JV_STR) TRY(attribute_of(c, at, &l->v[i], attr->u.s, &k));
            TRY(sort_key(c, &k, cs, &keys[i]));
        }
        if (jname_is(name, "unique")) {
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
            if (jname_is(name, "min") ? o < 0 : o > 0) best = i;
        }
        *out = l->v[best];
        return CLEAVE_OK;
    }
    if (jname_is(name, "reverse")) {
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
    if (jname_is(name, "selectattr")) return select_items(c, at, in, a, true, true, out);
    if (jname_is(name, "rejectattr")) return select_items(c, at, in, a, true, false, out);
    if (jname_is(name, "select")) return select_items(c, at, in, a, false, true, out);
    if (jname_is(name, "reject")) return select_items(c, at, in, a, false, false, out);
    if (jname_is(name, "map")) {
        jlist *items;
        jvalue none = {.t = JV_UNDEF};
        TRY(jctx_iterate(c, at, jv_truthy(in) ? in : &none,
                         &items)); /* falsy: nothing, as jinja2 */
        jlist *l = jlist_new(&c->arena, items->n);
        if (!l) return CLEAVE_ERR_OOM;
        const jvalue *attr = jarg(a, SIZE_MAX, "attribute"), *def = jarg(a, SIZE_MAX, "default");
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
    if (jname_is(name, "indent")) return indent(c, at, in, a, out);
    if (jname_is(name, "abs")) {
        if (in->t == JV_INT)
            return *out = jv_int(in->u.i < 0 && in->u.i != INT64_MIN ? -in->u.i : in->u.i),
                   CLEAVE_OK;
        if (in->t == JV_FLOAT) return *out = jv_float(fabs(in->u.f)), CLEAVE_OK;
        if (in->t == JV_BOOL) return *out = jv_int(in->u.b), CLEAVE_OK;
        return jctx_fail(c, at, "bad operand type for abs(): '%s'", jv_type_name(in));
    }
    if (jname_is(name, "sum")) {
        const jvalue *attr = jarg(a, 0, "attribute"), *start = jarg(a, 1, "start");
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
    if (jname_is(name, "attr")) {
        if (!a0 || a0->t != JV_STR) return jctx_fail(c, at, "attr needs a name");
        /* Python's getattr only: a dict's keys are no attributes */
        if (in->t == JV_DICT && !jinja_has_method(in, a0->u.s)) {
            *out = jv_undef("the attribute");
            return CLEAVE_OK;
        }
        return jctx_getattr(c, at, in, a0->u.s, out);
    }
    if (jname_is(name, "format")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        jlist args = {(jvalue *)a->pos, a->n_pos, a->n_pos, 0};
        jvalue tuple = {.t = JV_TUPLE, .u.l = &args};
        return jinja_percent_format(c, at, s.u.s, &tuple, out);
    }
    if (jname_is(name, "center")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        const jvalue *w = jarg(a, 0, "width");
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
    if (jname_is(name, "wordcount")) {
        jvalue s, words;
        TRY(jctx_str(c, in, &s));
        TRY(py_split(c, at, s.u.s, NULL, -1, &words));
        *out = jv_int((int64_t)words.u.l->n);
        return CLEAVE_OK;
    }
    if (jname_is(name, "round")) {
        const jvalue *pr = jarg(a, 0, "precision"), *method = jarg(a, 1, "method");
        int64_t p = pr && pr->t == JV_INT ? pr->u.i : 0;
        if (p < -20 || p > 20) return jctx_fail(c, at, "round: precision out of range");
        if (!jv_is_number(in)) return jctx_fail(c, at, "round: a number is required");
        if (in->t != JV_FLOAT &&
            (!method || (method->t == JV_STR && jname_is(method->u.s, "common"))) && p >= 0)
            return *out = in->t == JV_BOOL ? jv_int(in->u.b) : *in, CLEAVE_OK;
        double x = jv_as_double(in), r;
        if (!method || (method->t == JV_STR && jname_is(method->u.s, "common"))) {
            /* Python's round: correctly rounded, ties to even, as printf rounds the exact value */
            char tmp[400];
            if (p >= 0) {
                snprintf(tmp, sizeof tmp, "%.*f", (int)p, x);
                r = strtod(tmp, NULL);
            } else {
                double m = pow(10, (double)-p);
                r = nearbyint(x / m) * m;
            }
        } else if (method->t == JV_STR &&
                   (jname_is(method->u.s, "floor") || jname_is(method->u.s, "ceil"))) {
            double m = pow(10, (double)p);
            r = jname_is(method->u.s, "floor") ? floor(x * m) / m : ceil(x * m) / m;
        } else {
            return jctx_fail(c, at, "method must be common, ceil or floor");
        }
        *out = jv_float(r);
        return CLEAVE_OK;
    }
    if (jname_is(name, "escape") || jname_is(name, "e")) {
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
        if (!st) st = py_new_str(c, b.p ? b.p : "", b.n, out);
        free(b.p);
        return st;
    }
    if (jname_is(name, "batch")) {
        const jvalue *sz = jarg(a, 0, "linecount"), *fill = jarg(a, 1, "fill_with");
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
