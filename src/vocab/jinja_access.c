/* Jinja attribute and item access: obj.name and obj[key] as jinja2 reads
 * them (a dict's key, a loop's variables, a namespace's attributes, a
 * string's or list's methods as bound values, an undefined value where
 * jinja2 gives one). */
#include <stdio.h>
#include <string.h>

#include "vocab/jinja_impl.h"

#define TRY(x)                                                                                     \
    do {                                                                                           \
        cleave_status st_ = (x);                                                                   \
        if (st_) return st_;                                                                       \
    } while (0)


static cleave_status method_value(jctx *c, const jvalue *obj, jstr name, jvalue *out) {
    jmethod *m = jarena_alloc(&c->arena, sizeof *m);
    if (!m) return CLEAVE_ERR_OOM;
    m->self = *obj, m->name = name;
    *out = (jvalue){.t = JV_METHOD, .u.m = m};
    return CLEAVE_OK;
}

static bool name_is(jstr s, const char *w) { return s.n == strlen(w) && !memcmp(s.p, w, s.n); }

static cleave_status undef_attr(jctx *c, const jvalue *obj, jstr name, jvalue *out) {
    char *msg = jarena_alloc(&c->arena, name.n + 64);
    if (!msg) return CLEAVE_ERR_OOM;
    snprintf(msg, name.n + 64, "'%s object' has no attribute '%.*s', so it", jv_type_name(obj),
             (int)name.n, name.p);
    *out = jv_undef(msg);
    return CLEAVE_OK;
}

static cleave_status loop_attr(jctx *c, const jnode *at, const jloop *L, jstr name, jvalue *out) {
    int64_t n = (int64_t)L->items->n, i = (int64_t)L->index0;
    if (name_is(name, "index"))
        *out = jv_int(i + 1);
    else if (name_is(name, "index0"))
        *out = jv_int(i);
    else if (name_is(name, "revindex"))
        *out = jv_int(n - i);
    else if (name_is(name, "revindex0"))
        *out = jv_int(n - i - 1);
    else if (name_is(name, "first"))
        *out = jv_bool(i == 0);
    else if (name_is(name, "last"))
        *out = jv_bool(i == n - 1);
    else if (name_is(name, "length"))
        *out = jv_int(n);
    else if (name_is(name, "depth"))
        *out = jv_int(L->depth);
    else if (name_is(name, "depth0"))
        *out = jv_int(L->depth - 1);
    else if (name_is(name, "previtem"))
        *out = i > 0 ? L->items->v[i - 1] : jv_undef("there is no previous item: loop.previtem");
    else if (name_is(name, "nextitem"))
        *out = i + 1 < n ? L->items->v[i + 1] : jv_undef("there is no next item: loop.nextitem");
    else if (name_is(name, "cycle")) {
        jvalue self = {.t = JV_LOOP, .u.loop = (jloop *)L};
        return method_value(c, &self, name, out);
    } else {
        (void)at;
        jvalue self = {.t = JV_LOOP};
        return undef_attr(c, &self, name, out);
    }
    return CLEAVE_OK;
}

cleave_status jctx_getattr(jctx *c, const jnode *at, const jvalue *obj, jstr name, jvalue *out) {
    switch (obj->t) {
    case JV_UNDEF: return jctx_undefined(c, at, obj);
    case JV_LOOP: return loop_attr(c, at, obj->u.loop, name, out);
    case JV_NAMESPACE: {
        jvalue *v = jdict_get_str(obj->u.d, name.p, name.n);
        if (v) return *out = *v, CLEAVE_OK;
        return undef_attr(c, obj, name, out);
    }
    case JV_DICT: {
        if (jinja_has_method(obj, name)) return method_value(c, obj, name, out);
        jvalue *v = jdict_get_str(obj->u.d, name.p, name.n);
        if (v) return *out = *v, CLEAVE_OK;
        return undef_attr(c, obj, name, out);
    }
    case JV_STR:
    case JV_LIST:
    case JV_TUPLE:
        if (jinja_has_method(obj, name)) return method_value(c, obj, name, out);
        return undef_attr(c, obj, name, out);
    default: return undef_attr(c, obj, name, out);
    }
}

cleave_status jctx_getitem(jctx *c, const jnode *at, const jvalue *obj, const jvalue *key,
                           jvalue *out) {
    switch (obj->t) {
    case JV_UNDEF: return jctx_undefined(c, at, obj);
    case JV_DICT:
    case JV_NAMESPACE: {
        jvalue *v = jdict_get(obj->u.d, key);
        if (v) return *out = *v, CLEAVE_OK;
        break;
    }
    case JV_LIST:
    case JV_TUPLE:
    case JV_STR:
        if (key->t == JV_INT || key->t == JV_BOOL) {
            int64_t i = key->t == JV_INT ? key->u.i : key->u.b;
            if (obj->t == JV_STR) {
                jlist *chars;
                TRY(jctx_iterate(c, at, obj, &chars));
                int64_t n = (int64_t)chars->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return *out = chars->v[i], CLEAVE_OK;
            } else {
                int64_t n = (int64_t)obj->u.l->n;
                if (i < 0) i += n;
                if (i >= 0 && i < n) return *out = obj->u.l->v[i], CLEAVE_OK;
            }
            *out = jv_undef("the index is out of range, so the item");
            return CLEAVE_OK;
        }
        break;
    default: break;
    }
    if (key->t == JV_STR) return jctx_getattr(c, at, obj, key->u.s, out);
    *out = jv_undef("the item");
    return CLEAVE_OK;
}
