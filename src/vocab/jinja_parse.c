/* Jinja parser: tokens into a tree, with jinja2's grammar and operator
 * precedence (condexpr < or < and < not < compare < + - < ~ < * / // % <
 * ** < unary, then filters and tests). Statements: if/elif/else, for
 * (else, "if" filter, unpacking), set (also block set and ns.attr),
 * macro, call, filter, raw, break/continue, and transformers'
 * generation block. include, import, extends and block are refused: a
 * chat template reads no files. */
#include <string.h>

#include "base/error.h"
#include "vocab/jinja_impl.h"

typedef struct {
    jarena *a;
    const jtok *t;
    size_t n, i;
    int depth;
} parser;

typedef struct {
    jnode **v;
    size_t n, cap;
} nvec;

/* Nesting of expressions and blocks the recursive descent allows. */
#define MAX_PARSE_DEPTH 200

static const jtok *cur(parser *P) { return &P->t[P->i]; }
static const jtok *peek(parser *P, size_t k) {
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
static void next(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}

static bool tok_is(const jtok *t, jtok_kind k, const char *s) {
    if (t->kind != k) return false;
    if (!s) return true;
    size_t m = strlen(s);
    return t->s.n == m && !memcmp(t->s.p, s, m);
}
static bool is_op(parser *P, const char *s) { return tok_is(cur(P), JT_OP, s); }
static bool is_name(parser *P, const char *s) { return tok_is(cur(P), JT_NAME, s); }

static const char *tok_desc(const jtok *t) {
    switch (t->kind) {
    case JT_TEXT: return "template data";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_NAME: return "a name";
    case JT_STRING: return "a string";
    case JT_INT: return "an integer";
    case JT_FLOAT: return "a number";
    case JT_OP: return "an operator";
    default: return "the end of the template";
    }
}

static cleave_status fail(parser *P, const char *fmt, const char *what) {
    const jtok *t = cur(P);
    if (t->kind == JT_NAME || t->kind == JT_OP)
        return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: %s%s (found '%.*s')", t->line,
                       t->col, fmt, what ? what : "", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p);
    return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: %s%s (found %s)", t->line, t->col,
                   fmt, what ? what : "", tok_desc(t));
}

static cleave_status expect_op(parser *P, const char *s) {
    if (!is_op(P, s)) return fail(P, "expected ", s);
    next(P);
    return CLEAVE_OK;
}

static jnode *node(parser *P, jnode_kind k, const jtok *at) {
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (n) n->kind = k, n->line = at->line, n->col = at->col;
    return n;
}

static cleave_status vpush(parser *P, nvec *v, jnode *x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        jnode **p = jarena_alloc(P->a, cap * sizeof *p);
        if (!p) return CLEAVE_ERR_OOM;
        if (v->n) memcpy(p, v->v, v->n * sizeof *p);
        v->v = p, v->cap = cap;
    }
    v->v[v->n++] = x;
    return CLEAVE_OK;
}

static cleave_status push_name(parser *P, jstr **names, size_t *n, jstr s) {
    jstr *p = jarena_alloc(P->a, (*n + 1) * sizeof *p);
    if (!p) return CLEAVE_ERR_OOM;
    if (*n) memcpy(p, *names, *n * sizeof *p);
    p[(*n)++] = s;
    *names = p;
    return CLEAVE_OK;
}

#define TRY(x)                                                                                     \
    do {                                                                                           \
        cleave_status st_ = (x);                                                                   \
        if (st_) return st_;                                                                       \
    } while (0)
#define NEW(var, kind, at)                                                                         \
    jnode *var = node(P, kind, at);                                                                \
    if (!var) return CLEAVE_ERR_OOM

static cleave_status parse_expr(parser *P, bool condexpr, jnode **out);
static cleave_status parse_unary(parser *P, bool with_filter, jnode **out);
static cleave_status parse_primary(parser *P, jnode **out);
static cleave_status parse_postfix(parser *P, jnode **n);

