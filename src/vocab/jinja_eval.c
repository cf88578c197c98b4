/* Jinja evaluator: runs a parsed template against a conversation. Scopes
 * as jinja2 keeps them: a for loop's body and a macro's body are scopes
 * of their own (a set there does not leak out; namespace() is how
 * templates carry values out of loops), if blocks are not. Every node
 * counts a step; loops, output, nesting and memory are bounded. */
#include <math.h>
#include <stdarg.h>
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

/* ---- scopes ---- */

static jvalue *lookup(jframe *f, jstr name) {
    for (; f; f = f->parent) {
        jvalue *v = jdict_get_str(f->vars, name.p, name.n);
        if (v) return v;
    }
    return NULL;
}

static cleave_status assign(jctx *c, jframe *f, jstr name, jvalue v) {
    return jdict_set(&c->arena, f->vars, jv_str(name.p, name.n), v);
}

static cleave_status new_frame(jctx *c, jframe *parent, jframe **out) {
    jframe *f = jarena_alloc(&c->arena, sizeof *f);
    if (!f) return CLEAVE_ERR_OOM;
    f->vars = jdict_new(&c->arena, 4);
    if (!f->vars) return CLEAVE_ERR_OOM;
    f->parent = parent;
    *out = f;
    return CLEAVE_OK;
}

static cleave_status exec_body(jctx *c, jnode *const *body, size_t n, jframe *f);
static cleave_status eval(jctx *c, const jnode *n, jframe *f, jvalue *out);

/* Runs body with its output captured as a string value. */
static cleave_status capture(jctx *c, jnode *const *body, size_t n, jframe *f, jvalue *out) {
    jbuf b = {.limit = c->lim.max_output}, *saved = c->out;
    c->out = &b;
    cleave_status st = exec_body(c, body, n, f);
    c->out = saved;
    if (!st) st = jv_new_str(&c->arena, b.p ? b.p : "", b.n, out);
    free(b.p);
    return st;
}

/* ---- expressions ---- */

static cleave_status eval_args(jctx *c, const jnode *n, jframe *f, jargs *a) {
    jvalue *pos = n->n1 ? jarena_alloc(&c->arena, n->n1 * sizeof *pos) : NULL;
    jvalue *kw = n->n2 ? jarena_alloc(&c->arena, n->n2 * sizeof *kw) : NULL;
    if ((n->n1 && !pos) || (n->n2 && !kw)) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < n->n1; i++)
        TRY(eval(c, n->l1[i], f, &pos[i]));
    for (size_t i = 0; i < n->n2; i++)
        TRY(eval(c, n->l2[i], f, &kw[i]));
    *a = (jargs){pos, n->n1, n->names, kw, n->n2};
    return CLEAVE_OK;
}

static bool overflowed(int64_t *r, int64_t x, int64_t y, jop op) {
    switch (op) {
    case JOP_ADD: return __builtin_add_overflow(x, y, r);
    case JOP_SUB: return __builtin_sub_overflow(x, y, r);
    default: return __builtin_mul_overflow(x, y, r);
    }
}

static cleave_status repeat(jctx *c, const jnode *at, const jvalue *seq, int64_t times,
                            jvalue *out) {
    if (times < 0) times = 0;
    size_t unit = seq->t == JV_STR ? seq->u.s.n : seq->u.l->n;
    if (unit && (uint64_t)times > c->lim.max_output / unit)
        return jctx_fail(c, at, "a repetition larger than the output limit");
    if (seq->t == JV_STR) {
        char *p = jarena_alloc(&c->arena, unit * (size_t)times + 1);
        if (!p) return CLEAVE_ERR_OOM;
        for (int64_t i = 0; i < times; i++)
            memcpy(p + unit * (size_t)i, seq->u.s.p, unit);
        *out = jv_str(p, unit * (size_t)times);
        return CLEAVE_OK;
    }
    jlist *l = jlist_new(&c->arena, unit * (size_t)times);
    if (!l) return CLEAVE_ERR_OOM;
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < unit; k++)
            l->v[l->n++] = seq->u.l->v[k];
    *out = (jvalue){.t = seq->t, .u.l = l};
    return CLEAVE_OK;
}

