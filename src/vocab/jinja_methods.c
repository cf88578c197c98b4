/* The Python methods chat templates call on values: str's (strip,
 * split, startswith, format, ...), dict's (items, keys, values, get),
 * list's (index, count) and loop.cycle. The sandbox is jinja2's
 * immutable one: methods that change a list or dict (append, pop,
 * update, ...) are refused. */
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
        if (jname_is(s, *names)) return true;
    return false;
}

bool jinja_has_method(const jvalue *self, jstr name) {
    if (self->t == JV_STR) return listed(STR_METHODS, name);
    if (self->t == JV_DICT) return listed(DICT_METHODS, name);
    if (self->t == JV_LIST) return listed(LIST_METHODS, name);
    if (self->t == JV_TUPLE) return jname_is(name, "index") || jname_is(name, "count");
    return false;
}

static cleave_status str_method(jctx *c, const jnode *at, jstr s, jstr name, const jargs *a,
                                jvalue *out) {
    const jvalue *a0 = jarg(a, 0, NULL), *a1 = jarg(a, 1, NULL);
    if (jname_is(name, "strip") || jname_is(name, "lstrip") || jname_is(name, "rstrip")) {
        if (a0 && a0->t != JV_STR && a0->t != JV_NONE)
            return jctx_fail(c, at, "strip arg must be None or str");
        *out = py_strip(s, a0, name.p[0] != 'r', name.p[0] != 'l');
        return CLEAVE_OK;
    }
    if (jname_is(name, "split") || jname_is(name, "rsplit")) {
        const jvalue *sep = jarg(a, 0, "sep"), *mx = jarg(a, 1, "maxsplit");
        int64_t maxsplit = mx && mx->t == JV_INT ? mx->u.i : -1;
        if (jname_is(name, "rsplit") && maxsplit >= 0)
            return jctx_fail(c, at, "rsplit with maxsplit is not supported");
        return py_split(c, at, s, sep, maxsplit, out);
    }
    if (jname_is(name, "startswith") || jname_is(name, "endswith")) {
        bool r = false;
        TRY(py_affix_test(c, at, s, a0, name.p[0] == 'e', &r));
        *out = jv_bool(r);
        return CLEAVE_OK;
    }
    if (jname_is(name, "replace")) {
        const jvalue *cnt = jarg(a, 2, "count");
        if (!a0 || !a1 || a0->t != JV_STR || a1->t != JV_STR)
            return jctx_fail(c, at, "replace takes two strings");
        return py_replace(c, s, a0->u.s, a1->u.s, cnt && cnt->t == JV_INT ? cnt->u.i : -1, out);
    }
    if (jname_is(name, "upper")) return py_case(c, s, 1, out);
    if (jname_is(name, "lower")) return py_case(c, s, 0, out);
    if (jname_is(name, "capitalize")) return py_case(c, s, 2, out);
    if (jname_is(name, "title")) return py_case(c, s, 4, out);
    if (jname_is(name, "find") || jname_is(name, "rfind") || jname_is(name, "index")) {
        if (!a0 || a0->t != JV_STR)
            return jctx_fail(c, at, "%.*s takes a string", (int)name.n, name.p);
        int64_t i = py_find(s, a0->u.s, name.p[0] == 'r');
        if (i < 0 && jname_is(name, "index")) return jctx_fail(c, at, "substring not found");
        *out = jv_int(i);
        return CLEAVE_OK;
    }
    if (jname_is(name, "count")) {
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
    if (jname_is(name, "format")) return py_str_format(c, at, s, a, out);
    if (jname_is(name, "join")) {
        if (!a0) return jctx_fail(c, at, "join takes an iterable");
        jlist *items;
        TRY(jctx_iterate(c, at, a0, &items));
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].t != JV_STR)
                return jctx_fail(c, at, "sequence item %zu: expected str instance", i);
        return py_join(c, at, items, s, out);
    }
    if (jname_is(name, "splitlines")) {
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
    if (jname_is(name, "removeprefix") || jname_is(name, "removesuffix")) {
        if (!a0 || a0->t != JV_STR)
            return jctx_fail(c, at, "%.*s takes a string", (int)name.n, name.p);
        bool end = name.p[6] == 's';
        if (py_affix(s, a0->u.s, end))
            *out = jv_str(end ? s.p : s.p + a0->u.s.n, s.n - a0->u.s.n);
        else
            *out = jv_str(s.p, s.n);
        return CLEAVE_OK;
    }
    /* the is* predicates */
    bool r = s.n > 0, cased = false;
    for (size_t i = 0; i < s.n; i++) {
        unsigned char ch = (unsigned char)s.p[i];
        if (jname_is(name, "isdigit"))
            r &= isdigit(ch) != 0;
        else if (jname_is(name, "isalpha"))
            r &= isalpha(ch) != 0;
        else if (jname_is(name, "isalnum"))
            r &= isalnum(ch) != 0;
        else if (jname_is(name, "isspace"))
            r &= py_ascii_space((char)ch);
        else if (jname_is(name, "isupper"))
            r &= !islower(ch), cased |= isupper(ch) != 0;
        else if (jname_is(name, "islower"))
            r &= !isupper(ch), cased |= islower(ch) != 0;
    }
    if (jname_is(name, "isupper") || jname_is(name, "islower")) r = r && cased;
    *out = jv_bool(r);
    return CLEAVE_OK;
}

cleave_status jinja_items(jctx *c, const jdict *d, jvalue *out) {
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
    if (self->t == JV_LOOP && jname_is(name, "cycle")) {
        if (!a->n_pos) return jctx_fail(c, at, "no items for cycling given");
        *out = a->pos[self->u.loop->index0 % a->n_pos];
        return CLEAVE_OK;
    }
    if (self->t == JV_DICT) {
        const jdict *d = self->u.d;
        if (jname_is(name, "items")) {
            TRY(jinja_items(c, d, out));
            out->u.l->view = 1;
            return CLEAVE_OK;
        }
        if (jname_is(name, "keys") || jname_is(name, "values")) {
            jlist *l = jlist_new(&c->arena, d->n);
            if (!l) return CLEAVE_ERR_OOM;
            for (size_t i = 0; i < d->n; i++)
                l->v[l->n++] = name.p[0] == 'k' ? d->k[i] : d->v[i];
            l->view = name.p[0] == 'k' ? 2 : 3;
            *out = (jvalue){.t = JV_LIST, .u.l = l};
            return CLEAVE_OK;
        }
        if (jname_is(name, "get")) {
            const jvalue *k = jarg(a, 0, NULL), *def = jarg(a, 1, NULL);
            if (!k) return jctx_fail(c, at, "get expected at least 1 argument, got 0");
            const jvalue *v = jdict_get(d, k);
            *out = v ? *v : def ? *def : jv_none();
            return CLEAVE_OK;
        }
        if (jname_is(name, "copy")) {
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
        const jvalue *x = jarg(a, 0, NULL);
        if (jname_is(name, "index") || jname_is(name, "count")) {
            if (!x) return jctx_fail(c, at, "%.*s takes one argument", (int)name.n, name.p);
            int64_t k = 0, first = -1;
            for (size_t i = 0; i < l->n; i++)
                if (jv_equal(&l->v[i], x)) k++, first = first < 0 ? (int64_t)i : first;
            if (jname_is(name, "index") && first < 0)
                return jctx_fail(c, at, "value is not in list");
            *out = jv_int(jname_is(name, "index") ? first : k);
            return CLEAVE_OK;
        }
        if (jname_is(name, "copy")) {
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