/* Arguments of a call, filter or test: positional in l1, keywords in l2/names. */
static cleave_status parse_args(parser *P, jnode *call) {
    TRY(expect_op(P, "("));
    nvec pos = {0}, kw = {0};
    while (!is_op(P, ")")) {
        if (pos.n + kw.n) TRY(expect_op(P, ","));
        if (is_op(P, ")")) break;
        if (is_op(P, "*") || is_op(P, "**"))
            return fail(P, "*args and **kwargs in calls are not supported", NULL);
        if (cur(P)->kind == JT_NAME && tok_is(peek(P, 1), JT_OP, "=")) {
            TRY(push_name(P, &call->names, &call->n_names, cur(P)->s));
            next(P), next(P);
            jnode *v;
            TRY(parse_expr(P, true, &v));
            TRY(vpush(P, &kw, v));
        } else {
            if (kw.n) return fail(P, "a positional argument after keyword arguments", NULL);
            jnode *v;
            TRY(parse_expr(P, true, &v));
            TRY(vpush(P, &pos, v));
        }
    }
    next(P);
    call->l1 = pos.v, call->n1 = pos.n, call->l2 = kw.v, call->n2 = kw.n;
    return CLEAVE_OK;
}

/* A dotted name: filter and test names may be "a.b" in jinja2 syntax. */
static cleave_status parse_dotted(parser *P, jstr *s) {
    if (cur(P)->kind != JT_NAME) return fail(P, "expected a name", NULL);
    *s = cur(P)->s;
    next(P);
    while (is_op(P, ".") && peek(P, 1)->kind == JT_NAME) {
        s->n = (size_t)(peek(P, 1)->s.p + peek(P, 1)->s.n - s->p);
        next(P), next(P);
    }
    return CLEAVE_OK;
}

static cleave_status parse_filter(parser *P, jnode **n, bool start_inline) {
    while (is_op(P, "|") || start_inline) {
        if (!start_inline) next(P);
        start_inline = false;
        NEW(f, JN_FILTER, cur(P));
        TRY(parse_dotted(P, &f->s));
        if (is_op(P, "(")) TRY(parse_args(P, f));
        f->a = *n;
        *n = f;
    }
    return CLEAVE_OK;
}

static cleave_status parse_test(parser *P, jnode **n) {
    NEW(t, JN_TEST, cur(P));
    next(P); /* is */
    if (is_name(P, "not")) t->flag = true, next(P);
    TRY(parse_dotted(P, &t->s));
    const jtok *c = cur(P);
    if (is_op(P, "(")) {
        TRY(parse_args(P, t));
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT ||
                c->kind == JT_FLOAT || is_op(P, "[") || is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) return fail(P, "tests cannot be chained with 'is'", NULL);
        jnode *arg;
        TRY(parse_primary(P, &arg));
        TRY(parse_postfix(P, &arg));
        jnode **l = jarena_alloc(P->a, sizeof *l);
        if (!l) return CLEAVE_ERR_OOM;
        l[0] = arg, t->l1 = l, t->n1 = 1;
    }
    t->a = *n;
    *n = t;
    return CLEAVE_OK;
}

/* Inside [ ]: an expression or a slice a:b:c. */
static cleave_status parse_subscribed(parser *P, jnode **out) {
    const jtok *at = cur(P);
    jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(P, ":")) {
        TRY(parse_expr(P, true, &parts[0]));
        if (!is_op(P, ":")) return *out = parts[0], CLEAVE_OK;
    }
    next(P);
    if (!is_op(P, "]") && !is_op(P, ",") && !is_op(P, ":")) TRY(parse_expr(P, true, &parts[1]));
    if (is_op(P, ":")) {
        next(P);
        if (!is_op(P, "]") && !is_op(P, ",")) TRY(parse_expr(P, true, &parts[2]));
    }
    NEW(s, JN_SLICE, at);
    s->b = parts[0], s->c = parts[1], s->d = parts[2];
    *out = s;
    return CLEAVE_OK;
}