static cleave_status arith(jctx *c, const jnode *at, jop op, const jvalue *x, const jvalue *y,
                           jvalue *out) {
    static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
    if (x->t == JV_UNDEF) return jctx_undefined(c, at, x);
    if (y->t == JV_UNDEF) return jctx_undefined(c, at, y);
    if (op == JOP_ADD && x->t == JV_STR && y->t == JV_STR) {
        char *p = jarena_alloc(&c->arena, x->u.s.n + y->u.s.n + 1);
        if (!p) return CLEAVE_ERR_OOM;
        memcpy(p, x->u.s.p, x->u.s.n), memcpy(p + x->u.s.n, y->u.s.p, y->u.s.n);
        *out = jv_str(p, x->u.s.n + y->u.s.n);
        return CLEAVE_OK;
    }
    if (op == JOP_ADD && (x->t == JV_LIST || x->t == JV_TUPLE) && x->t == y->t) {
        jlist *l = jlist_new(&c->arena, x->u.l->n + y->u.l->n);
        if (!l) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < x->u.l->n; i++)
            l->v[l->n++] = x->u.l->v[i];
        for (size_t i = 0; i < y->u.l->n; i++)
            l->v[l->n++] = y->u.l->v[i];
        *out = (jvalue){.t = x->t, .u.l = l};
        return CLEAVE_OK;
    }
    if (op == JOP_MOD && x->t == JV_STR) return jinja_percent_format(c, at, x->u.s, y, out);
    if (op == JOP_MUL) {
        bool xs = x->t == JV_STR || x->t == JV_LIST || x->t == JV_TUPLE;
        bool ys = y->t == JV_STR || y->t == JV_LIST || y->t == JV_TUPLE;
        if (xs && (y->t == JV_INT || y->t == JV_BOOL))
            return repeat(c, at, x, y->t == JV_INT ? y->u.i : y->u.b, out);
        if (ys && (x->t == JV_INT || x->t == JV_BOOL))
            return repeat(c, at, y, x->t == JV_INT ? x->u.i : x->u.b, out);
    }
    if (!jv_is_number(x) || !jv_is_number(y))
        return jctx_fail(c, at, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op],
                         jv_type_name(x), jv_type_name(y));
    bool ints = x->t != JV_FLOAT && y->t != JV_FLOAT;
    int64_t a = x->t == JV_BOOL ? x->u.b : x->u.i, b = y->t == JV_BOOL ? y->u.b : y->u.i;
    double fa = jv_as_double(x), fb = jv_as_double(y);
    switch (op) {
    case JOP_ADD:
    case JOP_SUB:
    case JOP_MUL:
        if (ints) {
            int64_t r;
            if (overflowed(&r, a, b, op)) return jctx_fail(c, at, "integer overflow");
            *out = jv_int(r);
        } else {
            *out = jv_float(op == JOP_ADD ? fa + fb : op == JOP_SUB ? fa - fb : fa * fb);
        }
        return CLEAVE_OK;
    case JOP_DIV:
        if (fb == 0) return jctx_fail(c, at, "division by zero");
        *out = jv_float(fa / fb);
        return CLEAVE_OK;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (ints) {
            if (b == 0) return jctx_fail(c, at, "integer division or modulo by zero");
            if (a == INT64_MIN && b == -1) return jctx_fail(c, at, "integer overflow");
            int64_t q = a / b, r = a % b;
            if (r && ((r < 0) != (b < 0))) q--, r += b;
            *out = jv_int(op == JOP_FLOORDIV ? q : r);
        } else {
            if (fb == 0) return jctx_fail(c, at, "float division by zero");
            double q = floor(fa / fb), r = fmod(fa, fb);
            if (r != 0 && ((r < 0) != (fb < 0))) r += fb;
            *out = jv_float(op == JOP_FLOORDIV ? q : r);
        }
        return CLEAVE_OK;
    case JOP_POW:
        if (ints && b >= 0) {
            int64_t r = 1;
            for (int64_t i = 0; i < b; i++) {
                if (__builtin_mul_overflow(r, a, &r)) return jctx_fail(c, at, "integer overflow");
                if (r == 0 || r == 1) break;
            }
            *out = jv_int(r);
        } else {
            *out = jv_float(pow(fa, fb));
        }
        return CLEAVE_OK;
    default: return jctx_fail(c, at, "unknown operator");
    }
}

