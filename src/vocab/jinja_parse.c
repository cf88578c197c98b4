/* Jinja parser: tokens into a tree, with jinja2's grammar; expressions in
 * jinja_parse_expr.c. Statements: if/elif/else, for
 * (else, "if" filter, unpacking), set (also block set and ns.attr),
 * macro, call, filter, raw, break/continue, and transformers'
 * generation block. include, import, extends and block are refused: a
 * chat template reads no files. */
#include <string.h>

#include "base/error.h"
#include "vocab/jinja_parser.h"

static cleave_status expect_block_end(parser *P) {
    if (cur(P)->kind != JT_BLOCK_END) return jp_fail(P, "expected '%}'", NULL);
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
        if (cur(P)->kind != JT_NAME) return jp_fail(P, "expected a loop variable", NULL);
        TRY(jp_push_name(P, &n->names, &n->n_names, cur(P)->s));
        next(P);
    } while (is_op(P, ",") && (next(P), true));
    if (!is_name(P, "in")) return jp_fail(P, "expected 'in'", NULL);
    next(P);
    TRY(jp_parse_tuple(P, false, &n->a));
    if (is_name(P, "if")) {
        next(P);
        TRY(jp_parse_expr(P, true, &n->b));
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
    TRY(jp_parse_tuple(P, false, &n->a));
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
    if (cur(P)->kind != JT_NAME) return jp_fail(P, "expected a name to set", NULL);
    if (tok_is(peek(P, 1), JT_OP, ".") && peek(P, 2)->kind == JT_NAME) {
        n->flag = true; /* ns.attr = value */
        TRY(jp_push_name(P, &n->names, &n->n_names, cur(P)->s));
        TRY(jp_push_name(P, &n->names, &n->n_names, peek(P, 2)->s));
        next(P), next(P), next(P);
    } else {
        do {
            if (cur(P)->kind != JT_NAME) return jp_fail(P, "expected a name to set", NULL);
            TRY(jp_push_name(P, &n->names, &n->n_names, cur(P)->s));
            next(P);
        } while (is_op(P, ",") && (next(P), true));
    }
    if (is_op(P, "=")) {
        next(P);
        TRY(jp_parse_tuple(P, true, &n->a));
        return expect_block_end(P);
    }
    if (n->flag || n->n_names != 1) return jp_fail(P, "expected '='", NULL);
    n->kind = JN_SET_BLOCK;
    if (is_op(P, "|")) {
        NEW(hole, JN_NAME, cur(P)); /* the body's text goes where the filter's input is */
        n->a = hole;
        TRY(jp_parse_filter(P, &n->a, false));
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
    TRY(jp_expect_op(P, "("));
    nvec defaults = {0};
    while (!is_op(P, ")")) {
        if (n->n_names) TRY(jp_expect_op(P, ","));
        if (is_op(P, ")")) break;
        if (cur(P)->kind != JT_NAME) return jp_fail(P, "expected a parameter name", NULL);
        TRY(jp_push_name(P, &n->names, &n->n_names, cur(P)->s));
        next(P);
        jnode *def = NULL;
        if (is_op(P, "=")) {
            next(P);
            TRY(jp_parse_expr(P, true, &def));
        } else if (defaults.n && defaults.v[defaults.n - 1]) {
            return jp_fail(P, "a parameter without a default after one with a default", NULL);
        }
        TRY(jp_vpush(P, &defaults, def));
    }
    next(P);
    n->l2 = defaults.v, n->n2 = defaults.n;
    return CLEAVE_OK;
}

static cleave_status parse_macro(parser *P, jnode *n) {
    if (cur(P)->kind != JT_NAME) return jp_fail(P, "expected the macro's name", NULL);
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
    if (at->kind != JT_NAME) return jp_fail(P, "expected a statement name", NULL);
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
        TRY(jp_parse_filter(P, &n->a, true));
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
        TRY(jp_parse_expr(P, true, &callee));
        if (callee->kind != JN_CALL) return jp_fail(P, "expected a macro call after 'call'", NULL);
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
    if (++P->depth > MAX_PARSE_DEPTH) return jp_fail(P, "blocks nested too deeply", NULL);
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
            TRY(jp_vpush(P, &items, n));
            next(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            NEW(n, JN_OUTPUT, t);
            TRY(jp_parse_tuple(P, true, &n->a));
            if (cur(P)->kind != JT_VAR_END) return jp_fail(P, "expected '}}'", NULL);
            next(P);
            TRY(jp_vpush(P, &items, n));
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
            TRY(jp_vpush(P, &items, n));
        } else {
            return jp_fail(P, "unexpected ", jp_tok_desc(t));
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