static cleave_status parse_postfix(parser *P, jnode **n) {
    for (;;) {
        const jtok *at = cur(P);
        if (is_op(P, ".")) {
            next(P);
            if (cur(P)->kind == JT_NAME) {
                NEW(g, JN_ATTR, at);
                g->a = *n, g->s = cur(P)->s;
                next(P);
                *n = g;
            } else if (cur(P)->kind == JT_INT) {
                NEW(g, JN_ITEM, at);
                NEW(k, JN_CONST, cur(P));
                k->val = jv_int(cur(P)->i);
                next(P);
                g->a = *n, g->b = k;
                *n = g;
            } else {
                return fail(P, "expected a name or number after '.'", NULL);
            }
        } else if (is_op(P, "[")) {
            next(P);
            nvec items = {0};
            while (!is_op(P, "]")) {
                if (items.n) TRY(expect_op(P, ","));
                if (is_op(P, "]")) break;
                jnode *x;
                TRY(parse_subscribed(P, &x));
                TRY(vpush(P, &items, x));
            }
            next(P);
            if (!items.n) return fail(P, "expected a subscript", NULL);
            NEW(g, JN_ITEM, at);
            g->a = *n;
            if (items.n == 1) {
                g->b = items.v[0];
            } else {
                NEW(tup, JN_TUPLE, at);
                tup->l1 = items.v, tup->n1 = items.n;
                g->b = tup;
            }
            if (g->b->kind == JN_SLICE)
                g->b->a = *n, *n = g->b;
            else
                *n = g;
        } else if (is_op(P, "(")) {
            NEW(c, JN_CALL, at);
            c->a = *n;
            TRY(parse_args(P, c));
            *n = c;
        } else {
            return CLEAVE_OK;
        }
    }
}

static cleave_status parse_primary(parser *P, jnode **out) {
    const jtok *t = cur(P);
    if (++P->depth > MAX_PARSE_DEPTH) return fail(P, "expressions nested too deeply", NULL);
    cleave_status st = CLEAVE_OK;
    if (t->kind == JT_NAME) {
        NEW(n, JN_CONST, t);
        if (tok_is(t, JT_NAME, "true") || tok_is(t, JT_NAME, "True"))
            n->val = jv_bool(true);
        else if (tok_is(t, JT_NAME, "false") || tok_is(t, JT_NAME, "False"))
            n->val = jv_bool(false);
        else if (tok_is(t, JT_NAME, "none") || tok_is(t, JT_NAME, "None"))
            n->val = jv_none();
        else
            n->kind = JN_NAME, n->s = t->s;
        next(P);
        *out = n;
    } else if (t->kind == JT_STRING) {
        NEW(n, JN_CONST, t);
        jstr s = t->s;
        next(P);
        if (cur(P)->kind == JT_STRING) { /* adjacent literals join, as in Python */
            size_t total = s.n;
            for (size_t k = P->i; P->t[k].kind == JT_STRING; k++)
                total += P->t[k].s.n;
            char *buf = jarena_alloc(P->a, total + 1);
            if (!buf) return CLEAVE_ERR_OOM;
            memcpy(buf, s.p, s.n);
            size_t o = s.n;
            while (cur(P)->kind == JT_STRING)
                memcpy(buf + o, cur(P)->s.p, cur(P)->s.n), o += cur(P)->s.n, next(P);
            s = (jstr){buf, total};
        }
        n->val = jv_str(s.p, s.n);
        *out = n;
    } else if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        NEW(n, JN_CONST, t);
        n->val = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        next(P);
        *out = n;
    } else if (is_op(P, "(")) {
        next(P);
        nvec items = {0};
        bool comma = false;
        while (!is_op(P, ")")) {
            if (items.n) {
                TRY(expect_op(P, ","));
                comma = true;
            }
            if (is_op(P, ")")) break;
            jnode *x;
            TRY(parse_expr(P, true, &x));
            TRY(vpush(P, &items, x));
        }
        next(P);
        if (items.n == 1 && !comma) {
            *out = items.v[0];
        } else {
            NEW(n, JN_TUPLE, t);
            n->l1 = items.v, n->n1 = items.n;
            *out = n;
        }
    } else if (is_op(P, "[")) {
        next(P);
        nvec items = {0};
        while (!is_op(P, "]")) {
            if (items.n) TRY(expect_op(P, ","));
            if (is_op(P, "]")) break;
            jnode *x;
            TRY(parse_expr(P, true, &x));
            TRY(vpush(P, &items, x));
        }
        next(P);
        NEW(n, JN_LIST, t);
        n->l1 = items.v, n->n1 = items.n;
        *out = n;
    } else if (is_op(P, "{")) {
        next(P);
        nvec keys = {0}, vals = {0};
        while (!is_op(P, "}")) {
            if (keys.n) TRY(expect_op(P, ","));
            if (is_op(P, "}")) break;
            jnode *k, *v;
            TRY(parse_expr(P, true, &k));
            TRY(expect_op(P, ":"));
            TRY(parse_expr(P, true, &v));
            TRY(vpush(P, &keys, k));
            TRY(vpush(P, &vals, v));
        }
        next(P);
        NEW(n, JN_DICT, t);
        n->l1 = keys.v, n->n1 = keys.n, n->l2 = vals.v, n->n2 = vals.n;
        *out = n;
    } else {
        st = fail(P, "unexpected ", tok_desc(t));
    }
    P->depth--;
    return st;
}