static cleave_status contains(jctx *c, const jnode *at, const jvalue *item, const jvalue *in,
                              bool *out) {
    switch (in->t) {
    case JV_UNDEF: *out = false; return CLEAVE_OK;
    case JV_STR:
        if (item->t != JV_STR)
            return jctx_fail(c, at, "'in <string>' requires string as left operand, not %s",
                             jv_type_name(item));
        if (!item->u.s.n) return *out = true, CLEAVE_OK;
        *out = false;
        for (size_t i = 0; i + item->u.s.n <= in->u.s.n; i++)
            if (!memcmp(in->u.s.p + i, item->u.s.p, item->u.s.n)) return *out = true, CLEAVE_OK;
        return CLEAVE_OK;
    case JV_LIST:
    case JV_TUPLE:
        *out = false;
        for (size_t i = 0; i < in->u.l->n; i++)
            if (jv_equal(&in->u.l->v[i], item)) return *out = true, CLEAVE_OK;
        return CLEAVE_OK;
    case JV_DICT:
    case JV_NAMESPACE: *out = jdict_get(in->u.d, item) != NULL; return CLEAVE_OK;
    default: return jctx_fail(c, at, "argument of type '%s' is not iterable", jv_type_name(in));
    }
}

static cleave_status compare(jctx *c, const jnode *at, jop op, const jvalue *x, const jvalue *y,
                             bool *out) {
    if (op == JOP_EQ || op == JOP_NE) {
        *out = jv_equal(x, y) == (op == JOP_EQ);
        return CLEAVE_OK;
    }
    if (op == JOP_IN || op == JOP_NOTIN) {
        TRY(contains(c, at, x, y, out));
        if (op == JOP_NOTIN) *out = !*out;
        return CLEAVE_OK;
    }
    int o;
    if (!jv_compare(x, y, &o)) {
        if (x->t == JV_UNDEF) return jctx_undefined(c, at, x);
        if (y->t == JV_UNDEF) return jctx_undefined(c, at, y);
        return jctx_fail(c, at, "'%s' not supported between instances of '%s' and '%s'",
                         op == JOP_LT   ? "<"
                         : op == JOP_LE ? "<="
                         : op == JOP_GT ? ">"
                                        : ">=",
                         jv_type_name(x), jv_type_name(y));
    }
    *out = op == JOP_LT ? o < 0 : op == JOP_LE ? o <= 0 : op == JOP_GT ? o > 0 : o >= 0;
    return CLEAVE_OK;
}

/* Python's slice of a list, tuple or string with None for absent bounds. */
static cleave_status slice(jctx *c, const jnode *at, const jvalue *obj, const jvalue *lo,
                           const jvalue *hi, const jvalue *step, jvalue *out) {
    if (obj->t == JV_UNDEF) return jctx_undefined(c, at, obj);
    jlist *items;
    if (obj->t == JV_STR)
        TRY(jctx_iterate(c, at, obj, &items));
    else if (obj->t == JV_LIST || obj->t == JV_TUPLE)
        items = obj->u.l;
    else
        return jctx_fail(c, at, "'%s' object is not subscriptable", jv_type_name(obj));
    int64_t n = (int64_t)items->n, st = 1;
    for (int k = 0; k < 3; k++) {
        const jvalue *v = k == 0 ? lo : k == 1 ? hi : step;
        if (v->t != JV_NONE && v->t != JV_UNDEF && v->t != JV_INT && v->t != JV_BOOL)
            return jctx_fail(c, at, "slice indices must be integers or None");
    }
    if (step->t == JV_INT) st = step->u.i;
    if (st == 0) return jctx_fail(c, at, "slice step cannot be zero");
    int64_t a, b;
    bool has_a = lo->t == JV_INT || lo->t == JV_BOOL, has_b = hi->t == JV_INT || hi->t == JV_BOOL;
    int64_t va = lo->t == JV_INT ? lo->u.i : lo->t == JV_BOOL ? lo->u.b : 0;
    int64_t vb = hi->t == JV_INT ? hi->u.i : hi->t == JV_BOOL ? hi->u.b : 0;
    if (st > 0) {
        a = has_a ? (va < 0 ? (va + n < 0 ? 0 : va + n) : (va > n ? n : va)) : 0;
        b = has_b ? (vb < 0 ? (vb + n < 0 ? 0 : vb + n) : (vb > n ? n : vb)) : n;
    } else {
        a = has_a ? (va < 0 ? (va + n < 0 ? -1 : va + n) : (va >= n ? n - 1 : va)) : n - 1;
        b = has_b ? (vb < 0 ? (vb + n < 0 ? -1 : vb + n) : (vb >= n ? n - 1 : vb)) : -1;
    }
    jlist *l = jlist_new(&c->arena, (size_t)n);
    if (!l) return CLEAVE_ERR_OOM;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st)
        l->v[l->n++] = items->v[i];
    if (obj->t != JV_STR) {
        *out = (jvalue){.t = obj->t, .u.l = l};
        return CLEAVE_OK;
    }
    size_t total = 0;
    for (size_t i = 0; i < l->n; i++)
        total += l->v[i].u.s.n;
    char *p = jarena_alloc(&c->arena, total + 1);
    if (!p) return CLEAVE_ERR_OOM;
    size_t o = 0;
    for (size_t i = 0; i < l->n; i++)
        memcpy(p + o, l->v[i].u.s.p, l->v[i].u.s.n), o += l->v[i].u.s.n;
    *out = jv_str(p, total);
    return CLEAVE_OK;
}

