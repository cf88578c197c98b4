/* Jinja expressions: tokens into a tree with jinja2's operator
 * precedence (condexpr < or < and < not < compare < + - < ~ < * / // % <
 * ** < unary, then filters and tests), and the parser's shared helpers. */
#include <string.h>

#include "base/error.h"
#include "vocab/jinja_parser.h"

const char *jp_tok_desc(const jtok *t) {
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

cleave_status jp_fail(parser *P, const char *fmt, const char *what) {
    const jtok *t = cur(P);
    if (t->kind == JT_NAME || t->kind == JT_OP)
        return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: %s%s (found '%.*s')", t->line,
                       t->col, fmt, what ? what : "", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p);
    return err_set(CLEAVE_ERR_INVALID_ARG, "line %d, column %d: %s%s (found %s)", t->line, t->col,
                   fmt, what ? what : "", jp_tok_desc(t));
}

cleave_status jp_expect_op(parser *P, const char *s) {
    if (!is_op(P, s)) return jp_fail(P, "expected ", s);
    next(P);
    return CLEAVE_OK;
}

jnode *jp_node(parser *P, jnode_kind k, const jtok *at) {
    jnode *n = jarena_alloc(P->a, sizeof *n);
    if (n) n->kind = k, n->line = at->line, n->col = at->col;
    return n;
}