static cleave_status parse_unary(parser *P, bool with_filter, jnode **out) {
    const jtok *t = cur(P);
    jnode *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        bool neg = is_op(P, "-");
        next(P);
        if (++P->depth > MAX_PARSE_DEPTH) return fail(P, "expressions nested too deeply", NULL);
        jnode *x;
        TRY(parse_unary(P, false, &x));
        P->depth--;
        n = node(P, neg ? JN_NEG : JN_POS, t);
        if (!n) return CLEAVE_ERR_OOM;
        n->a = x;
    } else {
        TRY(parse_primary(P, &n));
    }
    TRY(parse_postfix(P, &n));
    if (with_filter) {
        for (;;) {
            if (is_op(P, "|"))
                TRY(parse_filter(P, &n, false));
            else if (is_name(P, "is"))
                TRY(parse_test(P, &n));
            else if (is_op(P, "("))
                TRY(parse_postfix(P, &n));
            else
                break;
        }
    }
    *out = n;
    return CLEAVE_OK;
}

static cleave_status binop(parser *P, jop op, const jtok *at, jnode **left, jnode *right) {
    NEW(n, JN_BINOP, at);
    n->op = op, n->a = *left, n->b = right;
    *left = n;
    return CLEAVE_OK;
}

static cleave_status parse_pow(parser *P, jnode **out) {
    TRY(parse_unary(P, true, out));
    while (is_op(P, "**")) {
        const jtok *at = cur(P);
        next(P);
        jnode *r;
        TRY(parse_unary(P, true, &r));
        TRY(binop(P, JOP_POW, at, out, r));
    }
    return CLEAVE_OK;
}

static cleave_status parse_math2(parser *P, jnode **out) {
    TRY(parse_pow(P, out));
    for (;;) {
        jop op;
        if (is_op(P, "*"))
            op = JOP_MUL;
        else if (is_op(P, "/"))
            op = JOP_DIV;
        else if (is_op(P, "//"))
            op = JOP_FLOORDIV;
        else if (is_op(P, "%"))
            op = JOP_MOD;
        else
            return CLEAVE_OK;
        const jtok *at = cur(P);
        next(P);
        jnode *r;
        TRY(parse_pow(P, &r));
        TRY(binop(P, op, at, out, r));
    }
}

static cleave_status parse_concat(parser *P, jnode **out) {
    TRY(parse_math2(P, out));
    while (is_op(P, "~")) {
        const jtok *at = cur(P);
        next(P);
        jnode *r;
        TRY(parse_math2(P, &r));
        TRY(binop(P, JOP_CONCAT, at, out, r));
    }
    return CLEAVE_OK;
}