static cleave_status eval_inner(jctx *c, const jnode *n, jframe *f, jvalue *out) {
    switch (n->kind) {
    case JN_CONST: *out = n->val; return CLEAVE_OK;
    case JN_NAME: {
        if (!n->s.n) return *out = c->hole, CLEAVE_OK;
        jvalue *v = lookup(f, n->s);
        if (v) return *out = *v, CLEAVE_OK;
        char *msg = jarena_alloc(&c->arena, n->s.n + 3);
        if (!msg) return CLEAVE_ERR_OOM;
        snprintf(msg, n->s.n + 3, "'%.*s'", (int)n->s.n, n->s.p);
        *out = jv_undef(msg);
        return CLEAVE_OK;
    }
    case JN_LIST:
    case JN_TUPLE: {
        jlist *l = jlist_new(&c->arena, n->n1);
        if (!l) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < n->n1; i++)
            TRY(eval(c, n->l1[i], f, &l->v[l->n++]));
        *out = (jvalue){.t = n->kind == JN_LIST ? JV_LIST : JV_TUPLE, .u.l = l};
        return CLEAVE_OK;
    }
    case JN_DICT: {
        jdict *d = jdict_new(&c->arena, n->n1);
        if (!d) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < n->n1; i++) {
            jvalue k, v;
            TRY(eval(c, n->l1[i], f, &k));
            TRY(eval(c, n->l2[i], f, &v));
            if (k.t != JV_STR && k.t != JV_INT && k.t != JV_FLOAT && k.t != JV_BOOL &&
                k.t != JV_NONE && k.t != JV_TUPLE)
                return jctx_fail(c, n, "unhashable type: '%s'", jv_type_name(&k));
            TRY(jdict_set(&c->arena, d, k, v));
        }
        *out = (jvalue){.t = JV_DICT, .u.d = d};
        return CLEAVE_OK;
    }
    case JN_ATTR: {
        jvalue obj;
        TRY(eval(c, n->a, f, &obj));
        return jctx_getattr(c, n, &obj, n->s, out);
    }
    case JN_ITEM: {
        jvalue obj, key;
        TRY(eval(c, n->a, f, &obj));
        TRY(eval(c, n->b, f, &key));
        return jctx_getitem(c, n, &obj, &key, out);
    }
    case JN_SLICE: {
        jvalue obj, part[3] = {jv_none(), jv_none(), jv_none()};
        TRY(eval(c, n->a, f, &obj));
        if (n->b) TRY(eval(c, n->b, f, &part[0]));
        if (n->c) TRY(eval(c, n->c, f, &part[1]));
        if (n->d) TRY(eval(c, n->d, f, &part[2]));
        return slice(c, n, &obj, &part[0], &part[1], &part[2], out);
    }
    case JN_BINOP: {
        jvalue x, y;
        TRY(eval(c, n->a, f, &x));
        TRY(eval(c, n->b, f, &y));
        if (n->op == JOP_CONCAT) {
            jvalue sx, sy;
            TRY(jctx_str(c, &x, &sx));
            TRY(jctx_str(c, &y, &sy));
            return arith(c, n, JOP_ADD, &sx, &sy, out);
        }
        return arith(c, n, n->op, &x, &y, out);
    }
    case JN_NEG:
    case JN_POS: {
        jvalue x;
        TRY(eval(c, n->a, f, &x));
        if (x.t == JV_UNDEF) return jctx_undefined(c, n, &x);
        if (!jv_is_number(&x))
            return jctx_fail(c, n, "bad operand type for unary %s: '%s'",
                             n->kind == JN_NEG ? "-" : "+", jv_type_name(&x));
        if (n->kind == JN_POS)
            *out = x.t == JV_BOOL ? jv_int(x.u.b) : x;
        else if (x.t == JV_FLOAT)
            *out = jv_float(-x.u.f);
        else if (x.t == JV_INT && x.u.i == INT64_MIN)
            return jctx_fail(c, n, "integer overflow");
        else
            *out = jv_int(x.t == JV_BOOL ? -(int64_t)x.u.b : -x.u.i);
        return CLEAVE_OK;
    }
    case JN_NOT: {
        jvalue x;
        TRY(eval(c, n->a, f, &x));
        *out = jv_bool(!jv_truthy(&x));
        return CLEAVE_OK;
    }
    case JN_AND:
    case JN_OR: {
        TRY(eval(c, n->a, f, out));
        if (jv_truthy(out) == (n->kind == JN_OR)) return CLEAVE_OK;
        return eval(c, n->b, f, out);
    }
    case JN_COND: {
        jvalue cond;
        TRY(eval(c, n->a, f, &cond));
        if (jv_truthy(&cond)) return eval(c, n->b, f, out);
        if (n->c) return eval(c, n->c, f, out);
        *out = jv_undef("the else branch of a conditional expression");
        return CLEAVE_OK;
    }
    case JN_CMP: {
        jvalue x, y;
        bool r = false;
        TRY(eval(c, n->a, f, &x));
        TRY(eval(c, n->b, f, &y));
        TRY(compare(c, n, n->op, &x, &y, &r));
        *out = jv_bool(r);
        return CLEAVE_OK;
    }
    case JN_FILTER: {
        jvalue in;
        jargs a;
        TRY(eval(c, n->a, f, &in));
        TRY(eval_args(c, n, f, &a));
        return jinja_filter(c, n, n->s, &in, &a, out);
    }
    case JN_TEST: {
        jvalue in;
        jargs a;
        bool r = false;
        TRY(eval(c, n->a, f, &in));
        TRY(eval_args(c, n, f, &a));
        TRY(jinja_test(c, n, n->s, &in, &a, &r));
        *out = jv_bool(r != n->flag);
        return CLEAVE_OK;
    }
    case JN_CALL: {
        jvalue callee;
        jargs a;
        TRY(eval(c, n->a, f, &callee));
        TRY(eval_args(c, n, f, &a));
        return jctx_call(c, n, &callee, &a, out);
    }
    default: return jctx_fail(c, n, "a statement where an expression belongs");
    }
}