cleave_status jp_vpush(parser *P, nvec *v, jnode *x) {
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

cleave_status jp_push_name(parser *P, jstr **names, size_t *n, jstr s) {
    jstr *p = jarena_alloc(P->a, (*n + 1) * sizeof *p);
    if (!p) return CLEAVE_ERR_OOM;
    if (*n) memcpy(p, *names, *n * sizeof *p);
    p[(*n)++] = s;
    *names = p;
    return CLEAVE_OK;
}

static cleave_status parse_unary(parser *P, bool with_filter, jnode **out);
static cleave_status parse_primary(parser *P, jnode **out);
static cleave_status parse_postfix(parser *P, jnode **n);

/* Arguments of a call, filter or test: positional in l1, keywords in l2/names. */
static cleave_status parse_args(parser *P, jnode *call) {
    TRY(jp_expect_op(P, "("));
    nvec pos = {0}, kw = {0};
    while (!is_op(P, ")")) {
        if (pos.n + kw.n) TRY(jp_expect_op(P, ","));
        if (is_op(P, ")")) break;
        if (is_op(P, "*") || is_op(P, "**"))
            return jp_fail(P, "*args and **kwargs in calls are not supported", NULL);
        if (cur(P)->kind == JT_NAME && tok_is(peek(P, 1), JT_OP, "=")) {
            TRY(jp_push_name(P, &call->names, &call->n_names, cur(P)->s));
            next(P), next(P);
            jnode *v;
            TRY(jp_parse_expr(P, true, &v));
            TRY(jp_vpush(P, &kw, v));
        } else {
            if (kw.n) return jp_fail(P, "a positional argument after keyword arguments", NULL);
            jnode *v;
            TRY(jp_parse_expr(P, true, &v));
            TRY(jp_vpush(P, &pos, v));
        }
    }
    next(P);
    call->l1 = pos.v, call->n1 = pos.n, call->l2 = kw.v, call->n2 = kw.n;
    return CLEAVE_OK;
}

/* A dotted name: filter and test names may be "a.b" in jinja2 syntax. */
static cleave_status parse_dotted(parser *P, jstr *s) {
    if (cur(P)->kind != JT_NAME) return jp_fail(P, "expected a name", NULL);
    *s = cur(P)->s;
    next(P);
    while (is_op(P, ".") && peek(P, 1)->kind == JT_NAME) {
        s->n = (size_t)(peek(P, 1)->s.p + peek(P, 1)->s.n - s->p);
        next(P), next(P);
    }
    return CLEAVE_OK;
}

cleave_status jp_parse_filter(parser *P, jnode **n, bool start_inline) {
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
        if (is_name(P, "is")) return jp_fail(P, "tests cannot be chained with 'is'", NULL);
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
        TRY(jp_parse_expr(P, true, &parts[0]));
        if (!is_op(P, ":")) return *out = parts[0], CLEAVE_OK;
    }
    next(P);
    if (!is_op(P, "]") && !is_op(P, ",") && !is_op(P, ":")) TRY(jp_parse_expr(P, true, &parts[1]));
    if (is_op(P, ":")) {
        next(P);
        if (!is_op(P, "]") && !is_op(P, ",")) TRY(jp_parse_expr(P, true, &parts[2]));
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
                return jp_fail(P, "expected a name or number after '.'", NULL);
            }
        } else if (is_op(P, "[")) {
            next(P);
            nvec items = {0};
            while (!is_op(P, "]")) {
                if (items.n) TRY(jp_expect_op(P, ","));
                if (is_op(P, "]")) break;
                jnode *x;
                TRY(parse_subscribed(P, &x));
                TRY(jp_vpush(P, &items, x));
            }
            next(P);
            if (!items.n) return jp_fail(P, "expected a subscript", NULL);
            /* a[1:2, 3] indexes with a tuple holding a slice: strings,
             * lists and dicts take neither (jinja2 raises a TypeError) */
            for (size_t i = 0; items.n > 1 && i < items.n; i++)
                if (items.v[i]->kind == JN_SLICE)
                    return jp_fail(P, "a slice cannot be one of several subscripts", NULL);
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
    if (++P->depth > MAX_PARSE_DEPTH) return jp_fail(P, "expressions nested too deeply", NULL);
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
                TRY(jp_expect_op(P, ","));
                comma = true;
            }
            if (is_op(P, ")")) break;
            jnode *x;
            TRY(jp_parse_expr(P, true, &x));
            TRY(jp_vpush(P, &items, x));
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
            if (items.n) TRY(jp_expect_op(P, ","));
            if (is_op(P, "]")) break;
            jnode *x;
            TRY(jp_parse_expr(P, true, &x));
            TRY(jp_vpush(P, &items, x));
        }
        next(P);
        NEW(n, JN_LIST, t);
        n->l1 = items.v, n->n1 = items.n;
        *out = n;
    } else if (is_op(P, "{")) {
        next(P);
        nvec keys = {0}, vals = {0};
        while (!is_op(P, "}")) {
            if (keys.n) TRY(jp_expect_op(P, ","));
            if (is_op(P, "}")) break;
            jnode *k, *v;
            TRY(jp_parse_expr(P, true, &k));
            TRY(jp_expect_op(P, ":"));
            TRY(jp_parse_expr(P, true, &v));
            TRY(jp_vpush(P, &keys, k));
            TRY(jp_vpush(P, &vals, v));
        }
        next(P);
        NEW(n, JN_DICT, t);
        n->l1 = keys.v, n->n1 = keys.n, n->l2 = vals.v, n->n2 = vals.n;
        *out = n;
    } else {
        st = jp_fail(P, "unexpected ", jp_tok_desc(t));
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
        if (++P->depth > MAX_PARSE_DEPTH) return jp_fail(P, "expressions nested too deeply", NULL);
        jnode *x;
        TRY(parse_unary(P, false, &x));
        P->depth--;
        n = jp_node(P, neg ? JN_NEG : JN_POS, t);
        if (!n) return CLEAVE_ERR_OOM;
        n->a = x;
    } else {
        TRY(parse_primary(P, &n));
    }
    TRY(parse_postfix(P, &n));
    if (with_filter) {
        for (;;) {
            if (is_op(P, "|"))
                TRY(jp_parse_filter(P, &n, false));
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

/* The arithmetic operators by precedence, loosest first, as jinja2
 * orders them; each level's operands are the next level's, the last's
 * unary expressions with their filters. All associate to the left. */
typedef struct {
    const char *text;
    jop op;
} binop_def;
#define LEVEL_OPS 4
static const binop_def LEVELS[][LEVEL_OPS] = {
    {{"+", JOP_ADD}, {"-", JOP_SUB}},
    {{"~", JOP_CONCAT}},
    {{"*", JOP_MUL}, {"/", JOP_DIV}, {"//", JOP_FLOORDIV}, {"%", JOP_MOD}},
    {{"**", JOP_POW}},
};
#define N_LEVELS (sizeof LEVELS / sizeof LEVELS[0])

static cleave_status parse_arith(parser *P, size_t level, jnode **out) {
    if (level == N_LEVELS) return parse_unary(P, true, out);
    TRY(parse_arith(P, level + 1, out));
    for (;;) {
        const binop_def *d = LEVELS[level];
        size_t k = 0;
        while (k < LEVEL_OPS && d[k].text && !is_op(P, d[k].text)) k++;
        if (k == LEVEL_OPS || !d[k].text) return CLEAVE_OK;
        const jtok *at = cur(P);
        next(P);
        jnode *r;
        TRY(parse_arith(P, level + 1, &r));
        TRY(binop(P, d[k].op, at, out, r));
    }
}

/* a < b < c compares pairwise and joins with "and", as jinja2 does (b is evaluated twice here). */
static cleave_status parse_compare(parser *P, jnode **out) {
    TRY(parse_arith(P, 0, out));
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
        TRY(parse_arith(P, 0, &r));
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
        if (++P->depth > MAX_PARSE_DEPTH) return jp_fail(P, "expressions nested too deeply", NULL);
        TRY(parse_not(P, &n->a));
        P->depth--;
        *out = n;
        return CLEAVE_OK;
    }
    return parse_compare(P, out);
}

/* a WORD b WORD c, left to right (and, or), each operand one level down. */
static cleave_status parse_word_chain(parser *P, const char *word, jnode_kind kind,
                                      cleave_status (*operand)(parser *, jnode **), jnode **out) {
    TRY(operand(P, out));
    while (is_name(P, word)) {
        NEW(n, kind, cur(P));
        next(P);
        n->a = *out;
        TRY(operand(P, &n->b));
        *out = n;
    }
    return CLEAVE_OK;
}

static cleave_status parse_and(parser *P, jnode **out) {
    return parse_word_chain(P, "and", JN_AND, parse_not, out);
}

static cleave_status parse_or(parser *P, jnode **out) {
    return parse_word_chain(P, "or", JN_OR, parse_and, out);
}

cleave_status jp_parse_expr(parser *P, bool condexpr, jnode **out) {
    if (++P->depth > MAX_PARSE_DEPTH) return jp_fail(P, "expressions nested too deeply", NULL);
    TRY(parse_or(P, out));
    while (condexpr && is_name(P, "if")) {
        NEW(c, JN_COND, cur(P));
        next(P);
        c->b = *out;
        TRY(parse_or(P, &c->a));
        if (is_name(P, "else")) {
            next(P);
            TRY(jp_parse_expr(P, true, &c->c));
        }
        *out = c;
    }
    P->depth--;
    return CLEAVE_OK;
}

/* Comma-separated expressions: one alone is itself, more a tuple. */
cleave_status jp_parse_tuple(parser *P, bool condexpr, jnode **out) {
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
        TRY(jp_parse_expr(P, condexpr, &x));
        TRY(jp_vpush(P, &items, x));
    }
    if (!items.n) return jp_fail(P, "expected an expression", NULL);
    if (items.n == 1 && !comma) return *out = items.v[0], CLEAVE_OK;
    NEW(n, JN_TUPLE, at);
    n->l1 = items.v, n->n1 = items.n;
    *out = n;
    return CLEAVE_OK;
}