static cleave_status parse_math1(parser *P, jnode **out) {
    TRY(parse_concat(P, out));
    while (is_op(P, "+") || is_op(P, "-")) {
        jop op = is_op(P, "+") ? JOP_ADD : JOP_SUB;
        const jtok *at = cur(P);
        next(P);
        jnode *r;
        TRY(parse_concat(P, &r));
        TRY(binop(P, op, at, out, r));
    }
    return CLEAVE_OK;
}

/* a < b < c compares pairwise and joins with "and", as jinja2 does (b is evaluated twice here). */
static cleave_status parse_compare(parser *P, jnode **out) {
    TRY(parse_math1(P, out));
    jnode *prev = *out, *result = NULL;
    for (;;) {
        jop op;
        const jtok *at = cur(P);
        if (is_op(P, "=="))
            op = JOP_EQ;
        else if (is_op(P, "!="))
            op = JOP_NE;
        else if (is_op(P, "<"))
            op = JOP_LT;
        else if (is_op(P, "<="))
            op = JOP_LE;
        else if (is_op(P, ">"))
            op = JOP_GT;
        else if (is_op(P, ">="))
            op = JOP_GE;
        else if (is_name(P, "in"))
            op = JOP_IN;
        else if (is_name(P, "not") && tok_is(peek(P, 1), JT_NAME, "in"))
            op = JOP_NOTIN, next(P);
        else
            break;
        next(P);
        jnode *r;
        TRY(parse_math1(P, &r));
        NEW(c, JN_CMP, at);
        c->op = op, c->a = prev, c->b = r;
        if (!result) {
            result = c;
        } else {
            NEW(and, JN_AND, at);
            and->a = result, and->b = c;
            result = and;
        }
        prev = r;
    }
    if (result) *out = result;
    return CLEAVE_OK;
}

static cleave_status parse_not(parser *P, jnode **out) {
    if (is_name(P, "not")) {
        NEW(n, JN_NOT, cur(P));
        next(P);
        if (++P->depth > MAX_PARSE_DEPTH) return fail(P, "expressions nested too deeply", NULL);
        TRY(parse_not(P, &n->a));
        P->depth--;
        *out = n;
        return CLEAVE_OK;
    }
    return parse_compare(P, out);
}

static cleave_status parse_and(parser *P, jnode **out) {
    TRY(parse_not(P, out));
    while (is_name(P, "and")) {
        NEW(n, JN_AND, cur(P));
        next(P);
        n->a = *out;
        TRY(parse_not(P, &n->b));
        *out = n;
    }
    return CLEAVE_OK;
}

static cleave_status parse_or(parser *P, jnode **out) {
    TRY(parse_and(P, out));
    while (is_name(P, "or")) {
        NEW(n, JN_OR, cur(P));
        next(P);
        n->a = *out;
        TRY(parse_and(P, &n->b));
        *out = n;
    }
    return CLEAVE_OK;
}

static cleave_status parse_expr(parser *P, bool condexpr, jnode **out) {
    if (++P->depth > MAX_PARSE_DEPTH) return fail(P, "expressions nested too deeply", NULL);
    TRY(parse_or(P, out));
    while (condexpr && is_name(P, "if")) {
        NEW(c, JN_COND, cur(P));
        next(P);
        c->b = *out;
        TRY(parse_or(P, &c->a));
        if (is_name(P, "else")) {
            next(P);
            TRY(parse_expr(P, true, &c->c));
        }
        *out = c;
    }
    P->depth--;
    return CLEAVE_OK;
}

/* Comma-separated expressions: one alone is itself, more a tuple. */
static cleave_status parse_tuple(parser *P, bool condexpr, jnode **out) {
    const jtok *at = cur(P);
    nvec items = {0};
    bool comma = false;
    for (;;) {
        if (items.n) {
            if (!is_op(P, ",")) break;
            next(P);
            comma = true;
        }
        if (cur(P)->kind == JT_BLOCK_END || cur(P)->kind == JT_VAR_END || is_op(P, ")") ||
            is_op(P, "=") || is_name(P, "recursive") || (!condexpr && is_name(P, "if")))
            break;
        jnode *x;
        TRY(parse_expr(P, condexpr, &x));
        TRY(vpush(P, &items, x));
    }
    if (!items.n) return fail(P, "expected an expression", NULL);
    if (items.n == 1 && !comma) return *out = items.v[0], CLEAVE_OK;
    NEW(n, JN_TUPLE, at);
    n->l1 = items.v, n->n1 = items.n;
    *out = n;
    return CLEAVE_OK;
}