static cleave_status eval(jctx *c, const jnode *n, jframe *f, jvalue *out) {
    TRY(jctx_step(c, n));
    return eval_inner(c, n, f, out);
}

/* ---- macros and loops ---- */

static cleave_status call_macro(jctx *c, const jnode *at, const struct jmacro *mac, const jargs *a,
                                jvalue *out) {
    const jnode *m = mac->node;
    if (a->n_pos > m->n_names)
        return jctx_fail(c, at, "macro '%.*s' takes not more than %zu argument(s)", (int)m->s.n,
                         m->s.p, m->n_names);
    if (c->depth >= c->lim.max_depth)
        return jctx_fail(c, at, "macros nested deeper than %d calls (a limit)", c->lim.max_depth);
    jframe *f;
    TRY(new_frame(c, mac->frame, &f));
    for (size_t k = 0; k < a->n_kw; k++) {
        bool known = false;
        for (size_t i = 0; i < m->n_names; i++)
            if (m->names[i].n == a->kw_names[k].n &&
                !memcmp(m->names[i].p, a->kw_names[k].p, m->names[i].n))
                known = i >= a->n_pos;
        if (!known && !(a->kw_names[k].n == 6 && !memcmp(a->kw_names[k].p, "caller", 6)))
            return jctx_fail(c, at, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->s.n,
                             m->s.p, (int)a->kw_names[k].n, a->kw_names[k].p);
    }
    c->depth++;
    cleave_status st = CLEAVE_OK;
    for (size_t i = 0; i < m->n_names && !st; i++) {
        jvalue v = jv_undef("a macro parameter that was not passed");
        bool have = false;
        if (i < a->n_pos) v = a->pos[i], have = true;
        for (size_t k = 0; k < a->n_kw && !have; k++)
            if (a->kw_names[k].n == m->names[i].n &&
                !memcmp(a->kw_names[k].p, m->names[i].p, m->names[i].n))
                v = a->kw[k], have = true;
        if (!have && m->l2[i]) st = eval(c, m->l2[i], f, &v);
        if (!st) st = assign(c, f, m->names[i], v);
    }
    for (size_t k = 0; k < a->n_kw && !st; k++) /* a call block's body, as caller() */
        if (a->kw_names[k].n == 6 && !memcmp(a->kw_names[k].p, "caller", 6))
            st = assign(c, f, a->kw_names[k], a->kw[k]);
    int jump = c->jump;
    if (!st) st = capture(c, m->l1, m->n1, f, out);
    c->jump = jump;
    c->depth--;
    return st;
}

