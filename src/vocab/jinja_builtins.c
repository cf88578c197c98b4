/* Jinja's global functions (range, namespace, dict, raise_exception,
 * strftime_now) and its tests (defined, none, string, mapping, ...), as
 * jinja2 defines them. */
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
        return py_new_str(c, buf, n, out);
    }
    case JB_UNSUPPORTED: return jctx_fail(c, at, "lipsum, cycler and joiner are not supported");
    default: return jctx_fail(c, at, "unknown function");
    }
}

/* ---- tests ---- */

cleave_status jinja_test(jctx *c, const jnode *at, jstr name, const jvalue *in, const jargs *a,
                         bool *out) {
    const jvalue *x = jarg(a, 0, NULL);
    jv_kind t = in->t;
    if (jname_is(name, "defined"))
        *out = t != JV_UNDEF;
    else if (jname_is(name, "undefined"))
        *out = t == JV_UNDEF;
    else if (jname_is(name, "none"))
        *out = t == JV_NONE;
    else if (jname_is(name, "string"))
        *out = t == JV_STR;
    else if (jname_is(name, "number"))
        *out = t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    else if (jname_is(name, "integer"))
        *out = t == JV_INT;
    else if (jname_is(name, "float"))
        *out = t == JV_FLOAT;
    else if (jname_is(name, "boolean"))
        *out = t == JV_BOOL;
    else if (jname_is(name, "true"))
        *out = t == JV_BOOL && in->u.b;
    else if (jname_is(name, "false"))
        *out = t == JV_BOOL && !in->u.b;
    else if (jname_is(name, "mapping"))
        *out = t == JV_DICT;
    else if (jname_is(name, "iterable"))
        *out = t == JV_STR || t == JV_LIST || t == JV_TUPLE || t == JV_DICT || t == JV_UNDEF;
    else if (jname_is(name, "sequence")) /* jinja2's Undefined has a length: it passes */
        *out = t == JV_STR || t == JV_LIST || t == JV_TUPLE || t == JV_DICT || t == JV_UNDEF;
    else if (jname_is(name, "callable"))
        *out = t == JV_MACRO || t == JV_BUILTIN || t == JV_METHOD;
    else if (jname_is(name, "escaped"))
        *out = false;
    else if (jname_is(name, "sameas")) /* Python's "is": singletons and small cached ints */
        *out = x && t == x->t &&
               (t == JV_NONE || t == JV_UNDEF || (t == JV_BOOL && in->u.b == x->u.b) ||
                (t == JV_INT && in->u.i == x->u.i && in->u.i >= -5 && in->u.i <= 256) ||
                ((t == JV_LIST || t == JV_TUPLE) && in->u.l == x->u.l) ||
                ((t == JV_DICT || t == JV_NAMESPACE) && in->u.d == x->u.d));
    else if (jname_is(name, "lower") || jname_is(name, "upper")) {
        jvalue s;
        TRY(jctx_str(c, in, &s));
        jargs none = {0};
        jvalue r;
        TRY(jinja_method(c, at, &s,
                         jname_is(name, "lower") ? (jstr){"islower", 7} : (jstr){"isupper", 7},
                         &none, &r));
        *out = r.u.b;
    } else if (jname_is(name, "odd") || jname_is(name, "even") || jname_is(name, "divisibleby")) {
        if (t != JV_INT && t != JV_BOOL)
            return jctx_fail(c, at, "the '%.*s' test needs an integer", (int)name.n, name.p);
        int64_t v = t == JV_INT ? in->u.i : in->u.b;
        if (jname_is(name, "divisibleby")) {
            if (!x || x->t != JV_INT || !x->u.i)
                return jctx_fail(c, at, "divisibleby needs a non-zero integer");
            *out = v % x->u.i == 0;
        } else {
            *out = (v % 2 != 0) == jname_is(name, "odd");
        }
    } else {
        jop op;
        if (jname_is(name, "eq") || jname_is(name, "equalto") || jname_is(name, "=="))
            op = JOP_EQ;
        else if (jname_is(name, "ne") || jname_is(name, "!="))
            op = JOP_NE;
        else if (jname_is(name, "lt") || jname_is(name, "lessthan"))
            op = JOP_LT;
        else if (jname_is(name, "le"))
            op = JOP_LE;
        else if (jname_is(name, "gt") || jname_is(name, "greaterthan"))
            op = JOP_GT;
        else if (jname_is(name, "ge"))
            op = JOP_GE;
        else if (jname_is(name, "in"))
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
                r = py_find(x->u.s, in->u.s, false) >= 0;
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