static cleave_status expect_block_end(parser *P) {
    if (cur(P)->kind != JT_BLOCK_END) return fail(P, "expected '%}'", NULL);
    next(P);
    return CLEAVE_OK;
}

/* The statements up to {% one-of-ends %}; *end: which end (the name token, not consumed). */
static cleave_status parse_body(parser *P, const char *const *ends, jnode **out, const jtok **end);

/* An {% else %} branch (of for or if), up to its end tag (left current):
 * n's second body. */
static cleave_status parse_else(parser *P, const char *end_tag, jnode *n) {
    next(P);
    TRY(expect_block_end(P));
    const char *const ends[] = {end_tag, NULL};
    const jtok *end;
    jnode *body;
    TRY(parse_body(P, ends, &body, &end));
    n->l2 = body->l1, n->n2 = body->n1;
    return CLEAVE_OK;
}

static cleave_status parse_for(parser *P, jnode *n) {
    do {
        if (cur(P)->kind != JT_NAME) return fail(P, "expected a loop variable", NULL);
        TRY(push_name(P, &n->names, &n->n_names, cur(P)->s));
        next(P);
    } while (is_op(P, ",") && (next(P), true));
    if (!is_name(P, "in")) return fail(P, "expected 'in'", NULL);
    next(P);
    TRY(parse_tuple(P, false, &n->a));
    if (is_name(P, "if")) {
        next(P);
        TRY(parse_expr(P, true, &n->b));
    }
    if (is_name(P, "recursive")) n->flag = true, next(P);
    TRY(expect_block_end(P));
    static const char *const ends[] = {"endfor", "else", NULL};
    const jtok *end;
    jnode *body;
    TRY(parse_body(P, ends, &body, &end));
    n->l1 = body->l1, n->n1 = body->n1;
    if (tok_is(end, JT_NAME, "else")) TRY(parse_else(P, "endfor", n));
    next(P);
    return expect_block_end(P);
}

static cleave_status parse_if(parser *P, jnode *n) {
    TRY(parse_tuple(P, false, &n->a));
    TRY(expect_block_end(P));
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const jtok *end;
    jnode *body;
    TRY(parse_body(P, ends, &body, &end));
    n->l1 = body->l1, n->n1 = body->n1;
    if (tok_is(end, JT_NAME, "elif")) {
        NEW(e, JN_IF, end);
        next(P);
        TRY(parse_if(P, e)); /* consumes through endif */
        jnode **l = jarena_alloc(P->a, sizeof *l);
        if (!l) return CLEAVE_ERR_OOM;
        l[0] = e, n->l2 = l, n->n2 = 1;
        return CLEAVE_OK;
    }
    if (tok_is(end, JT_NAME, "else")) TRY(parse_else(P, "endif", n));
    next(P);
    return expect_block_end(P);
}