static cleave_status bind_targets(jctx *c, const jnode *at, jframe *f, const jstr *names, size_t n,
                                  const jvalue *v) {
    if (n == 1) return assign(c, f, names[0], *v);
    jlist *items;
    if (v->t == JV_LIST || v->t == JV_TUPLE)
        items = v->u.l;
    else if (v->t == JV_STR || v->t == JV_DICT)
        TRY(jctx_iterate(c, at, v, &items));
    else
        return jctx_fail(c, at, "cannot unpack non-iterable %s object", jv_type_name(v));
    if (items->n != n)
        return jctx_fail(c, at, "%s values to unpack (expected %zu, got %zu)",
                         items->n > n ? "too many" : "not enough", n, items->n);
    for (size_t i = 0; i < n; i++)
        TRY(assign(c, f, names[i], items->v[i]));
    return CLEAVE_OK;
}

static cleave_status run_for(jctx *c, const jnode *n, const jvalue *iterable, jframe *parent,
                             int depth) {
    jlist *items;
    TRY(jctx_iterate(c, n, iterable, &items));
    jframe *f;
    TRY(new_frame(c, parent, &f));
    if (n->b) { /* {% for x in xs if cond %}: filtered first, so loop.length counts what is left */
        jlist *kept = jlist_new(&c->arena, items->n);
        if (!kept) return CLEAVE_ERR_OOM;
        for (size_t i = 0; i < items->n; i++) {
            jvalue keep;
            TRY(bind_targets(c, n, f, n->names, n->n_names, &items->v[i]));
            TRY(eval(c, n->b, f, &keep));
            if (jv_truthy(&keep)) kept->v[kept->n++] = items->v[i];
        }
        items = kept;
    }
    jloop *L = jarena_alloc(&c->arena, sizeof *L);
    if (!L) return CLEAVE_ERR_OOM;
    L->items = items, L->depth = depth, L->node = n, L->frame = parent;
    for (size_t i = 0; i < items->n; i++) {
        TRY(jctx_step(c, n));
        L->index0 = i;
        /* each iteration starts from the enclosing scope: what the last one set is gone, as in
         * jinja2 */
        f->vars->n = 0;
        TRY(assign(c, f, (jstr){"loop", 4}, (jvalue){.t = JV_LOOP, .u.loop = L}));
        TRY(bind_targets(c, n, f, n->names, n->n_names, &items->v[i]));
        TRY(exec_body(c, n->l1, n->n1, f));
        if (c->jump == 1) {
            c->jump = 0;
            break;
        }
        c->jump = 0;
    }
    if (!items->n && n->n2) TRY(exec_body(c, n->l2, n->n2, parent));
    return CLEAVE_OK;
}

cleave_status jctx_call(jctx *c, const jnode *at, const jvalue *callee, const jargs *a,
                        jvalue *out) {
    switch (callee->t) {
    case JV_MACRO: return call_macro(c, at, callee->u.macro, a, out);
    case JV_BUILTIN: return jinja_builtin(c, at, callee->u.builtin, a, out);
    case JV_METHOD: return jinja_method(c, at, &callee->u.m->self, callee->u.m->name, a, out);
    case JV_LOOP: {
        const jloop *L = callee->u.loop;
        if (!L->node->flag)
            return jctx_fail(
                c, at, "the loop is not recursive ('recursive' missing) so it cannot be called");
        if (a->n_pos != 1 || a->n_kw) return jctx_fail(c, at, "loop() takes one iterable");
        if (c->depth >= c->lim.max_depth)
            return jctx_fail(c, at, "recursive loops deeper than %d (a limit)", c->lim.max_depth);
        jbuf b = {.limit = c->lim.max_output}, *saved = c->out;
        c->out = &b;
        c->depth++;
        cleave_status st = run_for(c, L->node, &a->pos[0], L->frame, L->depth + 1);
        c->depth--;
        c->out = saved;
        if (!st) st = jv_new_str(&c->arena, b.p ? b.p : "", b.n, out);
        free(b.p);
        return st;
    }
    case JV_UNDEF: return jctx_undefined(c, at, callee);
    default: return jctx_fail(c, at, "'%s' object is not callable", jv_type_name(callee));
    }
}

