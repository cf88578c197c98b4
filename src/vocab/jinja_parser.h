/* The Jinja parser's shared parts: its state over the tokens, the token
 * tests, failures and tree nodes (jinja_parse_expr.c), and the expression
 * parsers the statements use. Internal to jinja_parse*.c. */
#ifndef CLEAVE_VOCAB_JINJA_PARSER_H
#define CLEAVE_VOCAB_JINJA_PARSER_H

#include <string.h>

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

static inline const jtok *cur(parser *P) { return &P->t[P->i]; }
static inline const jtok *peek(parser *P, size_t k) {
    return &P->t[P->i + k < P->n ? P->i + k : P->n - 1];
}
static inline void next(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}

static inline bool tok_is(const jtok *t, jtok_kind k, const char *s) {
    if (t->kind != k) return false;
    if (!s) return true;
    size_t m = strlen(s);
    return t->s.n == m && !memcmp(t->s.p, s, m);
}
static inline bool is_op(parser *P, const char *s) { return tok_is(cur(P), JT_OP, s); }
static inline bool is_name(parser *P, const char *s) { return tok_is(cur(P), JT_NAME, s); }

/* A token as a message names it ("a name", "'%}'"). */
const char *jp_tok_desc(const jtok *t);
/* "line L, column C: <fmt><what> (found ...)" as INVALID_ARG. */
cleave_status jp_fail(parser *P, const char *fmt, const char *what);
cleave_status jp_expect_op(parser *P, const char *s);
jnode *jp_node(parser *P, jnode_kind k, const jtok *at);
cleave_status jp_vpush(parser *P, nvec *v, jnode *x);
cleave_status jp_push_name(parser *P, jstr **names, size_t *n, jstr s);
/* An expression (condexpr: with "x if c else y"); comma-separated ones
 * (one alone is itself, more a tuple); a filter chain after "|" (or, with
 * start_inline, a {% filter %} block's). */
cleave_status jp_parse_expr(parser *P, bool condexpr, jnode **out);
cleave_status jp_parse_tuple(parser *P, bool condexpr, jnode **out);
cleave_status jp_parse_filter(parser *P, jnode **n, bool start_inline);

#define TRY(x)                                                                                     \
    do {                                                                                           \
        cleave_status st_ = (x);                                                                   \
        if (st_) return st_;                                                                       \
    } while (0)
#define NEW(var, kind, at)                                                                         \
    jnode *var = jp_node(P, kind, at);                                                                \
    if (!var) return CLEAVE_ERR_OOM

#endif