static cleave_status parse_set(parser *P, jnode *n) {
    if (cur(P)->kind != JT_NAME) return fail(P, "expected a name to set", NULL);
    if (tok_is(peek(P, 1), JT_OP, ".") && peek(P, 2)->kind == JT_NAME) {
        n->flag = true; /* ns.attr = value */
        TRY(push_name(P, &n->names, &n->n_names, cur(P)->s));
        TRY(push_name(P, &n->names, &n->n_names, peek(P, 2)->s));
        next(P), next(P), next(P);
    } else {
        do {
            if (cur(P)->kind != JT_NAME) return fail(P, "expected a name to set", NULL);
            TRY(push_name(P, &n->names, &n->n_names, cur(P)->s));
            next(P);
        } while (is_op(P, ",") && (next(P), true));
    }
    if (is_op(P, "=")) {
        next(P);
        TRY(parse_tuple(P, true, &n->a));
        return expect_block_end(P);
    }
    if (n->flag || n->n_names != 1) return fail(P, "expected '='", NULL);
    n->kind = JN_SET_BLOCK;
    if (is_op(P, "|")) {
        NEW(hole, JN_NAME, cur(P)); /* the body's text goes where the filter's input is */
        n->a = hole;
        TRY(parse_filter(P, &n->a, false));
    }
    TRY(expect_block_end(P));
    static const char *const ends[] = {"endset", NULL};
    const jtok *end;
    jnode *body;
    TRY(parse_body(P, ends, &body, &end));
    n->l1 = body->l1, n->n1 = body->n1;
    next(P);
    return expect_block_end(P);
}

/* (a, b=default, ...): names in n->names, defaults (NULL where none) in n->l2. */
static cleave_status parse_signature(parser *P, jnode *n) {
    TRY(expect_op(P, "("));
    nvec defaults = {0};
    while (!is_op(P, ")")) {
        if (n->n_names) TRY(expect_op(P, ","));
        if (is_op(P, ")")) break;
        if (cur(P)->kind != JT_NAME) return fail(P, "expected a parameter name", NULL);
        TRY(push_name(P, &n->names, &n->n_names, cur(P)->s));
        next(P);
        jnode *def = NULL;
        if (is_op(P, "=")) {
            next(P);
            TRY(parse_expr(P, true, &def));
        } else if (defaults.n && defaults.v[defaults.n - 1]) {
            return fail(P, "a parameter without a default after one with a default", NULL);
        }
        TRY(vpush(P, &defaults, def));
    }
    next(P);
    n->l2 = defaults.v, n->n2 = defaults.n;
    return CLEAVE_OK;
}

static cleave_status parse_macro(parser *P, jnode *n) {
    if (cur(P)->kind != JT_NAME) return fail(P, "expected the macro's name", NULL);
    n->s = cur(P)->s;
    next(P);
    TRY(parse_signature(P, n));
    TRY(expect_block_end(P));
    static const char *const ends[] = {"endmacro", NULL};
    const jtok *end;
    jnode *body;
    TRY(parse_body(P, ends, &body, &end));
    n->l1 = body->l1, n->n1 = body->n1;
    next(P);
    if (cur(P)->kind == JT_NAME) next(P); /* {% endmacro name %} */
    return expect_block_end(P);
}