/* ---- statements ---- */

static cleave_status exec_set(jctx *c, const jnode *n, jframe *f) {
    jvalue v;
    if (n->kind == JN_SET_BLOCK) {
        TRY(capture(c, n->l1, n->n1, f, &v));
        if (n->a) {
            jvalue saved = c->hole;
            c->hole = v;
            cleave_status st = eval(c, n->a, f, &v);
            c->hole = saved;
            TRY(st);
        }
        return assign(c, f, n->names[0], v);
    }
    TRY(eval(c, n->a, f, &v));
    if (n->flag) {
        jvalue *ns = lookup(f, n->names[0]);
        if (!ns || ns->t != JV_NAMESPACE)
            return jctx_fail(c, n, "cannot assign attribute on non-namespace object '%.*s'",
                             (int)n->names[0].n, n->names[0].p);
        return jdict_set(&c->arena, ns->u.d, jv_str(n->names[1].p, n->names[1].n), v);
    }
    return bind_targets(c, n, f, n->names, n->n_names, &v);
}

static cleave_status exec_node(jctx *c, const jnode *n, jframe *f) {
    TRY(jctx_step(c, n));
    switch (n->kind) {
    case JN_TEXT: return jbuf_put(c->out, n->s.p, n->s.n);
    case JN_OUTPUT: {
        jvalue v;
        TRY(eval(c, n->a, f, &v));
        return jv_str_into(c->out, &v);
    }
    case JN_IF: {
        jvalue cond;
        TRY(eval(c, n->a, f, &cond));
        if (jv_truthy(&cond)) return exec_body(c, n->l1, n->n1, f);
        return exec_body(c, n->l2, n->n2, f);
    }
    case JN_FOR: {
        jvalue it;
        TRY(eval(c, n->a, f, &it));
        return run_for(c, n, &it, f, 1);
    }
    case JN_SET:
    case JN_SET_BLOCK: return exec_set(c, n, f);
    case JN_MACRO: {
        /* a macro sees the scope it is defined in (a loop's variables too), as in jinja2 */
        struct jmacro *mac = jarena_alloc(&c->arena, sizeof *mac);
        if (!mac) return CLEAVE_ERR_OOM;
        mac->node = n, mac->frame = f;
        return assign(c, f, n->s, (jvalue){.t = JV_MACRO, .u.macro = mac});
    }
    case JN_FILTER_BLOCK: {
        jvalue body, v, saved = c->hole;
        TRY(capture(c, n->l1, n->n1, f, &body));
        c->hole = body;
        cleave_status st = eval(c, n->a, f, &v);
        c->hole = saved;
        TRY(st);
        return jv_str_into(c->out, &v);
    }
    case JN_BODY: return exec_body(c, n->l1, n->n1, f);
    case JN_BREAK: c->jump = 1; return CLEAVE_OK;
    case JN_CONTINUE: c->jump = 2; return CLEAVE_OK;
    case JN_CALL_BLOCK: {
        struct jmacro *mac = jarena_alloc(&c->arena, sizeof *mac);
        if (!mac) return CLEAVE_ERR_OOM;
        mac->node = n->b, mac->frame = f;
        jvalue callee, v;
        jargs a;
        TRY(eval(c, n->a->a, f, &callee));
        TRY(eval_args(c, n->a, f, &a));
        jstr *names = jarena_alloc(&c->arena, (a.n_kw + 1) * sizeof *names);
        jvalue *kw = jarena_alloc(&c->arena, (a.n_kw + 1) * sizeof *kw);
        if (!names || !kw) return CLEAVE_ERR_OOM;
        if (a.n_kw)
            memcpy(names, a.kw_names, a.n_kw * sizeof *names),
                memcpy(kw, a.kw, a.n_kw * sizeof *kw);
        names[a.n_kw] = (jstr){"caller", 6};
        kw[a.n_kw] = (jvalue){.t = JV_MACRO, .u.macro = mac};
        a.kw_names = names, a.kw = kw, a.n_kw++;
        TRY(jctx_call(c, n, &callee, &a, &v));
        return jv_str_into(c->out, &v);
    }
    default: return jctx_fail(c, n, "an expression where a statement belongs");
    }
}