static cleave_status parse_statement(parser *P, jnode **out) {
    const jtok *at = cur(P);
    if (at->kind != JT_NAME) return fail(P, "expected a statement name", NULL);
    jstr w = at->s;
#define IS(s) (w.n == sizeof(s) - 1 && !memcmp(w.p, s, w.n))
    next(P);
    if (IS("for")) {
        NEW(n, JN_FOR, at);
        *out = n;
        return parse_for(P, n);
    }
    if (IS("if")) {
        NEW(n, JN_IF, at);
        *out = n;
        return parse_if(P, n);
    }
    if (IS("set")) {
        NEW(n, JN_SET, at);
        *out = n;
        return parse_set(P, n);
    }
    if (IS("macro")) {
        NEW(n, JN_MACRO, at);
        *out = n;
        return parse_macro(P, n);
    }
    if (IS("break") || IS("continue")) {
        NEW(n, IS("break") ? JN_BREAK : JN_CONTINUE, at);
        *out = n;
        return expect_block_end(P);
    }
    if (IS("filter")) {
        NEW(n, JN_FILTER_BLOCK, at);
        NEW(hole, JN_NAME, at);
        n->a = hole;
        TRY(parse_filter(P, &n->a, true));
        TRY(expect_block_end(P));
        static const char *const ends[] = {"endfilter", NULL};
        const jtok *end;
        jnode *body;
        TRY(parse_body(P, ends, &body, &end));
        n->l1 = body->l1, n->n1 = body->n1;
        next(P);
        *out = n;
        return expect_block_end(P);
    }
    if (IS("generation")) { /* transformers' marker of the assistant's text: renders its body */
        TRY(expect_block_end(P));
        static const char *const ends[] = {"endgeneration", NULL};
        const jtok *end;
        TRY(parse_body(P, ends, out, &end));
        next(P);
        return expect_block_end(P);
    }
    if (IS("call")) {
        /* {% call(params) m(args) %}body{% endcall %}: m gets the body as caller(params) */
        NEW(n, JN_CALL_BLOCK, at);
        NEW(caller, JN_MACRO, at);
        caller->s = (jstr){"caller", 6};
        if (is_op(P, "(")) TRY(parse_signature(P, caller));
        n->b = caller;
        jnode *callee;
        TRY(parse_expr(P, true, &callee));
        if (callee->kind != JN_CALL) return fail(P, "expected a macro call after 'call'", NULL);
        n->a = callee;
        TRY(expect_block_end(P));
        static const char *const ends[] = {"endcall", NULL};
        const jtok *end;
        jnode *body;
        TRY(parse_body(P, ends, &body, &end));
        caller->l1 = body->l1, caller->n1 = body->n1;
        next(P);
        *out = n;
        return expect_block_end(P);
    }
    if (IS("include") || IS("import") || IS("from") || IS("extends") || IS("block"))
        return err_set(
            CLEAVE_ERR_INVALID_ARG,
            "line %d, column %d: '%.*s' is not allowed: a chat template reads no other templates",
            at->line, at->col, (int)w.n, w.p);
#undef IS
    return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: unknown tag '%.*s'", at->line,
                   at->col, (int)(w.n > 40 ? 40 : w.n), w.p);
}

static cleave_status parse_body(parser *P, const char *const *ends, jnode **out, const jtok **end) {
    NEW(body, JN_BODY, cur(P));
    nvec items = {0};
    if (++P->depth > MAX_PARSE_DEPTH) return fail(P, "blocks nested too deeply", NULL);
    for (;;) {
        const jtok *t = cur(P);
        if (t->kind == JT_EOF) {
            if (ends) {
                return err_set(
                    CLEAVE_ERR_INVALID_ARG,
                    "line %d, column %d: unexpected end of template: '{%% %s %%}' missing", t->line,
                    t->col, ends[0]);
            }
            break;
        }
        if (t->kind == JT_TEXT) {
            NEW(n, JN_TEXT, t);
            n->s = t->s;
            TRY(vpush(P, &items, n));
            next(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            NEW(n, JN_OUTPUT, t);
            TRY(parse_tuple(P, true, &n->a));
            if (cur(P)->kind != JT_VAR_END) return fail(P, "expected '}}'", NULL);
            next(P);
            TRY(vpush(P, &items, n));
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(P);
            const jtok *w = cur(P);
            bool is_end = false;
            for (const char *const *e = ends; e && *e; e++)
                if (tok_is(w, JT_NAME, *e)) is_end = true;
            if (is_end) {
                *end = w;
                break;
            }
            if (w->kind == JT_NAME && w->s.n >= 3 &&
                (!memcmp(w->s.p, "end", 3) || tok_is(w, JT_NAME, "elif") ||
                 tok_is(w, JT_NAME, "else")))
                return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: unexpected '%.*s'%s%s",
                               w->line, w->col, (int)(w->s.n > 40 ? 40 : w->s.n), w->s.p,
                               ends ? ", expected " : "", ends ? ends[0] : "");
            jnode *n;
            TRY(parse_statement(P, &n));
            TRY(vpush(P, &items, n));
        } else {
            return fail(P, "unexpected ", tok_desc(t));
        }
    }
    P->depth--;
    body->l1 = items.v, body->n1 = items.n;
    *out = body;
    return CLEAVE_OK;
}

cleave_status jinja_parse_tokens(jarena *a, const jtok *toks, size_t n_toks, jnode **root) {
    parser P = {.a = a, .t = toks, .n = n_toks};
    const jtok *end = NULL;
    return parse_body(&P, NULL, root, &end);
}