static cleave_status exec_body(jctx *c, jnode *const *body, size_t n, jframe *f) {
    for (size_t i = 0; i < n && !c->jump; i++)
        TRY(exec_node(c, body[i], f));
    return CLEAVE_OK;
}

/* ---- the render ---- */

jinja_limits jinja_default_limits(void) {
    return (jinja_limits){
        .max_output = 8u << 20, .max_steps = 10000000, .max_depth = 64, .max_memory = 256u << 20};
}

static cleave_status set_global(jctx *c, const char *name, jvalue v) {
    return jdict_set(&c->arena, c->root->parent->vars, jv_str(name, strlen(name)), v);
}

static cleave_status make_globals(jctx *c, const jinja_render_args *args) {
    jframe *g;
    TRY(new_frame(c, NULL, &g));
    TRY(new_frame(c, g, &c->root));
    jlist *msgs = jlist_new(&c->arena, args->n_msgs);
    if (!msgs) return CLEAVE_ERR_OOM;
    for (size_t i = 0; i < args->n_msgs; i++) {
        jdict *d = jdict_new(&c->arena, 2);
        if (!d) return CLEAVE_ERR_OOM;
        const cleave_chat_message *m = &args->msgs[i];
        if (!m->role || !m->content)
            return err_set(CLEAVE_ERR_INVALID_ARG,
                           "chat template: message %zu has no role or content", i);
        TRY(jdict_set(&c->arena, d, jv_str("role", 4), jv_str(m->role, strlen(m->role))));
        TRY(jdict_set(&c->arena, d, jv_str("content", 7), jv_str(m->content, strlen(m->content))));
        msgs->v[msgs->n++] = (jvalue){.t = JV_DICT, .u.d = d};
    }
    const char *bos = args->bos_token ? args->bos_token : "",
               *eos = args->eos_token ? args->eos_token : "";
    TRY(set_global(c, "messages", (jvalue){.t = JV_LIST, .u.l = msgs}));
    TRY(set_global(c, "add_generation_prompt", jv_bool(args->add_generation_prompt)));
    TRY(set_global(c, "bos_token", jv_str(bos, strlen(bos))));
    TRY(set_global(c, "eos_token", jv_str(eos, strlen(eos))));
    TRY(set_global(c, "range", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_RANGE}));
    TRY(set_global(c, "namespace", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_NAMESPACE}));
    TRY(set_global(c, "dict", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_DICT}));
    TRY(set_global(c, "raise_exception", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_RAISE}));
    TRY(set_global(c, "strftime_now", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_STRFTIME}));
    TRY(set_global(c, "lipsum", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_UNSUPPORTED}));
    TRY(set_global(c, "cycler", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_UNSUPPORTED}));
    TRY(set_global(c, "joiner", (jvalue){.t = JV_BUILTIN, .u.builtin = JB_UNSUPPORTED}));
    return CLEAVE_OK;
}

cleave_status jinja_render(const jinja_template *t, const jinja_render_args *args, char **out,
                           size_t *n_out) {
    if (!t || !args || !out || !n_out || (!args->msgs && args->n_msgs))
        return err_set(CLEAVE_ERR_INVALID_ARG, "jinja_render: arguments required");
    *out = NULL, *n_out = 0;
    jctx c = {.args = args, .lim = args->limits};
    if (!c.lim.max_output || !c.lim.max_steps || c.lim.max_depth <= 0 || !c.lim.max_memory)
        c.lim = jinja_default_limits();
    c.arena.limit = c.lim.max_memory;
    jbuf b = {.limit = c.lim.max_output};
    c.out = &b;
    cleave_status st = make_globals(&c, args);
    if (!st) st = exec_body(&c, t->root->l1, t->root->n1, c.root);
    if (!st && !b.p) {
        b.p = mem_alloc(1, "jinja output");
        if (!b.p)
            st = CLEAVE_ERR_OOM;
        else
            b.p[0] = 0;
    }
    if (st && c.arena.over) st = CLEAVE_ERR_INVALID_ARG; /* a limit, not the machine's memory */
    jarena_free(&c.arena);
    if (st) {
        free(b.p);
        return st;
    }
    *out = b.p, *n_out = b.n;
    return CLEAVE_OK;
}
